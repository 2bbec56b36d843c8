//! The kubelet API of the node agent authorizes every caller as a kubelet
//! does (issue 8 finding 2): authentication alone (a client certificate the
//! CA signed, a token the API server knows) reads no pod's logs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use wasmlet_e2e::{Plane, eventually, install_plugin};

/// A client certificate for `user` signed by the plane's CA, written as
/// `DIR/user.crt` and `DIR/user.key`.
fn client_cert(plane: &Plane, dir: &Path, user: &str) -> Result<()> {
    let pki = plane.data_dir().join("pki");
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca.key"))?)?;
    let ca =
        rcgen::Issuer::from_ca_cert_pem(&std::fs::read_to_string(pki.join("ca.crt"))?, ca_key)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    std::fs::write(dir.join(format!("{user}.crt")), cert.pem())?;
    std::fs::write(dir.join(format!("{user}.key")), key.serialize_pem())?;
    Ok(())
}

/// `GET url` with curl and `auth` (its extra arguments): (HTTP status, body).
fn get(url: &str, auth: &[&str]) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}"])
        .args(auth)
        .arg(url)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').context("curl printed no status")?;
    Ok((code.trim().parse()?, body.to_string()))
}

#[tokio::test]
async fn authenticated_callers_without_the_permission_read_no_logs() -> Result<()> {
    let node = "node-authz";
    let plane = Plane::start_up(&["--node-name", node]).await?;
    install_plugin(&plane.plugin_dir(), "wasi-runner")?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let port = eventually(
        Duration::from_secs(30),
        "the node's kubelet port",
        || async {
            let n = nodes.get_opt(node).await.ok().flatten()?;
            Some(n.status?.daemon_endpoints?.kubelet_endpoint?.port)
        },
    )
    .await?;
    let url = format!("https://127.0.0.1:{port}/containerLogs/default/victim/main");
    let dir = tempfile::tempdir()?;
    client_cert(&plane, dir.path(), "mallory")?;
    let (crt, key) = (
        dir.path().join("mallory.crt"),
        dir.path().join("mallory.key"),
    );
    let mallory = [
        "--cert",
        crt.to_str().context("utf-8")?,
        "--key",
        key.to_str().context("utf-8")?,
    ];

    // A certificate the cluster CA signed, but for a user with no rights on
    // nodes/proxy: 403 before any pod is looked at.
    let (code, body) = get(&url, &mallory)?;
    assert_eq!(code, 403, "mallory got through: {body}");
    assert!(
        body.contains("mallory") && body.contains("nodes") && body.contains("proxy"),
        "the refusal names the user and the permission: {body}"
    );

    // No credentials: 401. A token the API server does not know: 401.
    assert_eq!(get(&url, &[])?.0, 401);
    assert_eq!(
        get(&url, &["-H", "Authorization: Bearer not-a-token"])?.0,
        401
    );

    // The admin's token is authorized: the request reaches the pod lookup.
    let token = std::fs::read_to_string(plane.data_dir().join("pki").join("token"))?;
    let bearer = format!("Authorization: Bearer {}", token.trim());
    let (code, body) = get(&url, &["-H", &bearer])?;
    assert_eq!(code, 404, "the admin is authorized: {body}");
    assert!(body.contains("victim"), "{body}");

    // The same questions through kubectl, which asks the plane's access reviews.
    let can = |args: &[&str]| -> Result<String> {
        let out = plane.kubectl(args)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    assert_eq!(can(&["auth", "can-i", "get", "pods"])?, "yes");
    let proxy = format!("nodes/{node}");
    let as_mallory = [
        "auth",
        "can-i",
        "get",
        &proxy,
        "--subresource",
        "proxy",
        "--as",
        "mallory",
    ];
    let answer = can(&as_mallory)?;
    assert!(answer.starts_with("no"), "{answer}");
    Ok(())
}
