//! CRD structural schemas: parsing, defaulting, pruning, validation.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value, json};
use wasmlet_apimachinery::schema::Structural;

use crate::generate;

const TYPES: &[&str] = &[
    "object", "array", "string", "integer", "number", "boolean", "", "bogus",
];
const FORMATS: &[&str] = &[
    "int32",
    "int64",
    "date-time",
    "date",
    "byte",
    "uri",
    "uuid",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "email",
    "duration",
    "quantity",
    "float",
    "password",
];
const PATTERNS: &[&str] = &[
    "^[a-z]+$",
    "a|b",
    "(",
    "\\d{2,}",
    ".*",
    "[",
    "^$",
    "(?i)x",
    "a{99999999}",
];

/// A schema node of roughly the shape CRDs use; `depth` bounds nesting.
fn node(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let mut m = Map::new();
    let typ = *u.choose(TYPES)?;
    if !typ.is_empty() {
        m.insert("type".into(), json!(typ));
    }
    if depth > 0 && (typ == "object" || u.ratio(1, 8)?) {
        if u.ratio(3, 4)? {
            let mut props = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                props.insert(generate::word(u)?, node(u, depth - 1)?);
            }
            m.insert("properties".into(), Value::Object(props));
        } else if u.ratio(1, 2)? {
            let ap = if u.ratio(1, 3)? {
                json!(u.arbitrary::<bool>()?)
            } else {
                node(u, depth - 1)?
            };
            m.insert("additionalProperties".into(), ap);
        }
    }
    if depth > 0 && (typ == "array" || u.ratio(1, 8)?) && u.ratio(7, 8)? {
        m.insert("items".into(), node(u, depth - 1)?);
    }
    // Keywords, each sometimes.
    for _ in 0..u.int_in_range(0..=4)? {
        match u.int_in_range(0..=16)? {
            0 => m.insert("default".into(), generate::value(u, 3)?),
            1 => m.insert("nullable".into(), json!(u.arbitrary::<bool>()?)),
            2 => m.insert("enum".into(), generate::value(u, 2)?),
            3 => m.insert("pattern".into(), json!(*u.choose(PATTERNS)?)),
            4 => m.insert("format".into(), json!(*u.choose(FORMATS)?)),
            5 => m.insert(
                u.choose(&["minimum", "maximum", "multipleOf"])?.to_string(),
                Value::Number(generate::number(u)?),
            ),
            6 => m.insert(
                u.choose(&[
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                    "minProperties",
                    "maxProperties",
                ])?
                .to_string(),
                Value::Number(generate::number(u)?),
            ),
            7 => m.insert(
                u.choose(&["exclusiveMinimum", "exclusiveMaximum", "uniqueItems"])?
                    .to_string(),
                json!(u.arbitrary::<bool>()?),
            ),
            8 => m.insert(
                "required".into(),
                json!([generate::word(u)?, generate::word(u)?]),
            ),
            9 => m.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                json!(u.arbitrary::<bool>()?),
            ),
            10 => m.insert(
                "x-kubernetes-embedded-resource".into(),
                json!(u.arbitrary::<bool>()?),
            ),
            11 => m.insert(
                "x-kubernetes-int-or-string".into(),
                json!(u.arbitrary::<bool>()?),
            ),
            12 => m.insert(
                "x-kubernetes-list-type".into(),
                json!(*u.choose(&["atomic", "set", "map", "x"])?),
            ),
            13 => m.insert(
                "x-kubernetes-list-map-keys".into(),
                json!([generate::word(u)?]),
            ),
            14 => m.insert(
                "x-kubernetes-map-type".into(),
                json!(*u.choose(&["atomic", "granular", "x"])?),
            ),
            15 if depth > 0 => m.insert(
                u.choose(&["allOf", "anyOf", "oneOf"])?.to_string(),
                json!([node(u, depth - 1)?]),
            ),
            _ => m.insert(generate::word(u)?, generate::value(u, 1)?),
        };
    }
    Ok(Value::Object(m))
}

/// An object that follows `schema` most of the time (known property names,
/// matching types), so validation and defaulting go deep.
fn instance(u: &mut Unstructured, schema: &Value, depth: u32) -> Result<Value> {
    if depth == 0 || u.ratio(1, 10)? {
        return generate::value(u, 2);
    }
    let typ = schema.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match typ {
        "object" => {
            let mut m = Map::new();
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (k, s) in props {
                    if u.ratio(3, 4)? {
                        m.insert(k.clone(), instance(u, s, depth - 1)?);
                    }
                }
            }
            let extra = schema
                .get("additionalProperties")
                .cloned()
                .unwrap_or(Value::Null);
            for _ in 0..u.int_in_range(0..=2)? {
                m.insert(generate::word(u)?, instance(u, &extra, depth - 1)?);
            }
            Value::Object(m)
        }
        "array" => {
            let items = schema.get("items").cloned().unwrap_or(Value::Null);
            let n = u.int_in_range(0..=3)?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(instance(u, &items, depth - 1)?);
            }
            Value::Array(out)
        }
        "string" => Value::String(generate::word(u)?),
        "integer" | "number" => Value::Number(generate::number(u)?),
        "boolean" => Value::Bool(u.arbitrary()?),
        _ => generate::value(u, 2)?,
    })
}

/// Whether `field` is `pruned` or inside it. A pruned field named "" at the
/// root has the path "" too, which says nothing: skip it.
fn under(field: &str, pruned: &str) -> bool {
    !pruned.is_empty()
        && (field == pruned
            || field
                .strip_prefix(pruned)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('[')))
}

pub fn schema(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (Ok(mut raw), Ok(seed)) = (node(&mut u, 4), u.arbitrary::<u64>()) else {
        return;
    };
    // The root of a CRD schema is an object; make it one most of the time.
    if seed % 8 != 0
        && let Some(m) = raw.as_object_mut()
    {
        m.insert("type".into(), json!("object"));
    }
    let Ok(s) = Structural::new(&raw) else {
        return;
    };
    let Ok(mut obj) = instance(&mut u, &raw, 5) else {
        return;
    };
    // Upstream's order: prune, default, validate.
    let pruned = s.prune(&mut obj);
    let mut twice = obj.clone();
    assert_eq!(
        s.prune(&mut twice),
        Vec::<String>::new(),
        "pruning twice removed more: {raw}"
    );
    let mut defaulted = obj.clone();
    s.default(&mut defaulted);
    let mut again = defaulted.clone();
    s.default(&mut again);
    assert_eq!(again, defaulted, "defaulting is not idempotent under {raw}");
    // A required field the schema does not declare is pruned and then
    // missing: upstream reports that too, so Required causes are exempt.
    let causes = s.validate(&obj).into_iter().chain(s.validate(&defaulted));
    for cause in causes.filter(|c| c.reason != "FieldValueRequired") {
        for p in &pruned {
            assert!(
                !under(&cause.field, p),
                "validation reports {} at {}, which pruning removed (schema {raw})",
                cause.message,
                cause.field
            );
        }
    }
}
