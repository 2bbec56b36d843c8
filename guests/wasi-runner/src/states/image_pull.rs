//! `ImagePull`: fetches the module of every container's and init container's image
//! (`workloads.fetch-module`), waiting on `fetch-done` for pulls in progress.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};
use wasmlet_sdk::workloads::{self, FetchError, FetchProgress, FetchRequest, PullPolicy};

use super::{Error, ImagePullBackOff, VolumeMount, clear_waiting};
use crate::pod::{self, CState, PodData, Render, event, next_backoff, render};

/// Waiting reasons this state sets (and clears once the modules are there).
pub(crate) const PULL_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ImagePull;

impl State<PodData> for ImagePull {
    const NAME: &'static str = "ImagePull";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        let spec = pod::spec(pod)?;
        // Images are mutable in a pod spec: follow them.
        for c in d.init.iter_mut().chain(d.main.iter_mut()) {
            if let Some(sc) = pod::container(pod, &c.name) {
                c.image = sc.image.clone().unwrap_or_default();
            }
        }
        let pull_secrets: Vec<String> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.clone())
            .collect();
        let mut seen = BTreeSet::new();
        let mut pending = Vec::new();
        let mut failures = Vec::new();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            let image = c.image.clone().unwrap_or_default();
            if !seen.insert(image.clone()) || d.modules.contains_key(&image) {
                continue;
            }
            if image.is_empty() {
                return Ok(Transition::next(
                    self,
                    Error::fatal(
                        "InvalidImageName",
                        format!("container {} has no image", c.name),
                    ),
                ));
            }
            let req = FetchRequest {
                image: image.clone(),
                pull_policy: pull_policy(c, &image),
                namespace: pod::namespace(pod),
                pull_secrets: pull_secrets.clone(),
            };
            match workloads::fetch_module(&req) {
                Ok(FetchProgress::Ready(module)) => {
                    d.modules.insert(image, module);
                }
                Ok(FetchProgress::Pending(id)) => pending.push(WaitOn::FetchDone(id)),
                Err(e) => failures.push((image, e)),
            }
        }
        if !failures.is_empty() {
            for (image, e) in failures {
                let (reason, message) = describe(&image, e);
                for c in d
                    .init
                    .iter_mut()
                    .chain(d.main.iter_mut())
                    .filter(|c| c.image == image && c.is_waiting())
                {
                    c.state = CState::waiting(reason, Some(message.clone()));
                }
                event(
                    pod,
                    true,
                    "Failed",
                    "Pull",
                    format!("Failed to pull image \"{image}\": {message}"),
                );
            }
            d.image_backoff_ms = next_backoff(d.image_backoff_ms, false);
            return Ok(Transition::next(
                self,
                ImagePullBackOff::new(d.image_backoff_ms),
            ));
        }
        if !pending.is_empty() {
            return Ok(Transition::wait(self, pending));
        }
        d.image_backoff_ms = 0;
        clear_waiting(d, PULL_REASONS);
        Ok(Transition::next(self, VolumeMount))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}

/// `imagePullPolicy`, or the API server's default for it (`Always` for `:latest` or no
/// tag; local `file://` modules are never pulled again).
fn pull_policy(c: &Container, image: &str) -> PullPolicy {
    match c.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ if image.starts_with("file://") || image.contains('@') => PullPolicy::IfNotPresent,
        _ => {
            let last = image.rsplit('/').next().unwrap_or(image);
            match last.split_once(':') {
                Some((_, tag)) if tag != "latest" => PullPolicy::IfNotPresent,
                _ => PullPolicy::Always,
            }
        }
    }
}

/// kubelet's waiting reason and a message for a failed fetch.
fn describe(image: &str, e: FetchError) -> (&'static str, String) {
    match e {
        FetchError::InvalidReference(m) => (
            "InvalidImageName",
            format!("Failed to apply default image tag \"{image}\": {m}"),
        ),
        FetchError::NeverPull => (
            "ErrImageNeverPull",
            format!("Container image \"{image}\" is not present with pull policy of Never"),
        ),
        FetchError::NotFound(m) => ("ErrImagePull", format!("not found: {m}")),
        FetchError::Unauthorized(m) => ("ErrImagePull", format!("unauthorized: {m}")),
        FetchError::NotWasm(m) => ("ErrImagePull", format!("not a wasm module: {m}")),
        FetchError::Unavailable(m) => ("ErrImagePull", format!("registry unavailable: {m}")),
        FetchError::Other(m) => ("ErrImagePull", m),
    }
}
