//! Server-side apply and field ownership (`metadata.managedFields`), after
//! upstream `sigs.k8s.io/structured-merge-diff` (`merge.Updater`) and
//! `k8s.io/apimachinery/pkg/util/managedfields`.
//!
//! * [`apply`] serves `PATCH` with `application/apply-patch+yaml`: it merges the
//!   applied configuration into the live object, prunes what this manager applied
//!   before and no longer applies (unless someone else owns it), and fails with
//!   [`Conflicts`] when the configuration changes a field another manager owns,
//!   unless [`Writer::force`].
//!   An apply that changes no value still records the manager's entry
//!   (keeping its old time, upstream's no-op apply). For the manager `kubectl`,
//!   conflicts on fields its client-side apply set and that still hold that
//!   value are no conflicts, and the last-applied annotation follows the
//!   applied configuration (upstream's upgrade from client-side apply).
//! * [`update`] serves create, update and the other patch types: the manager takes
//!   every field whose value it added or changed, away from everyone else.
//!   Past 10 `Update` entries the oldest merge into `ancient-changes`, as upstream.
//!
//! ```
//! use serde_json::json;
//! use wasmlet_apimachinery::builtin::BuiltinListTypes;
//! use wasmlet_apimachinery::managedfields::{self, ApplyError, Writer};
//!
//! let lists = BuiltinListTypes::for_apply("apps", "StatefulSet");
//! let cfg = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
//!                  "metadata": {"name": "db"}, "spec": {"replicas": 3}});
//! let now = "2025-01-01T00:00:00Z";
//! let alice = Writer::new("alice", "apps/v1", &lists, now);
//! let live = managedfields::apply(None, &cfg, &alice).unwrap();
//! assert_eq!(live["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
//!
//! let other = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
//!                    "metadata": {"name": "db"}, "spec": {"replicas": 5}});
//! let bob = Writer::new("bob", "apps/v1", &lists, now);
//! let Err(ApplyError::Conflicts(c)) = managedfields::apply(Some(&live), &other, &bob) else { panic!() };
//! assert_eq!(c.to_string(), "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
//! ```
//!
//! Use [`crate::builtin::BuiltinListTypes::for_apply`] (list-map keys, not patch
//! merge keys) for built-in kinds and the CRD schema's list types for custom
//! resources.
//!
//! # Deviations from upstream
//!
//! * **No schema beyond list types.** Every JSON object is treated as a struct:
//!   `+mapType=atomic`/`+structType=atomic` objects (e.g. a label selector) are
//!   owned field by field instead of as one leaf, and the pruning step's
//!   "named fields are members" rule applies to every field, not only to fields a
//!   schema names. Nothing is validated or defaulted against a schema here.
//! * **No version conversion.** Field sets are recorded in the request's
//!   `apiVersion` and compared as they are, whatever version they were recorded
//!   in. Exact for CRDs with `conversion: None` and for single-version built-ins.
//! * **Keyed lists that cannot be keyed** in a stored object (an element without
//!   any key field, duplicate keys) are treated as atomic rather than tracked per
//!   element; in the applied configuration they are an [`ApplyError::Invalid`],
//!   as upstream. Duplicates upstream tolerates in live objects are not tracked.
//! * **Nulls.** A `null` in the applied configuration deletes the field from the
//!   result (upstream stores null, which typed decoding then drops) and is owned.
//! * Entries of the live object's `managedFields` that do not decode are
//!   dropped instead of failing the request.
//! * Pruning never removes `apiVersion`, `kind` or `metadata` as a whole.
//! * Conflicts are listed in manager-identifier order, then path order (upstream:
//!   map order, so unspecified).
//!
//! Subresources (`/status`, `/scale`) and reset fields are supported through
//! [`Scope`] ([`Writer::scoped`]): the entry records the
//! subresource, and ignored paths are neither owned nor compared.

mod cap;
mod conflict;
mod entry;
pub mod fieldpath;
mod last_applied;
mod walk;

use crate::listtype::ListTypes;
use fieldpath::{PathElement, Set, path_string};
use serde_json::{Map, Value};
use walk::{Comparison, Walker};

