//! Connections bounded well below the process's file-descriptor limit. The
//! server shares its process with the host and the node agent: before these
//! bounds ~19,700 idle connections that never finished a TLS handshake took
//! every descriptor, and the node went NotReady because the host could open
//! no socket.
//!
//! - A TLS handshake must finish within [`ConnectionLimits::handshake`].
//! - At most [`ConnectionLimits::total`] connections are open at once; one
//!   more is closed as soon as it is accepted.
//! - Connections without a client certificate (tokens, anonymous) have a
//!   smaller share, [`ConnectionLimits::anonymous`], so that what is left is
//!   the reserve of the plane's own certificate users (the node, the host,
//!   kubelets); and one source address holds at most
//!   [`ConnectionLimits::per_source`] of them.
//! - A connection in its handshake has shown no certificate yet: at most
//!   [`ConnectionLimits::handshaking`] are, [`ConnectionLimits::per_source`]
//!   from one address, and past that a new connection ends the oldest
//!   handshake (a client finishes its own in milliseconds; the oldest is one
//!   that never starts it). Silent connections from many addresses then hold
//!   at most that many places, and a certificate user still reaches its
//!   reserve.
//! - A connection must begin its first request within
//!   [`ConnectionLimits::first_request`] of its handshake, and may idle
//!   between requests for [`ConnectionLimits::idle`].
//!
//! kube-apiserver has no such limits of its own (Go raises the descriptor
//! limit to the hard one at start, which [`raise_fd_limit`] does too); it
//! relies on the process's limit and its request timeouts.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The bounds; [`ConnectionLimits::from_fd_limit`] derives them from the
/// process's descriptor limit.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections open at once, whoever holds them.
    pub total: usize,
    /// Of those, connections without a client certificate.
    pub anonymous: usize,
    /// Of those, connections still in their TLS handshake (not counted
    /// among the anonymous ones).
    pub handshaking: usize,
    /// Connections without a client certificate from one address.
    pub per_source: usize,
    /// How long a TLS handshake may take.
    pub handshake: Duration,
    /// How long after its handshake a connection may stay silent before its
    /// first request (kube-apiserver's `ReadHeaderTimeout`, 32 s).
    pub first_request: Duration,
    /// How long a connection may stay idle between requests, or take to send
    /// a request's headers: longer than clients keep idle connections
    /// (kube-rs, client-go: 90 s), so that a client never reuses one the
    /// server has just closed (at 32 s, idle pooled connections were reset
    /// under a client's next request).
    pub idle: Duration,
}

impl ConnectionLimits {
    /// Half the descriptors for connections (the other half is the store's,
    /// the plugins', the node's); half of those for connections without a
    /// certificate and a quarter for handshakes, which leaves a quarter to
    /// certificate users whatever the others do; a quarter of the anonymous
    /// share for one address.
    pub fn from_fd_limit() -> ConnectionLimits {
        let fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let total = usize::try_from(fds / 2)
            .unwrap_or(usize::MAX)
            .clamp(64, 32_768);
        let anonymous = total / 2;
        ConnectionLimits {
            total,
            anonymous,
            handshaking: total / 4,
            per_source: (anonymous / 4).max(16),
            handshake: Duration::from_secs(10),
            first_request: Duration::from_secs(32),
            idle: Duration::from_secs(120),
        }
    }
}

/// Raises the soft limit of open files to the hard one, as Go's runtime does
/// for kube-apiserver at start; returns the limit now in force.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "the open-files limit stays as it is");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The connections open now, counted against [`ConnectionLimits`].
pub(crate) struct Connections {
    pub(crate) limits: ConnectionLimits,
    total: AtomicUsize,
    anonymous: Mutex<Anonymous>,
}

/// Connections without a certificate, and those in their handshake.
#[derive(Default)]
struct Anonymous {
    all: usize,
    by_source: HashMap<IpAddr, usize>,
    /// Handshakes in progress, oldest first, each with what ends it.
    handshaking: BTreeMap<u64, tokio::sync::oneshot::Sender<()>>,
    handshaking_by_source: HashMap<IpAddr, usize>,
    next: u64,
}

/// One more for `source` in `counts`, unless it has `max` already.
fn count_in(counts: &mut HashMap<IpAddr, usize>, source: IpAddr, max: usize) -> bool {
    let mine = counts.entry(source).or_default();
    if *mine >= max {
        return false;
    }
    *mine += 1;
    true
}

/// One fewer for `source` in `counts`.
fn uncount_in(counts: &mut HashMap<IpAddr, usize>, source: IpAddr) {
    if let Some(n) = counts.get_mut(&source) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(&source);
        }
    }
}

