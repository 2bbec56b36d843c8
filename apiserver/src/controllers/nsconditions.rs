//! The conditions a terminating Namespace reports while its content is
//! deleted, as kube-controller-manager's namespace controller writes them:
//! discovery, parsing and deletion succeeded (always, here), and what content
//! and which finalizers remain.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::meta;

/// Objects left in the namespace, per `resource.group`, and per finalizer.
#[derive(Default)]
pub(crate) struct Remaining {
    pub(crate) resources: BTreeMap<String, usize>,
    pub(crate) finalizers: BTreeMap<String, usize>,
}

impl Remaining {
    pub(crate) fn add(&mut self, resource: &str, group: &str, obj: &Value) {
        *self
            .resources
            .entry(format!("{resource}.{group}"))
            .or_default() += 1;
        for f in meta::finalizers(obj) {
            *self.finalizers.entry(f).or_default() += 1;
        }
    }

    fn conditions(&self) -> Vec<(&'static str, bool, &'static str, String)> {
        let list = |m: &BTreeMap<String, usize>, sep: &str| {
            m.iter()
                .map(|(k, n)| format!("{k}{sep}{n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let content = if self.resources.is_empty() {
            (
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".to_string(),
            )
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!(
                    "Some resources are remaining: {}",
                    list(&self.resources, " has ")
                ),
            )
        };
        let finalizers = if self.finalizers.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".to_string(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    list(&self.finalizers, " in ")
                ),
            )
        };
        vec![
            (
                "NamespaceDeletionDiscoveryFailure",
                false,
                "ResourcesDiscovered",
                "All resources successfully discovered".into(),
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                false,
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed".into(),
            ),
            (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            ),
            content,
            finalizers,
        ]
    }

    /// `ns` with these conditions in its status, or `None` if it has them
    /// already (a transition time changes only with the status).
    pub(crate) fn apply(&self, ns: &Value) -> Option<Value> {
        let old: Vec<Value> = ns
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let now = meta::now_rfc3339();
        let conds: Vec<Value> = self
            .conditions()
            .into_iter()
            .map(|(ty, status, reason, message)| {
                let status = if status { "True" } else { "False" };
                let prev = old.iter().find(|c| c["type"] == ty);
                let since = prev
                    .filter(|c| c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({"type": ty, "status": status, "lastTransitionTime": since,
                       "reason": reason, "message": message})
            })
            .collect();
        if conds == old {
            return None;
        }
        let mut new = ns.clone();
        new["status"]["conditions"] = Value::Array(conds);
        Some(new)
    }
}