pub use conflict::{Conflict, Conflicts};
use entry::{Entry, decode, decode_sent, set_managed_fields, without_managed_fields};
pub use last_applied::ANNOTATION as LAST_APPLIED_ANNOTATION;

/// What a write is for, beyond the manager: the subresource and the fields the
/// request may not own (upstream's reset fields, e.g. `status` when writing the
/// main resource of a kind with a status subresource, or `spec` via `/status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// `"status"`, `"scale"`, ...; recorded as the entry's `subresource`.
    pub subresource: Option<String>,
    /// Paths of field names from the root, e.g. `vec![vec!["status".into()]]`.
    pub ignored: Vec<Vec<String>>,
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409 Conflict, reason
    /// `Conflict`, one `FieldManagerConflict` cause per entry of
    /// [`Conflicts::causes`].
    #[error(transparent)]
    Conflicts(#[from] Conflicts),
    /// The configuration (or the live object) cannot be applied: 422/400.
    #[error("invalid apply configuration: {0}")]
    Invalid(String),
    /// The configuration sets `metadata.managedFields`, which only the server
    /// writes on an apply: upstream's 400 Bad Request.
    #[error("metadata.managedFields must be nil")]
    ManagedFields,
}

/// Owner of the fields an untracked object had when it was first applied to.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Fields no manager ever owns (upstream `stripMetaManager`).
fn stripped() -> Set {
    let mut s = Set::new();
    let f = PathElement::field;
    s.insert(&[f("apiVersion")]);
    s.insert(&[f("kind")]);
    s.insert(&[f("metadata")]);
    for m in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[f("metadata"), f(m)]);
    }
    s
}

fn ignored_set(scope: &Scope) -> Set {
    let mut s = Set::new();
    for p in &scope.ignored {
        let path: Vec<PathElement> = p.iter().map(|n| PathElement::field(n)).collect();
        s.insert(&path);
    }
    s
}

fn exclude(c: Comparison, ignored: &Set) -> Comparison {
    Comparison {
        added: c.added.recursive_difference(ignored),
        modified: c.modified.recursive_difference(ignored),
        removed: c.removed.recursive_difference(ignored),
    }
}

/// Who writes and how: the field manager, the API version it writes at, how
/// lists merge, the time stamped on its entry and the part of the object the
/// request may own.
///
/// ```
/// use wasmlet_apimachinery::listtype::AllAtomic;
/// use wasmlet_apimachinery::managedfields::{self, Writer};
/// let w = Writer::new("kubectl", "v1", &AllAtomic, "2025-03-01T10:00:00Z");
/// let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "a"}, "data": {"k": "v"}});
/// let stored = managedfields::apply(None, &cm, &w).unwrap();
/// assert_eq!(stored["metadata"]["managedFields"][0]["manager"], "kubectl");
/// ```
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    /// The field manager recorded on the entry (`?fieldManager=`, or the client's default).
    pub manager: &'a str,
    /// The API version the request used (recorded on the entry).
    pub api_version: &'a str,
    /// How each list merges, so that list elements are owned by key rather than by index.
    pub lists: &'a dyn ListTypes,
    /// RFC 3339 time stamped on this manager's entry.
    pub now: &'a str,
    /// The subresource and the fields the request may not own.
    pub scope: &'a Scope,
    /// Apply only: take fields other managers own instead of reporting a
    /// conflict (`?force=true`).
    pub force: bool,
}

static NO_SCOPE: Scope = Scope {
    subresource: None,
    ignored: Vec::new(),
};

impl<'a> Writer<'a> {
    /// A writer of the main resource, without force.
    pub fn new(
        manager: &'a str,
        api_version: &'a str,
        lists: &'a dyn ListTypes,
        now: &'a str,
    ) -> Writer<'a> {
        Writer {
            manager,
            api_version,
            lists,
            now,
            scope: &NO_SCOPE,
            force: false,
        }
    }

    /// The same writer limited to `scope` (a subresource, fields it may not own).
    pub fn scoped(self, scope: &'a Scope) -> Writer<'a> {
        Writer { scope, ..self }
    }

    /// The same writer, taking conflicting fields when `force` is set (`?force=true`).
    pub fn forced(self, force: bool) -> Writer<'a> {
        Writer { force, ..self }
    }
}

