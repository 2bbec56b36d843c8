//! Bad input over raw HTTP: each gets a Status naming the problem, and the
//! server keeps serving (and its store stays consistent) afterwards.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::Value;
use wasmlet_e2e::*;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[track_caller]
fn assert_status(r: (u16, Value), code: u16, reason: &str, mentions: &str) {
    let (got, body) = r;
    assert_eq!(got, code, "body: {body}");
    assert_eq!(body["kind"], "Status", "not a Status: {body}");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], code);
    assert_eq!(body["reason"], reason, "{body}");
    let msg = body["message"].as_str().unwrap_or("");
    assert!(
        msg.to_lowercase().contains(&mentions.to_lowercase()),
        "message {msg:?} does not mention {mentions:?}"
    );
}

#[tokio::test]
async fn bad_requests_get_clear_status_errors() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let json = Some("application/json");

    // Malformed JSON.
    assert_status(
        plane.raw("POST", CMS, json, Some(b"{\"metadata\": {\"name\": \"x\"}"))?,
        400,
        "BadRequest",
        "json",
    );
    assert_status(
        plane.raw("POST", CMS, json, Some(b"[1, 2]"))?,
        400,
        "BadRequest",
        "object",
    );
    assert_status(
        plane.raw("POST", CMS, json, Some(b""))?,
        400,
        "BadRequest",
        "empty",
    );
    // Malformed YAML, as an apply body and as a YAML create.
    let bad_yaml: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n";
    assert_status(
        plane.raw(
            "PATCH",
            &format!("{CMS}/x?fieldManager=t"),
            Some("application/apply-patch+yaml"),
            Some(bad_yaml),
        )?,
        400,
        "BadRequest",
        "yaml",
    );
    assert_status(
        plane.raw("POST", CMS, Some("application/yaml"), Some(bad_yaml))?,
        400,
        "BadRequest",
        "yaml",
    );
    // Apply without a field manager: invalid PatchOptions, as upstream.
    assert_status(
        plane.raw(
            "PATCH",
            &format!("{CMS}/x"),
            Some("application/apply-patch+yaml"),
            Some(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
        )?,
        422,
        "Invalid",
        "fieldManager",
    );

    // Unknown resource paths and kinds: 404.
    let (code, body) = plane.raw("GET", "/api/v1/namespaces/default/widgets", None, None)?;
    assert_eq!(
        (code, body["reason"].as_str()),
        (404, Some("NotFound")),
        "{body}"
    );
    let (code, _) = plane.raw("GET", "/apis/nosuch.example.com/v1/things", None, None)?;
    assert_eq!(code, 404);
    let (code, _) = plane.raw("GET", "/api/v7/pods", None, None)?;
    assert_eq!(code, 404);
    let (code, _) = plane.raw(
        "GET",
        "/api/v1/namespaces/default/configmaps/x/bogus-subresource",
        None,
        None,
    )?;
    assert_eq!(code, 404);

    // Wrong apiVersion or kind in the body: 400 naming it.
    assert_status(
        plane.raw(
            "POST",
            CMS,
            json,
            Some(br#"{"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}"#),
        )?,
        400,
        "BadRequest",
        "apps/v1",
    );
    assert_status(
        plane.raw(
            "POST",
            CMS,
            json,
            Some(br#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}"#),
        )?,
        400,
        "BadRequest",
        "Secret",
    );
    // Namespace in the body differs from the URL.
    assert_status(
        plane.raw("POST", CMS, json, Some(br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}"#))?,
        400,
        "BadRequest",
        "namespace",
    );

    // Names that are not DNS-1123: 422 naming metadata.name.
    for bad in [
        "Upper",
        "under_score",
        "-lead",
        "trail-",
        "dots..dots",
        &"x".repeat(254),
    ] {
        let body = format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{bad}"}}}}"#
        );
        let (code, s) = plane.raw("POST", CMS, json, Some(body.as_bytes()))?;
        assert_eq!(
            (code, s["reason"].as_str()),
            (422, Some("Invalid")),
            "name {bad:?}: {s}"
        );
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.name", "{s}");
    }
    let (code, s) = plane.raw(
        "POST",
        "/api/v1/namespaces",
        json,
        Some(br#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}"#),
    )?;
    assert_eq!(
        (code, s["reason"].as_str()),
        (422, Some("Invalid")),
        "namespaces must be DNS-1123 labels: {s}"
    );
    // Label values are validated too.
    let (code, s) = plane.raw(
        "POST",
        CMS,
        json,
        Some(br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "not valid!"}}}"#),
    )?;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");

    // A body over 3 MiB: 413.
    let big = format!(
        r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "big"}}, "data": {{"k": "{}"}}}}"#,
        "x".repeat(3 * 1024 * 1024 + 10)
    );
    let (code, s) = plane.raw("POST", CMS, json, Some(big.as_bytes()))?;
    assert_eq!(code, 413, "{s}");
    assert_eq!(s["kind"], "Status");
    // Just under the limit is fine (upstream's limit is on the request body; etcd's 1.5 MiB object
    // limit does not apply here, so this only proves the 413 is about size).
    let ok = format!(
        r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "almost"}}, "data": {{"k": "{}"}}}}"#,
        "x".repeat(1024 * 1024)
    );
    assert_eq!(plane.raw("POST", CMS, json, Some(ok.as_bytes()))?.0, 201);

    // Unknown patch content type: 415. Protobuf bodies: 415.
    plane.raw(
        "POST",
        CMS,
        json,
        Some(br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"}}"#),
    )?;
    assert_status(
        plane.raw(
            "PATCH",
            &format!("{CMS}/target"),
            Some("application/x-unknown-patch"),
            Some(b"{}"),
        )?,
        415,
        "UnsupportedMediaType",
        "application/x-unknown-patch",
    );
    assert_status(
        plane.raw(
            "POST",
            CMS,
            Some("application/vnd.kubernetes.protobuf"),
            Some(b"k8s\x00"),
        )?,
        // Protobuf is served for built-in kinds: an empty envelope is a 400
        // that says what is wrong with it.
        400,
        "BadRequest",
        "the protobuf body could not be decoded",
    );
    // A patch that is not JSON, a JSON patch that is not a list.
    assert_status(
        plane.raw(
            "PATCH",
            &format!("{CMS}/target"),
            Some("application/merge-patch+json"),
            Some(b"{nope"),
        )?,
        400,
        "BadRequest",
        "json",
    );
    let (code, _) = plane.raw(
        "PATCH",
        &format!("{CMS}/target"),
        Some("application/json-patch+json"),
        Some(br#"{"op": "add"}"#),
    )?;
    assert!(
        code == 400 || code == 422,
        "JSON patch that is not an array: {code}"
    );
    // Bad query parameters.
    assert_status(
        plane.raw("GET", &format!("{CMS}?limit=abc"), None, None)?,
        400,
        "BadRequest",
        "limit",
    );
    assert_status(
        plane.raw(
            "GET",
            &format!("{CMS}?watch=true&resourceVersion=abc"),
            None,
            None,
        )?,
        400,
        "BadRequest",
        "abc",
    );
    assert_status(
        plane.raw(
            "DELETE",
            &format!("{CMS}/target?propagationPolicy=Sideways"),
            None,
            None,
        )?,
        400,
        "BadRequest",
        "Sideways",
    );
    // Unsupported methods.
    let (code, _) = plane.raw("PUT", CMS, json, Some(b"{}"))?;
    assert_eq!(code, 405);

    // The server still serves, and only the good writes were stored.
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let names: Vec<String> = cms
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["almost", "target"]);
    cms.create(&PostParams::default(), &configmap("after", &[]))
        .await?;
    let (code, _) = plane.raw("GET", "/healthz", None, None)?;
    assert_eq!(code, 200);
    Ok(())
}

/// A port already in use ends `wasmlet up` with a message that names the
/// address and the flag that sets it (not a bare "Address already in use").
#[tokio::test]
async fn a_busy_port_names_the_address_and_the_flag() -> anyhow::Result<()> {
    let busy = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = busy.local_addr()?.to_string();
    let port = busy.local_addr()?.port().to_string();
    let cases: [(&[&str], &str); 2] = [
        (&["--port", &port], "--port"),
        (
            &[
                "--port",
                "0",
                "--metrics-addr",
                &addr,
                "--kubelet-port",
                "0",
            ],
            "--metrics-addr",
        ),
    ];
    for (flags, flag) in cases {
        let dir = tempfile::tempdir()?;
        let run = tokio::process::Command::new(wasmlet_bin())
            .arg("up")
            .arg("--data-dir")
            .arg(dir.path())
            .args(flags)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), run).await??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "wasmlet up {flags:?} started");
        assert!(
            stderr.contains(&addr) && stderr.contains(flag),
            "the error names {addr} and {flag}: {stderr}"
        );
    }
    Ok(())
}
