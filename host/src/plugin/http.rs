//! The host side of the `http` import: one shared outbound HTTP(S) client per
//! host process (hyper-util's pooled client over rustls with the ring provider
//! and the platform's root certificates).
//!
//! The contract (wit/http.wit) is deliberately small: one buffered request, one
//! buffered response. What the host enforces here, after the manifest's
//! `http-hosts` check in `imports.rs`:
//!
//! - only absolute `http://` / `https://` URLs with a host and no userinfo;
//! - a valid method (not `CONNECT`) and valid header names and values; the
//!   guest may not set `host` or the message framing (`content-length`,
//!   `transfer-encoding`, `connection`, ...): the host derives those from the
//!   URL and the buffered body, so a request goes where the allow-list said;
//! - one timeout over connect, request and the whole response body: the
//!   request's `timeout-ms` (default [`DEFAULT_TIMEOUT`]), never past what is
//!   left of the call's deadline;
//! - a response body of at most [`MAX_RESPONSE_BODY`] bytes (`too-large`);
//! - no redirects: a 3xx comes back as a response like any other status;
//! - no proxies from the environment: the allow-list names where requests go;
//! - names resolve to public addresses only, unless the manifest says
//!   `http-private-addresses = true` (see [`super::http_dns`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::bindings::reconciler::wasmlet::plugin::http::{HttpError, Request, Response};
use super::http_dns::CheckedResolver;

/// The timeout when the request names none (still capped by the call deadline).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response body handed to a guest.
pub(crate) const MAX_RESPONSE_BODY: usize = 4 << 20;

/// Headers the host sets itself: the target (`host`) and the framing of a
/// buffered message. A guest-supplied one could desynchronise or redirect the request.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// The outbound client, shared by every plugin's calls (connection pool included).
pub(crate) struct HttpClient {
    /// Names resolve to global addresses only.
    client: Client<HttpsConnector<HttpConnector<CheckedResolver>>, Full<Bytes>>,
    /// For manifests with `http-private-addresses = true`.
    private: Client<HttpsConnector<HttpConnector<CheckedResolver>>, Full<Bytes>>,
    pub(crate) default_timeout: Duration,
    pub(crate) max_body: usize,
}

impl HttpClient {
    /// The process's client, built on first use (loading the platform's roots once).
    pub(crate) fn shared() -> Arc<HttpClient> {
        static SHARED: OnceLock<Arc<HttpClient>> = OnceLock::new();
        SHARED.get_or_init(|| Arc::new(HttpClient::new())).clone()
    }

    /// A new client with its own pool. Without platform root certificates
    /// `https://` still works as a scheme, but every certificate is refused
    /// (a `connection` error naming the TLS failure).
    pub(crate) fn new() -> HttpClient {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = || {
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
        };
        let tls = match builder().with_native_roots() {
            Ok(b) => b.with_no_client_auth(),
            Err(e) => {
                tracing::warn!(error = %e, "no platform root certificates: plugins' https requests will fail certificate checks");
                builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }
        };
        let build = |allow_private| {
            let mut http = HttpConnector::new_with_resolver(CheckedResolver { allow_private });
            http.enforce_http(false);
            http.set_nodelay(true);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http);
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(8)
                .build(https)
        };
        HttpClient {
            client: build(false),
            private: build(true),
            default_timeout: DEFAULT_TIMEOUT,
            max_body: MAX_RESPONSE_BODY,
        }
    }

    /// Sends `req` to `url` (already parsed with [`parse_url`] and allowed by
    /// the manifest), waiting at most `budget` beyond the request's own timeout.
    /// With `allow_private`, names may resolve to non-global addresses.
    pub(crate) async fn fetch(
        &self,
        req: Request,
        url: &url::Url,
        budget: Duration,
        allow_private: bool,
    ) -> Result<Response, HttpError> {
        let timeout = req
            .timeout_ms
            .map_or(self.default_timeout, |ms| Duration::from_millis(ms.into()))
            .min(budget);
        let request = build_request(req, url)?;
        let client = if allow_private {
            &self.private
        } else {
            &self.client
        };
        match tokio::time::timeout(timeout, Self::send(client, self.max_body, request)).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::Timeout),
        }
    }

    async fn send(
        client: &Client<HttpsConnector<HttpConnector<CheckedResolver>>, Full<Bytes>>,
        max_body: usize,
        request: http::Request<Full<Bytes>>,
    ) -> Result<Response, HttpError> {
        let resp = client.request(request).await.map_err(|e| {
            if e.is_connect() {
                HttpError::Connection(chain(&e))
            } else {
                HttpError::Other(chain(&e))
            }
        })?;
        let (parts, body) = resp.into_parts();
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body as u64) {
            return Err(HttpError::TooLarge);
        }
        let body = match Limited::new(body, max_body).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => return Err(HttpError::TooLarge),
            Err(e) => {
                return Err(HttpError::Connection(format!(
                    "reading the response body: {}",
                    chain(&*e)
                )));
            }
        };
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        Ok(Response {
            status: parts.status.as_u16(),
            headers,
            body: body.to_vec(),
        })
    }
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient::new()
    }
}