/// Server-side apply of `applied` by `by.manager` onto `live` (`None`: create).
/// Returns the object to store, with `metadata.managedFields` updated.
pub fn apply(live: Option<&Value>, applied: &Value, by: &Writer) -> Result<Value, ApplyError> {
    let Writer {
        manager,
        api_version,
        lists,
        now,
        scope,
        force,
    } = *by;
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the configuration must be a JSON object".into(),
        ));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::ManagedFields);
    }
    let live_obj = match live {
        None => Value::Object(Map::new()),
        Some(v) if v.is_object() => v.clone(),
        Some(_) => {
            return Err(ApplyError::Invalid(
                "the live object is not a JSON object".into(),
            ));
        }
    };
    let mut managers = decode(&live_obj);
    let live_obj = without_managed_fields(live_obj);
    let config = without_managed_fields(applied.clone());
    let w = Walker { lists };
    w.check_strict(&config).map_err(ApplyError::Invalid)?;
    let ignored = ignored_set(scope);
    if managers.is_empty() && live.is_some() {
        // Upstream skipNonAppliedManager: fields that predate any tracking belong
        // to "before-first-apply", so applying over them is a conflict.
        let empty = Value::Object(Map::new());
        let cmp = exclude(w.compare(&empty, &live_obj), &ignored);
        managers.push(Entry {
            manager: BEFORE_FIRST_APPLY.into(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            subresource: String::new(),
            time: Some(now.to_string()),
            set: cmp.modified.union(&cmp.added).difference(&stripped()),
        });
    }

    let allowed = (manager == last_applied::KUBECTL && !force)
        .then(|| last_applied::allowed_conflicts(&w, &live_obj, api_version))
        .flatten();
    let me = Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        subresource: scope.subresource.clone().unwrap_or_default(),
        time: Some(now.to_string()),
        set: w.to_field_set(&config).recursive_difference(&ignored),
    };
    let my_id = me.id();
    let previous = managers.iter().find(|e| e.id() == my_id).cloned();
    managers.retain(|e| e.id() != my_id);
    managers.push(me);

    let merged = w.merge(&live_obj, &config);
    let mut merged = prune(
        &w,
        merged,
        &managers,
        previous.as_ref().map(|e| e.set.clone()),
    );

    let cmp = exclude(w.compare(&live_obj, &merged), &ignored);
    let changed = cmp.modified.union(&cmp.added);
    let conflicts = conflicts(&managers, &my_id, &changed, allowed.as_ref());
    if !force && !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(Conflicts(conflicts)));
    }
    // Upstream's no-op apply: the object as it was, the entry recorded but
    // its time left as it was (none for a new entry).
    let same = live.is_some() && merged == live_obj;
    let strip = stripped();
    for e in managers.iter_mut() {
        if e.id() == my_id {
            e.set = e.set.difference(&strip);
            if same {
                e.time = previous.as_ref().and_then(|p| p.time.clone());
            }
        } else {
            e.set = e.set.difference(&changed).difference(&cmp.removed);
        }
    }
    if manager == last_applied::KUBECTL {
        last_applied::refresh(&mut merged, &config);
    }
    set_managed_fields(&mut merged, managers);
    Ok(merged)
}

/// The fields of other managers that `changed` changes, less those `allowed`
/// (kubectl's own client-side apply: see [`last_applied`]).
fn conflicts(
    managers: &[Entry],
    my_id: &str,
    changed: &Set,
    allowed: Option<&Set>,
) -> Vec<Conflict> {
    let mut others: Vec<&Entry> = managers.iter().filter(|e| e.id() != my_id).collect();
    others.sort_by_key(|e| e.id());
    others
        .iter()
        .flat_map(|e| {
            e.set
                .intersection(changed)
                .paths()
                .into_iter()
                .filter(|p| !allowed.is_some_and(|a| a.has(p)))
                .map(|p| Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation.clone(),
                    api_version: e.api_version.clone(),
                    subresource: Some(e.subresource.clone()).filter(|s| !s.is_empty()),
                    field: path_string(&p),
                })
        })
        .collect()
}

