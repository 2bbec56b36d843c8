//! JSON values to protobuf bytes and back, driven by a [`Message`]'s field
//! table: one generic walk for every kind, with Kubernetes' special types
//! (Quantity, IntOrString, Time, MicroTime, Duration, RawExtension and
//! friends) mapped to their JSON forms as Go's codecs do.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, SecondsFormat, Utc};
use prost::encoding::{decode_varint, encode_varint};
use serde_json::{Map, Number, Value};

use super::CodecError;
use super::schema::{Field, Message, SCHEMA, Special, Ty};

/// Protobuf nests no deeper than this here (upstream's objects are far
/// shallower; a hostile body must not exhaust the stack).
const MAX_DEPTH: usize = 100;

fn err(path: &str, what: impl std::fmt::Display) -> CodecError {
    let at = if path.is_empty() { "the object" } else { path };
    CodecError(format!("{at}: {what}"))
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

// ---------- decoding ----------

enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    /// Skipped: no Kubernetes field is fixed32.
    Fixed32,
    Bytes(&'a [u8]),
}

/// The fields of one message, in order.
fn fields<'a>(mut buf: &'a [u8], path: &str) -> Result<Vec<(u32, Wire<'a>)>, CodecError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = decode_varint(&mut buf).map_err(|e| err(path, e))?;
        let tag = u32::try_from(key >> 3).map_err(|_| err(path, "field number out of range"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(decode_varint(&mut buf).map_err(|e| err(path, e))?),
            1 => {
                let (b, rest) = buf
                    .split_first_chunk::<8>()
                    .ok_or_else(|| err(path, "truncated fixed64 field"))?;
                buf = rest;
                Wire::Fixed64(u64::from_le_bytes(*b))
            }
            5 => {
                buf = buf
                    .get(4..)
                    .ok_or_else(|| err(path, "truncated fixed32 field"))?;
                Wire::Fixed32
            }
            2 => {
                let len = usize::try_from(decode_varint(&mut buf).map_err(|e| err(path, e))?)
                    .map_err(|_| err(path, "length out of range"))?;
                if len > buf.len() {
                    return Err(err(path, "truncated length-delimited field"));
                }
                let (b, rest) = buf.split_at(len);
                buf = rest;
                Wire::Bytes(b)
            }
            w => return Err(err(path, format!("unsupported wire type {w}"))),
        };
        if tag == 0 {
            return Err(err(path, "field number 0"));
        }
        out.push((tag, wire));
    }
    Ok(out)
}

fn as_bytes<'a>(w: &Wire<'a>, path: &str) -> Result<&'a [u8], CodecError> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(err(path, "expected a length-delimited field")),
    }
}

fn as_string(w: &Wire, path: &str) -> Result<String, CodecError> {
    String::from_utf8(as_bytes(w, path)?.to_vec()).map_err(|_| err(path, "a string is not UTF-8"))
}

/// One scalar value (never a packed run).
fn scalar(ty: Ty, w: &Wire, path: &str) -> Result<Value, CodecError> {
    Ok(match (ty, w) {
        (Ty::String, _) => Value::String(as_string(w, path)?),
        (Ty::Bytes, _) => Value::String(B64.encode(as_bytes(w, path)?)),
        (Ty::Bool, Wire::Varint(v)) => Value::Bool(*v != 0),
        (Ty::Int32, Wire::Varint(v)) => Value::from(*v as i32),
        (Ty::Int64, Wire::Varint(v)) => Value::from(*v as i64),
        (Ty::Double, Wire::Fixed64(v)) => Number::from_f64(f64::from_bits(*v))
            .map(Value::Number)
            .ok_or_else(|| err(path, "a double is not finite"))?,
        _ => return Err(err(path, "the wire type does not match the field's type")),
    })
}

