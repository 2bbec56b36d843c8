//! Objects as the caches hold them: metadata parsed, everything else (spec,
//! status, data...) kept as one JSON text.
//!
//! A [`kube::api::DynamicObject`] holds its body as a `serde_json::Value`
//! tree: a map, its keys and every string are separate allocations, about
//! 2.5 KiB for a small custom resource with one condition. 20,000 cached
//! objects were most of the host's memory (issue 16: RSS 1.37× a typed
//! kube-runtime controller's). As text the body is its own JSON size, and
//! what a guest reads is spliced from it without re-encoding. The host reads
//! the few fields it needs ([`CachedObject::status`], a watch's map path) by
//! parsing on demand.
//!
//! ```ignore
//! use kube::api::{ApiResource, GroupVersionKind};
//! use wasmlet::cluster::CachedObject;
//! let o: CachedObject = serde_json::from_str(
//!     r#"{"apiVersion":"example.dev/v1","kind":"Widget",
//!         "metadata":{"name":"w","namespace":"ns"},"spec":{"size":3}}"#,
//! )?;
//! assert_eq!(o.metadata.name.as_deref(), Some("w"));
//! assert_eq!(o.at_path("spec.size"), Some(serde_json::json!(3)));
//! let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.dev", "v1", "Widget"));
//! assert!(o.json(&ar).starts_with(r#"{"apiVersion":"example.dev/v1","kind":"Widget""#));
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject};
use kube::core::DynamicResourceScope;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// A cached object of one kind: its metadata, and its other top-level fields
/// as the text of one JSON object (`apiVersion` and `kind` are the cache's
/// kind, so they are not kept).
#[derive(Clone, Debug, PartialEq)]
pub struct CachedObject {
    pub metadata: ObjectMeta,
    body: Box<str>,
    /// Where the object's last change sits in its cache's journal (0 for an
    /// object no cache stored): what `list-changes` compares cursors with.
    pub(crate) seq: u64,
}

impl CachedObject {
    pub(crate) fn from_dynamic(o: &DynamicObject) -> CachedObject {
        let mut body = Map::new();
        if let Some(fields) = o.data.as_object() {
            for (k, v) in fields {
                if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    body.insert(k.clone(), v.clone());
                }
            }
        }
        CachedObject {
            metadata: o.metadata.clone(),
            body: Value::Object(body).to_string().into_boxed_str(),
            seq: 0,
        }
    }

    /// The fields besides apiVersion, kind and metadata, parsed.
    pub(crate) fn body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| Value::Object(Map::new()))
    }

    /// `status`, or an empty object when there is none.
    pub(crate) fn status(&self) -> Value {
        self.at_path("status")
            .filter(|s| !s.is_null())
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    /// The value at a dotted path of the body (`spec.nodeName`). Only that
    /// value is built into a tree; the rest of the text is skipped over.
    pub(crate) fn at_path(&self, path: &str) -> Option<Value> {
        let parts: Vec<&str> = path.split('.').collect();
        let mut de = serde_json::Deserializer::from_str(&self.body);
        serde::de::DeserializeSeed::deserialize(path::At(&parts), &mut de)
            .ok()
            .flatten()
    }

    /// The same object with `status` replaced and stored at `resource_version`.
    pub(crate) fn with_status(
        &self,
        status: Value,
        resource_version: Option<String>,
    ) -> CachedObject {
        let mut body = match self.body() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        body.insert("status".into(), status);
        let mut metadata = self.metadata.clone();
        metadata.resource_version = resource_version;
        CachedObject {
            metadata,
            body: Value::Object(body).to_string().into_boxed_str(),
            seq: 0,
        }
    }

    /// The object as a guest reads it: JSON text with `apiVersion` and
    /// `kind`, the body spliced in as it is kept (no tree is built).
    pub(crate) fn json(&self, resource: &ApiResource) -> String {
        let text = |v: &str| serde_json::to_string(v).unwrap_or_default();
        let mut out = String::with_capacity(self.body.len() + 512);
        out.push_str("{\"apiVersion\":");
        out.push_str(&text(&resource.api_version));
        out.push_str(",\"kind\":");
        out.push_str(&text(&resource.kind));
        out.push_str(",\"metadata\":");
        out.push_str(&serde_json::to_string(&self.metadata).unwrap_or_else(|_| "{}".into()));
        let inner = &self.body[1..self.body.len() - 1];
        if !inner.is_empty() {
            out.push(',');
            out.push_str(inner);
        }
        out.push('}');
        out
    }
}