/// Upstream `Updater.prune`: removes from `merged` what this manager applied
/// last time (`last`), no longer applies, and nobody else owns.
fn prune(w: &Walker, merged: Value, managers: &[Entry], last: Option<Set>) -> Value {
    let Some(last) = last.filter(|s| !s.is_empty()) else {
        return merged;
    };
    let last = last.with_named_fields_as_members();
    let pruned = w.remove_items(&merged, &last);
    // addBackOwnedItems: put back whatever someone (this apply included) owns.
    let managed = managers
        .iter()
        .fold(Set::new(), |acc, e| acc.union(&e.set))
        .with_named_fields_as_members();
    let merged_set = w.to_field_set(&merged).with_named_fields_as_members();
    let pruned_set = w.to_field_set(&pruned).with_named_fields_as_members();
    let pruned = w.remove_items(&merged, &merged_set.difference(&pruned_set.union(&managed)));
    // addBackDanglingItems: only remove what this manager owned last time.
    let pruned_set = w.to_field_set(&pruned).with_named_fields_as_members();
    let mut gone = merged_set.difference(&pruned_set).intersection(&last);
    let mut skeleton = Set::new();
    for f in ["apiVersion", "kind", "metadata"] {
        skeleton.insert(&[PathElement::field(f)]);
    }
    gone = gone.difference(&skeleton);
    w.remove_items(&merged, &gone)
}

/// Field ownership for a create (`old: None`), update or non-apply patch by
/// `w.manager`: returns `new` with `metadata.managedFields` updated.
///
/// As upstream, on the main resource a client may replace `managedFields`: the
/// ones in `new` are used when present and decodable, and `[]` (or `[{}]`) resets
/// them; otherwise those of `old` are kept. Writes to a subresource always keep
/// `old`'s.
pub fn update(old: Option<&Value>, new: &Value, by: &Writer) -> Value {
    let Writer {
        manager,
        api_version,
        lists,
        now,
        scope,
        force: _,
    } = *by;
    if !new.is_object() {
        return new.clone();
    }
    let old_obj = old
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut managers = match new.pointer("/metadata/managedFields") {
        _ if scope.subresource.is_some() => decode(&old_obj),
        Some(Value::Array(a))
            if a.is_empty() || (a.len() == 1 && a[0] == Value::Object(Map::new())) =>
        {
            Vec::new()
        }
        Some(Value::Array(_)) => decode_sent(new).unwrap_or_else(|| decode(&old_obj)),
        _ => decode(&old_obj),
    };
    let untracked = managers.is_empty()
        && old_obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .is_some_and(|u| !u.is_empty());
    let old_obj = without_managed_fields(old_obj);
    let mut out = without_managed_fields(new.clone());
    if untracked {
        // Upstream skipNonAppliedManager: an existing object without managed
        // fields is not tracked again until someone applies to it.
        return out;
    }
    let w = Walker { lists };
    let cmp = exclude(w.compare(&old_obj, &out), &ignored_set(scope));
    let changed = cmp.modified.union(&cmp.added);
    for e in managers.iter_mut() {
        e.set = e.set.difference(&changed).difference(&cmp.removed);
    }
    let mine = changed.difference(&stripped());
    if !mine.is_empty() {
        let me = Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            subresource: scope.subresource.clone().unwrap_or_default(),
            time: Some(now.to_string()),
            set: mine,
        };
        match managers.iter_mut().find(|e| e.id() == me.id()) {
            Some(e) => {
                e.set = e.set.union(&me.set);
                e.time = me.time;
            }
            None => managers.push(me),
        }
    }
    managers.retain(|e| !e.set.is_empty());
    cap::cap_updaters(&mut managers, cap::MAX_UPDATERS);
    set_managed_fields(&mut out, managers);
    out
}

#[cfg(test)]
mod tests;
