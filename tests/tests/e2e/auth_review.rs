//! `kubectl auth whoami` (SelfSubjectReview) and `kubectl auth can-i --list`
//! (SelfSubjectRulesReview) against the embedded API server, as against an
//! upstream one: whoami names the caller (the admin, a ServiceAccount token's
//! user) and --list shows the caller's RBAC rules, a Role's exactly.

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use kube::api::{Api, PostParams};
use kube::discovery::Discovery;
use wasmlet_e2e::Plane;

/// `kubectl auth whoami -o json`'s user info.
fn whoami(plane: &Plane, extra: &[&str]) -> Result<serde_json::Value> {
    let mut args = vec!["auth", "whoami", "-o", "json"];
    args.extend_from_slice(extra);
    let out: serde_json::Value = serde_json::from_str(&plane.kubectl_ok(&args)?)?;
    ensure!(out["kind"] == "SelfSubjectReview", "{out}");
    Ok(out["status"]["userInfo"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_names_the_admin_and_a_service_account_token_user() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let me = whoami(&plane, &[])?;
    assert_eq!(me["username"], "wasmlet-admin");
    assert_eq!(
        me["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );
    // The plain table form, as kubectl prints it.
    let table = plane.kubectl_ok(&["auth", "whoami"])?;
    assert!(
        table.contains("Username") && table.contains("wasmlet-admin"),
        "{table}"
    );

    plane.kubectl_ok(&["create", "serviceaccount", "robot"])?;
    let token = plane.kubectl_ok(&["create", "token", "robot"])?;
    let token = format!("--token={}", token.trim());
    let robot = whoami(&plane, &[&token])?;
    assert_eq!(robot["username"], "system:serviceaccount:default:robot");
    let groups: BTreeSet<&str> = robot["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    assert_eq!(
        groups,
        BTreeSet::from([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    // Both reviews are in discovery (kubectl finds whoami's there).
    let client = plane.client().await?;
    let discovery = Discovery::new(client).run_aggregated().await?;
    for (group, kind) in [
        ("authentication.k8s.io", "SelfSubjectReview"),
        ("authorization.k8s.io", "SelfSubjectRulesReview"),
    ] {
        let found = discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.recommended_resources())
            .any(|(ar, _)| ar.kind == kind);
        ensure!(found, "{kind}.{group} is not in aggregated discovery");
    }
    Ok(())
}

/// The resource rules of a SelfSubjectRulesReview for `user` in `ns`, as
/// (verbs, groups, resources, names) strings.
async fn rules_of(plane: &Plane, user: &str, ns: &str) -> Result<BTreeSet<String>> {
    let reviews = Api::<SelfSubjectRulesReview>::all(plane.client_as(user).await?);
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(ns.into()),
        },
        ..Default::default()
    };
    let got = reviews.create(&PostParams::default(), &review).await?;
    let status = got.status.expect("a review has a status");
    ensure!(!status.incomplete, "{user}'s rules are incomplete");
    Ok(status
        .resource_rules
        .iter()
        .map(|r| {
            format!(
                "{:?} {:?} {:?} {:?}",
                r.verbs,
                r.api_groups.clone().unwrap_or_default(),
                r.resources.clone().unwrap_or_default(),
                r.resource_names.clone().unwrap_or_default()
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_i_list_shows_exactly_a_bound_roles_rules() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    plane.kubectl_ok(&["create", "namespace", "team"])?;
    plane.kubectl_ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "team",
        "--verb=get,list",
        "--resource=configmaps,pods",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "role",
        "one-secret",
        "-n",
        "team",
        "--verb=get",
        "--resource=secrets",
        "--resource-name=token",
    ])?;
    for role in ["reader", "one-secret"] {
        plane.kubectl_ok(&[
            "create",
            "rolebinding",
            role,
            "-n",
            "team",
            &format!("--role={role}"),
            "--user=alice",
        ])?;
    }

    // What alice holds beyond an unbound user (both get the defaults bound
    // to system:authenticated) is exactly her Roles' rules.
    let alice = rules_of(&plane, "alice", "team").await?;
    let nobody = rules_of(&plane, "bob", "team").await?;
    let extra: BTreeSet<&String> = alice.difference(&nobody).collect();
    let want = [
        r#"["get", "list"] [""] ["configmaps", "pods"] []"#.to_string(),
        r#"["get"] [""] ["secrets"] ["token"]"#.to_string(),
    ];
    assert_eq!(extra, want.iter().collect::<BTreeSet<_>>());
    // In another namespace the RoleBindings do not apply.
    assert_eq!(rules_of(&plane, "alice", "default").await?, nobody);

    // kubectl's table shows the same rules, and the defaults' non-resource URLs.
    let table = plane.kubectl_ok(&["auth", "can-i", "--list", "-n", "team", "--as=alice"])?;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "Resources",
            "Non-Resource",
            "URLs",
            "Resource",
            "Names",
            "Verbs"
        ]
    );
    for want in [
        vec!["configmaps", "[]", "[]", "[get", "list]"],
        vec!["pods", "[]", "[]", "[get", "list]"],
        vec!["secrets", "[]", "[token]", "[get]"],
        vec![
            "selfsubjectreviews.authentication.k8s.io",
            "[]",
            "[]",
            "[create]",
        ],
    ] {
        assert!(rows.contains(&want), "no row {want:?} in\n{table}");
    }
    assert!(
        // (the Resources cell is blank on a non-resource row)
        rows.contains(&vec!["[/healthz]", "[]", "[get]"]),
        "no /healthz row in\n{table}"
    );

    // The admin holds cluster-admin's rules through system:masters.
    let admin = plane.kubectl_ok(&["auth", "can-i", "--list"])?;
    assert!(
        admin
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["*.*", "[]", "[]", "[*]"]),
        "{admin}"
    );
    Ok(())
}
