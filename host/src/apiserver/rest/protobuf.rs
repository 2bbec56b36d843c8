//! The one protobuf body the plane reads: access reviews. `kubectl auth can-i`
//! sends its SelfSubjectAccessReview as `application/vnd.kubernetes.protobuf`
//! whatever the server advertises (it accepts a JSON answer), so the plane
//! decodes that message, and SubjectAccessReview, into the JSON it would have
//! received. Everything else in protobuf stays 415.
//!
//! The envelope is upstream's: the magic `k8s\0`, then a `runtime.Unknown`
//! whose field 2 holds the object. Field numbers are those of
//! `k8s.io/api/authorization/v1/generated.proto`.

use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// A decoding failure, with what was being read.
#[derive(Debug, thiserror::Error)]
#[error("the protobuf body is malformed: {0}")]
pub struct DecodeError(String);

/// Decodes an access review of `kind` (`SubjectAccessReview` or
/// `SelfSubjectAccessReview`) into its JSON form.
pub fn access_review(body: &[u8], kind: &str) -> Result<Value, DecodeError> {
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| DecodeError("missing the k8s\\0 prefix".into()))?;
    let raw = fields(unknown)?
        .into_iter()
        .find_map(|(n, v)| (n == 2).then_some(v))
        .and_then(Field::bytes)
        .ok_or_else(|| DecodeError("runtime.Unknown has no raw object".into()))?;
    let mut spec = Value::Object(Map::new());
    for (n, v) in fields(raw)? {
        if n == 2 {
            let bytes = v.bytes().ok_or_else(|| DecodeError("spec".into()))?;
            spec = review_spec(bytes, kind == "SubjectAccessReview")?;
        }
    }
    Ok(json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec}))
}

fn review_spec(bytes: &[u8], with_subject: bool) -> Result<Value, DecodeError> {
    let mut spec = Map::new();
    let mut groups = Vec::new();
    for (n, v) in fields(bytes)? {
        match (n, with_subject) {
            (1, _) => {
                let names = [
                    "namespace",
                    "verb",
                    "group",
                    "version",
                    "resource",
                    "subresource",
                    "name",
                ];
                spec.insert("resourceAttributes".into(), strings(&v, &names)?);
            }
            (2, _) => {
                spec.insert(
                    "nonResourceAttributes".into(),
                    strings(&v, &["path", "verb"])?,
                );
            }
            (3, true) => {
                spec.insert("user".into(), json!(v.string()?));
            }
            (4, true) => groups.push(json!(v.string()?)),
            (6, true) => {
                spec.insert("uid".into(), json!(v.string()?));
            }
            _ => {}
        }
    }
    if !groups.is_empty() {
        spec.insert("groups".into(), Value::Array(groups));
    }
    Ok(Value::Object(spec))
}

/// A message whose fields 1..=names.len() are strings, as a JSON object.
fn strings(v: &Field, names: &[&str]) -> Result<Value, DecodeError> {
    let bytes = v
        .bytes()
        .ok_or_else(|| DecodeError("attributes are not a message".into()))?;
    let mut out = Map::new();
    for (n, f) in fields(bytes)? {
        if let Some(name) = (n as usize).checked_sub(1).and_then(|i| names.get(i)) {
            out.insert((*name).into(), json!(f.string()?));
        }
    }
    Ok(Value::Object(out))
}

#[derive(Clone, Copy)]
enum Field<'a> {
    Varint,
    Fixed,
    Bytes(&'a [u8]),
}

impl<'a> Field<'a> {
    fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Field::Bytes(b) => Some(b),
            _ => None,
        }
    }

    fn string(&self) -> Result<String, DecodeError> {
        match self {
            Field::Bytes(b) => std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| DecodeError("a string is not UTF-8".into())),
            _ => Err(DecodeError("expected a string".into())),
        }
    }
}

/// The fields of one message, in order.
fn fields(mut buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, DecodeError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let field = match key & 7 {
            0 => {
                varint(&mut buf)?;
                Field::Varint
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                buf = buf
                    .get(n..)
                    .ok_or_else(|| DecodeError("truncated fixed-width field".into()))?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?)
                    .map_err(|_| DecodeError("length out of range".into()))?;
                if len > buf.len() {
                    return Err(DecodeError("truncated length-delimited field".into()));
                }
                let (b, rest) = buf.split_at(len);
                buf = rest;
                Field::Bytes(b)
            }
            w => return Err(DecodeError(format!("unsupported wire type {w}"))),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf
            .split_first()
            .ok_or_else(|| DecodeError("truncated varint".into()))?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError("varint longer than 10 bytes".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![(field << 3) | 2, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn decodes_what_kubectl_auth_can_i_sends() {
        // SelfSubjectAccessReview{spec{resourceAttributes{namespace:"default", verb:"get", resource:"pods"}}}
        let attrs = [ld(1, b"default"), ld(2, b"get"), ld(5, b"pods")].concat();
        let review = ld(2, &ld(1, &attrs));
        let unknown = [ld(1, &ld(2, b"SelfSubjectAccessReview")), ld(2, &review)].concat();
        let body = [MAGIC, &unknown].concat();
        let v = access_review(&body, "SelfSubjectAccessReview").unwrap();
        assert_eq!(
            v["spec"]["resourceAttributes"],
            json!({"namespace": "default", "verb": "get", "resource": "pods"})
        );
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for body in [
            &b"k8s\0"[..],
            b"k8s\0\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"k8s\0\x12\x05ab",
            b"json",
            b"k8s\0\x17",
        ] {
            assert!(access_review(body, "SubjectAccessReview").is_err());
        }
    }
}
