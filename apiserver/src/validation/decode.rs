//! What upstream's decoding of a request body reports: wrong JSON types
//! (`json: cannot unmarshal number into Go struct field ConfigMap.data of
//! type map[string]string`) and duplicate fields (`duplicate field "x"`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Go's `UnmarshalTypeError` text for a type error at `field` (a field path
/// as the structural validator reports it, e.g. `spec.containers[0].image`),
/// found by walking the annotated schema and the object together (the object
/// tells where a map key with dots in it ends).
pub(crate) fn go_type_error(schema: &Value, obj: &Value, field: &str) -> String {
    let mut node = schema;
    let mut val = obj;
    let mut rest = field;
    let mut go_path: Vec<&str> = Vec::new();
    let mut in_struct = schema["x-go-struct"].as_str().unwrap_or("");
    while !rest.is_empty() {
        rest = rest.strip_prefix('.').unwrap_or(rest);
        if let Some(r) = rest.strip_prefix('[') {
            let Some((idx, after)) = r.split_once(']') else {
                break;
            };
            val = idx
                .parse::<usize>()
                .ok()
                .and_then(|i| val.get(i))
                .unwrap_or(&Value::Null);
            node = &node["items"];
            rest = after;
        } else if let Some(props) = node.get("properties").and_then(Value::as_object) {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let key = &rest[..end];
            in_struct = node["x-go-struct"].as_str().unwrap_or(in_struct);
            go_path.push(key);
            node = props.get(key).unwrap_or(&Value::Null);
            val = val.get(key).unwrap_or(&Value::Null);
            rest = &rest[end..];
        } else if node.get("additionalProperties").is_some() {
            // The longest key of the object that the rest of the path starts with.
            let key = val
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .filter(|k| {
                    rest.strip_prefix(k.as_str())
                        .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
                })
                .max_by_key(|k| k.len())
                .cloned()
                .unwrap_or_default();
            val = val.get(&key).unwrap_or(&Value::Null);
            node = &node["additionalProperties"];
            rest = &rest[key.len().min(rest.len())..];
            if key.is_empty() {
                break;
            }
        } else {
            break;
        }
    }
    let go_type = node["x-go-type"].as_str().unwrap_or("interface {}");
    let word = match val {
        Value::Number(n) if node["type"] == "integer" && !n.is_i64() && !n.is_u64() => {
            format!("number {n}")
        }
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    };
    if go_path.is_empty() {
        format!("json: cannot unmarshal {word} into Go value of type {go_type}")
    } else {
        format!(
            "json: cannot unmarshal {word} into Go struct field {in_struct}.{} of type {go_type}",
            go_path.join(".")
        )
    }
}

/// The paths of fields a JSON (or YAML) body names twice in one object, in
/// document order (`metadata.name`, `spec.containers[0].image`). Bodies that
/// do not parse have none (the parser reports them).
pub(crate) fn duplicate_fields(body: &[u8], content_type: &str) -> Vec<String> {
    let out = RefCell::new(Vec::new());
    let walk = Walk {
        path: String::new(),
        out: &out,
    };
    if content_type.contains("yaml") {
        let _ = walk.deserialize(serde_yaml::Deserializer::from_slice(body));
    } else {
        let _ = walk.deserialize(&mut serde_json::Deserializer::from_slice(body));
    }
    out.into_inner()
}

struct Walk<'a> {
    path: String,
    out: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<KeyString>()? {
            let path = if self.path.is_empty() {
                k.0.clone()
            } else {
                format!("{}.{}", self.path, k.0)
            };
            if !seen.insert(k.0) {
                self.out.borrow_mut().push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                out: self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
                out: self.out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A map key as text, whatever scalar YAML wrote it as.
struct KeyString(String);

impl<'de> serde::Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyString, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(KeyString(match v {
            Value::String(s) => s,
            other => other.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::schemas::for_kind;
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicates_are_found_at_every_depth() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"image":"x","image":"y"}]},"data":{"k":"1","k":"2"}}"#;
        assert_eq!(
            duplicate_fields(body, "application/json"),
            vec!["metadata.name", "spec.containers[0].image", "data.k"]
        );
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":[{"b":2}]}"#, "application/json").is_empty());
        let yaml = b"metadata:\n  name: a\ndata:\n  x: '1'\n  x: '2'\n";
        assert_eq!(duplicate_fields(yaml, "application/yaml"), vec!["data.x"]);
    }

    #[test]
    fn type_errors_name_the_go_struct_and_type() {
        let cm = for_kind("", "ConfigMap").unwrap();
        let obj = json!({"data": 5});
        assert_eq!(
            go_type_error(&cm.annotated, &obj, "data"),
            "json: cannot unmarshal number into Go struct field ConfigMap.data of type map[string]string"
        );
        let obj = json!({"data": {"a.b.c": 7}});
        assert_eq!(
            go_type_error(&cm.annotated, &obj, "data.a.b.c"),
            "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
        let obj = json!({"metadata": {"labels": {"app.kubernetes.io/name": true}}});
        assert_eq!(
            go_type_error(
                &cm.annotated,
                &obj,
                "metadata.labels.app.kubernetes.io/name"
            ),
            "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string"
        );
        let pod = for_kind("", "Pod").unwrap();
        let obj =
            json!({"spec": {"containers": [{"name": "c"}, {"ports": [{"containerPort": 1.5}]}]}});
        assert_eq!(
            go_type_error(
                &pod.annotated,
                &obj,
                "spec.containers[1].ports[0].containerPort"
            ),
            "json: cannot unmarshal number 1.5 into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
        );
    }
}
