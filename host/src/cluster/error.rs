//! [`ClientError`]: why a call to the cluster failed, in the contract's terms.

/// Why a client call failed: the contract's `client-error`, host side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("denied: {0}")]
    Denied(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("too many requests")]
    TooManyRequests,
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

impl From<kube::Error> for ClientError {
    fn from(e: kube::Error) -> ClientError {
        match e {
            kube::Error::Api(s) => match s.code {
                404 => ClientError::NotFound,
                409 => ClientError::Conflict(s.message),
                400 | 415 | 422 => ClientError::Invalid(s.message),
                429 => ClientError::TooManyRequests,
                500..=599 => ClientError::Unavailable(s.message),
                _ => ClientError::Other(s.message),
            },
            kube::Error::SerdeError(e) => ClientError::Invalid(e.to_string()),
            other => ClientError::Unavailable(other.to_string()),
        }
    }
}
