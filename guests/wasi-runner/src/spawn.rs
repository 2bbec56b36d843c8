//! Turning a container spec into a `spawn-spec`: argv, environment (env, envFrom, the
//! downward API, `$(VAR)` expansion), mounts and the memory limit.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret};
use wasmlet_sdk::client::{Client, ClientError};
use wasmlet_sdk::provider::Pod;
use wasmlet_sdk::workloads::{self, LogTarget, Mount, SpawnSpec, WorkloadError, WorkloadHandle};

use crate::pod::{self, Ctr, PodData, now_ms};

/// Why a container could not be started.
#[derive(Debug)]
pub enum SpawnError {
    /// `CreateContainerConfigError`: a ConfigMap, Secret or key the container needs is
    /// missing; retried.
    Config(String),
    /// The module of its image is not (or no longer) in the store: pull again.
    NoModule,
    /// The host refused or failed: the container counts as failed to start.
    Start(String),
}

/// Starts `c` (one of `d.init` or `d.main`, by `init` and index) and records it.
pub fn start(
    pod: &Pod,
    d: &mut PodData,
    init: bool,
    index: usize,
) -> Result<WorkloadHandle, SpawnError> {
    let ctr: &Ctr = if init { &d.init[index] } else { &d.main[index] };
    let c = pod::container(pod, &ctr.name).ok_or_else(|| {
        SpawnError::Start(format!("container {} is not in the pod spec", ctr.name))
    })?;
    let module = d
        .modules
        .get(&ctr.image)
        .cloned()
        .ok_or(SpawnError::NoModule)?;
    let env = environment(pod, c).map_err(SpawnError::Config)?;
    let args = argv(c, &env);
    let mounts = mounts(c, d).map_err(SpawnError::Start)?;
    let memory_limit = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(|q| parse_quantity(&q.0));
    let ctr = if init {
        &mut d.init[index]
    } else {
        &mut d.main[index]
    };
    let spec = SpawnSpec {
        module,
        args,
        env,
        mounts,
        memory_limit,
        logs: LogTarget {
            pod_namespace: pod::namespace(pod),
            pod_name: pod::name(pod),
            pod_uid: pod::pod_uid(pod),
            container: ctr.name.clone(),
            attempt: if ctr.started_once {
                ctr.restarts + 1
            } else {
                0
            },
        },
    };
    match workloads::spawn(&spec) {
        Ok(h) => {
            let started = workloads::status(h).map_or_else(|_| now_ms(), |s| s.started_at_ms);
            ctr.started(h, started);
            Ok(h)
        }
        Err(e) => {
            let m = match e {
                WorkloadError::UnknownHandle => "the host does not know the module".to_owned(),
                WorkloadError::Invalid(m) | WorkloadError::Failed(m) => m,
            };
            ctr.failed_to_start(m.clone());
            Err(SpawnError::Start(m))
        }
    }
}

/// The full argv: `command` (else the container's name as program name) + `args`,
/// with `$(VAR)` references expanded as kubelet does.
pub fn argv(c: &Container, env: &[(String, String)]) -> Vec<String> {
    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut argv: Vec<String> = match c.command.as_deref() {
        Some(cmd) if !cmd.is_empty() => cmd.iter().map(|a| expand(a, &vars)).collect(),
        _ => vec![c.name.clone()],
    };
    argv.extend(c.args.iter().flatten().map(|a| expand(a, &vars)));
    argv
}

/// kubelet's `$(VAR)` expansion: `$$` is a literal `$`, unknown references stay as written.
pub fn expand(s: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        if let Some(t) = tail.strip_prefix('$') {
            out.push('$');
            rest = t;
        } else if let Some(t) = tail.strip_prefix('(')
            && let Some(end) = t.find(')')
        {
            let name = &t[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &t[end + 1..];
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment: `envFrom` (in order), then `env` (later entries
/// override earlier ones; values may reference earlier variables as `$(VAR)`).
pub fn environment(pod: &Pod, c: &Container) -> Result<Vec<(String, String)>, String> {
    let ns = pod::namespace(pod);
    let client = Client::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env
        .iter_mut()
        .find(|(n, _)| *n == k)
    {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let optional = r.optional.unwrap_or(false);
            match get_config_map(&client, &ns, &r.name, optional)? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut env, format!("{prefix}{k}"), v);
                    }
                }
                None => continue,
            }
        }
        if let Some(r) = &from.secret_ref {
            let optional = r.optional.unwrap_or(false);
            if let Some(s) = get_secret(&client, &ns, &r.name, optional)? {
                for (k, v) in s.data.unwrap_or_default() {
                    set(
                        &mut env,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(&v.0).into_owned(),
                    );
                }
            }
        }
    }
    for var in c.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let vars: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                Some(expand(var.value.as_deref().unwrap_or(""), &vars))
            }
            Some(src) => {
                if let Some(f) = &src.field_ref {
                    Some(field_value(pod, &f.field_path))
                } else if let Some(r) = &src.resource_field_ref {
                    Some(resource_value(pod, c, &r.resource))
                } else if let Some(k) = &src.config_map_key_ref {
                    let optional = k.optional.unwrap_or(false);
                    match get_config_map(&client, &ns, &k.name, optional)? {
                        Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&k.key)) {
                            Some(v) => Some(v.clone()),
                            None if optional => None,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in ConfigMap {ns}/{}",
                                    k.key, k.name
                                ));
                            }
                        },
                        None => None,
                    }
                } else if let Some(k) = &src.secret_key_ref {
                    let optional = k.optional.unwrap_or(false);
                    match get_secret(&client, &ns, &k.name, optional)? {
                        Some(s) => match s.data.as_ref().and_then(|d| d.get(&k.key)) {
                            Some(v) => Some(String::from_utf8_lossy(&v.0).into_owned()),
                            None if optional => None,
                            None => {
                                return Err(format!(
                                    "couldn't find key {} in Secret {ns}/{}",
                                    k.key, k.name
                                ));
                            }
                        },
                        None => None,
                    }
                } else {
                    None
                }
            }
        };
        if let Some(v) = value {
            set(&mut env, var.name.clone(), v);
        }
    }
    Ok(env)
}

