//! Node admission, as the kubelet's: a pod bound to this node (by the
//! scheduler, or by its author setting `spec.nodeName`, which bypasses the
//! scheduler) runs only if its requests fit what the node has allocatable
//! minus what the pods it admitted before request. Otherwise it is rejected as
//! upstream rejects it: phase `Failed`, reason `OutOfpods` / `OutOfcpu` /
//! `OutOfmemory`, message `Pod was rejected: Node didn't have enough
//! resource: ...` (kubelet's `lifecycle` admit handler, checks in the
//! scheduler's NodeResourcesFit order: pods, cpu, memory).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};

// Quantities are parsed exactly as the built-in scheduler parses them, so the
// two agree on what fits.
#[allow(dead_code)]
#[path = "../../../guests/scheduler/src/quantity.rs"]
mod quantity;

use quantity::{parse_milli, parse_units};

/// Requested cpu (millicores) and memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    pub(crate) cpu_milli: i128,
    pub(crate) memory: i128,
}

impl Resources {
    fn add(&mut self, o: Resources) {
        self.cpu_milli += o.cpu_milli;
        self.memory += o.memory;
    }

    fn max(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            memory: self.memory.max(o.memory),
        }
    }

    fn of(get: impl Fn(&str) -> Option<String>) -> Resources {
        Resources {
            cpu_milli: get("cpu").as_deref().and_then(parse_milli).unwrap_or(0),
            memory: get("memory").as_deref().and_then(parse_units).unwrap_or(0),
        }
    }
}

/// A container's requests; a resource with a limit and no request requests
/// its limit (the API server's defaulting, applied here in case it did not).
fn requests_of(r: Option<&ResourceRequirements>) -> Resources {
    let requests = r.and_then(|r| r.requests.as_ref());
    let limits = r.and_then(|r| r.limits.as_ref());
    Resources::of(|k| {
        requests
            .and_then(|m| m.get(k))
            .or_else(|| limits.and_then(|m| m.get(k)))
            .map(|q| q.0.clone())
    })
}

/// What a pod requests, as upstream's `PodRequests`: its containers summed,
/// at least each init container (plus the sidecars started before it; a
/// sidecar, an init container with `restartPolicy: Always`, runs beside the
/// containers and adds to their sum), plus the pod's overhead.
pub(crate) fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources::default();
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(requests_of(c.resources.as_ref()));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = requests_of(c.resources.as_ref());
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(r);
            init_peak = init_peak.max(sidecars);
        } else {
            let mut during = sidecars;
            during.add(r);
            init_peak = init_peak.max(during);
        }
    }
    sum.add(sidecars);
    let mut total = sum.max(init_peak);
    if let Some(o) = &spec.overhead {
        total.add(Resources::of(|k| o.get(k).map(|q| q.0.clone())));
    }
    total
}

/// What the node offers pods (its `status.allocatable`), and the largest
/// memory limit one container may have here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allocatable {
    pub(crate) resources: Resources,
    pub(crate) pods: i128,
    /// `--workload-max-memory`; `None`: no bound.
    pub(crate) max_container_memory: Option<i128>,
}

impl Allocatable {
    /// What the node registers as allocatable (see [`super::agent`]).
    pub(crate) fn of(cfg: &super::agent::NodeConfig) -> Allocatable {
        Allocatable {
            resources: Resources {
                cpu_milli: parse_milli(&cfg.cpu).unwrap_or(0),
                memory: cfg
                    .allocatable_memory
                    .map(i128::from)
                    .or_else(|| parse_units(&cfg.memory))
                    .unwrap_or(0),
            },
            pods: i128::from(cfg.pods),
            max_container_memory: cfg.max_container_memory.map(i128::from),
        }
    }
}

/// Why a pod was rejected: `reason` for `status.reason`, `message` for
/// `status.message` (upstream's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// The requests of the pods admitted and not yet finished, by uid.
#[derive(Debug)]
pub(crate) struct Admission {
    allocatable: Allocatable,
    admitted: HashMap<String, Resources>,
}

impl Admission {
    pub(crate) fn new(allocatable: Allocatable) -> Admission {
        Admission {
            allocatable,
            admitted: HashMap::new(),
        }
    }

