//! How an import's answer is written on a tape and read back from it:
//! `{"ok": ..}` / `{"err": ..}` (a JSON-string answer as the value it holds).

use serde::Serialize;
use serde_json::{Value, json};

/// An `{"ok": ...}` / `{"err": ...}` result of a call answering a JSON string.
pub(crate) fn json_string_result<E: Serialize>(r: &Result<String, E>) -> Value {
    match r {
        Ok(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => json!({ "ok": v }),
            Err(_) => json!({ "ok-text": s }),
        },
        Err(e) => json!({ "err": e }),
    }
}

/// The reverse of [`json_string_result`]; `None` when `v` is not one.
pub(crate) fn json_string_answer<E: serde::de::DeserializeOwned>(
    v: Value,
) -> Option<Result<String, E>> {
    let Value::Object(mut m) = v else { return None };
    if let Some(ok) = m.remove("ok") {
        return Some(Ok(ok.to_string()));
    }
    if let Some(Value::String(s)) = m.remove("ok-text") {
        return Some(Ok(s));
    }
    serde_json::from_value(m.remove("err")?).ok().map(Err)
}

/// `{"ok": v}` / `{"err": e}` for any serialisable result.
pub(crate) fn result_json<T: Serialize, E: Serialize>(r: &Result<T, E>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "err": e }),
    }
}

/// The reverse of [`result_json`].
pub(crate) fn result_answer<T: serde::de::DeserializeOwned, E: serde::de::DeserializeOwned>(
    v: Value,
) -> Option<Result<T, E>> {
    let Value::Object(mut m) = v else { return None };
    if let Some(ok) = m.remove("ok") {
        return serde_json::from_value(ok).ok().map(Ok);
    }
    serde_json::from_value(m.remove("err")?).ok().map(Err)
}
