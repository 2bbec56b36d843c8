//! A throwaway API server for tests: on a free port of 127.0.0.1, in a fresh
//! directory, with a client of it. One helper for this crate's unit tests and
//! the host's tests (the `testing` feature, which only the host's
//! `[dev-dependencies]` turn on), so the setup is written once.

use crate::{ApiServer, Config};

/// A running server, the directory it keeps its data in (removed when
/// dropped: keep it as long as the server), and a client of it. The watch
/// history is short (100 revisions); [`test_server_with`] changes that or
/// anything else in the [`Config`].
pub async fn test_server() -> (tempfile::TempDir, ApiServer, kube::Client) {
    test_server_with(|_| {}).await
}

/// As [`test_server`], with the `Config` changed by `configure` first
/// (`data_dir` and `listen` are set already).
///
/// # Panics
/// If the directory cannot be made or the server does not start: a test
/// cannot go on without it.
#[allow(clippy::unwrap_used)]
pub async fn test_server_with(
    configure: impl FnOnce(&mut Config),
) -> (tempfile::TempDir, ApiServer, kube::Client) {
    let data = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: data.path().into(),
        listen: ([127, 0, 0, 1], 0).into(),
        history: 100,
        ..Default::default()
    };
    configure(&mut config);
    let server = ApiServer::start(config).await.unwrap();
    let client = kube::Client::try_from(server.kube_config().await.unwrap()).unwrap();
    (data, server, client)
}
