//! WATCH: a stream of newline-delimited JSON events, from a resourceVersion or
//! from "now" (with the current objects first), with bookmarks, timeouts,
//! selector transitions (an object leaving a selector is DELETED for that
//! watcher) and 410 Gone for revisions older than the retained history.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::json;
use tokio::time::Instant;

use super::read::Filter;
use super::{Query, Target};
use crate::ApiState;
use crate::registry::ResourceType;
use crate::resources::Resources;
use crate::status::{ApiError, ApiResult};
use crate::store::{Event, EventType, Live, Stored};
use crate::watch_quota::WatchPermit;

/// How often an idle watch with bookmarks enabled is told the current revision.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// Watches without `timeoutSeconds` end after this, as upstream's default range.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// The longest `timeoutSeconds` honoured (longer is clamped): a deadline past
/// what `Instant` can hold would overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

struct Stream {
    resources: Resources,
    rt: Arc<ResourceType>,
    version: String,
    filter: Filter,
    initial: VecDeque<Arc<Stored>>,
    initial_end: Option<u64>,
    backlog: VecDeque<Arc<Event>>,
    live: Live,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    error: Option<ApiError>,
    /// `Accept: ...;as=Table` (kubectl get -w): each object as a one-row Table.
    table: bool,
    /// `Accept: ...;as=PartialObjectMetadata`: each object's metadata only,
    /// in this `Accept` (which names the meta.k8s.io version).
    metadata: Option<String>,
    /// Counts this watch against its user's quota until the stream is dropped.
    _permit: WatchPermit,
}

fn line(kind: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

impl Stream {
    fn object(&self, s: &Stored) -> ApiResult<Bytes> {
        if self.table {
            let t = crate::printers::table::table(&self.rt, &[s.value()?], None, &s.rv.to_string());
            return Ok(Bytes::from(serde_json::to_vec(&t).unwrap_or_default()));
        }
        if let Some(accept) = &self.metadata {
            let m = super::read::partial_metadata(accept, &s.value()?);
            return Ok(Bytes::from(serde_json::to_vec(&m).unwrap_or_default()));
        }
        self.resources.render(&self.rt, &self.version, s)
    }

    /// The event's line, or an ERROR line naming what could not be served.
    fn event(&self, kind: EventType, s: &Stored) -> Bytes {
        match self.object(s) {
            Ok(object) => line(kind.as_str(), &object),
            Err(e) => line(
                "ERROR",
                &serde_json::to_vec(&e.status()).unwrap_or_default(),
            ),
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.version), "metadata": meta});
        line("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default())
    }

    /// What this watcher sees of one event, given its selectors.
    fn render(&self, e: &Event) -> Option<Bytes> {
        let now = self.filter.matches(&e.object);
        let before = e.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        match e.kind {
            EventType::Added if now => Some(self.event(EventType::Added, &e.object)),
            EventType::Modified if now && before => {
                Some(self.event(EventType::Modified, &e.object))
            }
            EventType::Modified if now => Some(self.event(EventType::Added, &e.object)),
            // Out of the selector's scope: upstream's watch cache reports the
            // last state that matched (informers key their caches on it),
            // stamped with this event's revision.
            EventType::Modified if before => {
                let prev = e.prev.as_ref()?;
                Some(match prev.restamped(e.rv) {
                    Ok(last) => self.event(EventType::Deleted, &last),
                    Err(err) => line(
                        "ERROR",
                        &serde_json::to_vec(&ApiError::from(err).status()).unwrap_or_default(),
                    ),
                })
            }
            EventType::Deleted if before || now => Some(self.event(EventType::Deleted, &e.object)),
            _ => None,
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        if let Some(e) = self.error.take() {
            return Some(line(
                "ERROR",
                &serde_json::to_vec(&e.status()).unwrap_or_default(),
            ));
        }
        if let Some(s) = self.initial.pop_front() {
            return Some(self.event(EventType::Added, &s));
        }
        if let Some(rv) = self.initial_end.take() {
            return Some(self.bookmark(rv, true));
        }
        while let Some(e) = self.backlog.pop_front() {
            if let Some(b) = self.render(&e) {
                return Some(b);
            }
        }
        loop {
            let wake = if self.bookmarks {
                self.next_bookmark.min(self.deadline)
            } else {
                self.deadline
            };
            tokio::select! {
                e = self.live.recv() => {
                    let e = e?;
                    if let Some(b) = self.render(&e) {
                        return Some(b);
                    }
                }
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= self.deadline {
                        return None;
                    }
                    self.next_bookmark = Instant::now() + BOOKMARK_EVERY;
                    // Only claim a revision once everything up to it was sent.
                    let rv = self.resources.store.published_rv();
                    if self.live.is_empty() {
                        return Some(self.bookmark(rv, false));
                    }
                }
            }
        }
    }
}

