use super::validation::go_float;
use super::*;
use serde_json::json;

fn schema(spec_props: Value) -> Structural {
    Structural::new(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": spec_props}},
    }))
    .unwrap()
}

/// Validates `{"spec": spec}` and returns the full messages.
fn check(s: &Structural, spec: Value) -> Vec<String> {
    s.validate(&json!({"spec": spec}))
        .iter()
        .map(Cause::full_message)
        .collect()
}

fn reasons(s: &Structural, spec: Value) -> Vec<String> {
    s.validate(&json!({"spec": spec}))
        .into_iter()
        .map(|c| c.reason)
        .collect()
}

// --- defaulting ------------------------------------------------------------

#[test]
fn defaults_absent_fields_only() {
    let s = schema(json!({
        "replicas": {"type": "integer", "default": 1},
        "mode": {"type": "string", "default": "a"},
        "opt": {"type": "string", "nullable": true, "default": "d"},
    }));
    let mut obj = json!({"spec": {"mode": "b", "opt": null}});
    s.default(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({"mode": "b", "opt": null, "replicas": 1})
    );
    // A non-nullable null is replaced by the default, as upstream.
    let mut obj = json!({"spec": {"mode": null}});
    s.default(&mut obj);
    assert_eq!(obj["spec"]["mode"], "a");
}

#[test]
fn nested_defaults_apply_inside_a_defaulted_object() {
    let s = Structural::new(&json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "default": {},
            "properties": {
                "strategy": {
                    "type": "object",
                    "default": {"type": "Rolling"},
                    "properties": {
                        "type": {"type": "string"},
                        "maxUnavailable": {"x-kubernetes-int-or-string": true, "default": "25%"},
                    },
                },
            },
        }},
    }))
    .unwrap();
    let mut obj = json!({"apiVersion": "a/v1", "kind": "K"});
    s.default(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({"strategy": {"type": "Rolling", "maxUnavailable": "25%"}})
    );
}

#[test]
fn defaults_in_array_items_and_maps() {
    let s = schema(json!({
        "ports": {"type": "array", "items": {
            "type": "object",
            "properties": {"protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}},
        }},
        "names": {"type": "array", "items": {"type": "string", "default": "x"}},
        "limits": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"max": {"type": "integer", "default": 10}},
        }},
    }));
    let mut obj = json!({"spec": {
        "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}],
        "names": ["a", null],
        "limits": {"cpu": {}, "mem": {"max": 3}},
    }});
    s.default(&mut obj);
    assert_eq!(
        obj["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
    );
    assert_eq!(obj["spec"]["names"], json!(["a", "x"]));
    assert_eq!(
        obj["spec"]["limits"],
        json!({"cpu": {"max": 10}, "mem": {"max": 3}})
    );
}

#[test]
fn defaults_leave_scalars_and_unknown_fields_alone() {
    let s = schema(json!({"a": {"type": "integer", "default": 1}}));
    let mut obj = json!({"spec": "not an object", "other": {"a": null}});
    s.default(&mut obj);
    assert_eq!(obj, json!({"spec": "not an object", "other": {"a": null}}));
}

// --- pruning ---------------------------------------------------------------

#[test]
fn prunes_unknown_fields_and_reports_paths() {
    let s = schema(json!({
        "keep": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }));
    let mut obj = json!({
        "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
        "status": {"x": 1},
        "spec": {"keep": "k", "foo": 1, "items": [{"name": "n", "bar": true}, {"baz": {"deep": 1}}]},
    });
    let removed = s.prune(&mut obj);
    assert_eq!(
        removed,
        vec![
            "spec.foo",
            "spec.items[0].bar",
            "spec.items[1].baz",
            "status"
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"keep": "k", "items": [{"name": "n"}, {}]},
        })
    );
}

