//! Authorization in the embedded plane (issue 8): RBAC Roles and bindings
//! decide what each user may do, refusals read as upstream's, and
//! `kubectl auth can-i` agrees with what requests actually get.

use anyhow::Result;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use wasmlet_e2e::{Plane, expect_status};

/// Creates an RBAC object through the kube client (JSON). `kubectl create
/// rolebinding` and friends send protobuf, which the embedded plane does not
/// read for these kinds.
async fn create_rbac(client: &kube::Client, v: serde_json::Value) -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let pp = PostParams::default();
    let ns = v["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let c = client.clone();
    match v["kind"].as_str().unwrap_or("") {
        "Role" => drop(
            Api::<Role>::namespaced(c, &ns)
                .create(&pp, &serde_json::from_value(v)?)
                .await?,
        ),
        "RoleBinding" => drop(
            Api::<RoleBinding>::namespaced(c, &ns)
                .create(&pp, &serde_json::from_value(v)?)
                .await?,
        ),
        "ClusterRole" => drop(
            Api::<ClusterRole>::all(c)
                .create(&pp, &serde_json::from_value(v)?)
                .await?,
        ),
        "ClusterRoleBinding" => drop(
            Api::<ClusterRoleBinding>::all(c)
                .create(&pp, &serde_json::from_value(v)?)
                .await?,
        ),
        other => anyhow::bail!("not an RBAC kind: {other}"),
    }
    Ok(())
}

/// A binding of `role` (`Role` or `ClusterRole`) to one subject.
fn binding(
    kind: &str,
    name: &str,
    ns: &str,
    role: (&str, &str),
    subject: serde_json::Value,
) -> serde_json::Value {
    let mut subject = subject;
    if subject["kind"] != "ServiceAccount" {
        subject["apiGroup"] = "rbac.authorization.k8s.io".into();
    }
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
        "subjects": [subject],
    })
}

async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_its_namespace_only() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    namespace(&admin, "a").await?;
    namespace(&admin, "b").await?;
    Api::<Pod>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &wasmlet_e2e::pod("existing"))
        .await?;
    // The default ClusterRoles exist from the first start.
    for role in ["cluster-admin", "admin", "edit", "view"] {
        plane.kubectl_ok(&["get", "clusterrole", role])?;
    }
    create_rbac(
        &admin,
        binding(
            "RoleBinding",
            "alice-view",
            "a",
            ("ClusterRole", "view"),
            serde_json::json!({"kind": "User", "name": "alice"}),
        ),
    )
    .await?;

    let alice = plane.client_as("alice").await?;
    let pods_a = Api::<Pod>::namespaced(alice.clone(), "a");
    let listed = pods_a.list(&ListParams::default()).await?;
    assert_eq!(listed.items.len(), 1);

    let s = expect_status(
        pods_a
            .create(&PostParams::default(), &wasmlet_e2e::pod("new"))
            .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods is forbidden: User \"alice\" cannot create resource \"pods\" in API group \"\" in the namespace \"a\""
    );
    let s = expect_status(
        Api::<Pod>::namespaced(alice.clone(), "b")
            .list(&ListParams::default())
            .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"b\""
    );
    // Secrets are not in `view`.
    expect_status(
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(alice.clone(), "a")
            .list(&ListParams::default())
            .await,
        403,
        "Forbidden",
    );

    // kubectl's access reviews give the same answers.
    let can = |args: &[&str]| -> Result<String> {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", "alice"]);
        let out = plane.kubectl(&all)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    assert_eq!(can(&["list", "pods", "-n", "a"])?, "yes");
    assert_eq!(can(&["get", "pods/log", "-n", "a"])?, "yes");
    assert_eq!(can(&["create", "pods", "-n", "a"])?, "no");
    assert_eq!(can(&["list", "pods", "-n", "b"])?, "no");
    assert_eq!(can(&["list", "secrets", "-n", "a"])?, "no");

    // kubectl shows the refusal as upstream's.
    let out = plane.kubectl(&["get", "pods", "-n", "b", "--as", "alice"])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"b\""
        ),
        "{err}"
    );

    // Removing the binding takes the access away.
    plane.kubectl_ok(&["delete", "rolebinding", "alice-view", "-n", "a"])?;
    expect_status(pods_a.list(&ListParams::default()).await, 403, "Forbidden");
    Ok(())
}

