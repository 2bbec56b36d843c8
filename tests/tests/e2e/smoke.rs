//! The plane starts, authenticates, and serves a kube client.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use wasmlet_e2e::Plane;

#[tokio::test]
async fn serves_kube_client_and_refuses_anonymous() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for ns in ["default", "kube-system", "kube-node-lease"] {
        assert!(
            names.contains(&ns.to_string()),
            "{ns} missing from {names:?}"
        );
    }
    // No token: 401 with a Status body.
    let (server, _) = plane.endpoint()?;
    let out = std::process::Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{server}/api/v1/namespaces"),
        ])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    Ok(())
}