#[test]
fn preserve_unknown_fields_keeps_unknown_but_prunes_known_subtrees() {
    let s = schema(json!({
        "config": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"strict": {"type": "object", "properties": {"a": {"type": "string"}}}},
        },
    }));
    let mut obj = json!({"spec": {"config": {"anything": {"goes": [1, {"x": 2}]}, "strict": {"a": "1", "b": 2}}}});
    let removed = s.prune(&mut obj);
    assert_eq!(removed, vec!["spec.config.strict.b"]);
    assert_eq!(
        obj["spec"]["config"],
        json!({"anything": {"goes": [1, {"x": 2}]}, "strict": {"a": "1"}})
    );
}

#[test]
fn preserve_unknown_fields_at_the_root_keeps_everything() {
    let s =
        Structural::new(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}))
            .unwrap();
    let mut obj = json!({"apiVersion": "a/v1", "kind": "K", "spec": {"x": 1}, "status": {}});
    let before = obj.clone();
    assert!(s.prune(&mut obj).is_empty());
    assert_eq!(obj, before);
}

#[test]
fn additional_properties_schema_prunes_inside_values() {
    let s = schema(json!({
        "selector": {"type": "object", "additionalProperties": {"type": "string"}},
        "things": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"n": {"type": "integer"}},
        }},
    }));
    let mut obj =
        json!({"spec": {"selector": {"a": "b", "c": "d"}, "things": {"t1": {"n": 1, "junk": 2}}}});
    assert_eq!(s.prune(&mut obj), vec!["spec.things.t1.junk"]);
    assert_eq!(obj["spec"]["selector"], json!({"a": "b", "c": "d"}));
}

#[test]
fn embedded_resources_keep_their_type_and_object_meta() {
    let s = schema(json!({
        "template": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"image": {"type": "string"}}}},
        },
    }));
    let mut obj = json!({"spec": {"template": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}},
        "spec": {"image": "i", "junk": 1}, "extra": 2,
    }}});
    assert_eq!(
        s.prune(&mut obj),
        vec!["spec.template.extra", "spec.template.spec.junk"]
    );
    assert_eq!(
        obj["spec"]["template"]["metadata"],
        json!({"labels": {"a": "b"}})
    );
    assert_eq!(obj["spec"]["template"]["kind"], "Pod");
}

#[test]
fn meta_fields_are_pruned_when_nested_and_unknown() {
    let s = schema(json!({}));
    let mut obj = json!({"spec": {"kind": "x", "metadata": {}}});
    assert_eq!(s.prune(&mut obj), vec!["spec.kind", "spec.metadata"]);
}

// --- validation ------------------------------------------------------------

#[test]
fn type_errors() {
    let s = schema(json!({
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "name": {"type": "string"},
        "on": {"type": "boolean"},
        "list": {"type": "array", "items": {"type": "string"}},
        "obj": {"type": "object"},
    }));
    assert_eq!(
        check(&s, json!({"replicas": "3"})),
        vec![
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ]
    );
    assert_eq!(
        reasons(&s, json!({"replicas": "3"})),
        vec!["FieldValueTypeInvalid"]
    );
    assert_eq!(
        check(&s, json!({"replicas": 1.5})),
        vec![
            "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
        ]
    );
    assert_eq!(
        check(&s, json!({"name": 5, "on": "yes", "obj": [], "list": [1]})),
        vec![
            "spec.name: Invalid value: \"integer\": spec.name in body must be of type string: \"integer\"",
            "spec.on: Invalid value: \"string\": spec.on in body must be of type boolean: \"string\"",
            "spec.list[0]: Invalid value: \"integer\": spec.list[0] in body must be of type string: \"integer\"",
            "spec.obj: Invalid value: \"array\": spec.obj in body must be of type object: \"array\"",
        ]
    );
    // Integral floats are integers, integers are numbers.
    assert!(check(&s, json!({"replicas": 3.0, "ratio": 2})).is_empty());
    assert_eq!(
        check(&s, json!({"name": null})),
        vec![
            "spec.name: Invalid value: \"null\": spec.name in body must be of type string: \"null\""
        ]
    );
}

