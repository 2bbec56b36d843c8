//! Field paths and field sets, as upstream `structured-merge-diff/fieldpath`,
//! with the `fieldsV1` wire format of `metadata.managedFields`.
//!
//! ```
//! use serde_json::json;
//! use wasmlet_apimachinery::managedfields::fieldpath::{PathElement, Set};
//!
//! let mut set = Set::new();
//! let c = PathElement::key(&[("name", &json!("c"))]);
//! set.insert(&[PathElement::field("spec"), PathElement::field("containers"), c.clone()]);
//! set.insert(&[PathElement::field("spec"), PathElement::field("containers"), c, PathElement::field("image")]);
//! assert_eq!(
//!     set.to_fields_v1(),
//!     json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}}),
//! );
//! assert_eq!(Set::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
//! ```

use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One step of a field path, kept in its `fieldsV1` spelling: `f:<field>`,
/// `k:<json object of key fields, sorted>`, `v:<json value>` or `i:<index>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathElement(String);

/// A path from the object root.
pub type Path = Vec<PathElement>;

impl PathElement {
    /// A field of an object (`f:name`).
    pub fn field(name: &str) -> PathElement {
        PathElement(format!("f:{name}"))
    }

    /// The element of a map-list with these key field values (`k:{...}`); the
    /// fields are sorted by name, as upstream does.
    pub fn key(fields: &[(&str, &Value)]) -> PathElement {
        let mut sorted: Vec<_> = fields.to_vec();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let obj: Map<String, Value> = sorted
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        PathElement(format!("k:{}", Value::Object(obj)))
    }

    /// The element of a set-list with this value (`v:...`).
    pub fn value(v: &Value) -> PathElement {
        PathElement(format!("v:{v}"))
    }

    /// A position in an atomic list (`i:3`); never produced by this crate, but
    /// accepted in `fieldsV1`.
    pub fn index(i: usize) -> PathElement {
        PathElement(format!("i:{i}"))
    }

    /// Parses a `fieldsV1` key, canonicalising `k:` keys (sorted fields).
    pub fn parse(s: &str) -> Result<PathElement, String> {
        let (kind, rest) = s
            .split_at_checked(2)
            .ok_or_else(|| format!("{s:?} is not a path element"))?;
        match kind {
            "f:" => Ok(PathElement(s.to_string())),
            "v:" => {
                let v: Value = serde_json::from_str(rest).map_err(|e| format!("{s:?}: {e}"))?;
                Ok(PathElement::value(&v))
            }
            "k:" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => {
                    let fields: Vec<(&str, &Value)> =
                        m.iter().map(|(k, v)| (k.as_str(), v)).collect();
                    Ok(PathElement::key(&fields))
                }
                Ok(_) => Err(format!("{s:?}: a k: element must hold a JSON object")),
                Err(e) => Err(format!("{s:?}: {e}")),
            },
            "i:" => rest
                .parse::<usize>()
                .map(PathElement::index)
                .map_err(|e| format!("{s:?}: {e}")),
            _ => Err(format!("{s:?} is not a path element (f:, k:, v: or i:)")),
        }
    }

    /// The `fieldsV1` spelling.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The field name, for `f:` elements.
    pub fn field_name(&self) -> Option<&str> {
        self.0.strip_prefix("f:")
    }

    /// Upstream orders fields < keys < values < indices.
    fn rank(&self) -> u8 {
        match self.0.as_bytes().first() {
            Some(b'f') => 0,
            Some(b'k') => 1,
            Some(b'v') => 2,
            _ => 3,
        }
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank()).then_with(|| {
            match (self.0.strip_prefix("i:"), other.0.strip_prefix("i:")) {
                (Some(a), Some(b)) => a.parse::<usize>().ok().cmp(&b.parse::<usize>().ok()),
                _ => self.0.cmp(&other.0),
            }
        })
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Upstream's `value.ToString`: strings quoted, other scalars bare.
fn show(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(",")),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}={}", show(v))).collect(),
        other => other.to_string(),
    }
}

