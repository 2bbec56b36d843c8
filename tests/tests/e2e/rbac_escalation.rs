//! RBAC privilege-escalation prevention, roleRef immutability and
//! aggregated ClusterRoles (issue 8): a user who may write roles and
//! bindings cannot use that to grant more than they hold, as upstream.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::{Plane, create_json as create, eventually, expect_status};

const RBAC: &str = "rbac.authorization.k8s.io";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn role(name: &str, rules: Vec<Value>) -> Value {
    json!({"metadata": {"name": name}, "rules": rules})
}

/// A binding of `role` (`Role` or `ClusterRole`) to the user `user`.
fn binding(name: &str, role: (&str, &str), user: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": role.0, "name": role.1},
        "subjects": [{"kind": "User", "apiGroup": RBAC, "name": user}],
    })
}

async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": name}}),
    )
    .await?;
    Ok(())
}

const NOT_HELD: &str = "is attempting to grant RBAC permissions not currently held";

/// Alice may write Roles and RoleBindings in `team` and read pods there.
/// She tries to grant herself (and others) more, and is refused each time,
/// until an admin gives her `escalate` or `bind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_bindings_cannot_grant_more_than_the_writer_holds() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    namespace(&admin, "team").await?;
    let admin_roles = Api::<Role>::namespaced(admin.clone(), "team");
    let admin_bindings = Api::<RoleBinding>::namespaced(admin.clone(), "team");
    create(
        &admin_roles,
        role(
            "rbac-manager",
            vec![
                rule(
                    &[RBAC],
                    &["roles", "rolebindings"],
                    &["get", "create", "update", "patch"],
                ),
                rule(&[""], &["pods"], &["get", "list"]),
            ],
        ),
    )
    .await?;
    create(
        &admin_bindings,
        binding("alice-rbac", ("Role", "rbac-manager"), "alice"),
    )
    .await?;

    let alice = plane.client_as("alice").await?;
    let roles = Api::<Role>::namespaced(alice.clone(), "team");
    let bindings = Api::<RoleBinding>::namespaced(alice.clone(), "team");

    // A Role granting what she lacks.
    let s = expect_status(
        create(
            &roles,
            role("steal", vec![rule(&[""], &["secrets"], &["get", "list"])]),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "roles.rbac.authorization.k8s.io \"steal\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) \
         is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
    expect_status(roles.get("steal").await, 404, "NotFound");

    // What she holds she may hand on.
    create(
        &roles,
        role("pod-reader", vec![rule(&[""], &["pods"], &["get"])]),
    )
    .await?;
    // Widening that role afterwards is the same attack.
    let widen =
        json!({"rules": [rule(&[""], &["pods"], &["get"]), rule(&[""], &["secrets"], &["get"])]});
    let s = expect_status(
        roles
            .patch("pod-reader", &PatchParams::default(), &Patch::Merge(&widen))
            .await,
        403,
        "Forbidden",
    );
    assert!(s.message.contains(NOT_HELD), "{}", s.message);

    // Binding herself to a role holding more than she does.
    let s = expect_status(
        create(
            &bindings,
            binding("alice-admin", ("ClusterRole", "admin"), "alice"),
        )
        .await,
        403,
        "Forbidden",
    );
    assert!(
        s.message.starts_with(
            "rolebindings.rbac.authorization.k8s.io \"alice-admin\" is forbidden: user \"alice\""
        ) && s.message.contains(NOT_HELD),
        "{}",
        s.message
    );
    // ... or to one that does not exist (it could be created later).
    let s = expect_status(
        create(
            &bindings,
            binding("later", ("ClusterRole", "not-yet"), "alice"),
        )
        .await,
        403,
        "Forbidden",
    );
    assert!(s.message.contains("\"not-yet\" not found"), "{}", s.message);
    // Still only pods.
    expect_status(
        Api::<Secret>::namespaced(alice.clone(), "team")
            .list(&ListParams::default())
            .await,
        403,
        "Forbidden",
    );
    // A role she holds entirely she may bind.
    create(
        &bindings,
        binding("bob-pods", ("Role", "pod-reader"), "bob"),
    )
    .await?;

    // `bind` on one ClusterRole lets her bind that one; `escalate` on roles
    // lets her write any Role.
    create(
        &admin_roles,
        role(
            "delegate",
            vec![
                json!({"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["edit"]}),
                rule(&[RBAC], &["roles"], &["escalate"]),
            ],
        ),
    )
    .await?;
    create(
        &admin_bindings,
        binding("alice-delegate", ("Role", "delegate"), "alice"),
    )
    .await?;
    create(
        &bindings,
        binding("bob-edit", ("ClusterRole", "edit"), "bob"),
    )
    .await?;
    expect_status(
        create(
            &bindings,
            binding("bob-admin", ("ClusterRole", "admin"), "bob"),
        )
        .await,
        403,
        "Forbidden",
    );
    create(
        &roles,
        role("steal", vec![rule(&[""], &["secrets"], &["get"])]),
    )
    .await?;

    // A binding's roleRef never changes, even for the admin.
    let mut b = admin_bindings.get("bob-pods").await?;
    b.role_ref.name = "steal".into();
    let s = expect_status(
        admin_bindings
            .replace("bob-pods", &PostParams::default(), &b)
            .await,
        422,
        "Invalid",
    );
    assert_eq!(
        s.message,
        "RoleBinding.rbac.authorization.k8s.io \"bob-pods\" is invalid: roleRef: Invalid value: \
         rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"steal\"}: cannot change roleRef"
    );
    // Its subjects may.
    let mut b = admin_bindings.get("bob-pods").await?;
    b.subjects.as_mut().unwrap()[0].name = "carol".into();
    admin_bindings
        .replace("bob-pods", &PostParams::default(), &b)
        .await?;
    Ok(())
}

/// Whoever may create ClusterRoles but is not a cluster admin cannot use an
/// aggregation rule to gather other roles' rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregation_rule_needs_cluster_admin() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    create(
        &Api::<ClusterRole>::all(admin.clone()),
        role(
            "clusterrole-writer",
            vec![rule(&[RBAC], &["clusterroles"], &["create", "patch"])],
        ),
    )
    .await?;
    create(
        &Api::<ClusterRoleBinding>::all(admin.clone()),
        binding(
            "mallory-writer",
            ("ClusterRole", "clusterrole-writer"),
            "mallory",
        ),
    )
    .await?;
    let mallory = Api::<ClusterRole>::all(plane.client_as("mallory").await?);
    let s = expect_status(
        create(
            &mallory,
            json!({"metadata": {"name": "gather-admin"}, "rules": [],
                   "aggregationRule": {"clusterRoleSelectors": [
                       {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}}),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "clusterroles.rbac.authorization.k8s.io \"gather-admin\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );
    // Nor can she label a role she does not hold into one that is
    // aggregated (cluster-admin's rules would land in `view`).
    let label =
        json!({"metadata": {"labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}});
    let s = expect_status(
        mallory
            .patch(
                "cluster-admin",
                &PatchParams::default(),
                &Patch::Merge(&label),
            )
            .await,
        403,
        "Forbidden",
    );
    assert!(s.message.contains(NOT_HELD), "{}", s.message);
    // A ClusterRole of what she holds is fine.
    create(
        &mallory,
        role(
            "writer-copy",
            vec![rule(&[RBAC], &["clusterroles"], &["create", "patch"])],
        ),
    )
    .await?;
    Ok(())
}

fn has_rule_for(role: &ClusterRole, resource: &str) -> bool {
    role.rules
        .iter()
        .flatten()
        .any(|r| r.resources.iter().flatten().any(|x| x == resource))
}

/// `view`, `edit` and `admin` are aggregated as upstream's: a ClusterRole
/// labelled `aggregate-to-view` extends all three, and the authorizer
/// follows; removing the label takes it back out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_cluster_roles_follow_the_roles_they_select() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    namespace(&admin, "a").await?;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "a"),
        binding("bob-view", ("ClusterRole", "view"), "bob"),
    )
    .await?;
    let bob = plane.client_as("bob").await?;
    // The defaults are aggregated before the plane serves.
    Api::<ConfigMap>::namespaced(bob.clone(), "a")
        .list(&ListParams::default())
        .await?;
    let secrets = Api::<Secret>::namespaced(bob.clone(), "a");
    expect_status(secrets.list(&ListParams::default()).await, 403, "Forbidden");

    let cluster_roles = Api::<ClusterRole>::all(admin.clone());
    create(
        &cluster_roles,
        json!({"metadata": {"name": "secret-lister",
                            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
               "rules": [rule(&[""], &["secrets"], &["list"])]}),
    )
    .await?;
    let wait = Duration::from_secs(60);
    eventually(wait, "view to grant listing secrets", || async {
        secrets.list(&ListParams::default()).await.ok()
    })
    .await?;
    for name in ["edit", "admin"] {
        eventually(wait, &format!("{name} to gather the rule"), || async {
            let r = cluster_roles.get(name).await.ok()?;
            has_rule_for(&r, "secrets").then_some(())
        })
        .await?;
    }

    let unlabel =
        json!({"metadata": {"labels": {"rbac.authorization.k8s.io/aggregate-to-view": null}}});
    cluster_roles
        .patch(
            "secret-lister",
            &PatchParams::default(),
            &Patch::Merge(&unlabel),
        )
        .await?;
    eventually(wait, "view to stop granting secrets", || async {
        secrets
            .list(&ListParams::default())
            .await
            .is_err()
            .then_some(())
    })
    .await?;
    expect_status(secrets.list(&ListParams::default()).await, 403, "Forbidden");

    // A role of one's own, aggregated by a selector.
    create(
        &cluster_roles,
        json!({"metadata": {"name": "monitoring"}, "rules": [],
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"team": "mon"}}]}}),
    )
    .await?;
    create(
        &cluster_roles,
        json!({"metadata": {"name": "mon-pods", "labels": {"team": "mon"}},
               "rules": [rule(&[""], &["pods"], &["get"])]}),
    )
    .await?;
    eventually(wait, "monitoring to gather mon-pods", || async {
        let r = cluster_roles.get("monitoring").await.ok()?;
        has_rule_for(&r, "pods").then_some(())
    })
    .await?;
    Ok(())
}

/// A data directory from before the defaults were aggregated holds `view`
/// and `edit` with their rules written out: the next start gives them their
/// aggregation rule (and so today's rules), except a role the operator
/// marked `rbac.authorization.kubernetes.io/autoupdate: "false"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_default_roles_become_aggregated_on_restart() -> Result<()> {
    let mut plane = Plane::start(&[]).await?;
    let admin = plane.client().await?;
    let cluster_roles = Api::<ClusterRole>::all(admin.clone());
    // `edit` first: while it is still aggregated, changing `view` makes the
    // server rewrite `edit`, which would race the test's own write.
    for (name, autoupdate) in [("edit", Some("false")), ("view", None)] {
        let mut r = cluster_roles.get(name).await?;
        r.aggregation_rule = None;
        r.rules = Some(vec![serde_json::from_value(rule(
            &[""],
            &["configmaps"],
            &["get"],
        ))?]);
        if let Some(a) = autoupdate {
            r.metadata.annotations = Some(
                [(
                    "rbac.authorization.kubernetes.io/autoupdate".to_string(),
                    a.to_string(),
                )]
                .into(),
            );
        }
        cluster_roles
            .replace(name, &PostParams::default(), &r)
            .await?;
    }
    plane.kill9();
    plane.spawn().await?;
    let cluster_roles = Api::<ClusterRole>::all(plane.client().await?);
    let view = cluster_roles.get("view").await?;
    assert!(view.aggregation_rule.is_some());
    assert!(
        has_rule_for(&view, "pods"),
        "view was not re-aggregated: {view:?}"
    );
    let edit = cluster_roles.get("edit").await?;
    assert!(edit.aggregation_rule.is_none());
    assert!(!has_rule_for(&edit, "pods"), "edit was changed: {edit:?}");
    Ok(())
}