#[test]
fn nullable_accepts_null() {
    let s = schema(json!({"name": {"type": "string", "nullable": true, "enum": ["a", null]}}));
    assert!(check(&s, json!({"name": null})).is_empty());
}

#[test]
fn int_or_string() {
    let s = schema(json!({
        "port": {"x-kubernetes-int-or-string": true},
        "legacy": {"type": "string", "format": "int-or-string"},
    }));
    assert!(check(&s, json!({"port": 80, "legacy": 1})).is_empty());
    assert!(check(&s, json!({"port": "http", "legacy": "25%"})).is_empty());
    assert_eq!(
        check(&s, json!({"port": true, "legacy": 1.5})),
        vec![
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            "spec.legacy: Invalid value: \"number\": spec.legacy in body must be of type integer,string: \"number\"",
        ]
    );
}

#[test]
fn required_fields() {
    let s = Structural::new(&json!({
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": {"type": "object", "required": ["size", "mode"], "properties": {
            "size": {"type": "string"}, "mode": {"type": "string"},
        }}},
    }))
    .unwrap();
    let causes = s.validate(&json!({"spec": {"mode": "a"}}));
    assert_eq!(
        causes,
        vec![Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.size".into(),
        }]
    );
    assert_eq!(causes[0].full_message(), "spec.size: Required value");
    assert_eq!(
        s.validate(&json!({}))[0].full_message(),
        "spec: Required value"
    );
}

#[test]
fn enums() {
    let s = schema(json!({
        "mode": {"type": "string", "enum": ["a", "b"]},
        "level": {"type": "integer", "enum": [1, 2]},
    }));
    let causes = s.validate(&json!({"spec": {"mode": "x", "level": 3}}));
    assert_eq!(
        causes[0].full_message(),
        "spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""
    );
    assert_eq!(causes[0].reason, "FieldValueNotSupported");
    assert_eq!(
        causes[1].full_message(),
        "spec.level: Unsupported value: 3: supported values: \"1\", \"2\""
    );
    assert!(check(&s, json!({"mode": "b", "level": 2.0})).is_empty());
}

#[test]
fn numeric_bounds() {
    let s = schema(json!({
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
        "ex": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1.5, "exclusiveMaximum": true},
        "step": {"type": "integer", "multipleOf": 5},
    }));
    assert_eq!(
        check(&s, json!({"replicas": 0})),
        vec![
            "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
        ]
    );
    assert_eq!(
        check(&s, json!({"replicas": 11})),
        vec![
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"
        ]
    );
    assert_eq!(
        check(&s, json!({"ex": 0})),
        vec!["spec.ex: Invalid value: 0: spec.ex in body should be greater than 0"]
    );
    assert_eq!(
        check(&s, json!({"ex": 1.5})),
        vec!["spec.ex: Invalid value: 1.5: spec.ex in body should be less than 1.5"]
    );
    assert_eq!(
        check(&s, json!({"step": 7})),
        vec!["spec.step: Invalid value: 7: spec.step in body should be a multiple of 5"]
    );
    assert!(check(&s, json!({"replicas": 1, "ex": 0.5, "step": 10})).is_empty());
    assert_eq!(
        reasons(&s, json!({"replicas": 0})),
        vec!["FieldValueInvalid"]
    );
}

#[test]
fn string_lengths_and_pattern() {
    let s = schema(json!({
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
    }));
    let causes = s.validate(&json!({"spec": {"name": "abcdef"}}));
    assert_eq!(
        causes[0].full_message(),
        "spec.name: Too long: may not be more than 5 bytes"
    );
    assert_eq!(causes[0].reason, "FieldValueTooLong");
    assert_eq!(
        check(&s, json!({"name": "a"})),
        vec!["spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long"]
    );
    assert_eq!(
        check(&s, json!({"name": "AB"})),
        vec!["spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"]
    );
    // Lengths count characters, not bytes.
    let s = schema(json!({"n": {"type": "string", "maxLength": 2}}));
    assert!(check(&s, json!({"n": "éé"})).is_empty());
}