pub(crate) async fn watch(
    state: &ApiState,
    t: &Target,
    query: &Query,
    accept: &str,
    user: &str,
) -> ApiResult<Response> {
    let filter = Filter::from_query(&t.rt, query)?;
    let permit = state.watches.acquire(user)?;
    let flag = |k: &str| super::query_bool(query, k) == Some(true);
    let timeout = match query.get("timeoutSeconds").map(String::as_str) {
        None | Some("") => DEFAULT_TIMEOUT,
        Some(s) => Duration::from_secs(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds \"{s}\"")))?,
        )
        .min(MAX_TIMEOUT),
    };
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let send_initial = super::query_bool(query, "sendInitialEvents");
    let prefix = t.rt.prefix(t.namespace.as_deref());
    let store = &state.resources.store;
    let mut initial = VecDeque::new();
    let mut initial_end = None;
    let (from, replay_current) = match rv {
        // Upstream: "" and "0" start with the current state as ADDED events.
        "" | "0" => (0, send_initial != Some(false)),
        rv => {
            let rv: u64 = rv.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resource version \"{rv}\": must be an integer"
                ))
            })?;
            (rv, send_initial == Some(true))
        }
    };
    let sub = if replay_current {
        let snap = store.snapshot();
        for s in snap.range(&prefix, None) {
            if filter.matches(s) {
                initial.push_back(s.clone());
            }
        }
        if send_initial == Some(true) {
            initial_end = Some(snap.rv);
        }
        store.watch_client(&prefix, snap.rv)
    } else {
        store.watch_client(&prefix, from)
    };
    let (backlog, live, error) = match sub {
        Ok(s) => (s.backlog.into(), s.live, None),
        Err(e) => (
            VecDeque::new(),
            Live::ended(),
            Some(ApiError::gone(e.to_string())),
        ),
    };
    let stream = Stream {
        resources: state.resources.clone(),
        rt: t.rt.clone(),
        version: t.version.clone(),
        filter,
        initial,
        initial_end,
        backlog,
        live,
        deadline: Instant::now() + timeout,
        bookmarks: flag("allowWatchBookmarks"),
        next_bookmark: Instant::now() + BOOKMARK_EVERY,
        error,
        table: super::read::wants_table(accept),
        metadata: super::read::wants_metadata(accept).then(|| accept.to_string()),
        _permit: permit,
    };
    let body = futures::stream::unfold(stream, |mut s| async move {
        let b = s.next().await?;
        Some((Ok::<Bytes, std::io::Error>(b), s))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    /// A watch asking for the largest `timeoutSeconds` gets a normal stream
    /// (the deadline overflowed and panicked the handler), and the server
    /// keeps serving.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_huge_watch_timeout_is_clamped() {
        let (_data, _server, client) = crate::test_server().await;
        let req = http::Request::get(
            "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=18446744073709551615",
        )
        .body(Vec::new())
        .unwrap();
        let resp = client.send(req.map(Into::into)).await.expect("a response");
        assert_eq!(resp.status(), 200);
        drop(resp);
        let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        ns.get("default").await.expect("the server still serves");
    }

    /// A watch that is never read, while 20 MiB of large objects are written,
    /// is cut off once its queue passes the byte bound: its stream ends short
    /// of the writes (it queued 8,192 events, 3.5 GB in one case), and a
    /// watcher that reads along on its own connection sees every object.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unread_watch_is_cut_off_past_its_byte_bound() {
        use std::time::Duration;

        use futures::TryStreamExt;
        use http_body_util::BodyExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::{WatchStreamExt, watcher};

        let (_data, server, client) = crate::test_server().await;
        let unread = kube::Client::try_from(server.kube_config().await.unwrap()).unwrap();
        let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true")
            .body(Vec::new())
            .unwrap();
        let resp = unread.send(req.map(Into::into)).await.expect("a response");
        assert_eq!(resp.status(), 200);

        let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        let reader = tokio::spawn({
            let cms = cms.clone();
            async move {
                let mut seen = std::collections::BTreeSet::new();
                let stream = watcher(cms, watcher::Config::default()).default_backoff();
                let mut stream = std::pin::pin!(stream);
                while seen.len() < 40 {
                    if let Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) =
                        stream.try_next().await
                    {
                        seen.insert(o.metadata.name.unwrap());
                    }
                }
            }
        });
        let big = "x".repeat(512 << 10);
        for i in 0..40 {
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("big-{i:02}")},
                "data": {"big": big},
            }))
            .unwrap();
            cms.create(&Default::default(), &cm).await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(120), reader)
            .await
            .expect("the reading watcher saw every object")
            .unwrap();

        // The unread stream ends by itself, short of the 40 objects.
        let body = tokio::time::timeout(
            Duration::from_secs(60),
            resp.into_body()
                .into_data_stream()
                .try_fold(Vec::new(), |mut all, chunk| async move {
                    all.extend_from_slice(&chunk);
                    Ok(all)
                }),
        )
        .await
        .expect("the unread watch was closed")
        .expect("the stream ends cleanly");
        let added = body
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(br#"{"type":"ADDED""#))
            .count();
        assert!(added < 40, "the unread watch got all {added} events");
    }
}
