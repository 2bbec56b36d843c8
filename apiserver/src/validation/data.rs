//! ConfigMaps and Secrets as upstream's `ValidateConfigMap`/`ValidateSecret`
//! (and their `...Update`) and the v1 Secret conversion: `stringData` merged
//! into `data`, `type` defaulted to `Opaque`, base64 checked, size at most
//! 1 MiB, typed secrets' required keys, `immutable` and `type` kept.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use super::{forbidden, invalid, required};
use crate::status::Cause;

/// Upstream's `MaxSecretSize`, the limit of ConfigMaps too.
pub(crate) const MAX_SIZE: usize = 1024 * 1024;

const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// Go's `encoding/base64.StdEncoding` as `[]byte` fields decode with it:
/// padding required, non-zero trailing bits accepted.
const STD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Go's message for bad base64 (`illegal base64 data at input byte 4`).
fn base64_error(e: base64::DecodeError) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _) => i,
        base64::DecodeError::InvalidLength(i) => i,
        base64::DecodeError::InvalidPadding => 0,
    };
    format!("illegal base64 data at input byte {at}")
}

/// Decoded length of a base64 `[]byte` field, or Go's decoding error.
/// Go ignores `\r` and `\n` inside base64 text.
fn decoded_len(s: &str) -> Result<usize, String> {
    let clean: String;
    let text = if s.contains(['\r', '\n']) {
        clean = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        &clean
    } else {
        s
    };
    STD.decode(text).map(|b| b.len()).map_err(base64_error)
}

fn object<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    obj.get(field).and_then(Value::as_object)
}

/// The v1 → internal Secret conversion: `stringData` entries overwrite
/// `data` (base64-encoded) and `stringData` is dropped; an empty `type` is
/// `Opaque`. Errors are decoding errors (bad base64), as upstream's.
pub(crate) fn decode_secret(obj: &mut Value) -> Result<(), String> {
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    if let Some(Value::Object(sd)) = o.remove("stringData") {
        let data = o
            .entry("data")
            .and_modify(|d| {
                if !d.is_object() {
                    *d = Value::Object(Map::new());
                }
            })
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(data) = data.as_object_mut() {
            for (k, v) in sd {
                let text = v.as_str().unwrap_or_default();
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
    if o.get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        o.insert("type".into(), Value::String("Opaque".into()));
    }
    check_base64(obj, "data")
}

/// ConfigMap `binaryData` is base64 like Secret `data`.
pub(crate) fn decode_configmap(obj: &Value) -> Result<(), String> {
    check_base64(obj, "binaryData")
}

fn check_base64(obj: &Value, field: &str) -> Result<(), String> {
    for v in object(obj, field).into_iter().flat_map(|m| m.values()) {
        if let Some(s) = v.as_str() {
            decoded_len(s)?;
        }
    }
    Ok(())
}

fn too_long() -> Cause {
    // Upstream reports the size on the empty path: the whole object.
    Cause {
        reason: "FieldValueTooLong".into(),
        message: format!("Too long: may not be more than {MAX_SIZE} bytes"),
        field: String::new(),
    }
}

fn text_len(obj: &Value, field: &str) -> usize {
    object(obj, field)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_str)
        .map(str::len)
        .sum()
}

fn binary_len(obj: &Value, field: &str) -> usize {
    object(obj, field)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_str)
        .filter_map(|s| decoded_len(s).ok())
        .sum()
}

pub(crate) fn validate_configmap(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let (Some(data), Some(bin)) = (object(obj, "data"), object(obj, "binaryData")) {
        for k in data.keys().filter(|k| bin.contains_key(*k)) {
            causes.push(invalid(
                &format!("data[{k}]"),
                &format!("\"{k}\""),
                "duplicate of key present in binaryData",
            ));
        }
    }
    if text_len(obj, "data") + binary_len(obj, "binaryData") > MAX_SIZE {
        causes.push(too_long());
    }
    causes
}

fn has_key(obj: &Value, key: &str) -> bool {
    object(obj, "data").is_some_and(|d| d.contains_key(key))
}

fn key_bytes(obj: &Value, key: &str) -> Option<Vec<u8>> {
    let s = object(obj, "data")?.get(key)?.as_str()?;
    STD.decode(s.replace(['\r', '\n'], "")).ok()
}

