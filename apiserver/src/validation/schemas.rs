//! The schemas of built-in kinds, taken from k8s-openapi's `schemars`
//! implementations (the upstream OpenAPI definitions) and turned into the
//! structural form CRDs use, once per kind on first use.
//!
//! The conversion keeps what Go's JSON decoding of the typed structs checks
//! (the type of every field, and which fields exist) and nothing more:
//! enums, patterns and `required` are upstream's hand-written validation,
//! not its decoding. Every node is nullable (Go decodes `null` into any
//! field), `$ref`s are inlined, and the special types become:
//! IntOrString int-or-string; Quantity (a number or a string), RawExtension,
//! FieldsV1, apiextensions' JSON and any `oneOf`/`anyOf` node: any value;
//! Time and MicroTime plain strings. A type that refers to itself
//! (JSONSchemaProps) is any value below its first level.
//!
//! Each node also carries `x-go-type` (and structs `x-go-struct`), the Go
//! names upstream's decoding errors print (`json: cannot unmarshal number
//! into Go struct field ConfigMap.data of type map[string]string`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use wasmlet_apimachinery::schema::Structural;

/// One built-in kind's schema in both forms.
pub struct KindSchema {
    /// What pruning and type validation run on.
    pub(crate) structural: Structural,
    /// The converted schema with its `x-go-*` annotations, for messages.
    pub(crate) annotated: Value,
}

type Generate = fn() -> Value;

fn root_of<T: JsonSchema>() -> Value {
    let mut g = SchemaGenerator::default();
    let mut root = g.root_schema_for::<T>().to_value();
    root["x-root-name"] = Value::String(T::schema_name().into_owned());
    root
}

/// The generator for a (group, kind); `None` for kinds without a schema here.
fn generator(group: &str, kind: &str) -> Option<Generate> {
    use api::scheduling;
    use api::{apps, autoscaling, batch, coordination, core, discovery, networking, policy, rbac};
    Some(match (group, kind) {
        ("", "Namespace") => root_of::<core::v1::Namespace>,
        ("", "Pod") => root_of::<core::v1::Pod>,
        ("", "Node") => root_of::<core::v1::Node>,
        ("", "ConfigMap") => root_of::<core::v1::ConfigMap>,
        ("", "Secret") => root_of::<core::v1::Secret>,
        // events.k8s.io Events are stored (and admitted) as core Events.
        ("", "Event") | ("events.k8s.io", "Event") => root_of::<core::v1::Event>,
        ("", "ServiceAccount") => root_of::<core::v1::ServiceAccount>,
        ("", "Service") => root_of::<core::v1::Service>,
        ("", "Endpoints") => root_of::<core::v1::Endpoints>,
        ("discovery.k8s.io", "EndpointSlice") => root_of::<discovery::v1::EndpointSlice>,
        ("coordination.k8s.io", "Lease") => root_of::<coordination::v1::Lease>,
        ("apps", "StatefulSet") => root_of::<apps::v1::StatefulSet>,
        ("apps", "Deployment") => root_of::<apps::v1::Deployment>,
        ("apps", "ReplicaSet") => root_of::<apps::v1::ReplicaSet>,
        ("apps", "DaemonSet") => root_of::<apps::v1::DaemonSet>,
        ("apps", "ControllerRevision") => root_of::<apps::v1::ControllerRevision>,
        ("", "ReplicationController") => root_of::<core::v1::ReplicationController>,
        ("", "ResourceQuota") => root_of::<core::v1::ResourceQuota>,
        ("", "LimitRange") => root_of::<core::v1::LimitRange>,
        ("", "PersistentVolume") => root_of::<core::v1::PersistentVolume>,
        ("", "PersistentVolumeClaim") => root_of::<core::v1::PersistentVolumeClaim>,
        ("", "PodTemplate") => root_of::<core::v1::PodTemplate>,
        ("networking.k8s.io", "Ingress") => root_of::<networking::v1::Ingress>,
        ("networking.k8s.io", "IngressClass") => root_of::<networking::v1::IngressClass>,
        ("scheduling.k8s.io", "PriorityClass") => root_of::<scheduling::v1::PriorityClass>,
        ("autoscaling", "HorizontalPodAutoscaler") => {
            root_of::<autoscaling::v2::HorizontalPodAutoscaler>
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            root_of::<api::certificates::v1::CertificateSigningRequest>
        }
        ("apiregistration.k8s.io", "APIService") => {
            root_of::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>
        }
        ("policy", "PodDisruptionBudget") => root_of::<policy::v1::PodDisruptionBudget>,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            root_of::<apiext::CustomResourceDefinition>
        }
        ("rbac.authorization.k8s.io", "Role") => root_of::<rbac::v1::Role>,
        ("rbac.authorization.k8s.io", "RoleBinding") => root_of::<rbac::v1::RoleBinding>,
        ("rbac.authorization.k8s.io", "ClusterRole") => root_of::<rbac::v1::ClusterRole>,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            root_of::<rbac::v1::ClusterRoleBinding>
        }
        ("batch", "Job") => root_of::<batch::v1::Job>,
        ("batch", "CronJob") => root_of::<batch::v1::CronJob>,
        _ => return None,
    })
}

