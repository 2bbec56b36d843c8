//! ControllerRevisions as upstream's `history` package makes them: the
//! revision's data is the patch `{"spec":{"template":{...,"$patch":"replace"}}}`
//! (keys sorted, as Go's `json.Marshal` of a map writes them), its hash is the
//! 32-bit FNV-1 of those bytes and the collision count, written with
//! `rand.SafeEncodeString`, and its name is `SET-HASH`.
//!
//! Deviation: upstream encodes the typed Go object, which also writes a few
//! empty structs the stored JSON may lack; [`patch`] adds the two a template
//! always has (`metadata.creationTimestamp: null`, each container's
//! `resources: {}`), so the hash matches kube-controller-manager's for the
//! templates API defaulting produces, but can differ for unusual ones.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Value, json};

/// The label holding a revision's hash (upstream's `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Upstream's `rand.SafeEncodeString` alphabet (no vowels, no 0/1/3).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// 32-bit FNV-1 (Go's `hash/fnv.New32`, not FNV-1a).
fn fnv32(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for part in parts {
        for b in *part {
            h = h.wrapping_mul(0x0100_0193);
            h ^= u32::from(*b);
        }
    }
    h
}

fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[c as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// Go's `json.Marshal` of a decoded map: keys sorted, `<`, `>`, `&`, U+2028
/// and U+2029 escaped.
pub fn go_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let keys: BTreeSet<&String> = m.keys().collect();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    // A preserve_order Map keeps insertion order, which `sorted` made sorted.
    let s = sorted(v).to_string();
    // These characters only occur inside strings in JSON text.
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// The revision data of `set`: upstream's `getPatch`.
pub fn patch(set: &StatefulSet) -> Value {
    let template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut t = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if let Some(o) = t.as_object_mut() {
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.entry("creationTimestamp").or_insert(Value::Null);
        }
        if let Some(cs) = o
            .get_mut("spec")
            .and_then(|s| s.get_mut("containers"))
            .and_then(Value::as_array_mut)
        {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.entry("resources").or_insert_with(|| json!({}));
            }
        }
        o.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// Upstream's `HashControllerRevision` of `data` with `collision_count`.
pub fn hash(data: &Value, collision_count: i32) -> String {
    let raw = go_json(data);
    let probe = collision_count.to_string();
    safe_encode(&fnv32(&[raw.as_bytes(), probe.as_bytes()]).to_string())
}

/// `ControllerRevisionName`: the prefix is cut to 223 characters.
pub fn name(set_name: &str, hash: &str) -> String {
    let prefix: String = set_name.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// The controller ownerReference a set puts on what it makes.
pub fn owner(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: set.metadata.name.clone().unwrap_or_default(),
        uid: set.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Upstream's `newRevision`: the set's template as revision `number`, named
/// for its hash with `collision_count`, carrying the set's annotations (where
/// `kubectl rollout history` reads a change's `kubernetes.io/change-cause`).
pub fn new_revision(set: &StatefulSet, number: i64, collision_count: i32) -> ControllerRevision {
    let data = patch(set);
    let h = hash(&data, collision_count);
    let mut labels = set
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), h.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(set.metadata.name.as_deref().unwrap_or_default(), &h)),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: set.metadata.annotations.clone(),
            owner_references: Some(vec![owner(set)]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// Drops null members, which a server may or may not keep in stored data.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Upstream's `EqualRevision`: same hash label and the same data.
pub fn equal(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    let hash_of = |r: &ControllerRevision| {
        r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL).cloned())
    };
    let data = |r: &ControllerRevision| r.data.as_ref().map(|d| without_nulls(&d.0));
    hash_of(a) == hash_of(b) && data(a) == data(b)
}

/// The pod template a revision holds (upstream's `ApplyRevision`, for the
/// one field a revision carries).
pub fn template(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(image: &str) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "serviceName": "web",
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": image}]},
                },
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_revision_carries_the_sets_annotations() {
        let mut s = set("a.wasm");
        s.metadata.annotations =
            Some([("kubernetes.io/change-cause".to_string(), "v2".to_string())].into());
        let rev = new_revision(&s, 2, 0);
        assert_eq!(rev.metadata.annotations, s.metadata.annotations);
        // Not part of what makes two revisions equal (upstream's EqualRevision).
        assert!(equal(&rev, &new_revision(&set("a.wasm"), 2, 0)));
    }

    #[test]
    fn fnv1_matches_the_reference_vectors() {
        // FNV-1 32 test vectors (Go's hash/fnv New32).
        assert_eq!(fnv32(&[b""]), 0x811c9dc5);
        assert_eq!(fnv32(&[b"a"]), 0x050c5d7e);
        assert_eq!(fnv32(&[b"foobar"]), 0x31f0b262);
        assert_eq!(fnv32(&[b"foo", b"bar"]), 0x31f0b262);
    }

    #[test]
    fn the_patch_is_the_template_replaced_with_sorted_keys() {
        let p = go_json(&patch(&set("a.wasm")));
        assert_eq!(
            p,
            r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"web"}},"spec":{"containers":[{"image":"a.wasm","name":"c","resources":{}}]}}}}"#
        );
        assert_eq!(
            go_json(&json!({"a": "<&>"})),
            r#"{"a":"\u003c\u0026\u003e"}"#
        );
    }

    #[test]
    fn the_hash_is_safe_encoded_and_changes_with_template_and_collisions() {
        let d = patch(&set("a.wasm"));
        let h = hash(&d, 0);
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
        assert_eq!(h, hash(&d, 0));
        assert_ne!(h, hash(&d, 1));
        assert_ne!(h, hash(&patch(&set("b.wasm")), 0));
        // Digits: '0' is 48, 48 % 27 = 21, the alphabet's '4'.
        assert_eq!(safe_encode("0123"), "4567");
    }

    #[test]
    fn a_revision_is_named_owned_labelled_and_holds_the_template() {
        let s = set("a.wasm");
        let r = new_revision(&s, 3, 0);
        let h = hash(&patch(&s), 0);
        assert_eq!(
            r.metadata.name.as_deref(),
            Some(format!("web-{h}").as_str())
        );
        assert_eq!(r.revision, 3);
        let labels = r.metadata.labels.clone().unwrap();
        assert_eq!(labels[HASH_LABEL], h);
        assert_eq!(labels["app"], "web");
        assert_eq!(r.metadata.owner_references.as_ref().unwrap()[0].uid, "u1");
        let t = template(&r).unwrap();
        assert_eq!(
            t.spec.unwrap().containers[0].image.as_deref(),
            Some("a.wasm")
        );
        // Stored without the null member, it is still the same revision.
        let mut stored = r.clone();
        stored.data = Some(RawExtension(without_nulls(&r.data.clone().unwrap().0)));
        assert!(equal(&r, &stored));
        assert!(!equal(&r, &new_revision(&set("b.wasm"), 3, 0)));
    }

    #[test]
    fn long_set_names_are_cut_for_the_revision_name() {
        let long = "x".repeat(300);
        assert_eq!(name(&long, "abc").len(), 223 + 4);
    }
}
