//! The reconciler against the SDK's fake host: which region's cluster gets
//! the ProjectDeployment, what comes back into the row, and the errors.

use super::*;
use wasmlet_sdk::reconciler::ErrorKind;
use wasmlet_sdk::testing::FakeHost;

fn project(id: &str, revision: i64, spec: serde_json::Value) -> Arc<Project> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "examples.wasmlet.dev/v1", "kind": "Project",
            "metadata": { "name": id, "generation": revision },
            "spec": spec,
        }))
        .unwrap(),
    )
}

fn run(p: &Arc<Project>) -> Result<Action, Error> {
    reconcile(p.clone(), &Context::for_object(&**p))
}

fn condition<'a>(action: &'a Action, type_: &str) -> &'a Condition {
    action
        .conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn the_deployment_lands_in_the_projects_region_and_its_status_comes_back() {
    let host = FakeHost::new();
    let (eu, us) = (host.cluster("eu-west"), host.cluster("us-east"));
    let _guard = host.install();
    let p = project(
        "p1",
        7,
        json!({"region": "eu-west", "name": "Shop", "size": "medium"}),
    );
    let action = run(&p).unwrap();
    let pd = eu
        .object("examples.wasmlet.dev/v1", "ProjectDeployment", None, "p1")
        .expect("applied in eu-west");
    assert_eq!(pd["spec"]["replicas"], 2);
    assert_eq!(pd["spec"]["revision"], 7);
    assert_eq!(pd["spec"]["displayName"], "Shop");
    assert_eq!(pd["metadata"]["labels"][PROJECT_LABEL], "p1");
    assert!(us.writes().is_empty() && host.writes().is_empty());
    assert_eq!(
        action.status_json().unwrap()["deployment"]["phase"],
        "Pending"
    );
    assert!(condition(&action, "Deployed").status == ConditionStatus::True);
    assert!(condition(&action, "Running").status == ConditionStatus::False);
    assert_eq!(action.requeue_after(), Some(POLL_PENDING));

    // The region reports the revision running: the row says so.
    eu.insert({
        let mut pd = pd.clone();
        pd["status"] = json!({"phase": "Running", "url": "https://p1.eu", "observedRevision": 7});
        pd
    });
    let action = run(&p).unwrap();
    let status = action.status_json().unwrap();
    assert_eq!(status["deployment"]["url"], "https://p1.eu");
    assert_eq!(status["region"], "eu-west");
    assert!(condition(&action, "Running").status == ConditionStatus::True);
    assert_eq!(action.requeue_after(), Some(POLL_RUNNING));
}

#[test]
fn a_moved_project_leaves_its_old_region() {
    let host = FakeHost::new();
    let (eu, us) = (host.cluster("eu-west"), host.cluster("us-east"));
    let _guard = host.install();
    let first = run(&project("p2", 1, json!({"region": "eu-west"}))).unwrap();
    assert_eq!(first.status_json().unwrap()["region"], "eu-west");
    let mut moved = (*project("p2", 2, json!({"region": "us-east"}))).clone();
    moved.status = Some(ProjectStatus {
        region: Some("eu-west".into()),
    });
    let after = run(&Arc::new(moved)).unwrap();
    assert_eq!(after.status_json().unwrap()["region"], "us-east");
    assert_eq!(
        eu.writes(),
        [
            "apply-create ProjectDeployment p2",
            "delete ProjectDeployment p2"
        ]
    );
    assert_eq!(us.writes(), ["apply-create ProjectDeployment p2"]);
}

#[test]
fn a_region_the_host_lacks_is_a_terminal_error_naming_it() {
    let host = FakeHost::new();
    let _guard = host.install();
    let e = run(&project("p3", 1, json!({"region": "ap-south"}))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Terminal);
    assert_eq!(e.reason, "RegionUnavailable");
    assert!(e.message.contains("region \"ap-south\""), "{}", e.message);
    assert!(e.message.contains("not configured"), "{}", e.message);
}

