//! Pod fields the runner cannot honour (the pod fails with reason `Unsupported`), and
//! fields it ignores (said in an Event).

use serde_json::Value;
use wasmlet_sdk::provider::Pod;

/// Volume types the runner can prepare.
const VOLUME_TYPES: &[&str] = &[
    "emptyDir",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "hostPath",
];

/// The first field the runner cannot honour, as `spec.path: why`.
pub fn check(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let unsupported =
        |field: String, why: &str| Some(format!("{field} is not supported by wasi-runner: {why}"));
    for (flag, field) in [
        (spec.host_network, "hostNetwork"),
        (spec.host_pid, "hostPID"),
        (spec.host_ipc, "hostIPC"),
    ] {
        if flag == Some(true) {
            return unsupported(
                format!("spec.{field}: true"),
                "WASI workloads share nothing with the host",
            );
        }
    }
    if spec.share_process_namespace == Some(true) {
        return unsupported(
            "spec.shareProcessNamespace: true".into(),
            "workloads are not processes",
        );
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let v = serde_json::to_value(v).unwrap_or(Value::Null);
        let kind = v
            .as_object()
            .and_then(|o| o.keys().find(|k| k.as_str() != "name").cloned());
        match kind {
            Some(k) if VOLUME_TYPES.contains(&k.as_str()) => {}
            Some(k) => {
                return unsupported(
                    format!("spec.volumes[{i}].{k}"),
                    "only emptyDir, configMap, secret, downwardAPI, projected and hostPath volumes are",
                );
            }
            None => {}
        }
    }
    let groups = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers[..]),
    ];
    for (group, containers) in groups {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("spec.{group}[{i}]");
            if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
                return unsupported(
                    format!("{at}.securityContext.privileged: true"),
                    "WASI workloads have no privileges to grant",
                );
            }
            for (j, p) in c.ports.iter().flatten().enumerate() {
                if p.host_port.is_some_and(|h| h != 0) {
                    return unsupported(
                        format!("{at}.ports[{j}].hostPort"),
                        "workloads have no sockets",
                    );
                }
            }
            for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
                if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                    return unsupported(
                        format!("{at}.volumeMounts[{j}].subPathExpr"),
                        "use subPath",
                    );
                }
            }
            if !c.volume_devices.as_deref().unwrap_or_default().is_empty() {
                return unsupported(
                    format!("{at}.volumeDevices"),
                    "workloads have no block devices",
                );
            }
            let probes = [
                ("startupProbe", &c.startup_probe),
                ("readinessProbe", &c.readiness_probe),
                ("livenessProbe", &c.liveness_probe),
            ];
            for (name, probe) in probes {
                let Some(p) = probe else { continue };
                for (set, kind) in [
                    (p.http_get.is_some(), "httpGet"),
                    (p.tcp_socket.is_some(), "tcpSocket"),
                    (p.grpc.is_some(), "grpc"),
                ] {
                    if set {
                        return unsupported(
                            format!("{at}.{name}.{kind}"),
                            "workloads have no sockets to probe (only exec probes are served)",
                        );
                    }
                }
            }
            if group == "initContainers" && c.restart_policy.as_deref() == Some("Always") {
                return unsupported(
                    format!("{at}.restartPolicy: Always"),
                    "sidecar init containers are not",
                );
            }
        }
    }
    None
}

/// Fields that are accepted but have no effect, for an Event (hooks, workingDir, ...).
/// Exec probes are the host's (its prober runs them), not the provider's.
pub fn ignored(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    let mut out = Vec::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let mut note = |set: bool, what: &str| {
            if set {
                out.push(format!("{}.{what}", c.name));
            }
        };
        note(c.lifecycle.is_some(), "lifecycle");
        note(
            c.working_dir.as_deref().is_some_and(|w| !w.is_empty()),
            "workingDir",
        );
        note(
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key("cpu")),
            "resources.limits.cpu",
        );
    }
    out
}
