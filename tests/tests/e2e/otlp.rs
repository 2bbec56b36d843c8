//! The host's spans reach an OpenTelemetry collector: `wasmlet up
//! --otlp-endpoint URL` posts OTLP/HTTP protobuf to `URL/v1/traces`. The test
//! plays the collector (a local HTTP server decoding the OTLP messages) and
//! checks that the scheduler's reconciles and a pod's states arrive as spans
//! with the attributes a person filters on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, ensure};
use axum::body::Bytes;
use axum::routing::post;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::json;
use wasmlet_e2e::eventually;
use wasmlet_e2e::workload_plane::{self, sleeper_spec};

/// One exported span: its name, its attributes as strings, and the service
/// name of the resource it came from.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    attributes: Vec<(String, String)>,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn pairs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// A collector on 127.0.0.1: every span of every request it was sent.
async fn collector() -> Result<(String, Arc<Mutex<Vec<Span>>>)> {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let sink = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                let mut out = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .as_ref()
                        .map(|r| pairs(&r.attributes))
                        .unwrap_or_default()
                        .into_iter()
                        .find(|(k, _)| k == "service.name")
                        .map(|(_, v)| v)
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            out.push(Span {
                                service: service.clone(),
                                name: s.name,
                                attributes: pairs(&s.attributes),
                            });
                        }
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{addr}"), spans))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_and_pod_state_spans_reach_the_collector() -> Result<()> {
    let (endpoint, spans) = collector().await?;
    let (plane, client) =
        workload_plane::start_with("scheduler,wasi-runner", &["--otlp-endpoint", &endpoint])
            .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "traced"},
        "spec": sleeper_spec(),
    }))?;
    pods.create(&PostParams::default(), &pod).await?;

    let seen = |f: &dyn Fn(&Span) -> bool| spans.lock().unwrap().iter().any(f);
    let found = eventually(
        Duration::from_secs(120),
        "the scheduler's reconcile and the pod's Running state as spans",
        || async {
            let scheduled = seen(&|s| {
                s.name == "reconcile"
                    && s.attr("plugin") == Some("scheduler")
                    && s.attr("key") == Some("default/traced")
                    && s.attr("outcome").is_some_and(|o| !o.is_empty())
            });
            let running = seen(&|s| {
                s.name == "pod_state"
                    && s.attr("pod") == Some("default/traced")
                    && s.attr("provider") == Some("wasi-runner")
                    && s.attr("state") == Some("Running")
            });
            (scheduled && running).then_some(())
        },
    )
    .await;
    if let Err(e) = found {
        let names: Vec<String> = spans
            .lock()
            .unwrap()
            .iter()
            .map(|s| format!("{} {:?}", s.name, s.attributes))
            .take(40)
            .collect();
        anyhow::bail!("{e}; spans: {names:#?}; log:\n{}", plane.log());
    }
    let all = spans.lock().unwrap().clone();
    ensure!(
        all.iter().all(|s| s.service == "wasmlet"),
        "every span names the service: {:?}",
        all.iter().map(|s| &s.service).collect::<Vec<_>>()
    );
    // Only the host's own spans: none of the client libraries' internals.
    ensure!(
        all.iter()
            .all(|s| s.name == "reconcile" || s.name == "pod_state"),
        "unexpected spans: {:?}",
        all.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn an_endpoint_the_exporter_cannot_use_stops_the_host_with_its_name() -> Result<()> {
    let out = std::process::Command::new(wasmlet_e2e::wasmlet_bin())
        .args([
            "run",
            "--otlp-endpoint",
            "https://collector:4318",
            "--kubeconfig",
            "/nonexistent",
        ])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "exit: {:?}", out.status);
    ensure!(
        err.contains("--otlp-endpoint \"https://collector:4318\"") && err.contains("https"),
        "stderr: {err}"
    );
    Ok(())
}
