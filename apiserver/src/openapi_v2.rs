//! `/openapi/v2` in JSON: the Swagger 2.0 document old clients read, made
//! from the per-group-version OpenAPI v3 documents ([`crate::openapi`]) the
//! way kube-openapi's v3-to-v2 conversion does: schemas become
//! `definitions` (references rewritten), request bodies become `in: body`
//! parameters, and what v2 cannot say is dropped (`nullable`, `oneOf`,
//! `anyOf`, `not`, a list of types). Built-in kinds carry their published
//! definitions; custom resources their `openAPIV3Schema`.
//!
//! Only JSON: kubectl asks for this document in protobuf (gnostic's
//! `OpenAPIv2`), and gets an empty message, a valid document without
//! definitions. Upstream would answer a type it cannot produce with a 406,
//! but kubectl 1.33 does not fall back from one: validating a `List`
//! (`kubectl apply -f list.yaml`, `create --validate=strict`) then fails with
//! "the server was unable to respond with a content type that the client
//! supports". With no definitions kubectl leaves validation to the server
//! (`fieldValidation`), and computes strategic merge patches from its own
//! types.

use serde_json::{Map, Value, json};

use crate::registry::Registry;

/// `#/components/schemas/X` → `#/definitions/X`; v3-only keywords dropped.
fn to_v2_schema(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in ["nullable", "oneOf", "anyOf", "not"] {
                m.remove(k);
            }
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                *r = format!("#/definitions/{name}");
            }
            // JSON Schema's `["string", "null"]`: v2 has one type.
            if let Some(Value::Array(types)) = m.get("type") {
                match types.iter().find(|t| *t != "null").cloned() {
                    Some(t) => {
                        m.insert("type".into(), t);
                    }
                    None => {
                        m.remove("type");
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                // Inside `properties` the keys are field names, not keywords.
                if k == "properties" || k == "definitions" {
                    if let Value::Object(props) = x {
                        for p in props.values_mut() {
                            to_v2_schema(p);
                        }
                    }
                } else {
                    to_v2_schema(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2_schema),
        _ => {}
    }
}

/// One v3 operation as v2: query parameters typed inline, the request body
/// as a `body` parameter, the response's schema without media types.
fn to_v2_operation(op: &Value) -> Value {
    let mut out = Map::new();
    for k in [
        "operationId",
        "x-kubernetes-action",
        "x-kubernetes-group-version-kind",
    ] {
        if let Some(x) = op.get(k) {
            out.insert(k.into(), x.clone());
        }
    }
    let mut params: Vec<Value> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"name": p["name"], "in": p["in"], "type": "string", "uniqueItems": true}))
        .collect();
    let mut consumes = Vec::new();
    if let Some(content) = op
        .pointer("/requestBody/content")
        .and_then(Value::as_object)
    {
        consumes.extend(content.keys().cloned());
        let schema = content
            .get("application/json")
            .or_else(|| content.values().next())
            .map(|c| c["schema"].clone())
            .unwrap_or(json!({"type": "object"}));
        params.push(json!({"name": "body", "in": "body", "required": true, "schema": schema}));
    }
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    if !consumes.is_empty() {
        out.insert("consumes".into(), json!(consumes));
    }
    let content = op
        .pointer("/responses/200/content")
        .and_then(Value::as_object);
    let produces: Vec<String> = content
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    let schema = content
        .and_then(|c| c.get("application/json"))
        .map(|c| c["schema"].clone());
    let mut ok = json!({"description": "OK"});
    if let Some(s) = schema {
        ok["schema"] = s;
    }
    out.insert("responses".into(), json!({"200": ok}));
    if !produces.is_empty() {
        out.insert("produces".into(), json!(produces));
    }
    out.insert("schemes".into(), json!(["https"]));
    let mut v = Value::Object(out);
    to_v2_schema(&mut v);
    v
}

