//! Outbound HTTP to the hosts the manifest allows (`[permissions] http-hosts`).
//!
//! ```no_run
//! use std::time::Duration;
//! use wasmlet_sdk::http::{self, Request};
//!
//! # fn demo() -> Result<(), http::HttpError> {
//! let resp = http::fetch(&Request::get("https://status.example.com/v1/health")
//!     .header("accept", "application/json")
//!     .timeout(Duration::from_secs(2)))?;
//! if resp.status == 200 {
//!     let body: serde_json::Value = resp.json().map_err(|e| http::HttpError::Other(e.to_string()))?;
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::http as raw;
use crate::host::with_host;

/// One request (buffered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method, e.g. `GET`.
    pub method: String,
    /// An absolute `http` or `https` URL; its host must be in the manifest's `http-hosts`.
    pub url: String,
    /// Request headers, in order; a name may repeat.
    pub headers: Vec<(String, String)>,
    /// The request body (empty for none).
    pub body: Vec<u8>,
    /// `None`: the host's own timeout; a longer one is cut to the plugin's call deadline.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request with this method and URL, no headers and no body.
    pub fn new(method: &str, url: &str) -> Self {
        Request {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// A `GET` of `url`.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` of `body` to `url`.
    pub fn post(url: &str, body: impl Into<Vec<u8>>) -> Self {
        Self::new("POST", url).body(body)
    }

    /// Adds a header (appended; an earlier one of the same name stays).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A JSON body, with `content-type: application/json`.
    pub fn json(self, value: &impl Serialize) -> Result<Self, serde_json::Error> {
        let body = serde_json::to_vec(value)?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sets the request's timeout (still bounded by the host's).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// One response (any status, 4xx and 5xx included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// Response headers, in the order received.
    pub headers: Vec<(String, String)>,
    /// The whole body; the host refuses bodies over its size limit ([`HttpError::TooLarge`]).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why no response came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL's host is not in the manifest's `http-hosts`.
    Denied(String),
    /// Not a valid absolute http(s) URL, method or header.
    InvalidRequest(String),
    /// No response within the timeout.
    Timeout,
    /// DNS, connect or TLS failure.
    Connection(String),
    /// The response body was larger than the host allows.
    TooLarge,
    /// Any other failure, described by the host.
    Other(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied(m) => write!(f, "denied by the plugin manifest: {m}"),
            HttpError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            HttpError::Timeout => f.write_str("timed out"),
            HttpError::Connection(m) => write!(f, "connection failed: {m}"),
            HttpError::TooLarge => f.write_str("response too large"),
            HttpError::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<raw::HttpError> for HttpError {
    fn from(e: raw::HttpError) -> Self {
        match e {
            raw::HttpError::Denied(m) => HttpError::Denied(m),
            raw::HttpError::InvalidRequest(m) => HttpError::InvalidRequest(m),
            raw::HttpError::Timeout => HttpError::Timeout,
            raw::HttpError::Connection(m) => HttpError::Connection(m),
            raw::HttpError::TooLarge => HttpError::TooLarge,
            raw::HttpError::Other(m) => HttpError::Other(m),
        }
    }
}

/// Sends `req` through the host.
pub fn fetch(req: &Request) -> Result<Response, HttpError> {
    let raw_req = raw::Request {
        method: req.method.clone(),
        url: req.url.clone(),
        headers: req.headers.clone(),
        body: req.body.clone(),
        timeout_ms: req
            .timeout
            .map(|t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX)),
    };
    let resp = with_host(|h| h.http_fetch(&raw_req))?;
    Ok(Response {
        status: resp.status,
        headers: resp.headers,
        body: resp.body,
    })
}
