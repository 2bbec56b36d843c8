//! The part of a CRD's `openAPIV3Schema` that CEL rules need: each node's
//! type, the bounds the cost estimate multiplies by, its children and its
//! compiled rules. Built once per CRD version (see [`super::Rules`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::rule::Rule;

/// Upstream's request size limit, which bounds a list, map or string whose
/// schema declares no `maxItems`/`maxProperties`/`maxLength` (as
/// apiextensions' `estimateMaxArrayItemsFromMinSize`).
pub(crate) const MAX_REQUEST_BYTES: u64 = crate::query::MAX_BODY as u64;

/// One schema node.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// `object`, `array`, `string`, `integer`, `number`, `boolean`, or empty
    /// (int-or-string, preserve-unknown-fields).
    pub(crate) typ: String,
    pub(crate) int_or_string: bool,
    /// `x-kubernetes-preserve-unknown-fields`, or an object without
    /// properties: fields not in `properties` may be selected.
    pub(crate) open: bool,
    pub(crate) properties: BTreeMap<String, Node>,
    pub(crate) additional: Option<Box<Node>>,
    pub(crate) items: Option<Box<Node>>,
    pub(crate) max_items: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) max_properties: Option<u64>,
    /// `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`: a `map`
    /// list's items are correlated with the old object's by their keys.
    pub(crate) list_type: String,
    pub(crate) list_map_keys: Vec<String>,
    pub(crate) rules: Vec<Rule>,
    /// Whether this node or one below it has rules (evaluation skips the rest).
    pub(crate) has_rules: bool,
}

impl Node {
    /// The node tree of `schema`, without rules (they are compiled after,
    /// since a rule's cost depends on the whole subtree).
    pub(crate) fn parse(schema: &Value) -> Node {
        let u = |k: &str| schema.get(k).and_then(Value::as_u64);
        let mut node = Node {
            typ: schema["type"].as_str().unwrap_or("").to_string(),
            int_or_string: schema["x-kubernetes-int-or-string"] == true
                || schema["format"] == "int-or-string",
            max_items: u("maxItems"),
            max_length: u("maxLength"),
            max_properties: u("maxProperties"),
            list_type: schema["x-kubernetes-list-type"]
                .as_str()
                .unwrap_or("atomic")
                .to_string(),
            list_map_keys: schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
            ..Node::default()
        };
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                node.properties.insert(k.clone(), Node::parse(v));
            }
        }
        if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            node.additional = Some(Box::new(Node::parse(a)));
        }
        if let Some(i) = schema.get("items").filter(|i| i.is_object()) {
            node.items = Some(Box::new(Node::parse(i)));
        }
        node.open = schema["x-kubernetes-preserve-unknown-fields"] == true
            || schema["x-kubernetes-embedded-resource"] == true
            || (node.typ == "object" && node.properties.is_empty() && node.additional.is_none());
        node
    }

    /// What every object's root has whatever its schema says, as upstream
    /// adds it for rules: `apiVersion`, `kind` and, of `metadata`, only
    /// `name` and `generateName`.
    pub(crate) fn add_root_fields(&mut self) {
        let string = |max: u64| Node {
            typ: "string".into(),
            max_length: Some(max),
            ..Node::default()
        };
        for k in ["apiVersion", "kind"] {
            self.properties
                .entry(k.into())
                .or_insert_with(|| string(253));
        }
        let mut meta = Node {
            typ: "object".into(),
            ..Node::default()
        };
        meta.properties.insert("name".into(), string(253));
        meta.properties.insert("generateName".into(), string(253));
        self.properties.insert("metadata".into(), meta);
    }

    /// The node a field selection on this one reaches: a property, or the
    /// `additionalProperties` schema of a map.
    pub(crate) fn field(&self, name: &str) -> Option<&Node> {
        self.properties.get(name).or(self.additional.as_deref())
    }

    /// Whether selecting `name` can never succeed (a compile error upstream:
    /// `undefined field`).
    pub(crate) fn lacks_field(&self, name: &str) -> bool {
        self.typ == "object"
            && !self.open
            && self.additional.is_none()
            && !self.properties.contains_key(name)
    }

    /// The most elements (list), entries (map) or bytes (string) a value of
    /// this node can have: the declared bound, else what fits in a request.
    pub(crate) fn max_size(&self) -> u64 {
        let declared = match self.typ.as_str() {
            "array" => self.max_items,
            "object" if self.additional.is_none() && !self.open => {
                Some(self.properties.len() as u64)
            }
            "object" => self.max_properties,
            "string" => self.max_length,
            "integer" | "number" | "boolean" => Some(1),
            _ => None,
        };
        declared.unwrap_or_else(|| {
            let each = match self.typ.as_str() {
                "array" => self.items.as_ref().map_or(1, |i| i.min_serialized()) + 1,
                // `"k":v,` at least
                "object" => 4 + self.additional.as_ref().map_or(1, |a| a.min_serialized()),
                _ => 1,
            };
            MAX_REQUEST_BYTES / each
        })
    }

    /// The fewest bytes a value of this node takes in JSON (`""`, `{}`, `[]`, `0`).
    fn min_serialized(&self) -> u64 {
        match self.typ.as_str() {
            "string" | "object" | "array" => 2,
            "boolean" => 4,
            _ => 1,
        }
    }
}