pub(crate) fn validate_secret(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if binary_len(obj, "data") > MAX_SIZE {
        causes.push(too_long());
    }
    let data_key = |k: &str| format!("data[{k}]");
    match obj.get("type").and_then(Value::as_str).unwrap_or("Opaque") {
        "kubernetes.io/service-account-token" => {
            let name = obj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if name.is_empty() {
                causes.push(required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                ));
            }
        }
        t @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let key = if t == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match key_bytes(obj, key) {
                None if !has_key(obj, key) => causes.push(required(&data_key(key))),
                bytes => {
                    let bytes = bytes.unwrap_or_default();
                    if let Err(e) = serde_json::from_slice::<Map<String, Value>>(&bytes) {
                        causes.push(invalid(
                            &data_key(key),
                            "\"<secret contents redacted>\"",
                            &e.to_string(),
                        ));
                    }
                }
            }
        }
        "kubernetes.io/basic-auth" if !has_key(obj, "username") && !has_key(obj, "password") => {
            causes.push(required(&data_key("username")));
            causes.push(required(&data_key("password")));
        }
        "kubernetes.io/ssh-auth"
            if key_bytes(obj, "ssh-privatekey").is_none_or(|b| b.is_empty()) =>
        {
            causes.push(required(&data_key("ssh-privatekey")));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has_key(obj, key) {
                    causes.push(required(&data_key(key)));
                }
            }
        }
        _ => {}
    }
    causes
}

/// `data`, `binaryData` and `immutable` of an immutable object stay; a
/// Secret's `type` never changes.
pub(crate) fn validate_update(secret: bool, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if secret {
        let (ot, nt) = (&old["type"], &new["type"]);
        if ot.is_string() && ot != nt {
            causes.push(invalid(
                "type",
                &format!("\"{}\"", nt.as_str().unwrap_or("")),
                "field is immutable",
            ));
        }
    }
    if old["immutable"] == true {
        if new["immutable"] != true {
            causes.push(forbidden("immutable", IMMUTABLE));
        }
        let fields: &[&str] = if secret {
            &["data"]
        } else {
            &["data", "binaryData"]
        };
        for f in fields {
            if old.get(*f).filter(|v| !v.is_null()) != new.get(*f).filter(|v| !v.is_null()) {
                causes.push(forbidden(f, IMMUTABLE));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::Full;
    use super::*;
    use serde_json::json;

    #[test]
    fn string_data_merges_into_data_and_type_defaults() {
        let mut s = json!({"data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "hello"}});
        decode_secret(&mut s).unwrap();
        assert_eq!(
            s,
            json!({"data": {"a": "eA==", "b": "aGVsbG8="}, "type": "Opaque"})
        );
    }

    #[test]
    fn bad_base64_is_a_decoding_error() {
        let mut s = json!({"data": {"a": "not base64!"}});
        assert_eq!(
            decode_secret(&mut s).unwrap_err(),
            "illegal base64 data at input byte 3"
        );
        assert!(decode_configmap(&json!({"binaryData": {"a": "eA=\n="}})).is_ok());
    }

    #[test]
    fn typed_secrets_need_their_keys() {
        let fields = |s: Value| -> Vec<String> {
            validate_secret(&s).into_iter().map(|c| c.field).collect()
        };
        assert_eq!(
            fields(json!({"type": "kubernetes.io/tls", "data": {"tls.crt": ""}})),
            vec!["data[tls.key]"]
        );
        assert_eq!(
            fields(json!({"type": "kubernetes.io/dockerconfigjson", "data": {}})),
            vec!["data[.dockerconfigjson]"]
        );
        assert_eq!(
            fields(
                json!({"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "bm9wZQ=="}})
            ),
            vec!["data[.dockerconfigjson]"]
        );
        assert!(
            fields(json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}}))
                .is_empty()
        );
        assert_eq!(
            fields(json!({"type": "kubernetes.io/service-account-token"})),
            vec!["metadata.annotations[kubernetes.io/service-account.name]"]
        );
    }

    #[test]
    fn size_counts_decoded_bytes() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_SIZE]);
        assert!(validate_secret(&json!({"data": {"a": big}})).is_empty());
        let over = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_SIZE + 1]);
        assert_eq!(
            validate_secret(&json!({"data": {"a": over}}))[0].reason,
            "FieldValueTooLong"
        );
        let text = "x".repeat(MAX_SIZE + 1);
        assert_eq!(validate_configmap(&json!({"data": {"a": text}})).len(), 1);
    }

    #[test]
    fn immutable_objects_keep_their_data() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        assert!(validate_update(false, &old, &old.clone()).is_empty());
        let c = validate_update(false, &old, &json!({"immutable": true, "data": {"a": "2"}}));
        assert_eq!(
            c[0].full(),
            "data: Forbidden: field is immutable when `immutable` is set"
        );
        let c = validate_update(false, &old, &json!({"data": {"a": "1"}}));
        assert_eq!(c[0].field, "immutable");
        let c = validate_update(
            true,
            &json!({"type": "Opaque"}),
            &json!({"type": "kubernetes.io/tls"}),
        );
        assert_eq!(
            c[0].full(),
            "type: Invalid value: \"kubernetes.io/tls\": field is immutable"
        );
    }
}