/// A ConfigMap, `None` when it is missing and optional; a missing required one is the
/// `CreateContainerConfigError` message.
pub fn get_config_map(
    client: &Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<ConfigMap>, String> {
    match client.get_opt::<ConfigMap>(ns, name) {
        Ok(Some(cm)) => Ok(Some(cm)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("configmap \"{name}\" not found")),
        Err(e) => Err(lookup_error("configmap", name, &e)),
    }
}

/// As [`get_config_map`], for a Secret.
pub fn get_secret(
    client: &Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<Secret>, String> {
    match client.get_opt::<Secret>(ns, name) {
        Ok(Some(s)) => Ok(Some(s)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("secret \"{name}\" not found")),
        Err(e) => Err(lookup_error("secret", name, &e)),
    }
}

fn lookup_error(kind: &str, name: &str, e: &ClientError) -> String {
    format!("{kind} \"{name}\" could not be read: {e}")
}

/// The downward API's `fieldRef` values (`status.podIP` is empty: workloads have no network).
pub fn field_value(pod: &Pod, path: &str) -> String {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let map_key = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(k) = map_key("metadata.labels['") {
        return m
            .labels
            .as_ref()
            .and_then(|l| l.get(&k))
            .cloned()
            .unwrap_or_default();
    }
    if let Some(k) = map_key("metadata.annotations['") {
        return m
            .annotations
            .as_ref()
            .and_then(|a| a.get(&k))
            .cloned()
            .unwrap_or_default();
    }
    match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => pod::namespace(pod),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => status.and_then(|s| s.host_ip.clone()).unwrap_or_default(),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// `resourceFieldRef` (default divisor): memory in bytes, cpu in whole cores (rounded up).
fn resource_value(_pod: &Pod, c: &Container, resource: &str) -> String {
    let Some((kind, what)) = resource.split_once('.') else {
        return String::new();
    };
    let res = c.resources.as_ref();
    let map = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => None,
    };
    let Some(q) = map.and_then(|m| m.get(what)) else {
        return String::new();
    };
    match what {
        "cpu" => parse_millis(&q.0)
            .map(|m| m.div_ceil(1000).to_string())
            .unwrap_or_default(),
        _ => parse_quantity(&q.0)
            .map(|b| b.to_string())
            .unwrap_or_default(),
    }
}

/// The container's `volumeMounts` as mounts of the prepared pod volumes.
pub fn mounts(c: &Container, d: &PodData) -> Result<Vec<Mount>, String> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let volume = *d
                .volumes
                .get(&m.name)
                .ok_or_else(|| format!("volumeMount {:?} names no prepared volume", m.name))?;
            Ok(Mount {
                volume,
                guest_path: m.mount_path.clone(),
                sub_path: m.sub_path.clone().filter(|s| !s.is_empty()),
                read_only: m.read_only.unwrap_or(false),
            })
        })
        .collect()
}

/// A Kubernetes quantity in base units, rounded up (`128Mi`, `1G`, `1e3`, `500m`).
pub fn parse_quantity(q: &str) -> Option<u64> {
    parse_millis(q).map(|m| m.div_ceil(1000))
}

/// A quantity in thousandths of its unit.
fn parse_millis(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let num: f64 = num.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    let millis = (num * factor * 1000.0).round();
    (millis >= 0.0 && millis.is_finite()).then_some(millis as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("128Mi"), Some(128 << 20));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
        assert_eq!(parse_quantity("1e3"), Some(1000));
        assert_eq!(parse_quantity("1.5Ki"), Some(1536));
        assert_eq!(parse_quantity("500m"), Some(1));
        assert_eq!(parse_quantity("x"), None);
    }

    #[test]
    fn dollar_expansion() {
        let vars: BTreeMap<&str, &str> = [("A", "1"), ("B", "two")].into_iter().collect();
        assert_eq!(expand("$(A)-$(B)", &vars), "1-two");
        assert_eq!(expand("$$(A) $(C) $ x", &vars), "$(A) $(C) $ x");
    }
}