/// Parses an absolute `http(s)://` URL with a host and no userinfo.
pub(crate) fn parse_url(s: &str) -> Result<url::Url, HttpError> {
    let invalid = |m: &str| HttpError::InvalidRequest(format!("{s}: {m}"));
    let url = url::Url::parse(s).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("only http:// and https:// URLs are allowed"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(HttpError::InvalidRequest(
            "URLs with credentials (user:password@) are not allowed; send an authorization header"
                .into(),
        ));
    }
    Ok(url)
}

fn build_request(req: Request, url: &url::Url) -> Result<http::Request<Full<Bytes>>, HttpError> {
    let method = http::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| HttpError::InvalidRequest(format!("invalid method {:?}", req.method)))?;
    if method == http::Method::CONNECT {
        return Err(HttpError::InvalidRequest("CONNECT is not allowed".into()));
    }
    // The fragment never goes on the wire.
    let mut target = url.clone();
    target.set_fragment(None);
    let uri: http::Uri = target
        .as_str()
        .parse()
        .map_err(|e| HttpError::InvalidRequest(format!("{}: {e}", req.url)))?;
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in &req.headers {
        let n = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("invalid header name {name:?}")))?;
        if RESERVED_HEADERS.contains(&n.as_str()) {
            return Err(HttpError::InvalidRequest(format!(
                "header {name:?} is set by the host"
            )));
        }
        let v = http::HeaderValue::from_str(value)
            .map_err(|_| HttpError::InvalidRequest(format!("invalid value for header {name:?}")))?;
        builder = builder.header(n, v);
    }
    builder
        .body(Full::new(Bytes::from(req.body)))
        .map_err(|e| HttpError::InvalidRequest(e.to_string()))
}

/// An error with its sources, `outer: inner: root`, duplicates dropped.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            url: "http://127.0.0.1:1/x#frag".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: b"hi".to_vec(),
            timeout_ms: None,
        }
    }

    /// A request waits for its own timeout when it is the shorter, else for
    /// the call's budget; on paused time, so the wait is exact and no test
    /// waits for it (the server accepts and never answers).
    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_the_shorter_of_its_timeout_and_the_budget() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = parse_url(&format!("http://{}/slow", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let client = HttpClient::new();
        let fetch = |timeout_ms: Option<u32>, budget: Duration| {
            let (client, url) = (&client, &url);
            async move {
                let mut r = req("GET", &[]);
                r.body.clear();
                r.timeout_ms = timeout_ms;
                let started = tokio::time::Instant::now();
                let got = client.fetch(r, url, budget, true).await;
                (got, started.elapsed())
            }
        };
        let second = Duration::from_secs(1);
        let (got, took) = fetch(Some(200), 10 * second).await;
        assert!(matches!(got, Err(HttpError::Timeout)), "{got:?}");
        assert_eq!(took, Duration::from_millis(200));
        let (got, took) = fetch(None, second / 2).await;
        assert!(matches!(got, Err(HttpError::Timeout)), "{got:?}");
        assert_eq!(took, second / 2);
        let (got, took) = fetch(Some(5000), second).await;
        assert!(matches!(got, Err(HttpError::Timeout)), "{got:?}");
        assert_eq!(took, second);
    }

    #[test]
    fn urls_must_be_absolute_http_without_credentials() {
        assert!(parse_url("https://a.example.com/x?y=1").is_ok());
        assert!(parse_url("http://127.0.0.1:8080").is_ok());
        for bad in [
            "ftp://a.example.com/",
            "file:///etc/passwd",
            "/relative",
            "http://u:p@127.0.0.1/",
            "http://u@127.0.0.1/",
            "data:text/plain,x",
        ] {
            assert!(
                matches!(parse_url(bad), Err(HttpError::InvalidRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn methods_and_headers_are_checked() {
        let url = parse_url("http://127.0.0.1:1/x#frag").unwrap();
        let r = build_request(req("PATCH", &[("x-a", "1"), ("accept", "*/*")]), &url).unwrap();
        assert_eq!(r.method(), http::Method::PATCH);
        assert_eq!(r.uri().to_string(), "http://127.0.0.1:1/x");
        assert_eq!(r.headers()["x-a"], "1");
        for (m, h) in [
            ("GE T", vec![]),
            ("CONNECT", vec![]),
            ("GET", vec![("bad name", "v")]),
            ("GET", vec![("x-a", "line\nbreak")]),
            ("GET", vec![("Host", "other.example.com")]),
            ("POST", vec![("content-length", "1000")]),
            ("POST", vec![("Transfer-Encoding", "chunked")]),
        ] {
            assert!(
                matches!(
                    build_request(req(m, &h), &url),
                    Err(HttpError::InvalidRequest(_))
                ),
                "{m} {h:?}"
            );
        }
    }
}
