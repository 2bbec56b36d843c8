//! Kubernetes-shaped values from fuzz bytes. Keys and strings come mostly
//! from a dictionary of the words the code under test branches on (patch
//! directives, schema keywords, list-type names), so random bytes reach past
//! the first `match` instead of dying on an unknown key.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Number, Value};

/// Words the patch engine, managed fields and schema code look for.
pub const WORDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "annotations",
    "spec",
    "status",
    "containers",
    "initContainers",
    "image",
    "ports",
    "containerPort",
    "protocol",
    "env",
    "value",
    "volumes",
    "volumeMounts",
    "mountPath",
    "items",
    "key",
    "finalizers",
    "ownerReferences",
    "uid",
    "managedFields",
    "manager",
    "operation",
    "fieldsType",
    "fieldsV1",
    "f:spec",
    "f:metadata",
    "f:name",
    "k:{\"name\":\"a\"}",
    "k:{\"containerPort\":80,\"protocol\":\"TCP\"}",
    "v:\"a\"",
    "i:0",
    ".",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/ports",
    "$deleteFromPrimitiveList/finalizers",
    "replace",
    "delete",
    "merge",
    "replicas",
    "selector",
    "matchLabels",
    "matchExpressions",
    "operator",
    "values",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "data",
    "type",
    "properties",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "nullable",
    "default",
    "required",
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "object",
    "array",
    "string",
    "integer",
    "number",
    "boolean",
    "map",
    "set",
    "atomic",
    "granular",
    "a",
    "b",
    "c",
    "0",
    "",
    "x/y",
    "TCP",
    "v1",
    "apps/v1",
    "Pod",
    "Deployment",
    "ConfigMap",
];

/// A dictionary word most of the time, otherwise arbitrary text.
pub fn word(u: &mut Unstructured) -> Result<String> {
    if u.ratio(7, 8)? {
        Ok((*u.choose(WORDS)?).to_string())
    } else {
        short_string(u)
    }
}

/// Arbitrary text of at most 24 chars (long strings only slow things down).
pub fn short_string(u: &mut Unstructured) -> Result<String> {
    let s: String = u.arbitrary()?;
    Ok(s.chars().take(24).collect())
}

/// An integer near a boundary most of the time.
pub fn number(u: &mut Unstructured) -> Result<Number> {
    const EDGES: &[i64] = &[
        0,
        1,
        -1,
        2,
        80,
        443,
        65535,
        i32::MAX as i64,
        i64::MIN,
        i64::MAX,
    ];
    Ok(match u.int_in_range(0..=3)? {
        0 => Number::from(*u.choose(EDGES)?),
        1 => Number::from(u.arbitrary::<i64>()?),
        2 => Number::from(u.arbitrary::<u64>()?),
        _ => {
            let f: f64 = *u.choose(&[0.5, -0.0, 1e308, -1e-308, 1.5, 3.0])?;
            Number::from_f64(f).unwrap_or_else(|| Number::from(0))
        }
    })
}

/// Any JSON value, at most `depth` levels of nesting, keys from [`WORDS`].
pub fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let max = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=max)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Number(number(u)?),
        3 | 4 => Value::String(word(u)?),
        5 => {
            let n = u.int_in_range(0..=4)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => Value::Object(object(u, depth - 1)?),
    })
}

/// A JSON object of up to five members.
pub fn object(u: &mut Unstructured, depth: u32) -> Result<Map<String, Value>> {
    let n = u.int_in_range(0..=5)?;
    let mut m = Map::new();
    for _ in 0..n {
        let k = word(u)?;
        let v = value(u, depth)?;
        m.insert(k, v);
    }
    Ok(m)
}

/// An object with `apiVersion`, `kind` and `metadata.name` (most of the time),
/// as a client sends it.
pub fn resource(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let mut m = object(u, depth)?;
    if u.ratio(7, 8)? {
        m.insert("apiVersion".into(), Value::String("v1".into()));
        m.insert(
            "kind".into(),
            Value::String(u.choose(&["ConfigMap", "Pod"])?.to_string()),
        );
        let mut meta = match m.remove("metadata") {
            Some(Value::Object(meta)) => meta,
            _ => Map::new(),
        };
        meta.insert(
            "name".into(),
            Value::String(u.choose(&["a", "b"])?.to_string()),
        );
        m.insert("metadata".into(), Value::Object(meta));
    }
    Ok(Value::Object(m))
}

/// A JSON document from `data` if it is one, else one generated from it: seed
/// files can be plain JSON, and mutations of them still produce values.
pub fn json_or_value<const N: usize>(data: &[u8]) -> Option<[Value; N]> {
    if let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(data)
        && let Ok(arr) = <[Value; N]>::try_from(items)
    {
        return Some(arr);
    }
    let mut u = Unstructured::new(data);
    let mut out = Vec::with_capacity(N);
    for _ in 0..N {
        out.push(resource(&mut u, 4).ok()?);
    }
    out.try_into().ok()
}
