//! Pod volumes as `prepare-volume` requests: emptyDir, configMap, secret, downwardAPI,
//! projected (configMap / secret / downwardAPI sources) and hostPath.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{KeyToPath, Volume};
use wasmlet_sdk::client::Client;
use wasmlet_sdk::log::{self, Level};
use wasmlet_sdk::provider::Pod;
use wasmlet_sdk::workloads::{EmptyDir, HostPath, VolumeFile, VolumeSource};

use crate::spawn::{field_value, get_config_map, get_secret, parse_quantity};

/// kubelet's `defaultMode` for configMap, secret, downwardAPI and projected volumes.
const DEFAULT_MODE: u32 = 0o644;

/// What a volume needs from the host, or why it cannot be had yet
/// (the `CreateContainerConfigError` message).
pub fn source(pod: &Pod, v: &Volume) -> Result<VolumeSource, String> {
    let ns = crate::pod::namespace(pod);
    let client = Client::new();
    if let Some(e) = &v.empty_dir {
        if e.medium.as_deref().is_some_and(|m| !m.is_empty()) {
            log::log(
                Level::Info,
                "emptyDir medium ignored: volumes are host directories",
                &[("volume", &v.name)],
            );
        }
        let size_limit = e.size_limit.as_ref().and_then(|q| parse_quantity(&q.0));
        return Ok(VolumeSource::EmptyDir(EmptyDir { size_limit }));
    }
    if let Some(h) = &v.host_path {
        let create = h.type_.as_deref() == Some("DirectoryOrCreate");
        return Ok(VolumeSource::HostPath(HostPath {
            path: h.path.clone(),
            create,
        }));
    }
    let mut files = Vec::new();
    if let Some(cm) = &v.config_map {
        let mode = mode_or(cm.default_mode, DEFAULT_MODE);
        if let Some(obj) = get_config_map(&client, &ns, &cm.name, cm.optional.unwrap_or(false))? {
            let data = config_map_data(obj);
            files = key_files(
                &data,
                cm.items.as_deref(),
                mode,
                cm.optional.unwrap_or(false),
                "configmap",
                &cm.name,
            )?;
        }
    } else if let Some(s) = &v.secret {
        let mode = mode_or(s.default_mode, DEFAULT_MODE);
        let name = s.secret_name.clone().unwrap_or_default();
        if let Some(obj) = get_secret(&client, &ns, &name, s.optional.unwrap_or(false))? {
            let data: BTreeMap<String, Vec<u8>> = obj
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            files = key_files(
                &data,
                s.items.as_deref(),
                mode,
                s.optional.unwrap_or(false),
                "secret",
                &name,
            )?;
        }
    } else if let Some(dw) = &v.downward_api {
        let mode = mode_or(dw.default_mode, DEFAULT_MODE);
        for item in dw.items.iter().flatten() {
            if let Some(f) = &item.field_ref {
                let contents = field_value(pod, &f.field_path).into_bytes();
                files.push(VolumeFile {
                    path: item.path.clone(),
                    contents,
                    mode: mode_or(item.mode, mode),
                });
            }
        }
    } else if let Some(p) = &v.projected {
        let mode = mode_or(p.default_mode, DEFAULT_MODE);
        for src in p.sources.iter().flatten() {
            if let Some(cm) = &src.config_map {
                let optional = cm.optional.unwrap_or(false);
                if let Some(obj) = get_config_map(&client, &ns, &cm.name, optional)? {
                    let data = config_map_data(obj);
                    files.extend(key_files(
                        &data,
                        cm.items.as_deref(),
                        mode,
                        optional,
                        "configmap",
                        &cm.name,
                    )?);
                }
            } else if let Some(s) = &src.secret {
                let optional = s.optional.unwrap_or(false);
                if let Some(obj) = get_secret(&client, &ns, &s.name, optional)? {
                    let data: BTreeMap<String, Vec<u8>> = obj
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    files.extend(key_files(
                        &data,
                        s.items.as_deref(),
                        mode,
                        optional,
                        "secret",
                        &s.name,
                    )?);
                }
            } else if let Some(dw) = &src.downward_api {
                for item in dw.items.iter().flatten() {
                    if let Some(f) = &item.field_ref {
                        let contents = field_value(pod, &f.field_path).into_bytes();
                        files.push(VolumeFile {
                            path: item.path.clone(),
                            contents,
                            mode: mode_or(item.mode, mode),
                        });
                    }
                }
            } else if src.service_account_token.is_some() {
                // Workloads have no sockets, so an API token is of no use to them.
                log::log(
                    Level::Info,
                    "serviceAccountToken projection skipped",
                    &[("volume", &v.name)],
                );
            }
        }
    }
    Ok(VolumeSource::Files(files))
}

fn config_map_data(cm: k8s_openapi::api::core::v1::ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    data.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    data
}

/// The files of a configMap / secret: every key, or only `items` (each at its path).
fn key_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
    kind: &str,
    name: &str,
) -> Result<Vec<VolumeFile>, String> {
    match items {
        None => Ok(data
            .iter()
            .map(|(k, v)| VolumeFile {
                path: k.clone(),
                contents: v.clone(),
                mode,
            })
            .collect()),
        Some(items) => {
            let mut files = Vec::new();
            for item in items {
                match data.get(&item.key) {
                    Some(v) => files.push(VolumeFile {
                        path: item.path.clone(),
                        contents: v.clone(),
                        mode: mode_or(item.mode, mode),
                    }),
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "configured key {} not found in {kind} \"{name}\"",
                            item.key
                        ));
                    }
                }
            }
            Ok(files)
        }
    }
}

fn mode_or(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map_or(default, |m| m & 0o777)
}
