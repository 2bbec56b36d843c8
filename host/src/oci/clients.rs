//! The registry clients, made in one place so that every pull and push (the
//! node's image pulls, `plugin push/pull`, `module push`) has the same
//! timeouts and TLS provider: the size-capped reader's HTTP client
//! ([`http_client`]) and the push client ([`registry_client`]).

use std::time::Duration;

use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};

/// How long a registry connection may take to open.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry read may wait for the next bytes.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// reqwest is built without a bundled crypto provider: use ring, like the
/// rest of the host (a no-op when a process default is already installed).
fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The HTTP client for [`super::capped::CappedReader`]s: redirects followed
/// (blob stores), credentials dropped on a redirect to another host
/// (reqwest's rule).
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    tls_provider();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e:#}"))
}

/// An `oci-client` client for `reference`'s registry (pushes); `insecure`:
/// plain HTTP to that registry.
pub(crate) fn registry_client(
    reference: &Reference,
    insecure: bool,
) -> Result<oci_client::Client, String> {
    tls_provider();
    let plain = if insecure {
        vec![reference.resolve_registry().to_string()]
    } else {
        Vec::new()
    };
    oci_client::Client::try_from(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        ..Default::default()
    })
    .map_err(|e| format!("OCI client: {e}"))
}