/// Decodes one message's bytes into its JSON form.
pub(crate) fn decode(
    m: &Message,
    buf: &[u8],
    path: &str,
    depth: usize,
) -> Result<Value, CodecError> {
    if depth > MAX_DEPTH {
        return Err(err(path, "nested too deeply"));
    }
    let mut out = Map::new();
    for (tag, w) in fields(buf, path)? {
        // Fields this version does not know are skipped, as protobuf does.
        let Some(f) = m.field_by_tag(tag) else {
            continue;
        };
        let p = child(path, &f.json);
        match f.ty {
            Ty::Message => {
                let v = decode_target(f, as_bytes(&w, &p)?, &p, depth)?;
                if let (true, Value::Object(fields)) = (f.inline, &v) {
                    out.extend(fields.clone());
                    continue;
                }
                // Go's zero time and an empty RawExtension are JSON null: left out.
                if !v.is_null() || f.repeated {
                    put(&mut out, f, v);
                }
            }
            Ty::MapString | Ty::MapBytes | Ty::MapMessage => {
                let (mut key, mut value) = (String::new(), None);
                for (t, ew) in fields(as_bytes(&w, &p)?, &p)? {
                    match t {
                        1 => key = as_string(&ew, &p)?,
                        2 => {
                            value = Some(match f.ty {
                                Ty::MapString => scalar(Ty::String, &ew, &p)?,
                                Ty::MapBytes => scalar(Ty::Bytes, &ew, &p)?,
                                _ => decode_target(f, as_bytes(&ew, &p)?, &p, depth)?,
                            })
                        }
                        _ => {}
                    }
                }
                let value = value.unwrap_or_else(|| match f.ty {
                    Ty::MapMessage => Value::Object(Map::new()),
                    _ => Value::String(String::new()),
                });
                let map = out
                    .entry(f.json.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            _ if f.repeated && f.ty != Ty::String && f.ty != Ty::Bytes => {
                // A repeated number may come packed or not.
                if let Wire::Bytes(mut b) = w {
                    while !b.is_empty() {
                        let v = match f.ty {
                            Ty::Double => {
                                let (d, rest) = b
                                    .split_first_chunk::<8>()
                                    .ok_or_else(|| err(&p, "truncated packed doubles"))?;
                                b = rest;
                                Wire::Fixed64(u64::from_le_bytes(*d))
                            }
                            _ => Wire::Varint(decode_varint(&mut b).map_err(|e| err(&p, e))?),
                        };
                        put(&mut out, f, scalar(f.ty, &v, &p)?);
                    }
                } else {
                    put(&mut out, f, scalar(f.ty, &w, &p)?);
                }
            }
            _ => {
                // Go writes every non-pointer string and number, zero or not;
                // its JSON leaves the zero ones out (omitempty), and so does
                // the stored form here, where logic reads `nodePort: 0` as set.
                // An element of a list is never omitted: `apiGroups: [""]` (the
                // core group) is one empty string, not an empty list.
                let v = scalar(f.ty, &w, &p)?;
                let zero = match &v {
                    Value::String(s) => s.is_empty(),
                    Value::Number(n) => n.as_f64() == Some(0.0),
                    _ => false,
                };
                if !zero || f.repeated {
                    put(&mut out, f, v);
                }
            }
        }
    }
    special_from(m, out, path)
}

fn decode_target(f: &Field, buf: &[u8], path: &str, depth: usize) -> Result<Value, CodecError> {
    let target = f.target.as_deref().unwrap_or_default();
    let m = SCHEMA
        .message(target)
        .ok_or_else(|| err(path, format!("no protobuf message {target}")))?;
    decode(m, buf, path, depth + 1)
}

fn put(out: &mut Map<String, Value>, f: &Field, v: Value) {
    if f.repeated {
        if let Value::Array(a) = out
            .entry(f.json.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            a.push(v);
        }
    } else {
        out.insert(f.json.clone(), v);
    }
}

/// The JSON form of a special message from its decoded fields.
fn special_from(m: &Message, mut o: Map<String, Value>, path: &str) -> Result<Value, CodecError> {
    // Special messages' fields are read by number: their JSON names are
    // upstream's protobuf names, not JSON ones.
    let name = |tag: u32| {
        m.field_by_tag(tag)
            .map(|f| f.json.clone())
            .unwrap_or_default()
    };
    let num =
        |o: &Map<String, Value>, tag: u32| o.get(&name(tag)).and_then(Value::as_i64).unwrap_or(0);
    let take = |o: &mut Map<String, Value>, tag: u32| o.remove(&name(tag));
    Ok(match m.special {
        Special::None => Value::Object(o),
        Special::Quantity => take(&mut o, 1).unwrap_or_else(|| Value::String("0".into())),
        Special::IntOrString => {
            if num(&o, 1) == 1 {
                take(&mut o, 3).unwrap_or_else(|| Value::String(String::new()))
            } else {
                Value::from(num(&o, 2))
            }
        }
        Special::Time | Special::MicroTime => {
            let (secs, nanos) = (num(&o, 1), num(&o, 2));
            if secs == 0 && nanos == 0 {
                // Go's zero time: JSON null, left out of the object.
                return Ok(Value::Null);
            }
            let nanos = u32::try_from(nanos).map_err(|_| err(path, "nanos out of range"))?;
            let t = DateTime::<Utc>::from_timestamp(secs, nanos)
                .ok_or_else(|| err(path, "time out of range"))?;
            Value::String(if m.special == Special::Time {
                t.to_rfc3339_opts(SecondsFormat::Secs, true)
            } else {
                t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            })
        }
        Special::Duration => Value::String(go_duration(num(&o, 1))),
        Special::Raw => match take(&mut o, 1) {
            Some(Value::String(b64)) => {
                let raw = B64.decode(b64).unwrap_or_default();
                if raw.starts_with(super::MAGIC) {
                    super::decode_object(&raw)?
                } else {
                    serde_json::from_slice(&raw)
                        .map_err(|e| err(path, format!("embedded JSON is invalid: {e}")))?
                }
            }
            _ => Value::Null,
        },
        Special::Items => take(&mut o, 1).unwrap_or_else(|| Value::Array(Vec::new())),
        Special::OrBool => match take(&mut o, 2) {
            Some(s) => s,
            None => take(&mut o, 1).unwrap_or(Value::Bool(false)),
        },
        Special::OrArray | Special::OrStringArray => match take(&mut o, 1) {
            Some(s) => s,
            None => take(&mut o, 2).unwrap_or_else(|| Value::Array(Vec::new())),
        },
    })
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub(crate) fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let u = ns.unsigned_abs();
    let frac = |v: u64, unit: u64| {
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = unit.ilog10() as usize;
            let f = format!("{rest:0digits$}");
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    };
    if u < 1_000 {
        return format!("{sign}{u}ns");
    }
    if u < 1_000_000 {
        return format!("{sign}{}µs", frac(u, 1_000));
    }
    if u < 1_000_000_000 {
        return format!("{sign}{}ms", frac(u, 1_000_000));
    }
    let (h, m) = (u / 3_600_000_000_000, (u / 60_000_000_000) % 60);
    let s = frac(u % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, m) => format!("{sign}{m}m{s}s"),
        (h, m) => format!("{sign}{h}h{m}m{s}s"),
    }
}

/// Parses a Go duration string (`1h30m`, `1.5s`, `300ms`) into nanoseconds.
pub(crate) fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|n| *n > 0)?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    let total = total.round();
    if total > i64::MAX as f64 {
        return None;
    }
    let ns = total as i64;
    Some(if neg { -ns } else { ns })
}