/// Upstream's `PathElement.String()`: `.spec`, `[name="c"]`, `[="x"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, rest) = self.0.split_at(2.min(self.0.len()));
        match kind {
            "f:" => write!(f, ".{rest}"),
            "k:" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) => {
                    let parts: Vec<String> =
                        m.iter().map(|(k, v)| format!("{k}={}", show(v))).collect();
                    write!(f, "[{}]", parts.join(","))
                }
                _ => write!(f, "[{rest}]"),
            },
            "v:" => match serde_json::from_str::<Value>(rest) {
                Ok(v) => write!(f, "[={}]", show(&v)),
                Err(_) => write!(f, "[={rest}]"),
            },
            _ => write!(f, "[{rest}]"),
        }
    }
}

/// A path as upstream prints it in conflicts: `.spec.containers[name="c"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(|pe| pe.to_string()).collect()
}

/// A set of field paths. Like upstream, a path is either a *member* (the field
/// itself is in the set) or only a prefix of members (`children`); both can hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    /// Never holds an empty set.
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    /// The empty set: no field owned.
    pub fn new() -> Set {
        Set::default()
    }

    /// Whether the set holds no path at all.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` as a member. The empty path (the root) is never a member.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [pe] => {
                self.members.insert(pe.clone());
            }
            [pe, rest @ ..] => self.children.entry(pe.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` itself is a member (a prefix of a member is not).
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [pe] => self.members.contains(pe),
            [pe, rest @ ..] => self.children.get(pe).is_some_and(|c| c.has(rest)),
        }
    }

    /// The paths under `pe`, without it (`WithPrefix`).
    pub fn child(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    /// Whether the direct child `pe` is a member.
    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The paths in either set.
    pub fn union(&self, o: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(o.members.iter().cloned());
        for (pe, c) in &o.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// Adds the paths of `o` in place: linear in `o`, where a chain of
    /// [`Set::union`]s copies the growing set each time.
    pub fn union_with(&mut self, o: &Set) {
        self.members.extend(o.members.iter().cloned());
        for (pe, c) in &o.children {
            self.children.entry(pe.clone()).or_default().union_with(c);
        }
    }

    /// The paths in both sets.
    pub fn intersection(&self, o: &Set) -> Set {
        let members = self.members.intersection(&o.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, c)| {
                o.children
                    .get(pe)
                    .map(|oc| (pe.clone(), c.intersection(oc)))
            })
            .filter(|(_, c)| !c.is_empty())
            .collect();
        Set { members, children }
    }

    /// Paths in `self` that are not in `o` (exact paths: a member of `o` does not
    /// remove what lies under it).
    pub fn difference(&self, o: &Set) -> Set {
        let members = self.members.difference(&o.members).cloned().collect();
        let children = self
            .children
            .iter()
            .map(|(pe, c)| match o.children.get(pe) {
                Some(oc) => (pe.clone(), c.difference(oc)),
                None => (pe.clone(), c.clone()),
            })
            .filter(|(_, c)| !c.is_empty())
            .collect();
        Set { members, children }
    }

    /// Like [`Set::difference`], and also drops everything under a member of `o`.
    pub fn recursive_difference(&self, o: &Set) -> Set {
        let members = self.members.difference(&o.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(pe, _)| !o.members.contains(*pe))
            .map(|(pe, c)| match o.children.get(pe) {
                Some(oc) => (pe.clone(), c.recursive_difference(oc)),
                None => (pe.clone(), c.clone()),
            })
            .filter(|(_, c)| !c.is_empty())
            .collect();
        Set { members, children }
    }

    /// Every member path, members of a node before its children, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(p);
        }
        for (pe, c) in &self.children {
            prefix.push(pe.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Upstream `EnsureNamedFieldsAreMembers`: a field that has owned fields under
    /// it becomes a member itself. Upstream does this only for fields a schema
    /// names (struct fields); with no schema, every field counts as named.
    pub(crate) fn with_named_fields_as_members(&self) -> Set {
        let mut members = self.members.clone();
        members.extend(
            self.children
                .keys()
                .filter(|pe| pe.field_name().is_some())
                .cloned(),
        );
        let children = self
            .children
            .iter()
            .map(|(pe, c)| (pe.clone(), c.with_named_fields_as_members()))
            .collect();
        Set { members, children }
    }

    /// The `fieldsV1` JSON form: one key per path element, `"."` for a member
    /// that also has children, `{}` for a plain member.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self {
            out.insert(".".to_string(), Value::Object(Map::new()));
        }
        let mut keys: Vec<&PathElement> = self.members.iter().chain(self.children.keys()).collect();
        keys.sort();
        keys.dedup();
        for pe in keys {
            let body = match self.children.get(pe) {
                Some(c) => c.emit(self.members.contains(pe)),
                None => Map::new(),
            };
            out.insert(pe.as_str().to_string(), Value::Object(body));
        }
        out
    }

    /// Parses `fieldsV1`. Errors name the offending key.
    pub fn from_fields_v1(v: &Value) -> Result<Set, String> {
        let Value::Object(m) = v else {
            return Err("fieldsV1 must be a JSON object".to_string());
        };
        let mut set = Set::new();
        for (k, body) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::parse(k)?;
            let Value::Object(inner) = body else {
                return Err(format!("fieldsV1 entry {k:?} must be a JSON object"));
            };
            if inner.is_empty() || inner.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let child = Set::from_fields_v1(body)?;
            if !child.is_empty() {
                set.children.insert(pe, child);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::field(s)
    }

    #[test]
    fn fields_v1_round_trip_with_upstream_shape() {
        let wire = json!({
            "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a/b\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}},
                                         "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {}}}
        });
        let set = Set::from_fields_v1(&wire).unwrap();
        let c = PathElement::key(&[("name", &json!("c"))]);
        assert!(set.has(&[f("spec"), f("containers"), c.clone()]));
        assert!(set.has(&[f("spec"), f("containers"), c.clone(), f("image")]));
        assert!(!set.has(&[f("spec"), f("containers")]));
        assert!(set.has(&[
            f("metadata"),
            f("finalizers"),
            PathElement::value(&json!("a/b"))
        ]));
        assert_eq!(set.to_fields_v1(), wire);
        // k: keys are canonicalised: field order in the wire form does not matter.
        let swapped = json!({"k:{\"protocol\":\"TCP\",\"containerPort\":80}": {}});
        let port = PathElement::key(&[("containerPort", &json!(80)), ("protocol", &json!("TCP"))]);
        assert!(Set::from_fields_v1(&swapped).unwrap().has(&[port]));
    }

    #[test]
    fn malformed_fields_v1_is_an_error() {
        assert!(Set::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(Set::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::new();
        a.insert(&[f("spec"), f("a")]);
        a.insert(&[f("spec"), f("b")]);
        let mut b = Set::new();
        b.insert(&[f("spec"), f("b")]);
        b.insert(&[f("spec"), f("c")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("spec"), f("b")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("spec"), f("a")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        let mut spec = Set::new();
        spec.insert(&[f("spec")]);
        assert_eq!(a.difference(&spec), a, "difference is exact-path");
        assert!(a.recursive_difference(&spec).is_empty());
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn display_matches_upstream() {
        let p = vec![
            f("spec"),
            f("containers"),
            PathElement::key(&[("name", &json!("c"))]),
            f("image"),
        ];
        assert_eq!(path_string(&p), ".spec.containers[name=\"c\"].image");
        let p = vec![
            f("spec"),
            f("ports"),
            PathElement::key(&[("protocol", &json!("TCP")), ("containerPort", &json!(80))]),
        ];
        assert_eq!(
            path_string(&p),
            ".spec.ports[containerPort=80,protocol=\"TCP\"]"
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::value(&json!("x"))
            ]),
            ".metadata.finalizers[=\"x\"]"
        );
    }
}
