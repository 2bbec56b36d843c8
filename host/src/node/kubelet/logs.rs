//! `GET /containerLogs/{namespace}/{pod}/{container}`: a container's log as
//! the kubelet serves it (`follow`, `tailLines`, `sinceSeconds`, `sinceTime`,
//! `timestamps`, `previous`, `limitBytes`), read from the CRI-format files the
//! workload manager writes. The numeric options are checked as upstream's
//! (see [`wasmlet_apimachinery::log_options`]): 400 when not a number, 422 when refused.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::super::workloads::logs::parse_cri_line;
use super::{Kubelet, status};
use wasmlet_apimachinery::log_options::LogOptions;

#[derive(Default)]
pub(super) struct LogQuery {
    follow: Option<bool>,
    timestamps: Option<bool>,
    previous: Option<bool>,
    opts: LogOptions,
}

impl LogQuery {
    /// The query, checked as upstream's kubelet checks it: a value that is
    /// not a number is 400, one `ValidatePodLogOptions` refuses 422.
    fn parse(raw: &HashMap<String, String>) -> Result<LogQuery, (StatusCode, String)> {
        let opts = LogOptions::parse(raw).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
        let invalid = opts.validate();
        if !invalid.is_empty() {
            let why: Vec<String> = invalid.iter().map(|i| i.text()).collect();
            return Err((
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("Invalid request: {}", why.join(", ")),
            ));
        }
        // Go's strconv.ParseBool, which the kubelet's query decoding uses.
        let flag = |k: &str| {
            raw.get(k)
                .map(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"))
        };
        Ok(LogQuery {
            follow: flag("follow"),
            timestamps: flag("timestamps"),
            previous: flag("previous"),
            opts,
        })
    }
}

/// Renders log lines: `sinceSeconds`/`sinceTime`, `tailLines`,
/// `timestamps`, `limitBytes`; partial lines (`P`) are joined to the next.
fn render(raw: &[u8], q: &LogQuery) -> Vec<u8> {
    let since = q.opts.since(chrono::Utc::now());
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut pending: Option<(String, Vec<u8>)> = None;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        let Some(l) = parse_cri_line(line) else {
            continue;
        };
        if let Some(cut) = since
            && chrono::DateTime::parse_from_rfc3339(l.timestamp).is_ok_and(|t| t < cut)
        {
            continue;
        }
        let (ts, mut text) = pending
            .take()
            .unwrap_or_else(|| (l.timestamp.to_string(), Vec::new()));
        text.extend_from_slice(l.text);
        if l.partial {
            pending = Some((ts, text));
            continue;
        }
        let mut out = Vec::new();
        if q.timestamps == Some(true) {
            out.extend_from_slice(ts.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&text);
        out.push(b'\n');
        lines.push(out);
    }
    if let Some(n) = q.opts.tail()
        && n < lines.len()
    {
        lines.drain(..lines.len() - n);
    }
    let mut out: Vec<u8> = lines.concat();
    if let Some(limit) = q.opts.limit() {
        out.truncate(limit);
    }
    out
}

fn read_all(files: &[PathBuf]) -> Vec<u8> {
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect()
}

pub(super) async fn container_logs(
    State(k): State<Kubelet>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(raw): Query<HashMap<String, String>>,
) -> Response {
    let q = match LogQuery::parse(&raw) {
        Ok(q) => q,
        Err((code, why)) => return status(code, why),
    };
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), &namespace);
    let p = match pods.get_opt(&pod).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return status(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod} not found"),
            );
        }
        Err(e) => return status(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(k.node.as_str()) {
        return status(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} does not run on node {}", k.node),
        );
    }
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let attempts = k.workloads.log_attempts(&uid, &container);
    let attempt = if q.previous == Some(true) {
        attempts.iter().rev().nth(1)
    } else {
        attempts.last()
    };
    let Some(&attempt) = attempt else {
        let what = if q.previous == Some(true) {
            "previous terminated container"
        } else {
            "container"
        };
        return status(
            StatusCode::BAD_REQUEST,
            format!("{what} \"{container}\" in pod \"{pod}\" not found (it has not started yet)"),
        );
    };
    let files = k.workloads.log_files(&uid, &container, attempt);
    let first = render(&read_all(&files), &q);
    if q.follow != Some(true) || q.previous == Some(true) {
        return ([(header::CONTENT_TYPE, "text/plain")], first).into_response();
    }
    // follow: stream what is appended to the attempt's file until the
    // container stops (or a newer attempt starts) and nothing more arrives.
    let current = files.last().cloned().unwrap_or_else(|| {
        k.workloads
            .log_path(&namespace, &pod, &uid, &container, attempt)
    });
    let mut offset = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
    let follow_q = LogQuery {
        timestamps: q.timestamps,
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let _ = tx.try_send(Ok(Bytes::from(first)));
    tokio::spawn(async move {
        let mut idle = 0u32;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let len = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
            if len > offset {
                let data = std::fs::read(&current).unwrap_or_default();
                let start = (offset as usize).min(data.len());
                // Only whole lines; the rest waits for the next round.
                let end = data[start..]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map(|i| start + i + 1)
                    .unwrap_or(start);
                if end > start {
                    if tx
                        .send(Ok(Bytes::from(render(&data[start..end], &follow_q))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    offset = end as u64;
                }
                idle = 0;
                continue;
            }
            idle += 1;
            // Every 2 s of silence, check whether the container is still running.
            if idle.is_multiple_of(10) {
                let running = k.workloads.log_attempts(&uid, &container).last() == Some(&attempt)
                    && pods
                        .get_opt(&pod)
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|p| container_running(&p, &container));
                if !running {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    (
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn container_running(p: &Pod, container: &str) -> bool {
    let s = p.status.as_ref();
    let all = s
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(
            s.and_then(|s| s.init_container_statuses.clone())
                .unwrap_or_default(),
        );
    for cs in all {
        if cs.name == container {
            return cs.state.and_then(|st| st.running).is_some();
        }
    }
    // Not reported yet: assume it is starting.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-01-01T00:00:00.000000001Z stdout F one\n\
2026-01-01T00:00:01.000000000Z stderr P tw\n\
2026-01-01T00:00:01.000000001Z stderr F o\n\
2026-01-01T00:00:02.000000000Z stdout F three\n";

    #[test]
    fn renders_like_kubelet() {
        assert_eq!(render(LOG, &LogQuery::default()), b"one\ntwo\nthree\n");
        let opts = |o: LogOptions| LogQuery {
            opts: o,
            ..Default::default()
        };
        let q = opts(LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        });
        assert_eq!(render(LOG, &q), b"two\nthree\n");
        let q = LogQuery {
            timestamps: Some(true),
            opts: LogOptions {
                tail_lines: Some(1),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(render(LOG, &q), b"2026-01-01T00:00:02.000000000Z three\n");
        let q = opts(LogOptions {
            limit_bytes: Some(5),
            ..Default::default()
        });
        assert_eq!(render(LOG, &q), b"one\nt");
        // Everything is older than 10 s.
        let q = opts(LogOptions {
            since_seconds: Some(10),
            ..Default::default()
        });
        assert_eq!(render(LOG, &q), b"");
        // As far back as an i64 reaches: everything, no panic.
        let q = opts(LogOptions {
            since_seconds: Some(i64::MAX),
            tail_lines: Some(i64::MAX),
            limit_bytes: Some(i64::MAX),
            ..Default::default()
        });
        assert_eq!(render(LOG, &q), b"one\ntwo\nthree\n");
        let q = opts(LogOptions {
            since_time: Some("2026-01-01T00:00:01Z".parse().unwrap()),
            ..Default::default()
        });
        assert_eq!(render(LOG, &q), b"two\nthree\n");
    }

    #[test]
    fn refused_options_are_400_or_422_not_a_panic() {
        let raw = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let code = |pairs| LogQuery::parse(&raw(pairs)).err().map(|r| r.0);
        assert_eq!(
            code(&[("sinceSeconds", "0")]),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            code(&[("tailLines", "-5")]),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            code(&[("sinceSeconds", "99999999999999999999")]),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(code(&[("sinceSeconds", "9223372036854775807")]), None);
    }
}
