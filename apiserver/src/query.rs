//! A request's query parameters, read as upstream's API server reads them:
//! shared by the REST handlers, authentication (a watch's token in the query)
//! and the logs proxy, so none of those imports the others. Also upstream's
//! request body limit, which CEL cost estimation (`cel_rules`) reads too.

use std::collections::HashMap;

/// Upstream's request body limit.
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

pub(crate) type Query = HashMap<String, String>;

/// A boolean query parameter as Go's `strconv.ParseBool` reads it (the
/// Python client sends `watch=True`): `Some` only for a value it accepts.
pub(crate) fn query_bool(q: &Query, key: &str) -> Option<bool> {
    match q.get(key)?.as_str() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub(crate) fn parse_query(uri: &axum::http::Uri) -> Query {
    uri.query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default()
}
