//! Issue 30 rows 1 and 2, request amplification, against the real binary: a
//! JSON patch whose copies double the object's depth or size, and a Role whose
//! one rule holds millions of permissions, used to abort the process. Each is
//! now refused with upstream's status, while another client's writes and
//! watches go on and nothing stored changes.

use std::time::Duration;

use anyhow::Result;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use serde_json::{Value, json};
use wasmlet_e2e::{Plane, configmap, create_json as create, expect_status};

const RBAC: &str = "rbac.authorization.k8s.io";

/// Namespace `ns`, and `user` bound there to `role` (a Role or ClusterRole).
async fn grant(admin: &kube::Client, ns: &str, user: &str, role: (&str, &str)) -> Result<()> {
    create(
        &Api::<Namespace>::all(admin.clone()),
        json!({"metadata": {"name": ns}}),
    )
    .await?;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), ns),
        json!({
            "metadata": {"name": format!("{user}-binding")},
            "roleRef": {"apiGroup": RBAC, "kind": role.0, "name": role.1},
            "subjects": [{"kind": "User", "apiGroup": RBAC, "name": user}],
        }),
    )
    .await?;
    Ok(())
}

/// A watch on config maps in `ns` from now, and a check that it sees `name` created.
struct Watching {
    api: Api<ConfigMap>,
    stream: futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>,
}

impl Watching {
    async fn open(api: Api<ConfigMap>) -> Result<Watching> {
        let stream = wasmlet_e2e::watch_from_now(&api).await?;
        Ok(Watching { api, stream })
    }

    /// Another client's write succeeds and the open watch delivers it.
    async fn write_and_see(&mut self, name: &str) -> Result<()> {
        self.api
            .create(&PostParams::default(), &configmap(name, &[("k", "v")]))
            .await?;
        loop {
            let next = tokio::time::timeout(Duration::from_secs(60), self.stream.try_next()).await;
            match next {
                Ok(Ok(Some(WatchEvent::Added(cm))))
                    if cm.metadata.name.as_deref() == Some(name) =>
                {
                    return Ok(());
                }
                Ok(Ok(Some(_))) => {}
                other => anyhow::bail!("the watch did not deliver {name}: {other:?}"),
            }
        }
    }
}

/// Patches of `n` ops that copy `/spec` into its own deepest point, each op
/// doubling its depth (about 64 KB at 15 ops).
fn depth_doubling(n: u32) -> Value {
    let mut ops = vec![json!({"op": "add", "path": "/spec", "value": {"x": {}}})];
    let mut deepest = "/spec/x".to_string();
    for k in 0..n {
        ops.push(json!({"op": "copy", "from": "/spec", "path": format!("{deepest}/x")}));
        deepest.push_str(&"/x".repeat(1 << k));
    }
    Value::Array(ops)
}

/// A 2 KB patch whose copies double `/spec`'s size 40 times.
fn size_doubling() -> Value {
    let mut ops = vec![json!({"op": "add", "path": "/spec", "value": {"a": ["x".repeat(1000)]}})];
    ops.extend((0..40).map(|_| json!({"op": "copy", "from": "/spec/a", "path": "/spec/a/-"})));
    Value::Array(ops)
}

/// Row 1: mallory may only get and patch one config map. Her amplifying JSON
/// patches get 422/413 naming the op; the plane keeps serving the admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amplifying_json_patches_are_refused() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    create(
        &Api::<Role>::namespaced(admin.clone(), "default"),
        json!({"metadata": {"name": "patch-one"}, "rules": [{
            "apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["target"], "verbs": ["get", "patch"],
        }]}),
    )
    .await?;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "default"),
        json!({
            "metadata": {"name": "mallory"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "patch-one"},
            "subjects": [{"kind": "User", "apiGroup": RBAC, "name": "mallory"}],
        }),
    )
    .await?;
    let admin_cms = Api::<ConfigMap>::namespaced(admin.clone(), "default");
    let before = admin_cms
        .create(
            &PostParams::default(),
            &configmap("target", &[("keep", "me")]),
        )
        .await?;
    let mut watching = Watching::open(admin_cms.clone()).await?;

    let mallory = Api::<ConfigMap>::namespaced(plane.client_as("mallory").await?, "default");
    let pp = PatchParams::default();
    let json_patch = |v: Value| {
        Patch::<()>::Json(serde_json::from_value::<json_patch::Patch>(v).expect("a JSON patch"))
    };

    let body = depth_doubling(15);
    assert!(serde_json::to_vec(&body)?.len() > 60_000);
    let attack = json_patch(body);
    let (refused, ()) = tokio::join!(mallory.patch("target", &pp, &attack), async {
        watching
            .write_and_see("during")
            .await
            .expect("a write during the attack")
    },);
    let s = expect_status(refused, 422, "Invalid");
    assert!(
        s.message.contains("failed at path '/spec/x/x/x")
            && s.message.contains("levels deep, over the limit of 100"),
        "{}",
        s.message
    );

    let s = expect_status(
        mallory
            .patch("target", &pp, &json_patch(size_doubling()))
            .await,
        422,
        "Invalid",
    );
    assert!(
        s.message
            .contains("operation '/12' failed at path '/spec/a/-'")
            && s.message
                .contains("Unable to complete the copy, the accumulated size increase of copy is")
            && s.message.contains("exceeding the limit 3145728"),
        "{}",
        s.message
    );

    let many = Value::Array(vec![
        json!({"op": "test", "path": "/data/keep", "value": "me"});
        10_001
    ]);
    let s = expect_status(
        mallory.patch("target", &pp, &json_patch(many)).await,
        413,
        "RequestEntityTooLarge",
    );
    assert_eq!(
        s.message,
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );

    // A patch within the bounds still applies, copies included.
    let fine = json!([
        {"op": "copy", "from": "/data/keep", "path": "/data/copy"},
        {"op": "test", "path": "/data/copy", "value": "me"},
    ]);
    let cm = mallory.patch("target", &pp, &json_patch(fine)).await?;
    assert_eq!(
        cm.data.unwrap_or_default().get("copy").map(String::as_str),
        Some("me")
    );

    watching.write_and_see("after").await?;
    let now = admin_cms.get("target").await?;
    let mut data = now.data.clone().unwrap_or_default();
    data.remove("copy");
    assert_eq!(Some(data), before.data);
    assert!(
        plane.log().matches("panicked").next().is_none(),
        "{}",
        plane.log()
    );
    Ok(())
}