/// A walk down a path of object keys while deserializing: values off the
/// path are skipped without being built.
mod path {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::Value;

    pub(super) struct At<'a>(pub &'a [&'a str]);

    impl<'de> DeserializeSeed<'de> for At<'_> {
        type Value = Option<Value>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
            match self.0.split_first() {
                None => serde::Deserialize::deserialize(d).map(Some),
                Some((first, rest)) => d.deserialize_any(Within { first, rest }),
            }
        }
    }

    struct Within<'a> {
        first: &'a str,
        rest: &'a [&'a str],
    }

    impl<'de> Visitor<'de> for Within<'_> {
        type Value = Option<Value>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
            let mut found = None;
            while let Some(hit) = map.next_key_seed(Is(self.first))? {
                if hit && found.is_none() {
                    found = map.next_value_seed(At(self.rest))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }

        fn visit_bool<E>(self, _: bool) -> Result<Option<Value>, E> {
            Ok(None)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Option<Value>, E> {
            Ok(None)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Option<Value>, E> {
            Ok(None)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Option<Value>, E> {
            Ok(None)
        }

        fn visit_str<E>(self, _: &str) -> Result<Option<Value>, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Option<Value>, E> {
            Ok(None)
        }
    }

    /// Whether a map key is `.0` (compared in place, not allocated).
    struct Is<'a>(&'a str);

    impl<'de> DeserializeSeed<'de> for Is<'_> {
        type Value = bool;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Is<'_> {
        type Value = bool;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a key")
        }

        fn visit_str<E>(self, v: &str) -> Result<bool, E> {
            Ok(v == self.0)
        }
    }
}

impl kube::Resource for CachedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Straight from the wire (list items and watch events): metadata into its
/// struct without `managedFields` (see `meta`), every other field copied
/// into the body text as it is read (`serde_transcode`), never built into a
/// `Value` first. Watch events may reach here buffered, where borrowing the
/// raw text is not possible.
impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = CachedObject;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CachedObject, A::Error> {
                let mut metadata = None;
                let mut body = Vec::with_capacity(256);
                body.push(b'{');
                while let Some(key) = map.next_key_seed(meta::Key)? {
                    match key.as_str() {
                        "metadata" => {
                            metadata = Some(map.next_value_seed(meta::WithoutManagedFields)?)
                        }
                        "apiVersion" | "kind" => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        _ => {
                            if body.len() > 1 {
                                body.push(b',');
                            }
                            serde_json::to_writer(&mut body, key.as_str())
                                .map_err(A::Error::custom)?;
                            body.push(b':');
                            map.next_value_seed(Transcode(&mut body))?;
                        }
                    }
                }
                body.push(b'}');
                let body = String::from_utf8(body).map_err(A::Error::custom)?;
                Ok(CachedObject {
                    metadata: metadata.unwrap_or_default(),
                    body: body.into_boxed_str(),
                    seq: 0,
                })
            }
        }
        d.deserialize_map(Fields)
    }
}

/// `metadata` read without its `managedFields`, which are skipped as they
/// are read and never built: their `fieldsV1` trees are most of a busy
/// object's metadata, and no reconcile reads them (field ownership is the
/// API server's business; the cache kept none of them before either).
mod meta {
    use std::fmt;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Deserialize;
    use serde::de::value::{MapAccessDeserializer, StrDeserializer};
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    pub(super) struct WithoutManagedFields;

    impl<'de> DeserializeSeed<'de> for WithoutManagedFields {
        type Value = ObjectMeta;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ObjectMeta, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for WithoutManagedFields {
        type Value = ObjectMeta;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("object metadata")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ObjectMeta, A::Error> {
            ObjectMeta::deserialize(MapAccessDeserializer::new(Skipping(map)))
        }
    }