    /// Admits pod `uid` if it fits beside the pods admitted so far (one
    /// already admitted stays admitted).
    pub(crate) fn admit(&mut self, uid: &str, pod: &Pod) -> Result<(), Rejection> {
        if self.admitted.contains_key(uid) {
            return Ok(());
        }
        let want = pod_requests(pod);
        let mut used = Resources::default();
        for r in self.admitted.values() {
            used.add(*r);
        }
        let a = self.allocatable;
        let pods = self.admitted.len() as i128;
        let short = if pods + 1 > a.pods {
            Some(("pods", 1, pods, a.pods))
        } else if want.cpu_milli > 0 && used.cpu_milli + want.cpu_milli > a.resources.cpu_milli {
            Some(("cpu", want.cpu_milli, used.cpu_milli, a.resources.cpu_milli))
        } else if want.memory > 0 && used.memory + want.memory > a.resources.memory {
            Some(("memory", want.memory, used.memory, a.resources.memory))
        } else {
            None
        };
        if let Some(r) = self.limit_too_large(pod) {
            return Err(r);
        }
        if let Some((name, requested, used, capacity)) = short {
            return Err(Rejection {
                reason: format!("OutOf{name}"),
                message: format!(
                    "Pod was rejected: Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            });
        }
        self.admitted.insert(uid.to_string(), want);
        Ok(())
    }

    /// A container whose memory limit is above the node's largest: its
    /// workload could never start, so the pod is refused here, once, not
    /// left to fail each start (`OutOfmemory`, with the container named).
    fn limit_too_large(&self, pod: &Pod) -> Option<Rejection> {
        let max = self.allocatable.max_container_memory?;
        let spec = pod.spec.as_ref()?;
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find_map(|c| {
                let limit = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .and_then(|l| l.get("memory"))
                    .and_then(|q| parse_units(&q.0))?;
                (limit > max).then(|| Rejection {
                    reason: "OutOfmemory".into(),
                    message: format!(
                        "Pod was rejected: container {}'s memory limit {limit} is above this node's largest container memory limit {max} (--workload-max-memory)",
                        c.name
                    ),
                })
            })
    }

    /// The pod finished or is gone: its requests are free again.
    pub(crate) fn release(&mut self, uid: &str) {
        self.admitted.remove(uid);
    }
}

/// Whether this node rejected the pod at admission (its status says so):
/// such a pod never runs here.
pub(crate) fn rejected(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Failed")
            && s.reason.as_deref().is_some_and(|r| r.starts_with("OutOf"))
    })
}

/// Whether the pod has finished (its requests no longer count).
pub(crate) fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn ctr(name: &str, requests: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": "x", "resources": {"requests": requests}})
    }

    const NODE: Allocatable = Allocatable {
        resources: Resources {
            cpu_milli: 2000,
            memory: 24 << 30,
        },
        pods: 3,
        max_container_memory: Some(2 << 30),
    };

    #[test]
    fn requests_sum_containers_and_take_the_largest_init_container() {
        let p = pod(json!({
            "containers": [ctr("a", json!({"cpu": "500m", "memory": "1Gi"})), ctr("b", json!({"cpu": "1"}))],
            "initContainers": [ctr("i", json!({"cpu": "3", "memory": "10Mi"}))],
            "overhead": {"memory": "1Mi"},
        }));
        assert_eq!(
            pod_requests(&p),
            Resources {
                cpu_milli: 3000,
                memory: (1 << 30) + (1 << 20)
            }
        );
        // A limit without a request requests the limit.
        let p = pod(
            json!({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"memory": "64Mi"}}}]}),
        );
        assert_eq!(pod_requests(&p).memory, 64 << 20);
        // A sidecar adds to the containers' sum.
        let mut side = ctr("s", json!({"cpu": "1"}));
        side["restartPolicy"] = json!("Always");
        let p =
            pod(json!({"containers": [ctr("a", json!({"cpu": "1"}))], "initContainers": [side]}));
        assert_eq!(pod_requests(&p).cpu_milli, 2000);
    }

    #[test]
    fn rejects_as_the_kubelet_and_frees_what_a_finished_pod_held() {
        let mut a = Admission::new(NODE);
        let huge =
            pod(json!({"containers": [ctr("a", json!({"cpu": "500", "memory": "1000Gi"}))]}));
        let r = a.admit("huge", &huge).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 500000, used: 0, capacity: 2000"
        );
        let big = pod(json!({"containers": [ctr("a", json!({"memory": "20Gi"}))]}));
        a.admit("big", &big).unwrap();
        let r = a.admit("big2", &big).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            format!(
                "Pod was rejected: Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                20i128 << 30,
                20i128 << 30,
                24i128 << 30
            )
        );
        a.release("big");
        a.admit("big2", &big).unwrap();
        // The pod count: a pod that requests nothing still takes a slot.
        let none = pod(json!({"containers": [ctr("a", json!({}))]}));
        a.admit("n1", &none).unwrap();
        a.admit("n2", &none).unwrap();
        let r = a.admit("n3", &none).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
        );
        // Admitting the same pod again changes nothing.
        a.admit("n1", &none).unwrap();
    }

    #[test]
    fn a_limit_above_the_nodes_largest_is_refused_and_no_limit_reserves_nothing() {
        let mut a = Admission::new(NODE);
        let limited = |l: &str| {
            pod(json!({"containers": [{"name": "big", "image": "x",
                "resources": {"requests": {"memory": "1Mi"}, "limits": {"memory": l}}}]}))
        };
        let r = a.admit("big", &limited("3Gi")).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            format!(
                "Pod was rejected: container big's memory limit {} is above this node's largest container memory limit {} (--workload-max-memory)",
                3i128 << 30,
                2i128 << 30
            )
        );
        a.admit("ok", &limited("2Gi")).unwrap();
        // Without a limit, a pod takes what it requests, nothing more.
        let tiny = pod(json!({"containers": [ctr("a", json!({"memory": "1Mi"}))]}));
        a.admit("t1", &tiny).unwrap();
        assert_eq!(a.admitted.values().map(|r| r.memory).sum::<i128>(), 2 << 20);
    }
}