/// Counts one connection until dropped (with the connection's stream).
pub(crate) struct Slot {
    conns: Arc<Connections>,
    source: Option<IpAddr>,
}

/// A connection in its TLS handshake, until dropped: the oldest one is
/// ended when [`ConnectionLimits::handshaking`] are.
pub(crate) struct Handshake {
    conns: Arc<Connections>,
    id: u64,
    source: IpAddr,
    /// Fires when a newer connection took its place.
    pub(crate) ended: tokio::sync::oneshot::Receiver<()>,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut a = self.conns.lock_anonymous();
        a.handshaking.remove(&self.id);
        uncount_in(&mut a.handshaking_by_source, self.source);
    }
}

impl Connections {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            total: AtomicUsize::new(0),
            anonymous: Mutex::default(),
        })
    }

    /// A place for one more connection, or `None` at the limit.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Slot> {
        let before = self.total.fetch_add(1, Ordering::AcqRel);
        let slot = Slot {
            conns: self.clone(),
            source: None,
        };
        (before < self.limits.total).then_some(slot)
    }

    fn lock_anonymous(&self) -> std::sync::MutexGuard<'_, Anonymous> {
        self.anonymous.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a connection from `source` without a client certificate,
    /// or `None` past its share or its source's.
    pub(crate) fn enter_anonymous(self: &Arc<Self>, source: IpAddr) -> Option<Slot> {
        let mut a = self.lock_anonymous();
        if a.all >= self.limits.anonymous
            || !count_in(&mut a.by_source, source, self.limits.per_source)
        {
            return None;
        }
        a.all += 1;
        Some(Slot {
            conns: self.clone(),
            source: Some(source),
        })
    }

    /// A place for a handshake from `source`: `None` past its source's
    /// share; past [`ConnectionLimits::handshaking`], the oldest handshake
    /// is ended to make room.
    pub(crate) fn enter_handshake(self: &Arc<Self>, source: IpAddr) -> Option<Handshake> {
        let mut a = self.lock_anonymous();
        if !count_in(&mut a.handshaking_by_source, source, self.limits.per_source) {
            return None;
        }
        if a.handshaking.len() >= self.limits.handshaking
            && let Some((_, oldest)) = a.handshaking.pop_first()
        {
            // Its connection closes at once and gives its places back.
            let _ = oldest.send(());
        }
        let (end, ended) = tokio::sync::oneshot::channel();
        let id = a.next;
        a.next += 1;
        a.handshaking.insert(id, end);
        Some(Handshake {
            conns: self.clone(),
            id,
            source,
            ended,
        })
    }

    /// Connections open now (for tests and the log).
    pub(crate) fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        match self.source {
            None => {
                self.conns.total.fetch_sub(1, Ordering::AcqRel);
            }
            Some(source) => {
                let mut a = self.conns.lock_anonymous();
                a.all = a.all.saturating_sub(1);
                uncount_in(&mut a.by_source, source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `handshaking` is 2.
    fn limits(total: usize, anonymous: usize, per_source: usize) -> ConnectionLimits {
        ConnectionLimits {
            total,
            anonymous,
            handshaking: 2,
            per_source,
            handshake: Duration::from_secs(1),
            first_request: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        }
    }

    #[test]
    fn slots_are_counted_until_dropped() {
        let conns = Connections::new(limits(2, 2, 1));
        let a = conns.enter().expect("first");
        let b = conns.enter().expect("second");
        assert!(conns.enter().is_none(), "a third past total 2");
        drop(a);
        let _c = conns.enter().expect("a place again once one closed");
        drop(b);
        assert_eq!(conns.open(), 1);
    }

    #[test]
    fn anonymous_connections_have_a_share_and_a_share_per_source() {
        let conns = Connections::new(limits(10, 3, 2));
        let (x, y, z): (IpAddr, IpAddr, IpAddr) = (
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            [10, 0, 0, 3].into(),
        );
        let x1 = conns.enter_anonymous(x).expect("x 1");
        let _x2 = conns.enter_anonymous(x).expect("x 2");
        assert!(conns.enter_anonymous(x).is_none(), "x past its 2");
        let _y1 = conns.enter_anonymous(y).expect("y 1");
        assert!(conns.enter_anonymous(z).is_none(), "past the share of 3");
        drop(x1);
        let _z1 = conns.enter_anonymous(z).expect("z once x closed one");
    }

    #[test]
    fn past_the_handshakes_bound_the_oldest_handshake_ends() {
        let conns = Connections::new(limits(10, 5, 2));
        let (x, y, z): (IpAddr, IpAddr, IpAddr) = (
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            [10, 0, 0, 3].into(),
        );
        let mut oldest = conns.enter_handshake(x).expect("x");
        let mut next = conns.enter_handshake(y).expect("y");
        // Two handshakes already: z ends x's, the oldest, and gets in.
        let mut newest = conns.enter_handshake(z).expect("z, in x's place");
        assert!(oldest.ended.try_recv().is_ok(), "x's handshake was ended");
        assert!(next.ended.try_recv().is_err(), "y's goes on");
        assert!(newest.ended.try_recv().is_err(), "z's goes on");
        drop(oldest);
        // A finished handshake is never ended.
        drop(newest);
        let _x = conns.enter_handshake(x).expect("x again");
        assert!(next.ended.try_recv().is_err(), "room for two: y goes on");
        let _w = conns.enter_handshake(z).expect("z again");
        assert!(
            next.ended.try_recv().is_ok(),
            "y was the oldest handshake left"
        );
        // Past its source's share: refused, nobody's ended.
        let conns = Connections::new(limits(10, 4, 1));
        let mut first = conns.enter_handshake(x).expect("x");
        assert!(conns.enter_handshake(x).is_none(), "x past its one");
        assert!(first.ended.try_recv().is_err());
    }
}

/// Against a running server: token-less connections past their share are
/// closed, the plane's certificate users still get in, and a connection
/// that never sends a request ends.
#[cfg(test)]
mod server_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::client::TlsStream;

    use super::ConnectionLimits;
    use crate::testing::test_server_with;

    /// A TLS connection without a client certificate, trusting the plane's CA.
    async fn connect(addr: std::net::SocketAddr, ca_pem: &str) -> TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
            roots.add(c.expect("CA pem")).expect("CA cert");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("tcp connect");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake")
    }

    /// Sends `GET /livez` and returns what came back before the server closed
    /// or answered ("" when it closed at once).
    async fn livez(conn: &mut TlsStream<tokio::net::TcpStream>) -> String {
        let sent = conn
            .write_all(b"GET /livez HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await;
        if sent.is_err() {
            return String::new();
        }
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(60), conn.read(&mut buf))
            .await
            .expect("the server answers or closes")
            .unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn token_less_connections_past_their_share_are_closed_and_certificate_users_still_get_in()
    {
        let (dir, server, _client) = test_server_with(|c| {
            c.connections = Some(ConnectionLimits {
                total: 64,
                anonymous: 2,
                handshaking: 16,
                per_source: 2,
                handshake: Duration::from_secs(10),
                first_request: Duration::from_secs(600),
                idle: Duration::from_secs(600),
            })
        })
        .await;
        let ca = server.pki().ca_pem.clone();
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut c = connect(server.addr, &ca).await;
            assert!(
                livez(&mut c).await.starts_with("HTTP/1.1 200"),
                "within the share"
            );
            held.push(c);
        }
        let mut third = connect(server.addr, &ca).await;
        assert_eq!(
            livez(&mut third).await,
            "",
            "a third token-less connection is closed"
        );
        // A client certificate of the plane's CA (as the node's and the host's).
        let path = server.pki().write_identity_kubeconfig(
            &dir.path().join("admin.kubeconfig"),
            server.addr,
            "admin",
            Some("system:masters"),
        );
        let kubeconfig =
            kube::config::Kubeconfig::read_from(path.expect("identity")).expect("read");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        namespaces
            .list(&Default::default())
            .await
            .expect("a certificate user gets in past the token-less share");
        // Closing one frees its place.
        drop(held.pop());
        let mut again = None;
        for _ in 0..100 {
            let mut c = connect(server.addr, &ca).await;
            if livez(&mut c).await.starts_with("HTTP/1.1 200") {
                again = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            again.is_some(),
            "a place is free again once a connection closed"
        );
    }

    #[tokio::test]
    async fn a_connection_that_sends_no_request_ends() {
        let (_dir, server, _client) = test_server_with(|c| {
            c.connections = Some(ConnectionLimits {
                first_request: Duration::from_secs(1),
                ..ConnectionLimits::from_fd_limit()
            })
        })
        .await;
        let mut c = connect(server.addr, &server.pki().ca_pem).await;
        let mut buf = [0u8; 64];
        // Nothing sent: the server ends the connection (EOF or an error),
        // well before the test's own bound.
        let ended = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "the idle connection is still open after 120 s"
        );
    }
}