    /// The metadata's map with `managedFields` left out.
    struct Skipping<A>(A);

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Skipping<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            while let Some(key) = self.0.next_key_seed(Key)? {
                if key.as_str() == "managedFields" {
                    self.0.next_value::<IgnoredAny>()?;
                    continue;
                }
                return seed
                    .deserialize(StrDeserializer::new(key.as_str()))
                    .map(Some);
            }
            Ok(None)
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.0.next_value_seed(seed)
        }
    }

    /// A map key, borrowed from the input where it can be (no allocation).
    pub(super) enum KeyText<'de> {
        Borrowed(&'de str),
        Owned(String),
    }

    impl KeyText<'_> {
        pub(super) fn as_str(&self) -> &str {
            match self {
                KeyText::Borrowed(k) => k,
                KeyText::Owned(k) => k,
            }
        }
    }

    pub(super) struct Key;

    impl<'de> DeserializeSeed<'de> for Key {
        type Value = KeyText<'de>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<KeyText<'de>, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key {
        type Value = KeyText<'de>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a key")
        }

        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<KeyText<'de>, E> {
            Ok(KeyText::Borrowed(v))
        }

        fn visit_str<E>(self, v: &str) -> Result<KeyText<'de>, E> {
            Ok(KeyText::Owned(v.to_string()))
        }

        fn visit_string<E>(self, v: String) -> Result<KeyText<'de>, E> {
            Ok(KeyText::Owned(v))
        }
    }
}