/// A Role with resourceNames grants exactly those objects; a ClusterRole
/// bound cluster-wide grants every namespace; impersonating needs the
/// `impersonate` verb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_bindings_and_impersonation() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin.clone(), "default");
    for name in ["open", "closed"] {
        cms.create(&PostParams::default(), &wasmlet_e2e::configmap(name, &[]))
            .await?;
    }
    let admin = plane.client().await?;
    create_rbac(
        &admin,
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "one-cm", "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["open"]}]}),
    )
    .await?;
    create_rbac(
        &admin,
        binding(
            "RoleBinding",
            "bob-one-cm",
            "default",
            ("Role", "one-cm"),
            serde_json::json!({"kind": "User", "name": "bob"}),
        ),
    )
    .await?;
    let as_bob = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--as", "bob"]);
        plane.kubectl(&all)
    };
    assert!(as_bob(&["get", "cm", "open"])?.status.success());
    let out = as_bob(&["get", "cm", "closed"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "configmaps \"closed\" is forbidden: User \"bob\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Group subjects and ClusterRoleBindings.
    create_rbac(
        &admin,
        binding(
            "ClusterRoleBinding",
            "ops-view",
            "",
            ("ClusterRole", "view"),
            serde_json::json!({"kind": "Group", "name": "ops"}),
        ),
    )
    .await?;
    assert!(
        plane
            .kubectl(&["get", "pods", "-A", "--as", "carol", "--as-group", "ops"])?
            .status
            .success()
    );
    assert!(
        !plane
            .kubectl(&["get", "pods", "-A", "--as", "carol"])?
            .status
            .success()
    );

    // Impersonation is a permission of its own, which bob lacks.
    let out = plane.kubectl(&["auth", "can-i", "impersonate", "users", "--as", "bob"])?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    Ok(())
}

/// The node agent authenticates with its own certificate
/// (`system:node:NAME` in `system:nodes`) and the Node authorizer confines
/// it: it reads the secrets its pods reference, not others, and writes its
/// own Node only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_identity_reads_only_what_its_pods_reference() -> Result<()> {
    use k8s_openapi::api::core::v1::{Node, Secret};
    use kube::api::{Patch, PatchParams};
    let plane = Plane::start_up(&["--node-name", "n1"]).await?;
    wasmlet_e2e::install_plugin(&plane.plugin_dir(), "wasi-runner")?;
    let admin = plane.client().await?;
    let node = plane.identity_client("kubeconfig-node").await?;
    // The agent registers its Node through that identity.
    let nodes = Api::<Node>::all(admin.clone());
    wasmlet_e2e::eventually(
        std::time::Duration::from_secs(30),
        "Node n1 registered",
        || async { nodes.get_opt("n1").await.ok().flatten() },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    let log = plane.log();
    assert!(
        !log.contains("is forbidden"),
        "the agent was refused: {log}"
    );

    let secrets = Api::<Secret>::namespaced(admin.clone(), "default");
    for name in ["mine", "unrelated"] {
        let s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "stringData": {"k": "v"}}))?;
        secrets.create(&PostParams::default(), &s).await?;
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "uses-mine"},
        "spec": {"nodeName": "n1",
                 "containers": [{"name": "m", "image": "file:///nonexistent.wasm"}],
                 "volumes": [{"name": "s", "secret": {"secretName": "mine"}}]}}))?;
    Api::<Pod>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await?;

    let as_node = Api::<Secret>::namespaced(node.clone(), "default");
    as_node.get("mine").await?;
    let s = expect_status(as_node.get("unrelated").await, 403, "Forbidden");
    assert_eq!(
        s.message,
        "secrets \"unrelated\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    expect_status(as_node.list(&ListParams::default()).await, 403, "Forbidden");

    // Its own Node, not another's.
    let other: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n2"}}))?;
    nodes.create(&PostParams::default(), &other).await?;
    let label = serde_json::json!({"metadata": {"labels": {"x": "y"}}});
    let node_nodes = Api::<Node>::all(node.clone());
    node_nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    expect_status(
        node_nodes
            .patch("n2", &PatchParams::default(), &Patch::Merge(&label))
            .await,
        403,
        "Forbidden",
    );

    // The controller host has its own identity too.
    let controller = plane.identity_client("kubeconfig-controller").await?;
    Api::<Secret>::namespaced(controller, "default")
        .list(&ListParams::default())
        .await?;
    Ok(())
}

