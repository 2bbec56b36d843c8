//! The protobuf messages of the Kubernetes API: field numbers and wire types
//! from the `k8s-pb` crate's generated source (read by `build.rs` into a
//! table), JSON field names from k8s-openapi's published definitions.

use std::collections::HashMap;
use std::sync::LazyLock;

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::Value;

static TABLE: &str = include_str!(concat!(env!("OUT_DIR"), "/k8s_pb_table.txt"));

/// The schema every codec call reads, built once.
pub(crate) static SCHEMA: LazyLock<Schema> = LazyLock::new(Schema::build);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    Bytes,
    Message,
    MapString,
    MapBytes,
    MapMessage,
}

#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) tag: u32,
    /// The name JSON uses (`volumeID`).
    pub(crate) json: String,
    pub(crate) ty: Ty,
    pub(crate) repeated: bool,
    /// The message type of a message field or a map's message values.
    pub(crate) target: Option<String>,
    /// A Go struct embedded inline (`Probe.handler`): its fields are the
    /// parent's in JSON.
    pub(crate) inline: bool,
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    None,
    /// A string (or a number, on input).
    Quantity,
    /// An integer or a string.
    IntOrString,
    /// RFC 3339 with seconds.
    Time,
    /// RFC 3339 with microseconds.
    MicroTime,
    /// A Go duration string (`1h0m0s`).
    Duration,
    /// Field 1 holds any JSON value as bytes (RawExtension, FieldsV1, apiextensions' JSON).
    Raw,
    /// A Go named slice (`ExtraValue`): a JSON array of its `items`.
    Items,
    /// JSONSchemaPropsOrBool, OrArray and OrStringArray.
    OrBool,
    OrArray,
    OrStringArray,
}

#[derive(Debug)]
pub(crate) struct Message {
    pub(crate) name: String,
    pub(crate) fields: Vec<Field>,
    pub(crate) special: Special,
    /// Normalized JSON name (lowercase, without `_`, `-`, `$`) to field index.
    by_name: HashMap<String, usize>,
}

impl Message {
    pub(crate) fn field_by_tag(&self, tag: u32) -> Option<&Field> {
        self.fields.iter().find(|f| f.tag == tag)
    }

    pub(crate) fn field_by_json(&self, key: &str) -> Option<&Field> {
        self.by_name.get(&normalize(key)).map(|i| &self.fields[*i])
    }
}

pub(crate) struct Schema {
    messages: HashMap<String, Message>,
    /// (group's first label or `core`, version, kind) to message name.
    kinds: HashMap<(String, String, String), String>,
}

fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | '$'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// `volume_id` to `volumeId`: for fields no published definition names.
fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn special(name: &str) -> Special {
    let short = name.rsplit('.').next().unwrap_or(name);
    match name {
        "apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
        "apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
        "apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
        "apimachinery.pkg.apis.meta.v1.Duration" => Special::Duration,
        "apimachinery.pkg.runtime.RawExtension" | "apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            Special::Raw
        }
        _ if name.starts_with("apiextensions_apiserver.") => match short {
            "Json" => Special::Raw,
            "JsonSchemaPropsOrBool" => Special::OrBool,
            "JsonSchemaPropsOrArray" => Special::OrArray,
            "JsonSchemaPropsOrStringArray" => Special::OrStringArray,
            _ => Special::None,
        },
        _ => Special::None,
    }
}

/// Every property name upstream's definitions give, per definition
/// (lowercased `io.k8s....` name), normalized name to JSON name.
fn json_names() -> HashMap<String, HashMap<String, String>> {
    fn add<T: JsonSchema>(g: &mut SchemaGenerator) {
        g.subschema_for::<T>();
    }
    let mut g = SchemaGenerator::default();
    use api::{
        apps, authentication, authorization, autoscaling, batch, coordination, core, discovery,
        events, networking, policy, rbac, scheduling,
    };
    add::<core::v1::Pod>(&mut g);
    add::<core::v1::Node>(&mut g);
    add::<core::v1::Namespace>(&mut g);
    add::<core::v1::ConfigMap>(&mut g);
    add::<core::v1::Secret>(&mut g);
    add::<core::v1::Event>(&mut g);
    add::<core::v1::ServiceAccount>(&mut g);
    add::<core::v1::Service>(&mut g);
    add::<core::v1::Endpoints>(&mut g);
    add::<core::v1::Binding>(&mut g);
    add::<core::v1::ResourceQuota>(&mut g);
    add::<core::v1::LimitRange>(&mut g);
    add::<events::v1::Event>(&mut g);
    add::<discovery::v1::EndpointSlice>(&mut g);
    add::<coordination::v1::Lease>(&mut g);
    add::<apps::v1::Deployment>(&mut g);
    add::<apps::v1::ReplicaSet>(&mut g);
    add::<apps::v1::StatefulSet>(&mut g);
    add::<apps::v1::DaemonSet>(&mut g);
    add::<apps::v1::ControllerRevision>(&mut g);
    add::<batch::v1::Job>(&mut g);
    add::<batch::v1::CronJob>(&mut g);
    add::<networking::v1::Ingress>(&mut g);
    add::<scheduling::v1::PriorityClass>(&mut g);
    add::<policy::v1::PodDisruptionBudget>(&mut g);
    add::<policy::v1::Eviction>(&mut g);
    add::<autoscaling::v1::Scale>(&mut g);
    add::<authentication::v1::TokenRequest>(&mut g);
    add::<authentication::v1::TokenReview>(&mut g);
    add::<authorization::v1::SelfSubjectAccessReview>(&mut g);
    add::<authorization::v1::SubjectAccessReview>(&mut g);
    add::<rbac::v1::Role>(&mut g);
    add::<rbac::v1::RoleBinding>(&mut g);
    add::<rbac::v1::ClusterRole>(&mut g);
    add::<rbac::v1::ClusterRoleBinding>(&mut g);
    add::<apiext::CustomResourceDefinition>(&mut g);
    add::<core::v1::ReplicationController>(&mut g);
    add::<authentication::v1::SelfSubjectReview>(&mut g);
    add::<authorization::v1::SelfSubjectRulesReview>(&mut g);
    add::<meta::Status>(&mut g);
    add::<meta::ListMeta>(&mut g);
    add::<meta::DeleteOptions>(&mut g);
    let mut out = HashMap::new();
    for (name, def) in g.take_definitions(true) {
        let Some(Value::Object(props)) = def.get("properties") else {
            continue;
        };
        let names = props
            .keys()
            .map(|k| (normalize(k), k.clone()))
            .collect::<HashMap<_, _>>();
        out.insert(name.to_lowercase(), names);
    }
    out
}