/// The whole v2 document: every served group-version's paths and schemas.
pub(crate) fn document(registry: &Registry) -> Value {
    let gvs = crate::openapi::group_versions(registry);
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for (g, v) in gvs {
        let Some(doc) = crate::openapi::v3_doc(registry, &g, &v) else {
            continue;
        };
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, s) in schemas {
                definitions.entry(name.clone()).or_insert_with(|| {
                    let mut s = s.clone();
                    to_v2_schema(&mut s);
                    s
                });
            }
        }
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let ops: Map<String, Value> = item
                .as_object()
                .into_iter()
                .flatten()
                .map(|(method, op)| (method.clone(), to_v2_operation(op)))
                .collect();
            paths.insert(path.clone(), Value::Object(ops));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes (wasmlet)", "version": "v1.33.0"},
        "paths": paths,
        "definitions": definitions,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{to_v2_operation, to_v2_schema};

    #[test]
    fn v3_schemas_and_operations_become_v2() {
        let mut s = json!({"type": "object", "properties": {
            "spec": {"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"},
            "not": {"type": ["string", "null"], "nullable": true, "anyOf": [{"type": "integer"}]},
        }});
        to_v2_schema(&mut s);
        assert_eq!(
            s,
            json!({"type": "object", "properties": {
                "spec": {"$ref": "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"},
                "not": {"type": "string"},
            }})
        );
        let op = json!({"operationId": "postX", "x-kubernetes-action": "post",
            "parameters": [{"name": "dryRun", "in": "query", "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/X"}}}},
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/X"}}}}}});
        let v2 = to_v2_operation(&op);
        assert_eq!(v2["parameters"][1]["in"], "body");
        assert_eq!(v2["parameters"][1]["schema"]["$ref"], "#/definitions/X");
        assert_eq!(v2["responses"]["200"]["schema"]["$ref"], "#/definitions/X");
        assert_eq!(
            v2["parameters"][0],
            json!({"name": "dryRun", "in": "query", "type": "string", "uniqueItems": true})
        );
    }

    /// The documents are built once per set of served types: a second request
    /// is the same bytes without a rebuild, and a CRD added, changed or
    /// removed is in (or out of) the next one.
    #[test]
    fn documents_are_cached_until_a_crd_changes() {
        let registry = crate::registry::Registry::with_builtins();
        let cache = crate::openapi::Cache::default();
        let started = std::time::Instant::now();
        let first = cache.v2(&registry, super::document);
        let built = started.elapsed();
        let started = std::time::Instant::now();
        let again = cache.v2(&registry, super::document);
        let cached = started.elapsed();
        eprintln!("/openapi/v2: built in {built:?}, then served in {cached:?}");
        assert_eq!(first.as_ptr(), again.as_ptr(), "built again");
        let root = cache.v3_root(&registry);
        assert_eq!(root.as_ptr(), cache.v3_root(&registry).as_ptr());
        assert!(cache.v3_doc(&registry, "x.dev", "v1").is_none());

        let crd = json!({"metadata": {"name": "things.x.dev"}, "spec": {"group": "x.dev",
            "scope": "Namespaced", "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        registry.insert(crate::crd::resource_type(&crd).unwrap());
        let with_crd = cache.v2(&registry, super::document);
        let doc: serde_json::Value = serde_json::from_slice(&with_crd).unwrap();
        assert!(doc["definitions"].get("x.dev.v1.Thing").is_some());
        assert!(
            doc["paths"]
                .get("/apis/x.dev/v1/namespaces/{namespace}/things")
                .is_some()
        );
        let root: serde_json::Value = serde_json::from_slice(&cache.v3_root(&registry)).unwrap();
        assert!(root["paths"].get("apis/x.dev/v1").is_some());
        assert!(cache.v3_doc(&registry, "x.dev", "v1").is_some());

        registry.remove("x.dev", "things");
        let doc: serde_json::Value =
            serde_json::from_slice(&cache.v2(&registry, super::document)).unwrap();
        assert!(doc["definitions"].get("x.dev.v1.Thing").is_none());
        assert!(cache.v3_doc(&registry, "x.dev", "v1").is_none());
    }
}
