//! The cost of the worst requests issue 30 rows 1 and 2 still accept (run:
//! `cargo bench -p wasmlet-apimachinery --bench amplification`): time and peak heap of
//!
//! 1. a JSON patch whose copies double a list until just under the 3 MiB copy
//!    limit, and one that nests an object into itself up to the depth limit,
//!    from seeds of several sizes;
//! 2. the escalation check of a Role with one rule of n groups x n resources
//!    x n verbs (n up to the validation limit of 256: 16.7 million
//!    permissions) against the rules of a namespace admin;
//! 3. label selectors up to the largest a request head holds (400 KiB):
//!    parse, and match against 5,000 objects' labels;
//! 4. server-side apply over a Pod of n containers that two managers wrote
//!    in opposite orders (map lists matched by key: linear, not n²).
//!
//! Peak heap is measured by a counting global allocator around each call.
//! Figures are printed, never asserted.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use wasmlet_apimachinery::builtin::BuiltinListTypes;
use wasmlet_apimachinery::managedfields::{self, Writer};
use wasmlet_apimachinery::patch::{self, bounds};
use wasmlet_apimachinery::rbac::PolicyRule;
use wasmlet_apimachinery::rbac_covers::missing;
use wasmlet_apimachinery::selector::LabelSelector;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f`, returning its result, milliseconds and peak heap above the
/// start, in MiB.
fn measured<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let start = Instant::now();
    let out = f();
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let peak = (PEAK.load(Ordering::Relaxed) - base) as f64 / (1024.0 * 1024.0);
    (out, ms, peak)
}

/// Doubling copies of `/a` (one string of `seed` bytes) while they stay
/// under the copy and result limits: the largest copy patch accepted.
fn doubling(seed: usize) -> (Value, Value) {
    let obj = json!({"a": ["x".repeat(seed)]});
    let mut size = bounds::measure(&obj["a"]).bytes;
    let mut copied = 0;
    let mut ops = vec![];
    let base = bounds::measure(&obj).bytes;
    while copied + size <= bounds::MAX_COPY_BYTES
        && base + copied + size <= bounds::MAX_RESULT_BYTES
    {
        ops.push(json!({"op": "copy", "from": "/a", "path": "/a/-"}));
        copied += size;
        size = size * 2 + 1;
    }
    (obj, Value::Array(ops))
}

/// Copies of `/a` into its own deepest point, while the depth stays within
/// the limit, from an object of `width` keys per level.
fn nesting(width: usize) -> (Value, Value) {
    let level: serde_json::Map<String, Value> =
        (0..width).map(|i| (format!("k{i}"), json!("v"))).collect();
    let mut a = Value::Object(level.clone());
    a["x"] = Value::Object(level);
    let obj = json!({"a": a});
    let mut depth = 2;
    let mut deepest = "/a/x".to_string();
    let mut ops = vec![];
    while 1 + (deepest.matches('/').count()) + depth <= bounds::MAX_DEPTH {
        ops.push(json!({"op": "copy", "from": "/a", "path": format!("{deepest}/x")}));
        deepest.push_str(&"/x".repeat(depth));
        depth *= 2;
    }
    (obj, Value::Array(ops))
}

/// Builds a selector of `n` parts.
type Shape = fn(usize) -> String;

fn many(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
    PolicyRule {
        verbs: v(verbs),
        api_groups: v(groups),
        resources: v(resources),
        ..Default::default()
    }
}

/// Roughly what the `admin` ClusterRole gives in a namespace.
fn namespace_admin() -> Vec<PolicyRule> {
    let all = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    vec![
        rule(
            &all,
            &[""],
            &[
                "pods",
                "configmaps",
                "secrets",
                "services",
                "serviceaccounts",
                "persistentvolumeclaims",
                "events",
            ],
        ),
        rule(
            &all,
            &["apps"],
            &[
                "deployments",
                "statefulsets",
                "daemonsets",
                "replicasets",
                "deployments/scale",
            ],
        ),
        rule(&all, &["batch"], &["jobs", "cronjobs"]),
        rule(
            &all,
            &["rbac.authorization.k8s.io"],
            &["roles", "rolebindings"],
        ),
        rule(
            &["get", "list", "watch"],
            &[""],
            &["*/status", "pods/log", "namespaces"],
        ),
    ]
}

fn main() {
    println!("row 1: JSON patch, worst accepted");
    for seed in [100, 1_000, 10_000, 100_000, 1_000_000] {
        let (obj, ops) = doubling(seed);
        let n = ops.as_array().map_or(0, Vec::len);
        let (r, ms, mib) = measured(|| {
            let mut x = obj.clone();
            patch::json(&mut x, &ops).map(|()| bounds::measure(&x).bytes)
        });
        let bytes = r.expect("accepted");
        println!(
            "  doubling copies, seed {seed:>9} B: {n:>2} ops, result {:.2} MiB, {ms:>7.2} ms, peak {mib:>6.2} MiB",
            bytes as f64 / (1024.0 * 1024.0)
        );
    }
    for width in [1, 10, 100] {
        let (obj, ops) = nesting(width);
        let n = ops.as_array().map_or(0, Vec::len);
        let (r, ms, mib) = measured(|| {
            let mut x = obj.clone();
            patch::json(&mut x, &ops).map(|()| bounds::measure(&x))
        });
        let m = r.expect("accepted");
        println!(
            "  self-nesting copies, {width:>3} keys/level: {n} ops, depth {}, result {:.2} MiB, {ms:>7.2} ms, peak {mib:>6.2} MiB",
            m.depth,
            m.bytes as f64 / (1024.0 * 1024.0)
        );
    }

    println!("row 2: escalation check of one rule of n groups x n resources x n verbs");
    let owner = namespace_admin();
    for n in [10, 50, 100, 200, 256] {
        let huge = PolicyRule {
            verbs: many("v", n),
            api_groups: many("g", n),
            resources: many("r", n),
            ..Default::default()
        };
        // Half of each list held, so partial permissions split.
        let mut mixed = huge.clone();
        for (i, verb) in ["get", "list", "watch", "create"].iter().enumerate() {
            mixed.verbs[i % n] = verb.to_string();
        }
        mixed.api_groups[0] = String::new();
        mixed.api_groups[1 % n] = "apps".into();
        mixed.resources[0] = "pods".into();
        mixed.resources[1 % n] = "deployments".into();
        for (what, r) in [("none held", &huge), ("some held", &mixed)] {
            let (m, ms, mib) = measured(|| missing(&owner, std::slice::from_ref(r)));
            let m = m.expect("checkable");
            println!(
                "  n = {n:>3} ({:>10} permissions, {what}): {:>10} missing, {ms:>7.2} ms, peak {mib:>6.3} MiB",
                n * n * n,
                m.total
            );
        }
    }

    println!(
        "selectors: the largest label selector a request head holds (400 KiB), on 5,000 objects' labels"
    );
    let labels: Vec<BTreeMap<String, String>> = (0..5_000)
        .map(|i| {
            (0..10)
                .map(|k| (format!("k{k}"), format!("v{}", i * 7 + k)))
                .collect()
        })
        .collect();
    let head = 8192 + 4096 * 100;
    let shapes: [(&str, Shape); 3] = [
        ("one set of n values", |n| {
            format!("k0 in ({})", many("v", n).join(","))
        }),
        ("n != terms", |n| many("k0!=x", n).join(",")),
        ("n bad values", |n| {
            format!("k0 in ({})", many("-", n).join(","))
        }),
    ];
    for (what, make) in &shapes {
        for n in [100, 1_000, 10_000, 50_000] {
            let text = make(n);
            if text.len() > head {
                continue;
            }
            let (sel, parse_ms, mib) = measured(|| LabelSelector::parse(&text));
            let (selected, match_ms, _) = measured(|| match &sel {
                Ok(s) => labels.iter().filter(|l| s.matches(*l)).count(),
                Err(_) => 0,
            });
            let outcome = match &sel {
                Ok(_) => format!("{selected:>5} selected"),
                Err(e) => format!("error of {:>6} B", e.0.len()),
            };
            println!(
                "  {what:<20} n = {n:>6} ({:>7} B): {outcome}, parse {parse_ms:>7.2} ms (peak {mib:>5.2} MiB), match {match_ms:>7.2} ms",
                text.len()
            );
        }
    }

    println!("row 4: server-side apply over a Pod of n containers written by two managers");
    let lists = BuiltinListTypes::for_apply("", "Pod");
    let pod = |n: usize, image: &str, reversed: bool| {
        let mut cs: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        if reversed {
            cs.reverse();
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": cs}})
    };
    let now = "2025-03-01T10:00:00Z";
    for n in [1_000, 5_000, 20_000] {
        let live = managedfields::update(
            None,
            &pod(n, "a", false),
            &Writer::new("creator", "v1", &lists, now),
        );
        let live = managedfields::update(
            Some(&live),
            &pod(n, "b", true),
            &Writer::new("editor", "v1", &lists, now),
        );
        let (r, ms, mib) = measured(|| {
            let by = Writer::new("me", "v1", &lists, now).forced(true);
            managedfields::apply(Some(&live), &pod(n, "c", false), &by)
        });
        r.expect("applied");
        println!("  {n:>6} containers: {ms:>8.2} ms, peak {mib:>6.2} MiB");
    }
}