/// Writes the value it is given to the buffer as JSON, as it is read.
struct Transcode<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let mut out = serde_json::Serializer::new(self.0);
        serde_transcode::transcode(d, &mut out).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;
    use serde_json::json;

    fn widget() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("example.dev", "v1", "Widget"))
    }

    #[test]
    fn the_guest_reads_the_object_with_its_api_version_and_kind() {
        let obj: CachedObject = serde_json::from_value(json!({
            "apiVersion": "example.dev/v1", "kind": "Widget",
            "metadata": {"name": "w\"1", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"size": 3, "tags": ["a", "é"]},
            "status": {"summary": "size=3"},
        }))
        .unwrap();
        let v: Value = serde_json::from_str(&obj.json(&widget())).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "example.dev/v1", "kind": "Widget",
                "metadata": {"name": "w\"1", "namespace": "ns", "resourceVersion": "7"},
                "spec": {"size": 3, "tags": ["a", "é"]},
                "status": {"summary": "size=3"},
            })
        );
    }

    #[test]
    fn an_object_with_only_metadata_reads_whole() {
        let obj: CachedObject =
            serde_json::from_str(r#"{"kind":"Namespace","metadata":{"name":"a"}}"#).unwrap();
        assert_eq!(obj.status(), json!({}));
        assert_eq!(obj.at_path("spec"), None);
        let v: Value = serde_json::from_str(&obj.json(&widget())).unwrap();
        assert_eq!(v["metadata"]["name"], "a");
        assert_eq!(v.as_object().unwrap().len(), 3);
    }

    #[test]
    fn fields_read_on_demand() {
        let obj: CachedObject = serde_json::from_str(
            r#"{"metadata":{"name":"a"},"spec":{"node":{"name":"n1"}},"status":{"observedGeneration":2}}"#,
        )
        .unwrap();
        assert_eq!(obj.status(), json!({"observedGeneration": 2}));
        assert_eq!(obj.at_path("spec.node.name"), Some(json!("n1")));
        assert_eq!(obj.at_path("spec.node.missing"), None);
        assert_eq!(obj.at_path("spec.node.name.deeper"), None);
        let updated = obj.with_status(json!({"ready": true}), Some("9".into()));
        assert_eq!(updated.status(), json!({"ready": true}));
        assert_eq!(updated.at_path("spec.node.name"), Some(json!("n1")));
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("9"));
    }

    #[test]
    fn a_dynamic_object_converts_to_its_metadata_and_body() {
        let d: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"a": "b"}},
            "spec": {"size": 1},
        }))
        .unwrap();
        let c = CachedObject::from_dynamic(&d);
        assert_eq!(c.body(), json!({"spec": {"size": 1}}));
        assert_eq!(c.metadata, d.metadata);
        assert_eq!(
            serde_json::from_str::<Value>(&c.json(&widget())).unwrap(),
            json!({"apiVersion": "example.dev/v1", "kind": "Widget",
                   "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"size": 1}})
        );
    }

    /// `managedFields` are skipped, wherever they stand in the metadata and
    /// whether the text is read in place or from serde's buffer; every other
    /// metadata field is kept.
    #[test]
    fn managed_fields_are_not_kept() {
        let managed = r#""managedFields":[{"manager":"m","operation":"Update","fieldsV1":{"f:spec":{"f:size":{}}}}]"#;
        for meta in [
            format!(r#"{{{managed},"name":"w","labels":{{"a":"b"}},"resourceVersion":"3"}}"#),
            format!(r#"{{"name":"w","labels":{{"a":"b"}},{managed},"resourceVersion":"3"}}"#),
            format!(r#"{{"name":"w","labels":{{"a":"b"}},"resourceVersion":"3",{managed}}}"#),
        ] {
            let object = format!(r#"{{"metadata":{meta},"spec":{{"size":1}}}}"#);
            let direct: CachedObject = serde_json::from_str(&object).unwrap();
            let event = format!(r#"{{"object":{object},"type":"MODIFIED"}}"#);
            let kube::api::WatchEvent::Modified(buffered) = serde_json::from_str(&event).unwrap()
            else {
                panic!("{event}: not a MODIFIED event");
            };
            for o in [direct, buffered] {
                assert_eq!(o.metadata.managed_fields, None, "{meta}");
                assert_eq!(o.metadata.name.as_deref(), Some("w"));
                assert_eq!(o.metadata.resource_version.as_deref(), Some("3"));
                assert_eq!(o.metadata.labels, Some([("a".into(), "b".into())].into()));
                assert_eq!(o.body(), json!({"spec": {"size": 1}}));
            }
        }
        // Metadata that is not an object is still an error, not a default.
        assert!(serde_json::from_str::<CachedObject>(r#"{"metadata":[]}"#).is_err());
    }

    /// A watch event's object is read straight from the text when `type`
    /// comes first, and from serde's buffer when `object` does: the body
    /// comes out the same, numbers and escapes included.
    #[test]
    fn watch_events_read_the_same_in_either_field_order() {
        let object = r#"{"apiVersion":"example.dev/v1","kind":"Widget","metadata":{"name":"w","resourceVersion":"3"},"spec":{"n":-2,"big":18446744073709551615,"f":1.5,"s":"a\"\u00e9\n","list":[true,null,{}]}}"#;
        let want = serde_json::json!({"spec": {"n": -2, "big": 18446744073709551615u64, "f": 1.5, "s": "a\"é\n", "list": [true, null, {}]}});
        for text in [
            format!(r#"{{"type":"ADDED","object":{object}}}"#),
            format!(r#"{{"object":{object},"type":"ADDED"}}"#),
        ] {
            let ev: kube::api::WatchEvent<CachedObject> = serde_json::from_str(&text).unwrap();
            let kube::api::WatchEvent::Added(obj) = ev else {
                panic!("{text}: not an ADDED event");
            };
            assert_eq!(obj.metadata.resource_version.as_deref(), Some("3"));
            assert_eq!(obj.body(), want, "{text}");
        }
    }
}

/// The module documentation's example (its modules are private to the
/// crate, so rustdoc cannot compile it from outside).
#[cfg(test)]
mod doc_example {
    #[test]
    fn the_module_example_reads_paths_and_encodes() -> Result<(), serde_json::Error> {
        use crate::cluster::CachedObject;
        use kube::api::{ApiResource, GroupVersionKind};
        let o: CachedObject = serde_json::from_str(
            r#"{"apiVersion":"example.dev/v1","kind":"Widget",
                "metadata":{"name":"w","namespace":"ns"},"spec":{"size":3}}"#,
        )?;
        assert_eq!(o.metadata.name.as_deref(), Some("w"));
        assert_eq!(o.at_path("spec.size"), Some(serde_json::json!(3)));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.dev", "v1", "Widget"));
        assert!(
            o.json(&ar)
                .starts_with(r#"{"apiVersion":"example.dev/v1","kind":"Widget""#)
        );
        Ok(())
    }
}