fn many(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn huge_rule(n: usize) -> Value {
    json!({"apiGroups": many("g", n), "resources": many("r", n), "verbs": many("v", n)})
}

/// Row 2: nadia is `admin` of her namespace. A Role whose one rule lists 300
/// groups, resources and verbs (27 million permissions) is refused in
/// validation naming the fields; one at the limits (256 each, 16.7 million)
/// passes validation and is refused by the escalation check with a bounded
/// message; so is a RoleBinding to such a ClusterRole. Roles she holds pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_with_millions_of_permissions_are_refused() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    grant(&admin, "team", "nadia", ("ClusterRole", "admin")).await?;
    let nadia = plane.client_as("nadia").await?;
    let roles = Api::<Role>::namespaced(nadia.clone(), "team");
    let mut watching = Watching::open(Api::<ConfigMap>::namespaced(admin.clone(), "team")).await?;

    let body = json!({"metadata": {"name": "huge"}, "rules": [huge_rule(300)]});
    assert!(serde_json::to_vec(&body)?.len() < 8_000);
    let (refused, ()) = tokio::join!(create(&roles, body), async {
        watching
            .write_and_see("during")
            .await
            .expect("a write during the attack")
    });
    let s = expect_status(refused, 422, "Invalid");
    assert!(
        s.message
            .contains("rules[0].verbs: Too many: 300: must have at most 256 items")
            && s.message.contains("rules[0].apiGroups: Too many: 300")
            && s.message.contains("rules[0].resources: Too many: 300"),
        "{}",
        s.message
    );

    let s = expect_status(
        create(
            &roles,
            json!({"metadata": {"name": "huge"}, "rules": [huge_rule(256)]}),
        )
        .await,
        403,
        "Forbidden",
    );
    assert!(
        s.message.starts_with(
            "roles.rbac.authorization.k8s.io \"huge\" is forbidden: user \"nadia\" (groups=[\"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"g0\"]"
        ) && s.message.ends_with("\n... and 16777196 more permissions not held")
            && s.message.len() < 4096,
        "{}",
        s.message
    );

    // The admin (system:masters) may write it; binding it is the same attack.
    create(
        &Api::<ClusterRole>::all(admin.clone()),
        json!({"metadata": {"name": "huge"}, "rules": [huge_rule(256)]}),
    )
    .await?;
    let s = expect_status(
        create(
            &Api::<RoleBinding>::namespaced(nadia.clone(), "team"),
            json!({
                "metadata": {"name": "huge"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "huge"},
                "subjects": [{"kind": "User", "apiGroup": RBAC, "name": "nadia"}],
            }),
        )
        .await,
        403,
        "Forbidden",
    );
    assert!(
        s.message
            .ends_with("\n... and 16777196 more permissions not held")
            && s.message.len() < 4096,
        "{}",
        s.message
    );

    // What she holds she may still grant.
    create(
        &roles,
        json!({"metadata": {"name": "reader"}, "rules": [
            {"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list", "watch"]}
        ]}),
    )
    .await?;
    watching.write_and_see("after").await?;
    let names: Vec<String> = Api::<Role>::namespaced(admin.clone(), "team")
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(names, ["reader"]);
    assert!(
        plane.log().matches("panicked").next().is_none(),
        "{}",
        plane.log()
    );
    Ok(())
}
