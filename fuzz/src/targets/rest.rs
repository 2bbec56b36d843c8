//! Requests to the embedded API server, through its real handler
//! ([`wasmlet_apiserver::internals::dispatch`]) on a server in a temp directory:
//! path parsing, query parameters, JSON/YAML/patch/protobuf bodies.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbitrary::{Result, Unstructured};
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, Request, header};
use wasmlet_apiserver::internals::{ApiState, dispatch};
use wasmlet_apiserver::{ApiServer, Config};

use crate::generate;

struct Server {
    runtime: tokio::runtime::Runtime,
    state: Arc<ApiState>,
    _dir: tempfile::TempDir,
}

/// One server per process: starting one takes a while, and state left by
/// earlier inputs (objects, CRDs) is more to trip over.
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temp dir");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let server = runtime
            .block_on(ApiServer::start(Config {
                data_dir: dir.path().into(),
                listen: ([127, 0, 0, 1], 0).into(),
                history: 1000,
                ..Default::default()
            }))
            .expect("the API server starts");
        Server {
            runtime,
            state: server.state,
            _dir: dir,
        }
    })
}

const PREFIXES: &[&str] = &[
    "/api/v1",
    "/apis/apps/v1",
    "/apis/authorization.k8s.io/v1",
    "/apis/apiextensions.k8s.io/v1",
    "/apis/coordination.k8s.io/v1",
    "/apis/authentication.k8s.io/v1",
    "/apis/x/v1",
    "/api",
    "/apis/examples.wasmlet.dev/v1",
];
const RESOURCES: &[&str] = &[
    "pods",
    "configmaps",
    "namespaces",
    "nodes",
    "deployments",
    "replicasets",
    "events",
    "leases",
    "selfsubjectaccessreviews",
    "subjectaccessreviews",
    "tokenreviews",
    "customresourcedefinitions",
    "secrets",
    "services",
    "serviceaccounts",
    "configsummaries",
    "bogus",
];
const SUBRESOURCES: &[&str] = &[
    "status", "scale", "log", "binding", "eviction", "finalize", "token", "x",
];
const PARAMS: &[&str] = &[
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "timeoutSeconds",
    "watch",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "fieldManager",
    "force",
    "dryRun",
    "fieldValidation",
    "gracePeriodSeconds",
    "propagationPolicy",
    "orphanDependents",
    "tailLines",
    "limitBytes",
    "container",
    "follow",
    "previous",
    "sinceSeconds",
    "timestamps",
];
const PARAM_VALUES: &[&str] = &[
    "true",
    "1",
    "0",
    "-1",
    "",
    "All",
    "Strict",
    "Warn",
    "Ignore",
    "Orphan",
    "Foreground",
    "NotOlderThan",
    "Exact",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "a=b",
    "a in (b)",
    "!a",
    "metadata.name=a",
    "spec.nodeName!=x",
    "status.phase==Running",
    "eyJydiI6MX0",
    "kubectl",
    "1e3",
];
const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+json",
    "application/vnd.kubernetes.protobuf",
    "application/cbor",
    "text/plain",
];
const ACCEPTS: &[&str] = &[
    "",
    "application/json",
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/vnd.kubernetes.protobuf",
    "*/*",
];

/// Percent-encodes everything but unreserved characters.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn name(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=3)? {
        0 => "a".into(),
        1 => "default".into(),
        2 => "b".into(),
        _ => generate::word(u)?,
    })
}

fn path(u: &mut Unstructured) -> Result<String> {
    let mut p = u.choose(PREFIXES)?.to_string();
    if u.ratio(1, 8)? {
        p.push_str("/watch");
    }
    if u.ratio(1, 2)? {
        p.push_str(&format!("/namespaces/{}", segment(&name(u)?)));
    }
    p.push('/');
    p.push_str(u.choose(RESOURCES)?);
    if u.ratio(1, 2)? {
        p.push_str(&format!("/{}", segment(&name(u)?)));
        if u.ratio(1, 3)? {
            p.push_str(&format!("/{}", u.choose(SUBRESOURCES)?));
        }
    }
    Ok(p)
}