// ---------- encoding ----------

fn key(out: &mut Vec<u8>, tag: u32, wire: u64) {
    encode_varint((u64::from(tag) << 3) | wire, out);
}

fn len_delimited(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    key(out, tag, 2);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn int(v: &Value, path: &str) -> Result<i64, CodecError> {
    v.as_i64()
        .or_else(|| v.as_u64().and_then(|u| i64::try_from(u).ok()))
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .ok_or_else(|| err(path, format!("expected an integer, found {v}")))
}

fn encode_scalar(f: &Field, v: &Value, path: &str, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let ty = match f.ty {
        Ty::MapString => Ty::String,
        Ty::MapBytes => Ty::Bytes,
        t => t,
    };
    match ty {
        Ty::String => {
            let s = v
                .as_str()
                .ok_or_else(|| err(path, format!("expected a string, found {v}")))?;
            len_delimited(out, f.tag, s.as_bytes());
        }
        Ty::Bytes => {
            let s = v
                .as_str()
                .ok_or_else(|| err(path, "expected a base64 string"))?;
            let b = B64
                .decode(s)
                .map_err(|e| err(path, format!("not base64: {e}")))?;
            len_delimited(out, f.tag, &b);
        }
        Ty::Bool => {
            let b = v
                .as_bool()
                .ok_or_else(|| err(path, format!("expected a boolean, found {v}")))?;
            key(out, f.tag, 0);
            encode_varint(u64::from(b), out);
        }
        Ty::Int32 | Ty::Int64 => {
            let n = int(v, path)?;
            if ty == Ty::Int32 && i32::try_from(n).is_err() {
                return Err(err(path, format!("{n} does not fit in 32 bits")));
            }
            key(out, f.tag, 0);
            encode_varint(n as u64, out);
        }
        Ty::Double => {
            let d = v
                .as_f64()
                .ok_or_else(|| err(path, format!("expected a number, found {v}")))?;
            key(out, f.tag, 1);
            out.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        Ty::Message | Ty::MapString | Ty::MapBytes | Ty::MapMessage => {
            unreachable!("messages and maps are not scalars")
        }
    }
    Ok(())
}

fn target_of<'a>(f: &Field, path: &str) -> Result<&'a Message, CodecError> {
    let name = f.target.as_deref().unwrap_or_default();
    SCHEMA
        .message(name)
        .ok_or_else(|| err(path, format!("no protobuf message {name}")))
}

/// One field's value (each element, for a repeated field).
fn encode_field(
    f: &Field,
    v: &Value,
    path: &str,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    match f.ty {
        Ty::Message => {
            let m = target_of(f, path)?;
            let mut inner = Vec::new();
            encode(m, v, path, depth + 1, &mut inner)?;
            len_delimited(out, f.tag, &inner);
        }
        Ty::MapString | Ty::MapBytes | Ty::MapMessage => {
            let Value::Object(map) = v else {
                return Err(err(path, format!("expected an object, found {v}")));
            };
            for (k, ev) in map {
                let p = child(path, k);
                let mut entry = Vec::new();
                len_delimited(&mut entry, 1, k.as_bytes());
                if !ev.is_null() {
                    let value_field = Field {
                        tag: 2,
                        json: String::new(),
                        ty: f.ty,
                        repeated: false,
                        target: f.target.clone(),
                        inline: false,
                    };
                    if f.ty == Ty::MapMessage {
                        let m = target_of(f, &p)?;
                        let mut inner = Vec::new();
                        encode(m, ev, &p, depth + 1, &mut inner)?;
                        len_delimited(&mut entry, 2, &inner);
                    } else {
                        encode_scalar(&value_field, ev, &p, &mut entry)?;
                    }
                }
                len_delimited(out, f.tag, &entry);
            }
        }
        _ => encode_scalar(f, v, path, out)?,
    }
    Ok(())
}

/// Encodes a JSON value as message `m`'s fields (no length prefix).
pub(crate) fn encode(
    m: &Message,
    v: &Value,
    path: &str,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    if depth > MAX_DEPTH {
        return Err(err(path, "nested too deeply"));
    }
    if let Some(fields) = special_to(m, v, path)? {
        for (tag, value) in fields {
            let f = m
                .field_by_tag(tag)
                .ok_or_else(|| err(path, format!("{} has no field {tag}", m.name)))?;
            if let (true, Value::Array(items)) = (f.repeated, &value) {
                for item in items {
                    encode_field(f, item, path, depth, out)?;
                }
            } else {
                encode_field(f, &value, path, depth, out)?;
            }
        }
        return Ok(());
    }
    let obj = match v {
        Value::Object(o) => o,
        Value::Null => return Ok(()),
        other => {
            return Err(err(path, format!("expected an object, found {other}")));
        }
    };
    let mut inlined: Vec<(&Field, Map<String, Value>)> = Vec::new();
    for (k, value) in obj {
        // TypeMeta travels in the envelope; fields protobuf has no number
        // for cannot be carried (upstream's typed structs drop them too).
        let Some(f) = m.field_by_json(k) else {
            // A field of an inline embedded struct goes into that message.
            let owner = m.fields.iter().find(|f| {
                f.inline
                    && SCHEMA
                        .message(f.target.as_deref().unwrap_or_default())
                        .is_some_and(|t| t.field_by_json(k).is_some())
            });
            if let Some(f) = owner {
                match inlined.iter_mut().find(|(g, _)| g.tag == f.tag) {
                    Some((_, map)) => {
                        map.insert(k.clone(), value.clone());
                    }
                    None => inlined.push((f, Map::from_iter([(k.clone(), value.clone())]))),
                }
            }
            continue;
        };
        if value.is_null() {
            continue;
        }
        let p = child(path, k);
        if f.repeated {
            let Value::Array(items) = value else {
                return Err(err(&p, format!("expected an array, found {value}")));
            };
            for (i, item) in items.iter().enumerate() {
                encode_field(f, item, &format!("{p}[{i}]"), depth, out)?;
            }
        } else {
            encode_field(f, value, &p, depth, out)?;
        }
    }
    for (f, map) in inlined {
        encode_field(f, &Value::Object(map), path, depth, out)?;
    }
    Ok(())
}

/// A special message's fields (by number) for its JSON form; `None` for
/// ordinary messages.
fn special_to(m: &Message, v: &Value, path: &str) -> Result<Option<Vec<(u32, Value)>>, CodecError> {
    let s = |x: &str| Value::String(x.to_string());
    Ok(Some(match (m.special, v) {
        (Special::None, _) => return Ok(None),
        (_, Value::Null) => Vec::new(),
        (Special::Quantity, Value::String(q)) => vec![(1, s(q))],
        (Special::Quantity, Value::Number(n)) => vec![(1, s(&n.to_string()))],
        (Special::IntOrString, Value::Number(n)) => {
            vec![(1, Value::from(0)), (2, Value::Number(n.clone()))]
        }
        (Special::IntOrString, Value::String(x)) => vec![(1, Value::from(1)), (3, s(x))],
        (Special::Time | Special::MicroTime, Value::String(t)) => {
            let t = DateTime::parse_from_rfc3339(t)
                .map_err(|e| err(path, format!("not an RFC 3339 time: {e}")))?;
            let mut f = vec![(1, Value::from(t.timestamp()))];
            if t.timestamp_subsec_nanos() != 0 {
                f.push((2, Value::from(t.timestamp_subsec_nanos())));
            }
            f
        }
        (Special::Duration, Value::String(d)) => {
            let ns =
                parse_go_duration(d).ok_or_else(|| err(path, format!("not a duration: {d:?}")))?;
            vec![(1, Value::from(ns))]
        }
        (Special::Raw, v) => {
            let raw = serde_json::to_vec(v).map_err(|e| err(path, e))?;
            vec![(1, Value::String(B64.encode(raw)))]
        }
        (Special::Items, Value::Array(a)) => vec![(1, Value::Array(a.clone()))],
        (Special::OrBool, Value::Bool(b)) => vec![(1, Value::Bool(*b))],
        (Special::OrBool, o @ Value::Object(_)) => vec![(1, Value::Bool(true)), (2, o.clone())],
        (Special::OrArray | Special::OrStringArray, o @ Value::Object(_)) => vec![(1, o.clone())],
        (Special::OrArray | Special::OrStringArray, Value::Array(a)) => {
            vec![(2, Value::Array(a.clone()))]
        }
        (special, other) => {
            return Err(err(path, format!("{other} is not a valid {special:?}")));
        }
    }))
}
