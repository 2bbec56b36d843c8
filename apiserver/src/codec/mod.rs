//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) for built-in
//! kinds, as upstream serves it: request bodies of create, update and delete
//! are decoded into the JSON the store keeps, and responses (objects, lists,
//! Status errors, watch streams) are encoded when `Accept` prefers protobuf.
//! Custom resources stay JSON only, as upstream's: a protobuf body is 415, and
//! an `Accept` naming nothing but protobuf is 406.
//!
//! Choice of library: the `k8s-pb` crate (kube-rs's prost types, generated
//! from upstream's `generated.proto` files) is the one source of field
//! numbers. Its structs carry no reflection and no serde, and a typed mapping
//! to and from JSON would be hand-written per kind, so `build.rs` reads the
//! crate's generated source into a table of messages (field number, wire
//! type, message type) and [`wire`] walks any message generically, taking
//! JSON field names from k8s-openapi's published definitions
//! ([`schema`]). The envelope types (`runtime.Unknown`, `WatchEvent`) are
//! k8s-pb's own prost structs. Kubernetes' special wire types keep their
//! JSON forms: Quantity (string), IntOrString, Time and MicroTime (RFC 3339),
//! Duration (Go's `1h0m0s`), RawExtension / FieldsV1 / apiextensions' JSON
//! (embedded JSON bytes) and Go named slices (`ExtraValue`).
//!
//! Where the two forms differ: Go writes every non-pointer string and number
//! even when empty or zero, and its JSON leaves them out (omitempty);
//! decoding does the same, so an object created in protobuf is stored as its
//! JSON twin would be. The price: protobuf cannot tell those from pointers
//! set to `""` or `0`, so an explicit zero in a protobuf body (a Deployment's
//! `replicas: 0`) reads as unset and gets the default. `false` is kept.
//!
//! The wire format: `k8s\0`, then a `runtime.Unknown` whose `typeMeta` names
//! the object's apiVersion and kind and whose `raw` holds the message.
//! Watch streams are `WatchEvent` messages (no envelope), each after a 4-byte
//! big-endian length, with the object in the envelope inside `object.raw`.

pub(crate) mod schema;
pub(crate) mod wire;
pub(crate) mod yaml;

use bytes::Bytes;
use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use prost::Message as _;
use serde_json::{Map, Value};

pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub(crate) const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub(crate) const MAGIC: &[u8] = b"k8s\0";

/// A body that is not protobuf this server can read, or an object that has
/// no protobuf form: says where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CodecError(pub String);

/// Whether a Content-Type names Kubernetes protobuf.
pub(crate) fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == PROTOBUF
}

/// What a response is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Json,
    Protobuf,
}

/// Picks the response encoding from `Accept` as upstream's negotiation
/// does: the client's most preferred media type this server can write.
/// `protobuf_ok` is false for kinds without protobuf (custom resources).
/// `None` (406 Not Acceptable, as upstream) when the client named media
/// types and none this server can write; no `Accept` at all means JSON.
pub(crate) fn negotiate(accept: &str, protobuf_ok: bool) -> Option<Output> {
    let mut ranges: Vec<(f32, &str, bool)> = Vec::new();
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        if media.is_empty() {
            continue;
        }
        let (mut q, mut as_kind) = (1.0f32, false);
        for p in parts {
            match p.split_once('=') {
                Some(("q", v)) => q = v.trim().parse().unwrap_or(1.0),
                Some(("as", _)) => as_kind = true,
                _ => {}
            }
        }
        ranges.push((q, media, as_kind));
    }
    // Stable: equal preferences keep the client's order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    if ranges.is_empty() {
        return Some(Output::Json);
    }
    for (q, media, as_kind) in ranges {
        if q <= 0.0 {
            continue;
        }
        match media.to_ascii_lowercase().as_str() {
            // Tables and partial metadata are served as JSON only.
            PROTOBUF if protobuf_ok && !as_kind => return Some(Output::Protobuf),
            "application/json" | "application/yaml" | "*/*" | "application/*" => {
                return Some(Output::Json);
            }
            _ => {}
        }
    }
    None
}

fn unwrap_envelope(body: &[u8]) -> Result<(String, String, Vec<u8>), CodecError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| CodecError("the body does not start with the k8s\\0 prefix".into()))?;
    let unknown = Unknown::decode(rest)
        .map_err(|e| CodecError(format!("the runtime.Unknown envelope is malformed: {e}")))?;
    let tm = unknown.type_meta.unwrap_or_default();
    let (api_version, kind) = (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
    );
    if kind.is_empty() {
        return Err(CodecError("the envelope names no kind".into()));
    }
    Ok((api_version, kind, unknown.raw.unwrap_or_default()))
}

/// Decodes an enveloped object (`k8s\0` + Unknown) into its JSON form, with
/// `apiVersion` and `kind` from the envelope.
pub(crate) fn decode_object(body: &[u8]) -> Result<Value, CodecError> {
    let (api_version, kind, raw) = unwrap_envelope(body)?;
    let m = schema::SCHEMA
        .for_kind(&api_version, &kind)
        .ok_or_else(|| CodecError(format!("no protobuf form for {api_version} {kind}")))?;
    let fields = wire::decode(m, &raw, "", 0)?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    if let Value::Object(o) = fields {
        out.extend(o);
    }
    Ok(Value::Object(out))
}

/// Encodes an object (with `apiVersion` and `kind`) in the envelope.
pub(crate) fn encode_object(v: &Value) -> Result<Vec<u8>, CodecError> {
    let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let m = schema::SCHEMA
        .for_kind(api_version, kind)
        .ok_or_else(|| CodecError(format!("no protobuf form for {api_version} {kind}")))?;
    let mut raw = Vec::new();
    wire::encode(m, v, "", 0, &mut raw)?;
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    unknown
        .encode(&mut out)
        .map_err(|e| CodecError(e.to_string()))?;
    Ok(out)
}

/// A protobuf request body as the JSON the handlers read.
pub(crate) fn request_to_json(body: &[u8]) -> Result<Bytes, CodecError> {
    let v = decode_object(body)?;
    serde_json::to_vec(&v)
        .map(Bytes::from)
        .map_err(|e| CodecError(e.to_string()))
}

/// A JSON response body in protobuf.
pub(crate) fn response_to_protobuf(json: &[u8]) -> Result<Vec<u8>, CodecError> {
    let v: Value = serde_json::from_slice(json)
        .map_err(|e| CodecError(format!("the response is not JSON: {e}")))?;
    encode_object(&v)
}

/// One watch event (`{"type", "object"}` JSON) as a length-prefixed
/// `WatchEvent` frame.
pub(crate) fn watch_frame(event_json: &[u8]) -> Result<Vec<u8>, CodecError> {
    let v: Value = serde_json::from_slice(event_json)
        .map_err(|e| CodecError(format!("the watch event is not JSON: {e}")))?;
    let object = encode_object(v.get("object").unwrap_or(&Value::Null))?;
    let event = WatchEvent {
        r#type: v.get("type").and_then(Value::as_str).map(str::to_string),
        object: Some(RawExtension { raw: Some(object) }),
    };
    let body = event.encode_to_vec();
    let len = u32::try_from(body.len()).map_err(|_| CodecError("watch event too large".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

#[cfg(test)]
mod http_tests;
#[cfg(test)]
mod tests;
