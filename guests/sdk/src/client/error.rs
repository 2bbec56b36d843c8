//! [`ClientError`]: why a client call failed.

use std::fmt;

use crate::bindings::client as raw;

/// Why a client call failed (the contract's `client-error`, plus [`ClientError::Decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// 404: no such object.
    NotFound,
    /// 409: stale resourceVersion, or the object already exists. Retry soon.
    Conflict(String),
    /// The plugin manifest does not grant this call.
    Denied(String),
    /// The request was rejected as invalid (400/422).
    Invalid(String),
    /// 429 (or an eviction blocked by a PodDisruptionBudget). Retry soon.
    TooManyRequests,
    /// The API server or the host's cache is unavailable.
    Unavailable(String),
    /// Anything else.
    Other(String),
    /// The SDK could not encode the request or decode the answer as the requested type.
    Decode(String),
}

impl ClientError {
    /// Whether retrying soon (not with exponential back-off) is the right response.
    pub fn is_retry_soon(&self) -> bool {
        matches!(
            self,
            ClientError::Conflict(_) | ClientError::TooManyRequests
        )
    }

    /// A short UpperCamelCase reason, as used in conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            ClientError::NotFound => "NotFound",
            ClientError::Conflict(_) => "Conflict",
            ClientError::Denied(_) => "Forbidden",
            ClientError::Invalid(_) => "Invalid",
            ClientError::TooManyRequests => "TooManyRequests",
            ClientError::Unavailable(_) => "Unavailable",
            ClientError::Other(_) => "ClientError",
            ClientError::Decode(_) => "DecodeError",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::NotFound => f.write_str("not found"),
            ClientError::Conflict(m) => write!(f, "conflict: {m}"),
            ClientError::Denied(m) => write!(f, "denied by the plugin manifest: {m}"),
            ClientError::Invalid(m) => write!(f, "invalid request: {m}"),
            ClientError::TooManyRequests => f.write_str("too many requests"),
            ClientError::Unavailable(m) => write!(f, "unavailable: {m}"),
            ClientError::Other(m) => f.write_str(m),
            ClientError::Decode(m) => write!(f, "decoding: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<raw::ClientError> for ClientError {
    fn from(e: raw::ClientError) -> Self {
        match e {
            raw::ClientError::NotFound => ClientError::NotFound,
            raw::ClientError::Conflict(m) => ClientError::Conflict(m),
            raw::ClientError::Denied(m) => ClientError::Denied(m),
            raw::ClientError::Invalid(m) => ClientError::Invalid(m),
            raw::ClientError::TooManyRequests => ClientError::TooManyRequests,
            raw::ClientError::Unavailable(m) => ClientError::Unavailable(m),
            raw::ClientError::Other(m) => ClientError::Other(m),
        }
    }
}