/// A kind's OpenAPI v3 definitions as upstream publishes them: its own
/// (named like `io.k8s.api.core.v1.Pod`) and every one it refers to, with
/// `$ref`s pointing at `#/components/schemas/`.
pub(crate) struct KindOpenApi {
    pub(crate) name: String,
    pub(crate) definitions: Map<String, Value>,
}

/// For `/openapi/v3`: `None` for kinds without a schema here and for the
/// events.k8s.io view (its fields differ from the core Event it is stored as).
pub(crate) fn openapi_for(group: &str, kind: &str) -> Option<Arc<KindOpenApi>> {
    static DOCS: LazyLock<Cache<KindOpenApi>> = LazyLock::new(Default::default);
    if group == "events.k8s.io" {
        return None;
    }
    let key = (group.to_string(), kind.to_string());
    if let Some(hit) = DOCS.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return hit.clone();
    }
    let built = generator(group, kind).map(|g| {
        let mut root = g();
        let name = root["x-root-name"].as_str().unwrap_or(kind).to_string();
        let mut definitions = root
            .as_object_mut()
            .and_then(|o| o.remove("$defs"))
            .and_then(|d| match d {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .unwrap_or_default();
        if let Some(o) = root.as_object_mut() {
            for k in ["$schema", "x-root-name", "title"] {
                o.remove(k);
            }
        }
        definitions.insert(name.clone(), root);
        for d in definitions.values_mut() {
            rewrite_refs(d);
        }
        Arc::new(KindOpenApi { name, definitions })
    });
    DOCS.write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, built.clone());
    built
}

/// `#/$defs/X` → `#/components/schemas/X`, everywhere in a schema.
fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                *r = format!("#/components/schemas/{name}");
            }
            m.values_mut().for_each(rewrite_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

/// Per (group, kind), built on first use; `None` when there is none.
type Cache<T> = RwLock<HashMap<(String, String), Option<Arc<T>>>>;
static CACHE: LazyLock<Cache<KindSchema>> = LazyLock::new(Default::default);

/// The schema of a built-in kind, built on first use and kept.
pub fn for_kind(group: &str, kind: &str) -> Option<Arc<KindSchema>> {
    let key = (group.to_string(), kind.to_string());
    if let Some(hit) = CACHE.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return hit.clone();
    }
    let built = generator(group, kind).and_then(|g| match build(&g()) {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            // A conversion bug must not take writes down: the kind goes unchecked.
            tracing::error!(group, kind, error = %e, "built-in schema not usable");
            None
        }
    });
    CACHE
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, built.clone());
    built
}

/// Converts a schemars root schema (with `$defs`) into a [`KindSchema`].
pub(crate) fn build(root: &Value) -> Result<KindSchema, wasmlet_apimachinery::schema::SchemaError> {
    let defs = root
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let name = root["x-root-name"].as_str().unwrap_or("").to_string();
    let mut stack = vec![name.clone()];
    let mut annotated = convert(root, Some(&name), &defs, &mut stack);
    // The root is an object even if a conversion rule would make it "any".
    annotated["nullable"] = Value::Bool(false);
    let structural = Structural::new(&annotated)?;
    Ok(KindSchema {
        structural,
        annotated,
    })
}

fn any(go_type: &str) -> Value {
    json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true, "x-go-type": go_type})
}

/// `io.k8s.api.core.v1.Container` → (`v1`, `Container`).
fn go_name(def: &str) -> (&str, &str) {
    let mut parts = def.rsplit('.');
    let name = parts.next().unwrap_or(def);
    let pkg = parts.next().unwrap_or("");
    (pkg, name)
}

fn convert(
    s: &Value,
    def: Option<&str>,
    defs: &Map<String, Value>,
    stack: &mut Vec<String>,
) -> Value {
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r).to_string();
        return convert_ref(&name, defs, stack);
    }
    let go_type = |t: &str| Value::String(t.to_string());
    let mut out = Map::new();
    out.insert("nullable".into(), Value::Bool(true));
    let typ = s.get("type").and_then(Value::as_str);
    match typ {
        None => {
            if s["x-kubernetes-int-or-string"] == true {
                out.insert("x-kubernetes-int-or-string".into(), Value::Bool(true));
                out.insert("x-go-type".into(), go_type("intstr.IntOrString"));
            } else {
                return any("interface {}");
            }
        }
        Some("object") => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                let mut conv = Map::new();
                for (k, p) in props {
                    conv.insert(k.clone(), convert(p, None, defs, stack));
                }
                out.insert("type".into(), go_type("object"));
                out.insert("properties".into(), Value::Object(conv));
                let (pkg, name) = go_name(def.unwrap_or("struct"));
                out.insert("x-go-struct".into(), go_type(name));
                out.insert("x-go-type".into(), Value::String(format!("{pkg}.{name}")));
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                let v = convert(ap, None, defs, stack);
                let vt = v["x-go-type"]
                    .as_str()
                    .unwrap_or("interface {}")
                    .to_string();
                out.insert("type".into(), go_type("object"));
                out.insert("additionalProperties".into(), v);
                out.insert(
                    "x-go-type".into(),
                    Value::String(format!("map[string]{vt}")),
                );
            } else {
                // FieldsV1, RawExtension, JSON: free-form.
                return any("map[string]interface {}");
            }
        }
        Some("array") => {
            let items = s
                .get("items")
                .map(|i| convert(i, None, defs, stack))
                .unwrap_or_else(|| any("interface {}"));
            let it = items["x-go-type"]
                .as_str()
                .unwrap_or("interface {}")
                .to_string();
            out.insert("type".into(), go_type("array"));
            out.insert("items".into(), items);
            out.insert("x-go-type".into(), Value::String(format!("[]{it}")));
        }
        Some(t @ ("string" | "integer" | "number" | "boolean")) => {
            let format = s.get("format").and_then(Value::as_str).unwrap_or("");
            let gt = match (t, format) {
                ("string", "byte") => "[]uint8",
                ("string", _) => "string",
                ("integer", "int32") => "int32",
                ("integer", _) => "int64",
                ("number", _) => "float64",
                _ => "bool",
            };
            out.insert("type".into(), go_type(t));
            out.insert("x-go-type".into(), go_type(gt));
        }
        Some(_) => return any("interface {}"),
    }
    Value::Object(out)
}

