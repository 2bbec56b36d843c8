//! Label and field selectors as the fake store evaluates them on `list`.

use serde_json::Value;

/// Whether `labels` satisfies `selector` (equality- and existence-based terms).
pub fn labels_match(selector: &str, labels: &serde_json::Map<String, Value>) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            let get = |k: &str| labels.get(k.trim()).and_then(Value::as_str);
            if let Some((k, v)) = term.split_once("!=") {
                get(k) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                get(k).is_none()
            } else {
                get(term).is_some()
            }
        })
}

pub(super) fn fields_match(selector: &str, obj: &Value) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            let (path, want, equal) = match term.split_once("!=") {
                Some((p, v)) => (p, v, false),
                None => match term.split_once("==").or_else(|| term.split_once('=')) {
                    Some((p, v)) => (p, v, true),
                    None => return false,
                },
            };
            let pointer = format!("/{}", path.trim().replace('.', "/"));
            let have = obj.pointer(&pointer).and_then(Value::as_str).unwrap_or("");
            (have == want.trim()) == equal
        })
}
