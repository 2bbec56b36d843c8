//! Client-certificate authentication: the TLS handshake asks for an optional
//! client certificate signed by the plane's CA, and each connection's
//! requests carry the identity it names (upstream's x509 authenticator: the
//! common name is the user, each organization a group).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use axum_server::tls_rustls::RustlsAcceptor;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use wasmlet_apimachinery::rbac::UserInfo;

use crate::connections::{Connections, Slot};

/// A TLS server configuration presenting `cert_pem`/`key_pem` that asks for an
/// optional client certificate, which must chain to `client_ca_pem` when one is
/// offered (tokens work without one): the API server's and the kubelet API's.
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> anyhow::Result<std::sync::Arc<rustls::ServerConfig>> {
    use anyhow::Context as _;
    use std::sync::Arc;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())?
        .context("the server's key file holds no key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut client_ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The identity of the connection's verified client certificate, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerCert(pub Option<UserInfo>);

/// The user a DER client certificate names.
pub(crate) fn user_of_certificate(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    if name.is_empty() {
        return None;
    }
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    groups.push("system:authenticated".into());
    Some(UserInfo {
        name: name.to_string(),
        groups,
    })
}

/// Wraps the TLS acceptor: counts the connection against the server's
/// [`Connections`](crate::connections) bounds (closing it at once past them,
/// or when its handshake takes too long), and after the handshake gives every
/// request of the connection a [`PeerCert`] extension.
#[derive(Clone)]
pub(crate) struct PeerCertAcceptor {
    pub(crate) inner: RustlsAcceptor,
    pub(crate) connections: Arc<Connections>,
}

type BoxFut<T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send>>;

impl<S> Accept<TcpStream, S> for PeerCertAcceptor
where
    S: Send + 'static,
{
    type Stream = TlsStream<Counted>;
    type Service = WithPeer<S>;
    type Future = BoxFut<(Self::Stream, Self::Service)>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let inner = self.inner.clone();
        let conns = self.connections.clone();
        Box::pin(async move {
            let refused = |why: &str| {
                tracing::debug!(open = conns.open(), "connection closed: {why}");
                io::Error::new(io::ErrorKind::ConnectionRefused, why.to_string())
            };
            let Some(slot) = conns.enter() else {
                return Err(refused("too many connections"));
            };
            let Some(source) = stream.peer_addr().map(|a| a.ip()).ok() else {
                return Err(refused("no peer address"));
            };
            let Some(mut handshake) = conns.enter_handshake(source) else {
                return Err(refused("too many handshakes from one address"));
            };
            let counted = Counted {
                io: stream,
                _slots: vec![slot],
                first_request: None,
            };
            // The inner acceptor ends a handshake that takes longer than
            // `ConnectionLimits::handshake`; a newer connection ends it when
            // too many are in progress.
            let (mut stream, service) = tokio::select! {
                accepted = inner.accept(counted, service) => accepted?,
                _ = &mut handshake.ended => return Err(refused("handshake ended to make room for a newer connection")),
            };
            drop(handshake);
            // rustls verified the chain against the CA already.
            let user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| user_of_certificate(c));
            stream.get_mut().0.first_request =
                Some(Box::pin(tokio::time::sleep(conns.limits.first_request)));
            if user.is_none() {
                let Some(slot) = conns.enter_anonymous(source) else {
                    return Err(refused("too many connections without a client certificate"));
                };
                stream.get_mut().0._slots.push(slot);
            }
            Ok((
                stream,
                WithPeer {
                    inner: service,
                    peer: PeerCert(user),
                },
            ))
        })
    }
}

/// A TCP stream that holds its places among the server's connections until
/// it is dropped (closed), and ends when no request begins within
/// `ConnectionLimits::first_request` of the handshake (hyper's header timeout
/// starts only once the connection's first bytes have chosen HTTP/1, so a
/// silent connection would otherwise stay open for ever).
pub(crate) struct Counted {
    io: TcpStream,
    _slots: Vec<Slot>,
    first_request: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Some(deadline) = self.first_request.as_mut() {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > before => self.first_request = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request on the connection within its header timeout",
                    )));
                }
                _ => {}
            }
        }
        read
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A service that stamps each request with the connection's [`PeerCert`].
#[derive(Clone)]
pub(crate) struct WithPeer<S> {
    inner: S,
    peer: PeerCert,
}

impl<S, B> tower_service::Service<http::Request<B>> for WithPeer<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.extensions_mut().insert(self.peer.clone());
        self.inner.call(req)
    }
}