impl Schema {
    fn build() -> Schema {
        let names = json_names();
        let mut messages = HashMap::new();
        let mut kinds = HashMap::new();
        let mut current: Option<Message> = None;
        let mut finish = |m: Message, messages: &mut HashMap<String, Message>| {
            let segs: Vec<&str> = m.name.split('.').collect();
            if let [.., label, version, kind] = segs.as_slice() {
                kinds
                    .entry((label.to_string(), version.to_string(), kind.to_string()))
                    .or_insert_with(|| m.name.clone());
            }
            messages.insert(m.name.clone(), m);
        };
        for line in TABLE.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["M", name] => {
                    if let Some(m) = current.take() {
                        finish(m, &mut messages);
                    }
                    current = Some(Message {
                        name: name.to_string(),
                        fields: Vec::new(),
                        special: special(name),
                        by_name: HashMap::new(),
                    });
                }
                ["F", tag, rust, ty, label, rest @ ..] => {
                    let Some(m) = current.as_mut() else { continue };
                    let def = format!("io.k8s.{}", m.name.replace('_', "-")).to_lowercase();
                    let props = names.get(&def);
                    let json = props
                        .and_then(|n| n.get(&normalize(rust)))
                        .cloned()
                        .unwrap_or_else(|| lower_camel(rust));
                    // Published but not a property: an inline embedded struct.
                    let inline = *ty == "message"
                        && *label == "opt"
                        && props.is_some_and(|n| !n.contains_key(&normalize(rust)));
                    let ty = match *ty {
                        "string" => Ty::String,
                        "bool" => Ty::Bool,
                        "int32" => Ty::Int32,
                        "int64" => Ty::Int64,
                        "double" => Ty::Double,
                        "bytes" => Ty::Bytes,
                        "message" => Ty::Message,
                        "map:string" => Ty::MapString,
                        "map:bytes" => Ty::MapBytes,
                        "map:message" => Ty::MapMessage,
                        other => unreachable!("build.rs writes no field type {other}"),
                    };
                    m.by_name.insert(normalize(rust), m.fields.len());
                    m.fields.push(Field {
                        tag: tag.parse().expect("build.rs writes numeric tags"),
                        json,
                        ty,
                        repeated: *label == "rep",
                        target: rest.first().map(|t| t.to_string()),
                        inline,
                    });
                }
                _ => {}
            }
        }
        if let Some(m) = current.take() {
            finish(m, &mut messages);
        }
        for m in messages.values_mut() {
            if m.special == Special::None
                && m.fields.len() == 1
                && m.fields[0].json == "items"
                && m.fields[0].repeated
            {
                m.special = Special::Items;
            }
        }
        Schema { messages, kinds }
    }

    pub(crate) fn message(&self, name: &str) -> Option<&Message> {
        self.messages.get(name)
    }

    /// The message of a top-level object: by its group's first label and
    /// version (`rbac.authorization.k8s.io/v1` → `api.rbac.v1`), then
    /// meta/v1's (Status, DeleteOptions and the like exist in every group).
    pub(crate) fn for_kind(&self, api_version: &str, kind: &str) -> Option<&Message> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let label = match group.split('.').next() {
            None | Some("") => "core",
            Some(l) => l,
        };
        let key = |l: &str, v: &str| (l.to_string(), v.to_string(), kind.to_string());
        self.kinds
            .get(&key(label, version))
            .or_else(|| self.kinds.get(&key("meta", "v1")))
            .and_then(|n| self.messages.get(n))
    }
}