/// Requests a token for ServiceAccount `ns/name` (TokenRequest).
async fn request_token(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<serde_json::Value, kube::Error> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_subresource("token", name, &PostParams::default(), &body)
        .await
}

/// A client authenticating with `token` (the admin kubeconfig with its
/// token replaced).
async fn token_client(plane: &Plane, token: &str) -> Result<kube::Client> {
    let text = std::fs::read_to_string(plane.kubeconfig())?;
    let text: String = text
        .lines()
        .map(|l| match l.trim().strip_prefix("token:") {
            Some(_) => format!("    token: {token}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let path = plane
        .data_dir()
        .join(format!("kubeconfig-{}", &token[token.len() - 8..]));
    std::fs::write(&path, text)?;
    let kc = kube::config::Kubeconfig::read_from(&path)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// TokenRequest issues bound tokens; requests made with them act as the
/// ServiceAccount (authorized by RBAC), TokenReview validates them with their
/// audiences, and a token dies with its ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    namespace(&admin, "a").await?;
    namespace(&admin, "b").await?;
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "robot"}}))?;
    let sas = Api::<ServiceAccount>::namespaced(admin.clone(), "a");
    sas.create(&PostParams::default(), &sa).await?;
    create_rbac(
        &admin,
        binding(
            "RoleBinding",
            "robot-view",
            "a",
            ("ClusterRole", "view"),
            serde_json::json!({"kind": "ServiceAccount", "name": "robot", "namespace": "a"}),
        ),
    )
    .await?;

    let answer = request_token(
        &admin,
        "a",
        "robot",
        serde_json::json!({"expirationSeconds": 600}),
    )
    .await?;
    let token = answer["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    assert!(
        answer["status"]["expirationTimestamp"].is_string(),
        "{answer}"
    );

    let robot = token_client(&plane, &token).await?;
    Api::<Pod>::namespaced(robot.clone(), "a")
        .list(&ListParams::default())
        .await?;
    let s = expect_status(
        Api::<Pod>::namespaced(robot.clone(), "b")
            .list(&ListParams::default())
            .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods is forbidden: User \"system:serviceaccount:a:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"b\""
    );
    // Attack: the ServiceAccount tries to become the admin by impersonation.
    let kc_path = plane
        .data_dir()
        .join(format!("kubeconfig-{}", &token[token.len() - 8..]));
    let kc = kube::config::Kubeconfig::read_from(&kc_path)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info.impersonate = Some("wasmlet-admin".into());
    config.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
    let escalated = kube::Client::try_from(config)?;
    expect_status(
        Api::<Pod>::namespaced(escalated, "b")
            .list(&ListParams::default())
            .await,
        403,
        "Forbidden",
    );

    // TokenReview: the ServiceAccount's user and groups.
    let review = |token: String, audiences: Vec<&str>| {
        let admin = admin.clone();
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences}});
        async move {
            let req = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body)?)?;
            anyhow::Ok(admin.request::<serde_json::Value>(req).await?)
        }
    };
    let r = review(token.clone(), vec![]).await?;
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(
        r["status"]["user"]["username"],
        "system:serviceaccount:a:robot"
    );
    let groups = r["status"]["user"]["groups"].to_string();
    assert!(groups.contains("system:serviceaccounts:a"), "{groups}");

    // A token for another audience is good for that audience only.
    let vault = request_token(
        &admin,
        "a",
        "robot",
        serde_json::json!({"audiences": ["vault"]}),
    )
    .await?;
    let vault = vault["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    let r = review(vault.clone(), vec!["vault"]).await?;
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(r["status"]["audiences"], serde_json::json!(["vault"]));
    let r = review(vault.clone(), vec![]).await?;
    assert_eq!(r["status"]["authenticated"], false, "{r}");
    expect_status(
        Api::<Pod>::namespaced(token_client(&plane, &vault).await?, "a")
            .list(&ListParams::default())
            .await,
        401,
        "Unauthorized",
    );
    // A forged token (the payload altered, the signature kept) is refused.
    let mut parts: Vec<String> = token.split('.').map(String::from).collect();
    let forged = parts[1].replace('a', "b");
    assert_ne!(forged, parts[1]);
    parts[1] = forged;
    let r = review(parts.join("."), vec![]).await?;
    assert_eq!(r["status"]["authenticated"], false, "{r}");

    // The token dies with its ServiceAccount.
    sas.delete("robot", &Default::default()).await?;
    expect_status(
        Api::<Pod>::namespaced(robot, "a")
            .list(&ListParams::default())
            .await,
        401,
        "Unauthorized",
    );
    Ok(())
}

