//! Cost of validating built-in kinds by their schema (run:
//! `cargo bench -p wasmlet-apiserver --bench validation`): building a kind's
//! structural schema from k8s-openapi (once per kind per process), and the
//! per-write decode (prune + type check + kind rules) of a 1 KiB ConfigMap
//! and of a typical Pod.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::time::Instant;

use serde_json::{Value, json};
use wasmlet_apiserver::internals::{FieldChecks, Registry, decode, for_kind, validate};

fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    for (group, kind) in [("", "ConfigMap"), ("", "Pod"), ("apps", "StatefulSet")] {
        let start = Instant::now();
        for_kind(group, kind);
        println!(
            "schema build {kind}: {:.1} ms (first use only)",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    let registry = Registry::with_builtins();
    let opts = FieldChecks::default();
    let cases: [(&str, Value); 2] = [
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default", "labels": {"bench": "yes"}},
                "data": {"blob": "x".repeat(1000)}}),
        ),
        (
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
                    "tolerations": [{"key": "k", "operator": "Exists"}]},
                "status": {"phase": "Pending", "qosClass": "BestEffort"}}),
        ),
    ];
    for (resource, obj) in cases {
        let rt = registry.get("", resource).expect("built-in");
        let us = per_call(20_000, || {
            let mut o = obj.clone();
            decode(&rt, "v1", &mut o, &opts).expect("valid");
            let _ = validate(&rt, &o);
        });
        let clone_us = per_call(20_000, || {
            std::hint::black_box(obj.clone());
        });
        println!(
            "decode+validate {resource}: {:.2} µs per write ({:.2} µs of it the clone)",
            us, clone_us
        );
    }
}
