//! OpenAPI documents: enough for clients to know what the server accepts.
//!
//! `/openapi/v3` lists one document per group-version; each names every
//! resource path and declares the `fieldValidation` parameter on PATCH, which
//! is how kubectl learns that the server validates fields itself (it then
//! sends `fieldValidation=Strict` instead of validating client-side).
//! Custom resources carry their `openAPIV3Schema`; built-in kinds their
//! published definitions (from k8s-openapi, see
//! [`crate::validation::schemas::openapi_for`]), so `kubectl explain` works;
//! kinds without one here are open objects. PATCH does not list the
//! strategic-merge content type, so kubectl computes apply patches from its
//! own types (the definitions carry no patch strategies).
//! `/openapi/v2` is made from these documents (see [`crate::openapi_v2`]).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceType};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn fxhash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100000001b3)
    })
}

fn schema_name(rt: &ResourceType, version: &str) -> String {
    let group = if rt.group.is_empty() {
        "core".to_string()
    } else {
        rt.group.clone()
    };
    format!("{group}.{version}.{}", rt.kind)
}

fn operation(rt: &ResourceType, version: &str, action: &str, schema_ref: &str) -> Value {
    let gvk = json!({"group": rt.group, "version": version, "kind": rt.kind});
    let mut op = json!({
        "operationId": format!("{action}{}", rt.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
    });
    let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    match action {
        "patch" => {
            op["parameters"] = json!([
                query("dryRun"),
                query("fieldManager"),
                query("fieldValidation"),
                query("force")
            ]);
            let mut content = Map::new();
            let body = json!({"schema": {"type": "object"}});
            for ct in [
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ] {
                content.insert(ct.into(), body.clone());
            }
            op["requestBody"] = json!({"content": content, "required": true});
        }
        "post" | "put" => {
            op["parameters"] = json!([
                query("dryRun"),
                query("fieldManager"),
                query("fieldValidation")
            ]);
            op["requestBody"] = json!({"content": {"application/json": {"schema": {"$ref": schema_ref}}}, "required": true});
        }
        _ => {}
    }
    // Built-in kinds are also read and written in protobuf, as upstream
    // advertises them; custom resources are JSON only.
    if rt.builtin {
        let body = json!({"schema": {"$ref": schema_ref}});
        op["responses"]["200"]["content"][crate::codec::PROTOBUF] = body.clone();
        if matches!(action, "post" | "put") {
            op["requestBody"]["content"][crate::codec::PROTOBUF] = body;
        }
    }
    op
}

pub(crate) fn v3_doc(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let base = format!("/{}", gv_path(group, version));
    for rt in registry.all() {
        if rt.group != group || !rt.versions.iter().any(|v| v == version) {
            continue;
        }
        let published = rt
            .builtin
            .then(|| crate::validation::schemas::openapi_for(&rt.group, &rt.kind))
            .flatten();
        let name = match &published {
            Some(p) => p.name.clone(),
            None => schema_name(&rt, version),
        };
        let schema_ref = format!("#/components/schemas/{name}");
        let mut schema = match (&published, rt.schemas.get(version)) {
            (Some(p), _) => {
                for (k, d) in &p.definitions {
                    schemas.entry(k.clone()).or_insert_with(|| d.clone());
                }
                p.definitions.get(&name).cloned().unwrap_or_default()
            }
            (None, Some(_)) => rt
                .openapi_schema(version)
                .unwrap_or_else(|| json!({"type": "object"})),
            (None, None) => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        };
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": rt.group, "version": version, "kind": rt.kind}]);
        schemas.insert(name, schema);
        let collection = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", rt.resource)
        } else {
            format!("{base}/{}", rt.resource)
        };
        paths.insert(
            collection.clone(),
            json!({"get": operation(&rt, version, "list", &schema_ref), "post": operation(&rt, version, "post", &schema_ref)}),
        );
        let item = json!({
            "get": operation(&rt, version, "get", &schema_ref),
            "put": operation(&rt, version, "put", &schema_ref),
            "patch": operation(&rt, version, "patch", &schema_ref),
            "delete": operation(&rt, version, "delete", &schema_ref),
        });
        paths.insert(format!("{collection}/{{name}}"), item.clone());
        if rt.status {
            paths.insert(format!("{collection}/{{name}}/status"), item);
        }
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (wasmlet)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The OpenAPI documents as served, built once per [`Registry::generation`]:
/// building `/openapi/v2` walks every type's schema (0.6 s and 40 MB a
/// request with 200 CRDs), and the v3 root hashes every group-version's
/// document. A CRD added, changed or removed moves the generation, and the
/// next request builds afresh.
#[derive(Default)]
pub(crate) struct Cache {
    inner: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    generation: Option<u64>,
    v2: Option<Bytes>,
    v3_root: Option<Bytes>,
    /// By (group, version); `None` for one not served.
    v3: HashMap<(String, String), Option<Bytes>>,
}

impl Cache {
    /// `f` on what is cached for the registry's current generation. The
    /// generation is read before anything is built, so a document built
    /// while a CRD changes is never kept as the newer generation's.
    fn with<T>(&self, registry: &Registry, f: impl FnOnce(&mut Cached) -> T) -> T {
        let generation = registry.generation();
        let mut cached = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if cached.generation != Some(generation) {
            *cached = Cached {
                generation: Some(generation),
                ..Cached::default()
            };
        }
        f(&mut cached)
    }

    /// `/openapi/v2` in JSON, made by `build` (`openapi_v2::document`, a
    /// layer above this one) when the generation has none.
    pub(crate) fn v2(&self, registry: &Registry, build: impl FnOnce(&Registry) -> Value) -> Bytes {
        self.with(registry, |c| {
            c.v2.get_or_insert_with(|| encode(&build(registry))).clone()
        })
    }

    /// `/openapi/v3`.
    pub(crate) fn v3_root(&self, registry: &Registry) -> Bytes {
        self.with(registry, |c| {
            if let Some(root) = &c.v3_root {
                return root.clone();
            }
            let mut paths = Map::new();
            for (g, v) in group_versions(registry) {
                let p = gv_path(&g, &v);
                let doc =
                    cached_v3_doc(c, registry, &g, &v).unwrap_or_else(|| encode(&Value::Null));
                // The hash lets clients cache documents until they change.
                let hash = format!("{:016X}", fxhash(&doc));
                paths.insert(
                    p.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
                );
            }
            c.v3_root.insert(encode(&json!({"paths": paths}))).clone()
        })
    }

    /// `/openapi/v3/{api,apis/GROUP}/VERSION`, if served.
    pub(crate) fn v3_doc(&self, registry: &Registry, group: &str, version: &str) -> Option<Bytes> {
        self.with(registry, |c| cached_v3_doc(c, registry, group, version))
    }
}

fn cached_v3_doc(c: &mut Cached, registry: &Registry, group: &str, version: &str) -> Option<Bytes> {
    c.v3.entry((group.to_string(), version.to_string()))
        .or_insert_with(|| v3_doc(registry, group, version).map(|d| encode(&d)))
        .clone()
}

fn encode(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// Every served (group, version), in the registry's order.
pub(crate) fn group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut gvs: Vec<(String, String)> = Vec::new();
    for rt in registry.all() {
        for v in &rt.versions {
            if !gvs.contains(&(rt.group.clone(), v.clone())) {
                gvs.push((rt.group.clone(), v.clone()));
            }
        }
    }
    gvs
}

/// What clients name the OpenAPI v2 document in protobuf in `Accept`
/// (`...spec.v2@v1.0+protobuf`, or the newer `...spec.v2.v1.0+protobuf`).
pub(crate) const V2_PROTOBUF_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2";
/// The media type it is answered with, as kube-openapi's handler (the `@`
/// form does not parse as a MIME type).
pub(crate) const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
