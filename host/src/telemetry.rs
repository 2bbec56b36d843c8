//! Logs to stderr (text, coloured only on a terminal, or JSON lines), and the host's spans (`reconcile`, `pod_state`) to an
//! OpenTelemetry collector over OTLP/HTTP when an endpoint is configured.
//!
//! Off unless `--otlp-endpoint` (or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! names a collector: `http://collector:4318` sends spans to
//! `http://collector:4318/v1/traces` in protobuf, as every OTLP/HTTP exporter
//! does. Only spans of wasmlet's own modules are exported, never the client
//! libraries' debug spans, and export happens on the SDK's batch thread, so a
//! slow or absent collector never delays a reconcile.
//!
//! ```ignore
//! use wasmlet::telemetry::{DEFAULT_LOG_FILTER, LogFormat, Logs};
//! let logs = Logs { filter: DEFAULT_LOG_FILTER, format: LogFormat::Json };
//! let telemetry = wasmlet::telemetry::init(logs, Some("http://127.0.0.1:4318")).unwrap();
//! // ... run; spans are batched and sent in the background ...
//! telemetry.shutdown(); // flushes what is still batched
//! ```

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TelemetryError {
    #[error("--otlp-endpoint {0:?}: {1}")]
    Endpoint(String, String),
    #[error("--otlp-endpoint {0:?}: cannot build the OTLP exporter: {1}")]
    Exporter(String, String),
    #[error("--log-level (or WASMLET_LOG) {0:?} is not a tracing filter: {1}")]
    LogFilter(String, String),
}

/// Owns the span exporter, if any; [`Telemetry::shutdown`] flushes it.
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends what is still batched (bounded by the exporter's timeout).
    pub(crate) fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("wasmlet: flushing spans to the OTLP endpoint failed: {e}");
        }
    }
}

/// The URL spans are posted to: the collector's base URL plus `/v1/traces`,
/// unless it already names that path (as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` does).
pub(crate) fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let bad = |why: &str| TelemetryError::Endpoint(endpoint.to_owned(), why.to_owned());
    let url = url::Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    match url.scheme() {
        "http" => {}
        // The exporter's blocking client is built without TLS (a second TLS
        // stack only for spans); collectors take plain OTLP/HTTP on 4318, or a
        // sidecar/agent on localhost does.
        "https" => {
            return Err(bad(
                "https is not supported; use an http:// collector or agent",
            ));
        }
        s => return Err(bad(&format!("scheme {s:?}: want http://HOST:PORT"))),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    })
}

/// The log filter without `--log-level` / `WASMLET_LOG`. kube-client warns
/// "Server cert bypassed" on every connection the logs proxy makes to a
/// kubelet (whose serving certificate is not verified, as with
/// kube-apiserver without --kubelet-certificate-authority): said once at
/// start instead.
pub(crate) const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::tls=error";

/// How log records are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal (so no
    /// escape codes reach `kubectl logs` or a file) and `NO_COLOR` is unset.
    Text,
    /// One JSON object a line.
    Json,
}

/// Whether text logs are coloured: only on a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
/// (`with_ansi(true)` would override tracing-subscriber's own NO_COLOR check.)
pub(crate) fn colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The log settings (`--log-level`, `--log-format`).
pub(crate) struct Logs<'a> {
    pub(crate) filter: &'a str,
    pub(crate) format: LogFormat,
}

/// Installs the process's subscriber: logs filtered and formatted as `logs`
/// says to stderr and, with an endpoint, wasmlet's spans to that OTLP
/// collector.
pub(crate) fn init(
    logs: Logs<'_>,
    otlp_endpoint: Option<&str>,
) -> Result<Telemetry, TelemetryError> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(logs.filter)
        .map_err(|e| TelemetryError::LogFilter(logs.filter.to_owned(), e.to_string()))?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match logs.format {
        LogFormat::Text => fmt
            .with_ansi(colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let Some(endpoint) = otlp_endpoint.filter(|e| !e.is_empty()) else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Telemetry { provider: None });
    };
    let url = traces_url(endpoint)?;
    // The workspace's reqwest is built without a rustls provider of its own
    // (one TLS stack, ring, for the whole process): it must be installed
    // before the exporter's client is built, even for plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .build()
        .map_err(|e| TelemetryError::Exporter(endpoint.to_owned(), e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name("wasmlet")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("wasmlet"))
        .with_filter(Targets::new().with_target("wasmlet", LevelFilter::INFO));
    tracing_subscriber::registry().with(logs).with(spans).init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(!colour(false, None));
        assert!(!colour(true, Some("1".into())));
        // An empty NO_COLOR is unset, as no-color.org says.
        assert!(colour(true, Some("".into())));
    }

    #[test]
    fn a_base_url_gets_the_traces_path_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn endpoints_the_exporter_cannot_serve_are_refused_by_name() {
        for (endpoint, why) in [
            ("https://c:4318", "https is not supported"),
            ("file:///etc/passwd", "scheme \"file\""),
            ("c:4318", "scheme \"c\""),
            ("not a url", "relative URL"),
        ] {
            let e = traces_url(endpoint).unwrap_err().to_string();
            assert!(
                e.contains("--otlp-endpoint") && e.contains(why),
                "{endpoint}: {e}"
            );
        }
    }
}
