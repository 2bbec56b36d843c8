//! TLS to the datastore: rustls, verifying the server's certificate chain
//! and its name, as libpq's `sslmode=verify-full`. That is the default; a
//! plain TCP connection is made only when the URL says `sslmode=disable`
//! (or over a Unix socket, where libpq never uses TLS either).
//!
//! tokio-postgres knows neither `verify-full` nor `sslrootcert`, so
//! [`TlsSettings::split`] takes libpq's TLS parameters out of the URL before
//! the driver parses the rest.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use super::DatastoreError;

/// What the URL's `sslmode` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// TLS, the chain verified against the roots and the server's name
    /// against the host connected to (no `sslmode`, `verify-full`, or
    /// `require`, which wasmlet verifies as fully).
    VerifyFull,
    /// Plain TCP: only with `sslmode=disable`.
    Disable,
}

/// libpq's TLS parameters, taken out of a datastore URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: Mode,
    /// `sslrootcert=FILE`: the CA certificates (PEM) the server's chain must
    /// end in. `None` (or `sslrootcert=system`): the system's roots.
    pub(crate) root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// Splits `sslmode` and `sslrootcert` off `url` (a `postgres://` URL or
    /// a `key=value` string): the settings, and the URL without them.
    pub(crate) fn split(url: &str) -> Result<(TlsSettings, String), DatastoreError> {
        let (params, rest) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            split_query(url)
        } else {
            split_key_values(url)
        };
        let mut settings = TlsSettings {
            mode: Mode::VerifyFull,
            root_cert: None,
        };
        for (key, value) in params {
            match (key.as_str(), value.as_str()) {
                ("sslmode", "disable") => settings.mode = Mode::Disable,
                ("sslmode", "verify-full" | "require") => settings.mode = Mode::VerifyFull,
                ("sslmode", other) => {
                    return Err(DatastoreError::Url(format!(
                        "sslmode={other} is not supported: use verify-full (the default) or, for a plain connection, disable"
                    )));
                }
                ("sslrootcert", "system") => settings.root_cert = None,
                ("sslrootcert", file) => settings.root_cert = Some(file.into()),
                _ => unreachable!("split_* return only the TLS keys"),
            }
        }
        Ok((settings, rest))
    }

    /// The connector for these settings. Reads the CA file now, so that a
    /// missing or unreadable one fails the start, not each connection.
    pub(crate) fn connector(&self) -> Result<RustlsConnect, DatastoreError> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(file) => {
                for cert in read_certs(file)? {
                    roots.add(cert).map_err(|e| {
                        DatastoreError::Url(format!("sslrootcert {}: {e}", file.display()))
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(native.certs);
                if added == 0 && self.mode == Mode::VerifyFull {
                    tracing::warn!(
                        "no system CA certificates found: datastore connections will fail to verify; give the CA with sslrootcert=FILE in the datastore URL"
                    );
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| DatastoreError::Url(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(RustlsConnect {
            config: Arc::new(config),
        })
    }
}

fn is_tls_key(key: &str) -> bool {
    key == "sslmode" || key == "sslrootcert"
}

/// `postgres://...?a=b&sslmode=x`: the TLS pairs, and the URL without them.
fn split_query(url: &str) -> (Vec<(String, String)>, String) {
    let Some((base, query)) = url.split_once('?') else {
        return (Vec::new(), url.to_string());
    };
    let mut tls = Vec::new();
    let mut kept = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let pair = url::form_urlencoded::parse(part.as_bytes()).next();
        match pair {
            Some((k, v)) if is_tls_key(&k) => tls.push((k.into_owned(), v.into_owned())),
            _ => kept.push(part),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (tls, rest)
}

/// `host=h sslmode=x ...`: the TLS pairs, and the string without them.
/// (Quoted values with spaces are left to the driver, which refuses an
/// unknown key.)
fn split_key_values(url: &str) -> (Vec<(String, String)>, String) {
    let mut tls = Vec::new();
    let mut kept = Vec::new();
    for token in url.split_whitespace() {
        match token.split_once('=') {
            Some((k, v)) if is_tls_key(k.trim()) && !v.starts_with('\'') => {
                tls.push((k.trim().to_string(), v.to_string()))
            }
            _ => kept.push(token),
        }
    }
    (tls, kept.join(" "))
}

fn read_certs(
    file: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, DatastoreError> {
    let bad = |e: &dyn std::fmt::Display| {
        DatastoreError::Url(format!("sslrootcert {}: {e}", file.display()))
    };
    let pem = std::fs::read(file).map_err(|e| bad(&e))?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in the file"));
    }
    Ok(certs)
}

/// tokio-postgres's TLS seam over rustls. Used for every connection; a
/// plain one is `sslmode=disable` in the driver's config, which never calls it.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = TlsStream;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, Self::Error> {
        Ok(Connect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_string())?,
        })
    }
}

/// One connection's handshake, to the host it was made for.
pub(crate) struct Connect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for Connect {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            let stream = connector.connect(self.name, stream).await?;
            Ok(TlsStream(Box::new(stream)))
        })
    }
}

/// A TLS connection to the datastore.
pub(crate) struct TlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl tokio_postgres::tls::TlsStream for TlsStream {
    /// None: SCRAM then runs without channel binding (`SCRAM-SHA-256`, not
    /// `-PLUS`), as with a libpq built without it.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_and_verify_full_is_the_default() {
        let (s, rest) = TlsSettings::split("postgres://u@db:5432/x").unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert, None);
        assert_eq!(rest, "postgres://u@db:5432/x");

        let (s, rest) = TlsSettings::split(
            "postgres://u@db/x?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(rest, "postgres://u@db/x?application_name=a");

        let (s, rest) = TlsSettings::split("host=db sslmode=disable user=u").unwrap();
        assert_eq!(s.mode, Mode::Disable);
        assert_eq!(rest, "host=db user=u");

        let (s, _) = TlsSettings::split("postgres://db/x?sslrootcert=system").unwrap();
        assert_eq!(s.root_cert, None);

        for weak in ["prefer", "allow", "verify-ca", "bogus"] {
            let e = TlsSettings::split(&format!("postgres://db/x?sslmode={weak}")).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("sslmode={weak} is not supported")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let (s, _) = TlsSettings::split("postgres://db/x?sslrootcert=/nonexistent/ca.pem").unwrap();
        let e = s.connector().err().unwrap().to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
    }
}