#[test]
fn a_bad_spec_names_the_project_and_the_field() {
    let host = FakeHost::new();
    let _guard = host.install();
    for (spec, field) in [
        (json!({}), "spec.region: missing"),
        (json!({"region": "EU West"}), "spec.region: \"EU West\""),
        (
            json!({"region": "eu-west", "size": "huge"}),
            "spec.size: \"huge\"",
        ),
    ] {
        let e = run(&project("p4", 1, spec)).unwrap_err();
        assert_eq!(
            (e.kind, e.reason.as_str()),
            (ErrorKind::Terminal, "InvalidSpec")
        );
        assert!(e.message.starts_with("project \"p4\": "), "{}", e.message);
        assert!(e.message.contains(field), "{}", e.message);
    }
}

#[test]
fn the_shipped_crd_is_cluster_scoped_with_a_status_subresource() {
    let crd: serde_json::Value =
        serde_yaml::from_str(include_str!("../projectdeployment.crd.yaml")).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["names"]["kind"], "ProjectDeployment");
    let v1 = &crd["spec"]["versions"][0];
    assert!(v1["subresources"]["status"].is_object());
    let props = &v1["schema"]["openAPIV3Schema"]["properties"];
    for f in ["project", "size", "replicas", "revision"] {
        assert!(props["spec"]["properties"][f].is_object(), "spec.{f}");
    }
    for f in ["phase", "url", "message", "observedRevision"] {
        assert!(props["status"]["properties"][f].is_object(), "status.{f}");
    }
}

/// A project whose row was deleted (marked), last applied in `applied`.
fn deleted(id: &str, spec: serde_json::Value, applied: Option<&str>) -> Arc<Project> {
    let mut p = (*project(id, 3, spec)).clone();
    p.metadata.deletion_timestamp = serde_json::from_value(json!("2025-01-02T03:04:05Z")).ok();
    p.metadata.finalizers = Some(vec!["examples.wasmlet.dev/project-deployment".into()]);
    p.status = applied.map(|r| ProjectStatus {
        region: Some(r.into()),
    });
    Arc::new(p)
}

fn run_finalize(p: &Arc<Project>) -> Result<Finalize, Error> {
    finalize(p.clone(), &Context::for_object(&**p))
}

#[test]
fn a_deleted_project_leaves_its_region() {
    let host = FakeHost::new();
    let (eu, us) = (host.cluster("eu-west"), host.cluster("us-east"));
    let _guard = host.install();
    let _applied = run(&project("p5", 1, json!({"region": "eu-west"}))).unwrap();
    let gone = deleted("p5", json!({"region": "eu-west"}), Some("eu-west"));
    assert_eq!(run_finalize(&gone).unwrap(), Finalize::Done);
    assert!(
        eu.object("examples.wasmlet.dev/v1", "ProjectDeployment", None, "p5")
            .is_none()
    );
    assert_eq!(
        eu.writes(),
        [
            "apply-create ProjectDeployment p5",
            "delete ProjectDeployment p5"
        ]
    );
    assert!(us.writes().is_empty());
    // Again (the host retries after a lost write): already gone is done.
    assert_eq!(run_finalize(&gone).unwrap(), Finalize::Done);
}

#[test]
fn a_project_deleted_while_moving_leaves_both_regions() {
    let host = FakeHost::new();
    let (eu, us) = (host.cluster("eu-west"), host.cluster("us-east"));
    let _guard = host.install();
    // Applied in both, the row's status still naming the old region.
    let _applied = run(&project("p6", 1, json!({"region": "eu-west"}))).unwrap();
    let _applied = run(&project("p6", 2, json!({"region": "us-east"}))).unwrap();
    let gone = deleted("p6", json!({"region": "us-east"}), Some("eu-west"));
    assert_eq!(run_finalize(&gone).unwrap(), Finalize::Done);
    for region in [&eu, &us] {
        assert!(
            region
                .object("examples.wasmlet.dev/v1", "ProjectDeployment", None, "p6")
                .is_none()
        );
    }
}

#[test]
fn a_deleted_project_in_a_region_the_host_lacks_goes_with_a_warning() {
    let host = FakeHost::new();
    let _guard = host.install();
    let gone = deleted("p7", json!({"region": "ap-south"}), None);
    assert_eq!(run_finalize(&gone).unwrap(), Finalize::Done);
    let logs = host.logs();
    assert!(
        logs.iter()
            .any(|(_, m)| m.contains("project p7: cannot clean up region \"ap-south\"")),
        "{logs:?}"
    );
}
