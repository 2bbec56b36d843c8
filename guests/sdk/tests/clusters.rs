//! `client` and `clusters` stay one API. Every function of the contract's
//! `client` is either also `clusters`' (the same, with `cluster: string`
//! first) or one only the host's own cluster has ([`CLIENT_ONLY`]); and each
//! shared one reaches the named cluster through the typed client
//! ([`FORWARDED`]). A function added to `client` and forgotten for named
//! clusters fails here, in `wit/` or in the SDK.
#![allow(clippy::unwrap_used)] // a test: a failure should stop it loudly

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use wasmlet_sdk::client::{ClusterClient, DeleteParams, ListParams, Patch};
use wasmlet_sdk::testing::FakeHost;
use wit_parser::{Resolve, Type, TypeDefKind};

/// `client` functions with no `clusters` twin, on purpose: pods, their
/// bindings and events belong to the host's own cluster, and `list-changes`
/// keeps a journal only the host's own caches have.
const CLIENT_ONLY: &[&str] = &[
    "list-changes",
    "create-all",
    "evict",
    "bind",
    "record-event",
];

/// Each shared function, called through a `ClusterClient` for "eu-west";
/// each returns what the named fake must then show.
type Call = fn(&ClusterClient, &FakeHost);
const FORWARDED: &[(&str, Call)] = &[
    ("get", |c, _| {
        let cm: ConfigMap = c.get("ns", "a").unwrap();
        assert_eq!(cm.data.unwrap()["at"], "eu-west");
    }),
    ("list", |c, _| {
        let cms: Vec<ConfigMap> = c.list(&ListParams::namespaced("ns")).unwrap();
        assert_eq!(cms.len(), 1);
        assert_eq!(cms[0].data.as_ref().unwrap()["at"], "eu-west");
    }),
    ("create", |c, eu| {
        let cm: ConfigMap = serde_json::from_value(config_map("b", "new")).unwrap();
        c.create(&cm).unwrap();
        assert!(eu.writes().contains(&"create ConfigMap ns/b".to_string()));
    }),
    ("update", |c, eu| {
        let mut cm: ConfigMap = c.get("ns", "a").unwrap();
        cm.data = None;
        c.update(&cm).unwrap();
        assert!(eu.writes().contains(&"update ConfigMap ns/a".to_string()));
    }),
    ("patch", |c, eu| {
        let _: ConfigMap = c
            .patch("ns", "a", &Patch::merge(json!({"data": {"p": "1"}})))
            .unwrap();
        assert!(eu.writes().contains(&"patch ConfigMap ns/a".to_string()));
    }),
    ("patch-status", |c, eu| {
        let _: ConfigMap = c
            .patch_status("ns", "a", &Patch::merge(json!({"status": {"s": 1}})))
            .unwrap();
        assert!(
            eu.writes()
                .contains(&"patch-status ConfigMap ns/a".to_string())
        );
    }),
    ("delete", |c, eu| {
        c.delete::<ConfigMap>("ns", "a", &DeleteParams::default())
            .unwrap();
        assert!(eu.writes().contains(&"delete ConfigMap ns/a".to_string()));
    }),
];

fn config_map(name: &str, at: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "ns" },
        "data": { "at": at },
    })
}

/// A type as WIT spells it; `use`d types keep their names, so `client`'s
/// and `clusters`' signatures compare as text.
fn wit_type(r: &Resolve, t: &Type) -> String {
    let Type::Id(id) = t else {
        return format!("{t:?}").to_lowercase();
    };
    let d = &r.types[*id];
    if let Some(name) = &d.name {
        return name.clone();
    }
    let or_ = |t: &Option<Type>| t.as_ref().map_or("_".into(), |t| wit_type(r, t));
    match &d.kind {
        TypeDefKind::Result(res) => format!("result<{}, {}>", or_(&res.ok), or_(&res.err)),
        TypeDefKind::List(t) => format!("list<{}>", wit_type(r, t)),
        TypeDefKind::Option(t) => format!("option<{}>", wit_type(r, t)),
        TypeDefKind::Type(t) => wit_type(r, t),
        other => format!("{other:?}"),
    }
}

/// `name: (param: type, ...) -> result` for each function of `interface`.
fn functions(r: &Resolve, interface: &str) -> Vec<(String, Vec<String>, String)> {
    let (_, i) = r
        .interfaces
        .iter()
        .find(|(_, i)| i.name.as_deref() == Some(interface))
        .unwrap_or_else(|| panic!("wit/ has no interface {interface}"));
    i.functions
        .values()
        .map(|f| {
            let params = f
                .params
                .iter()
                .map(|p| format!("{}: {}", p.name, wit_type(r, &p.ty)))
                .collect();
            let result = f.result.as_ref().map_or("_".into(), |t| wit_type(r, t));
            (f.name.clone(), params, result)
        })
        .collect()
}

#[test]
fn every_client_function_is_a_clusters_function_or_declared_client_only() {
    let mut r = Resolve::default();
    r.push_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit"))
        .expect("wit/ parses");
    let client = functions(&r, "client");
    let clusters = functions(&r, "clusters");
    let mut shared = BTreeSet::new();
    for (name, params, result) in &client {
        let Some((_, c_params, c_result)) = clusters.iter().find(|(n, _, _)| n == name) else {
            assert!(
                CLIENT_ONLY.contains(&name.as_str()),
                "client.{name} has no clusters.{name}: add it to wit/clusters.wit (cluster: string \
                 first) and to the SDK's Host methods taking a Cluster, or to CLIENT_ONLY here"
            );
            continue;
        };
        assert!(
            !CLIENT_ONLY.contains(&name.as_str()),
            "{name} is in clusters.wit and CLIENT_ONLY"
        );
        let mut expected = vec!["cluster: string".to_string()];
        expected.extend(params.iter().cloned());
        assert_eq!(
            (c_params, c_result),
            (&expected, result),
            "clusters.{name} is not client.{name} with the cluster first"
        );
        shared.insert(name.clone());
    }
    for (name, _, _) in &clusters {
        assert!(
            shared.contains(name),
            "clusters.{name} has no client.{name}"
        );
    }
    let forwarded: BTreeSet<String> = FORWARDED.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        shared, forwarded,
        "each function both interfaces have is checked through a ClusterClient in FORWARDED"
    );
}

#[test]
fn each_shared_function_reaches_the_named_cluster_and_only_it() {
    let host = FakeHost::new();
    host.insert(config_map("a", "own"));
    let eu = host.cluster("eu-west");
    eu.insert(config_map("a", "eu-west"));
    let _guard = host.install();
    let client = wasmlet_sdk::client::Client::new().cluster("eu-west");
    for (name, call) in FORWARDED {
        call(&client, &eu);
        assert_eq!(
            host.writes(),
            Vec::<String>::new(),
            "{name} wrote to the own cluster"
        );
    }
    let own: ConfigMap = wasmlet_sdk::client::Client::new().get("ns", "a").unwrap();
    assert_eq!(own.data.unwrap()["at"], "own");
}