#[test]
fn array_rules() {
    let s = schema(json!({
        "xs": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true, "items": {"type": "integer"}},
    }));
    assert_eq!(
        check(&s, json!({"xs": []})),
        vec!["spec.xs: Invalid value: 0: spec.xs in body should have at least 1 items"]
    );
    let causes = s.validate(&json!({"spec": {"xs": [1, 2, 3]}}));
    assert_eq!(
        causes[0].full_message(),
        "spec.xs: Too many: 3: must have at most 2 items"
    );
    assert_eq!(causes[0].reason, "FieldValueTooMany");
    assert_eq!(
        check(&s, json!({"xs": [1, 1]})),
        vec!["spec.xs: Invalid value: \"\": spec.xs in body shouldn't contain duplicates"]
    );
    assert!(check(&s, json!({"xs": [1, 2]})).is_empty());
}

#[test]
fn object_property_counts_and_map_values() {
    let s = schema(json!({
        "m": {"type": "object", "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "integer", "minimum": 0}},
    }));
    assert_eq!(
        check(&s, json!({"m": {}})),
        vec!["spec.m: Invalid value: 0: spec.m in body should have at least 1 properties"]
    );
    assert_eq!(
        check(&s, json!({"m": {"a": 1, "b": 2, "c": 3}})),
        vec!["spec.m: Too many: 3: must have at most 2 items"]
    );
    assert_eq!(
        check(&s, json!({"m": {"a": -1}})),
        vec!["spec.m.a: Invalid value: -1: spec.m.a in body should be greater than or equal to 0"]
    );
}

#[test]
fn formats() {
    let s = schema(json!({
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "other": {"type": "string", "format": "something-unknown"},
    }));
    assert!(check(&s, json!({
        "at": "2024-01-02T03:04:05Z", "day": "2024-01-02", "id": "123e4567-e89b-12d3-a456-426614174000",
        "ip": "10.0.0.1", "other": "whatever",
    }))
    .is_empty());
    let causes = s.validate(
        &json!({"spec": {"at": "yesterday", "day": "2024-13-01", "id": "x", "ip": "1.2.3"}}),
    );
    assert_eq!(
        causes[0].full_message(),
        "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\""
    );
    assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
    assert_eq!(causes.len(), 4);
}

#[test]
fn embedded_resource_needs_api_version_and_kind() {
    let s = schema(
        json!({"t": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}),
    );
    assert_eq!(
        check(&s, json!({"t": {"kind": "Pod"}})),
        vec!["spec.t.apiVersion: Required value: must not be empty"]
    );
    assert_eq!(
        check(&s, json!({"t": {"kind": 1, "apiVersion": "v1"}})),
        vec!["spec.t.kind: Invalid value: 1: must be a string"]
    );
    assert!(check(&s, json!({"t": {"kind": "Pod", "apiVersion": "v1"}})).is_empty());
}

#[test]
fn errors_are_collected_across_the_tree() {
    let s = schema(json!({
        "items": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "size": {"type": "integer", "maximum": 3},
        }}},
    }));
    assert_eq!(
        check(&s, json!({"items": [{"name": "a"}, {"size": 4}]})),
        vec![
            "spec.items[1].size: Invalid value: 4: spec.items[1].size in body should be less than or equal to 3",
            "spec.items[1].name: Required value",
        ]
    );
}

#[test]
fn go_float_formatting() {
    assert_eq!(go_float(1.0), "1");
    assert_eq!(go_float(1.5), "1.5");
    assert_eq!(go_float(1e21), "1e+21");
    assert_eq!(go_float(1e20), "100000000000000000000");
    assert_eq!(go_float(0.00001), "1e-05");
    assert_eq!(go_float(0.0001), "0.0001");
    assert_eq!(go_float(-2.5e-7), "-2.5e-07");
}

