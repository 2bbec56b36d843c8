//! Health endpoints in kube-apiserver's per-check format, shared by the
//! embedded API server ([`crate::health`]) and the host's own address
//! (the host crate's `endpoints` and `health::host`): `ok`, or with `?verbose` one
//! `[+]NAME ok` line per check and `NAME check passed`; a failing check makes
//! the answer 500 with every line and the reason withheld (the endpoints are
//! unauthenticated: the log has the reason); `?exclude=NAME` skips a check;
//! `/ENDPOINT/NAME` asks one check and names its reason.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

fn text(code: StatusCode, body: String) -> Response {
    (code, [("content-type", "text/plain; charset=utf-8")], body).into_response()
}

/// `/ENDPOINT?QUERY`: runs the checks `names` (through `check`) not excluded.
pub fn all(
    endpoint: &str,
    query: &str,
    names: &[&str],
    check: impl Fn(&str) -> Result<(), String>,
) -> Response {
    let mut verbose = false;
    let mut exclude: Vec<String> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "verbose" => verbose = true,
            "exclude" => exclude.push(v.into_owned()),
            _ => {}
        }
    }
    let mut out = String::new();
    let mut failed = false;
    for name in names {
        if let Some(i) = exclude.iter().position(|e| e == name) {
            exclude.remove(i);
            out.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match check(name) {
            Ok(()) => out.push_str(&format!("[+]{name} ok\n")),
            Err(why) => {
                tracing::warn!(check = name, reason = %why, "{endpoint} check failed");
                failed = true;
                out.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if !exclude.is_empty() {
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            exclude
                .iter()
                .map(|e| format!("\"{e}\""))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if failed {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{out}{endpoint} check failed\n"),
        );
    }
    if verbose {
        text(StatusCode::OK, format!("{out}{endpoint} check passed\n"))
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

/// `/ENDPOINT/NAME`: one check, 404 when the endpoint has no such check.
pub fn one(names: &[&str], name: &str, check: impl Fn(&str) -> Result<(), String>) -> Response {
    if !names.contains(&name) {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    }
    match check(name) {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(why) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {why}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(r: Response) -> (u16, String) {
        let code = r.status().as_u16();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn checks(name: &str) -> Result<(), String> {
        match name {
            "bad" => Err("broken".into()),
            _ => Ok(()),
        }
    }

    #[tokio::test]
    async fn verbose_lists_each_check_and_a_failure_is_500_with_the_reason_withheld() {
        let (code, text) = body(all("readyz", "verbose", &["ping", "good"], checks)).await;
        assert_eq!(code, 200);
        assert_eq!(text, "[+]ping ok\n[+]good ok\nreadyz check passed\n");
        let (code, text) = body(all("readyz", "", &["ping", "bad"], checks)).await;
        assert_eq!(code, 500);
        assert_eq!(
            text,
            "[+]ping ok\n[-]bad failed: reason withheld\nreadyz check failed\n"
        );
        let (code, text) = body(all("readyz", "exclude=bad&exclude=nope", &["bad"], checks)).await;
        assert_eq!(code, 200, "{text}");
        let (code, text) = body(one(&["bad"], "bad", checks)).await;
        assert_eq!(
            (code, text.as_str()),
            (500, "internal server error: broken\n")
        );
        assert_eq!(body(one(&["bad"], "other", checks)).await.0, 404);
    }
}
