//! Label and field selectors.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

use crate::generate;

pub fn selectors(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(sel) = LabelSelector::parse(&text) {
        let printed = sel.to_string();
        let again = LabelSelector::parse(&printed).unwrap_or_else(|e| {
            panic!("label selector {text:?} printed as {printed:?}, which fails to parse: {e}")
        });
        assert_eq!(
            again.to_string(),
            printed,
            "label selector {text:?}: print is not stable"
        );
        // Values print sorted, so compare what the selectors select.
        for pairs in [
            &[("a", "b"), ("x/y", "1")][..],
            &[("a", "c"), ("b", "2")],
            &[],
        ] {
            let labels: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(
                sel.matches(&labels),
                again.matches(&labels),
                "label selector {text:?} and its print {printed:?} select differently"
            );
        }
    }
    if let Ok(sel) = FieldSelector::parse(&text) {
        let printed = sel.to_string();
        let again = FieldSelector::parse(&printed).unwrap_or_else(|e| {
            panic!("field selector {text:?} printed as {printed:?}, which fails to parse: {e}")
        });
        assert_eq!(
            again.to_string(),
            printed,
            "field selector {text:?}: print is not stable"
        );
        assert_eq!(
            again.requirements(),
            sel.requirements(),
            "field selector {text:?}: reparse differs"
        );
        let get = |f: &str| (f == "metadata.name").then(|| "a".to_string());
        assert_eq!(sel.matches(get), again.matches(get));
    }
    // A LabelSelector object (matchLabels / matchExpressions).
    let mut u = Unstructured::new(data);
    if let Ok(v) = generate::value(&mut u, 4) {
        let _ = LabelSelector::from_label_selector(&v);
    }
}