/// A protobuf message: length-delimited fields (strings or nested
/// messages) mostly, other wire types and garbage sometimes.
fn protobuf(u: &mut Unstructured, depth: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(0..=5)? {
        let field: u8 = u.int_in_range(1..=8)?;
        match u.int_in_range(0..=9)? {
            0 => out.extend([field << 3, u.arbitrary()?]),
            1 => out.extend([(field << 3) | 1, 0, 0, 0, 0, 0, 0, 0, 0]),
            2 => {
                let n = u.int_in_range(0..=4)?;
                out.extend(u.bytes(n)?)
            }
            n => {
                let body = if n < 6 && depth > 0 {
                    protobuf(u, depth - 1)?
                } else {
                    generate::word(u)?.into_bytes()
                };
                out.push((field << 3) | 2);
                // Lengths up to 127 fit one varint byte; longer are cut.
                let len = body.len().min(127);
                out.push(len as u8);
                out.extend(&body[..len]);
            }
        }
    }
    Ok(out)
}

fn body(u: &mut Unstructured) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=5)? {
        0 | 1 => serde_json::to_vec(&generate::resource(u, 4)?).unwrap_or_default(),
        2 => {
            // YAML: JSON is YAML; add block-style text too.
            let v = generate::resource(u, 3)?;
            format!("{}\nspec:\n  x: [1, {{a: b}}]\n  y: &a {{}}\n  z: *a\n", v).into_bytes()
        }
        3 => {
            let review = protobuf(u, 3)?;
            let mut b = b"k8s\0".to_vec();
            b.extend([0x0a, 0x19, 0x12, 0x17]);
            b.extend(b"SelfSubjectAccessReview");
            b.push(0x12);
            b.push(review.len().min(127) as u8);
            b.extend(&review[..review.len().min(127)]);
            b
        }
        4 => {
            let ops = generate::value(u, 3)?;
            serde_json::to_vec(
                &serde_json::json!([{"op": "add", "path": "/metadata/labels", "value": ops}]),
            )
            .unwrap_or_default()
        }
        _ => {
            let n = u.int_in_range(0..=64)?;
            u.bytes(n)?.to_vec()
        }
    })
}

fn request(u: &mut Unstructured) -> Result<Request<Body>> {
    let method = u.choose(&[
        Method::GET,
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
    ])?;
    let mut uri = path(u)?;
    let mut q = url_query(u)?;
    if !q.is_empty() {
        uri.push('?');
        uri.push_str(&std::mem::take(&mut q));
    }
    let mut req = Request::builder().method(method.clone()).uri(uri);
    req = req.header(header::CONTENT_TYPE, *u.choose(CONTENT_TYPES)?);
    let accept = *u.choose(ACCEPTS)?;
    if !accept.is_empty() {
        req = req.header(header::ACCEPT, accept);
    }
    if u.ratio(1, 8)? {
        req = req.header("impersonate-user", "system:serviceaccount:default:x");
        req = req.header("impersonate-group", "system:authenticated");
    }
    let body = body(u)?;
    req.body(Body::from(body))
        .map_err(|_| arbitrary::Error::IncorrectFormat)
}

fn url_query(u: &mut Unstructured) -> Result<String> {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for _ in 0..u.int_in_range(0..=4)? {
        let key = u.choose(PARAMS)?;
        let value = if u.ratio(3, 4)? {
            u.choose(PARAM_VALUES)?.to_string()
        } else {
            generate::short_string(u)?
        };
        q.append_pair(key, &value);
    }
    Ok(q.finish())
}

pub fn rest(data: &[u8]) {
    let Ok(req) = request(&mut Unstructured::new(data)) else {
        return;
    };
    let shown = format!("{} {}", req.method(), req.uri());
    let s = server();
    s.runtime.block_on(async {
        let response = tokio::time::timeout(
            Duration::from_secs(20),
            dispatch(State(s.state.clone()), req),
        )
        .await
        .unwrap_or_else(|_| panic!("{shown}: no response within 20 s"));
        let status = response.status().as_u16();
        // pods/log proxies to a kubelet, and none runs here: its 500 is expected.
        assert!(
            status != 500 || shown.contains("/log"),
            "{shown}: 500 Internal Server Error"
        );
        // Reads what the body has now: whole for a plain response, the
        // first events for a watch (which would stream on).
        let _ = tokio::time::timeout(
            Duration::from_millis(20),
            axum::body::to_bytes(response.into_body(), 8 << 20),
        )
        .await;
    });
}
