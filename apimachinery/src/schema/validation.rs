//! Validation: checks an object against the schema's value constraints
//! (types, bounds, lengths, patterns, enums, required fields, list types)
//! and reports upstream-shaped [`Cause`]s.

use serde_json::{Map, Value};

use super::formats::check_format;
use super::structural::Node;
use super::{Cause, child};
use crate::goquote::go_quote;

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.to_string(),
        message,
        field: field.to_string(),
    }
}

fn required(field: &str, detail: &str) -> Cause {
    let msg = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    cause("FieldValueRequired", field, msg)
}

fn invalid(field: &str, bad: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {bad}: {detail}"),
    )
}

fn type_invalid(field: &str, bad: &str, detail: &str) -> Cause {
    cause(
        "FieldValueTypeInvalid",
        field,
        format!("Invalid value: {bad}: {detail}"),
    )
}

fn too_many(field: &str, actual: usize, max: u64) -> Cause {
    cause(
        "FieldValueTooMany",
        field,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

/// The JSON schema type name of a value, as kube-openapi reports it.
fn data_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A bad value as Go's field errors print it: `%q` for strings, `%v` for
/// numbers and booleans, `"null"` for null (JSON for objects and arrays).
fn bad_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_string(n),
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

fn number_string(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Go's `%v` for a float64: shortest representation, exponent form below
/// 1e-4 and from 1e21 on (`1e+21`, `1.5e-05`).
pub(super) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..21).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

fn is_integral(f: f64) -> bool {
    f.is_finite() && f.fract() == 0.0
}

/// JSON equality with numbers compared by value (`1 == 1.0`), as enum
/// matching converts between Go's int64 and float64.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

pub(super) fn validate(s: &Node, v: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    let types: Vec<&str> = if s.int_or_string {
        vec!["integer", "string"]
    } else {
        s.typ.iter().map(String::as_str).collect()
    };
    let name = path;

    // type
    let dt = data_type(v);
    if v.is_null() {
        if !types.is_empty() && !s.nullable {
            out.push(type_invalid(
                path,
                &go_quote("null"),
                &format!(
                    "{name} in body must be of type {}: \"null\"",
                    types.join(",")
                ),
            ));
        }
        validate_enum(s, v, path, out);
        return;
    }
    let float_int =
        dt == "number" && v.as_f64().is_some_and(is_integral) && types.contains(&"integer");
    let int_float = dt == "integer" && types.contains(&"number");
    if !(types.is_empty() || types.contains(&dt) || float_int || int_float) {
        out.push(type_invalid(
            path,
            &go_quote(dt),
            &format!(
                "{name} in body must be of type {}: {}",
                types.join(","),
                go_quote(dt)
            ),
        ));
    }

    // string: upstream stops at the first failing check
    if let Value::String(st) = v {
        let len = st.chars().count() as u64;
        if let Some(max) = s.max_length
            && len > max
        {
            out.push(cause(
                "FieldValueTooLong",
                path,
                format!("Too long: may not be more than {max} bytes"),
            ));
        } else if let Some(min) = s.min_length
            && len < min
        {
            out.push(invalid(
                path,
                &go_quote(st),
                &format!("{name} in body should be at least {min} chars long"),
            ));
        } else if let Some((p, re)) = &s.pattern
            && !re.is_match(st)
        {
            out.push(invalid(
                path,
                &go_quote(st),
                &format!("{name} in body should match '{p}'"),
            ));
        }
        // format
        if let Some(f) = &s.format
            && let Some(ok) = check_format(f, st)
            && !ok
        {
            out.push(type_invalid(
                path,
                &go_quote(st),
                &format!("{name} in body must be of type {f}: {}", go_quote(st)),
            ));
        }
    }

    // number
    if let Value::Number(n) = v {
        let x = n.as_f64().unwrap_or(f64::NAN);
        let shown = number_string(n);
        if let Some(m) = s.multiple_of
            && m > 0.0
        {
            let q = x / m;
            if !(q.is_finite() && (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0)) {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be a multiple of {}", go_float(m)),
                ));
            }
        }
        if let Some(min) = s.minimum {
            let (bad, word) = if s.exclusive_minimum {
                (x <= min, "greater than")
            } else {
                (x < min, "greater than or equal to")
            };
            if bad {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be {word} {}", go_float(min)),
                ));
            }
        }
        if let Some(max) = s.maximum {
            let (bad, word) = if s.exclusive_maximum {
                (x >= max, "less than")
            } else {
                (x > max, "less than or equal to")
            };
            if bad {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be {word} {}", go_float(max)),
                ));
            }
        }
    }

    // array
    if let Value::Array(items) = v {
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                validate(item_schema, item, &format!("{path}[{i}]"), false, out);
            }
        }
        if let Some(min) = s.min_items
            && (items.len() as u64) < min
        {
            out.push(invalid(
                path,
                &items.len().to_string(),
                &format!("{name} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = s.max_items
            && items.len() as u64 > max
        {
            out.push(too_many(path, items.len(), max));
        }
        if s.unique_items && has_duplicates(items) {
            out.push(invalid(
                path,
                "\"\"",
                &format!("{name} in body shouldn't contain duplicates"),
            ));
        }
    }

    validate_enum(s, v, path, out);

    // object
    if let Value::Object(obj) = v {
        let n = obj.len() as u64;
        if let Some(min) = s.min_properties
            && n < min
        {
            out.push(invalid(
                path,
                &n.to_string(),
                &format!("{name} in body should have at least {min} properties"),
            ));
        }
        if let Some(max) = s.max_properties
            && n > max
        {
            out.push(too_many(path, obj.len(), max));
        }
        if let Some(Some(additional)) = &s.additional {
            for (k, val) in obj {
                if s.property(k).is_none() {
                    validate(additional, val, &child(path, k), false, out);
                }
            }
        }
        for (k, prop) in &s.properties {
            if let Some(val) = obj.get(k) {
                validate(prop, val, &child(path, k), false, out);
            }
        }
        for k in &s.required {
            if !obj.contains_key(k) {
                out.push(required(&child(path, k), ""));
            }
        }
        if s.embedded && !root {
            validate_embedded(obj, path, out);
        }
    }
}

fn validate_enum(s: &Node, v: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(allowed) = &s.enum_values else {
        return;
    };
    if allowed.is_empty() || allowed.iter().any(|a| json_eq(a, v)) {
        return;
    }
    // Upstream lists string values as they are and others as JSON, each quoted.
    let supported: Vec<String> = allowed
        .iter()
        .map(|a| {
            go_quote(
                &a.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| a.to_string()),
            )
        })
        .collect();
    out.push(cause(
        "FieldValueNotSupported",
        path,
        format!(
            "Unsupported value: {}: supported values: {}",
            bad_value(v),
            supported.join(", ")
        ),
    ));
}

/// Upstream's objectmeta check for `x-kubernetes-embedded-resource` objects.
fn validate_embedded(obj: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    for key in ["apiVersion", "kind"] {
        let field = child(path, key);
        match obj.get(key) {
            None => out.push(required(&field, "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                out.push(invalid(&field, "\"\"", "must not be empty"))
            }
            Some(Value::String(_)) => {}
            Some(other) => out.push(invalid(&field, &bad_value(other), "must be a string")),
        }
    }
}

fn has_duplicates(items: &[Value]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[i + 1..].iter().any(|b| json_eq(a, b)))
}