fn convert_ref(name: &str, defs: &Map<String, Value>, stack: &mut Vec<String>) -> Value {
    match name {
        "io.k8s.apimachinery.pkg.api.resource.Quantity" => return any("resource.Quantity"),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
        | "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let (_, n) = go_name(name);
            return json!({"type": "string", "nullable": true, "x-go-type": format!("v1.{n}")});
        }
        _ => {}
    }
    let Some(def) = defs.get(name) else {
        return any("interface {}");
    };
    if stack.iter().any(|s| s == name) {
        return any(&format!("*{}", go_name(name).1));
    }
    stack.push(name.to_string());
    let out = convert(def, Some(name), defs, stack);
    stack.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_kind_converts() {
        for (g, k) in [
            ("", "Pod"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "Namespace"),
            ("", "Node"),
            ("", "Event"),
            ("", "ServiceAccount"),
            ("", "Service"),
            ("", "Endpoints"),
            ("discovery.k8s.io", "EndpointSlice"),
            ("coordination.k8s.io", "Lease"),
            ("apps", "StatefulSet"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "DaemonSet"),
            ("apps", "ControllerRevision"),
            ("", "ReplicationController"),
            ("", "ResourceQuota"),
            ("", "LimitRange"),
            ("", "PersistentVolume"),
            ("", "PersistentVolumeClaim"),
            ("", "PodTemplate"),
            ("networking.k8s.io", "Ingress"),
            ("networking.k8s.io", "IngressClass"),
            ("scheduling.k8s.io", "PriorityClass"),
            ("autoscaling", "HorizontalPodAutoscaler"),
            ("apiregistration.k8s.io", "APIService"),
            ("certificates.k8s.io", "CertificateSigningRequest"),
            ("policy", "PodDisruptionBudget"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            ("batch", "Job"),
            ("batch", "CronJob"),
        ] {
            let root = generator(g, k).expect("generator")();
            build(&root).unwrap_or_else(|e| panic!("{g}/{k}: {e}"));
        }
    }

    #[test]
    fn openapi_definitions_refer_to_components() {
        let doc = openapi_for("", "Pod").unwrap();
        assert_eq!(doc.name, "io.k8s.api.core.v1.Pod");
        let spec = &doc.definitions["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert_eq!(
            spec["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        let containers = &doc.definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(
            containers["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Container"
        );
        assert!(doc.definitions.contains_key("io.k8s.api.core.v1.Container"));
        assert!(openapi_for("events.k8s.io", "Event").is_none());
    }

    #[test]
    fn configmap_data_is_a_string_map_and_metadata_is_typed() {
        let s = for_kind("", "ConfigMap").unwrap();
        assert_eq!(
            s.annotated["properties"]["data"]["x-go-type"],
            "map[string]string"
        );
        assert_eq!(s.annotated["x-go-struct"], "ConfigMap");
        assert_eq!(
            s.annotated["properties"]["metadata"]["x-go-type"],
            "v1.ObjectMeta"
        );
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "bogus": 1, "managedFields": [{"fieldsV1": {"f:data": {}}}]},
            "data": {"a": "b"}, "extra": true});
        let unknown = s.structural.prune_typed(&mut obj);
        assert_eq!(unknown, vec!["extra", "metadata.bogus"]);
        assert_eq!(
            obj["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {}})
        );
        assert!(s.structural.validate(&obj).is_empty());
        let bad =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": 5});
        let causes = s.structural.validate(&bad);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "data");
    }

    #[test]
    fn quantities_int_or_strings_and_nulls_decode_as_upstream() {
        let s = for_kind("", "Pod").unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": null},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"cpu": 0.5, "memory": "1Gi"}},
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": "http"}}}]}});
        assert!(
            s.structural.validate(&pod).is_empty(),
            "{:?}",
            s.structural.validate(&pod)
        );
    }
}