// --- schema parsing --------------------------------------------------------

#[test]
fn rejects_non_structural_schemas_naming_the_path() {
    let e = |v: Value| Structural::new(&v).unwrap_err().to_string();
    assert_eq!(
        e(json!({"type": "object", "properties": {"spec": {"properties": {}}}})),
        "properties[spec].type: Required value: must not be empty for specified object fields"
    );
    assert_eq!(
        e(json!({"type": "object", "properties": {"spec": {"type": "array"}}})),
        "properties[spec].items: Required value: must be specified"
    );
    assert_eq!(
        e(json!({"type": "object", "properties": {"xs": {"type": "array", "items": {}}}})),
        "properties[xs].items.type: Required value: must not be empty for specified array items"
    );
    assert_eq!(
        e(json!({"type": "object", "properties": {"a": {"type": "str"}}})),
        "properties[a].type: Unsupported value: \"str\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
    );
    assert_eq!(
        e(json!({"type": "string"})),
        "type: Invalid value: \"string\": must be object at the root"
    );
    assert_eq!(
        e(json!({})),
        "type: Required value: must not be empty at the root"
    );
    assert!(e(json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}))
        .starts_with("properties[a].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't:"));
    assert_eq!(
        e(json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": "1"}}})),
        "properties[a].minimum: Invalid value: must be a number"
    );
    assert_eq!(
        e(
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "map"}}})
        ),
        "properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
    );
    assert_eq!(
        e(
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": {"type": "string"}}}})
        ),
        "properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
    );
    assert_eq!(e(json!("nope")), "Invalid value: must be a schema object");
    assert_eq!(
        e(json!({"type": "object", "properties": {"t": {"x-kubernetes-embedded-resource": true}}})),
        "properties[t].type: Required value: must be object if x-kubernetes-embedded-resource is true"
    );
    assert_eq!(
        e(json!({"type": "object", "additionalProperties": {"type": "string"}})),
        "additionalProperties: Forbidden: must not be used at the root"
    );
    // Untyped nodes are fine under x-kubernetes-preserve-unknown-fields or int-or-string.
    assert!(
        Structural::new(&json!({"type": "object", "properties": {
            "any": {"x-kubernetes-preserve-unknown-fields": true},
            "port": {"x-kubernetes-int-or-string": true},
        }}))
        .is_ok()
    );
}

// --- list types ------------------------------------------------------------

#[test]
fn list_types_from_extensions() {
    let s = schema(json!({
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": {"type": "object", "properties": {
                "port": {"type": "integer"}, "protocol": {"type": "string"},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            }}},
        "args": {"type": "array", "items": {"type": "string"}},
        "byName": {"type": "object", "additionalProperties": {
            "type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}},
    }));
    assert_eq!(
        s.list_type(&["spec", "ports"]),
        ListType::Map(vec!["port".into(), "protocol".into()])
    );
    assert_eq!(s.list_type(&["spec", "ports", "tags"]), ListType::Set);
    assert_eq!(s.list_type(&["spec", "args"]), ListType::Atomic);
    assert_eq!(s.list_type(&["spec", "byName", "anything"]), ListType::Set);
    assert_eq!(s.list_type(&["spec", "nope"]), ListType::Atomic);
    assert_eq!(s.list_type(&["spec"]), ListType::Atomic);
}

#[test]
fn never_panics_on_mismatched_data() {
    let s = schema(json!({
        "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "integer", "default": 1}}}},
    }));
    for v in [
        json!(null),
        json!(1),
        json!("s"),
        json!([1, 2]),
        json!({"spec": [1]}),
        json!({"spec": {"a": {"b": 1}}}),
        json!({"spec": {"a": [null, 1, "x"]}}),
    ] {
        let mut v2 = v.clone();
        s.default(&mut v2);
        let _ = s.prune(&mut v2);
        let _ = s.validate(&v2);
        let _ = s.validate(&v);
    }
}