/// `wasmlet plugin check` prints the ClusterRole a shipped plugin needs; the
/// embedded plane accepts it (server-side dry run), and bound to a user it
/// grants what the host does for the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_check_prints_a_cluster_role() -> Result<()> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let plane = Plane::start(&[]).await?;
    let check = Command::new(wasmlet_e2e::wasmlet_bin())
        .args(["plugin", "check"])
        .arg(wasmlet_e2e::built_plugins().join("configmap-summary.toml"))
        .output()?;
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let yaml = String::from_utf8(check.stdout)?;
    let apply = |extra: &[&str]| -> Result<String> {
        let mut child = Command::new(wasmlet_e2e::kubectl_bin())
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .args(["apply", "-f", "-"])
            .args(extra)
            .env("HOME", plane.data_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())?;
        let out = child.wait_with_output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let out = apply(&["--dry-run=server"])?;
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/wasmlet-plugin-configmap-summary created (server dry run)"),
        "{out}"
    );
    apply(&[])?;
    let crd = wasmlet_e2e::built_plugins().join("configsummary.crd.yaml");
    plane.kubectl_ok(&["apply", "-f", &crd.display().to_string()])?;
    create_rbac(
        &plane.client().await?,
        binding(
            "ClusterRoleBinding",
            "summary-host",
            "",
            ("ClusterRole", "wasmlet-plugin-configmap-summary"),
            serde_json::json!({"kind": "User", "name": "summary-host"}),
        ),
    )
    .await?;
    let can = |args: &[&str]| -> Result<String> {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", "summary-host", "-A"]);
        let out = plane.kubectl(&all)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    assert_eq!(
        can(&["watch", "configsummaries.examples.wasmlet.dev"])?,
        "yes"
    );
    assert_eq!(
        can(&[
            "patch",
            "configsummaries.examples.wasmlet.dev",
            "--subresource",
            "status"
        ])?,
        "yes"
    );
    assert_eq!(can(&["list", "configmaps"])?, "yes");
    assert_eq!(can(&["create", "events.events.k8s.io"])?, "yes");
    assert_eq!(can(&["delete", "configmaps"])?, "no");
    assert_eq!(can(&["get", "secrets"])?, "no");
    Ok(())
}

/// Attack: a user who may only list ConfigMaps asks for a watch spelled
/// `watch=True` (Go's `ParseBool` reads it, and so does the Python client).
/// Authorization must read it as the handler does: a watch, refused.
#[tokio::test]
async fn a_list_only_user_cannot_watch_by_spelling_it_differently() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    create_rbac(
        &admin,
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "lister", "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        }),
    )
    .await?;
    create_rbac(
        &admin,
        binding(
            "RoleBinding",
            "lister",
            "default",
            ("Role", "lister"),
            serde_json::json!({"kind": "User", "name": "lister"}),
        ),
    )
    .await?;
    let lister = plane.client_as("lister").await?;
    let get = |q: &str| {
        http::Request::get(format!("/api/v1/namespaces/default/configmaps{q}"))
            .body(Vec::new())
            .expect("a request")
    };
    lister.request_text(get("")).await?;
    for spelling in ["true", "True", "1", "t"] {
        // Refused at once; served, it would end after its 1 s.
        let watch = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            lister.request_text(get(&format!("?watch={spelling}&timeoutSeconds=1"))),
        )
        .await?;
        match watch {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "watch={spelling}: {s:?}"),
            other => panic!("watch={spelling} was served to a list-only user: {other:?}"),
        }
    }
    Ok(())
}
