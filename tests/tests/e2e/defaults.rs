//! Defaulting and the APIs users hit first, as upstream (issue 10): what a bare
//! Pod, a StatefulSet and a Namespace read back as, the `default`
//! ServiceAccount of every namespace, and Services, Endpoints and
//! EndpointSlices with the `kubernetes` Service behind `kubectl cluster-info`.
//! Through the real kubectl and the kube client.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::*;

const WAIT: Duration = Duration::from_secs(60);

fn as_json<T: serde::Serialize>(o: &T) -> Value {
    serde_json::to_value(o).expect("serialisable")
}

/// Writes `yaml` to a file in the plane's directory and `kubectl apply`s it.
fn apply(plane: &Plane, file: &str, yaml: &str) -> anyhow::Result<std::process::Output> {
    let path = plane.data_dir().join(file);
    std::fs::write(&path, yaml)?;
    plane.kubectl(&["apply", "-f", path.to_str().unwrap()])
}

#[tokio::test]
async fn a_bare_pod_reads_back_with_upstreams_defaults() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut p = pod("bare");
    p.spec.as_mut().unwrap().containers[0].ports = Some(vec![serde_json::from_value(
        json!({"containerPort": 8080}),
    )?]);
    let created = as_json(&pods.create(&PostParams::default(), &p).await?);
    let spec = &created["spec"];
    for (field, want) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("serviceAccountName", json!("default")),
        ("serviceAccount", json!("default")),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
    ] {
        assert_eq!(spec[field], want, "spec.{field} of {spec:#}");
    }
    assert_eq!(created["status"]["qosClass"], "BestEffort");
    let c = &spec["containers"][0];
    // `busybox`: no tag, so `latest`, so pulled always.
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    let tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        assert!(
            tolerations.contains(&json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})),
            "no 300 s toleration of {key}: {tolerations:?}"
        );
    }
    // A tagged image is pulled if not present; a client's own values stay.
    let mut tagged = pod("tagged");
    let s = tagged.spec.as_mut().unwrap();
    s.containers[0].image = Some("registry.example:5000/app:1.2".into());
    s.restart_policy = Some("Never".into());
    s.service_account_name = Some("robot".into());
    // Limits alone: requests default to them, which makes the pod Guaranteed.
    s.containers[0].resources = Some(serde_json::from_value(
        json!({"limits": {"cpu": "500m", "memory": "64Mi"}}),
    )?);
    let tagged = pods.create(&PostParams::default(), &tagged).await?;
    let status = tagged.status.clone().unwrap_or_default();
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    let s = tagged.spec.unwrap();
    let requests = s.containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("64Mi"));
    assert_eq!(
        s.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    assert_eq!(s.restart_policy.as_deref(), Some("Never"));
    assert_eq!(s.service_account_name.as_deref(), Some("robot"));
    // Pods carry a generation (since 1.33), config maps do not.
    assert_eq!(created["metadata"]["generation"], 1);
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = cms
        .create(&PostParams::default(), &configmap("c", &[("k", "v")]))
        .await?;
    assert_eq!(cm.metadata.generation, None);
    let cm = cms
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await?;
    assert_eq!(cm.metadata.generation, None);
    Ok(())
}

const STATEFULSET: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: main
        image: nginx:1.27
"#;

#[tokio::test]
async fn a_statefulset_is_defaulted_and_rollout_status_works() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let out = apply(&plane, "sts.yaml", STATEFULSET)?;
    assert!(out.status.success(), "{out:?}");
    let sets: Api<StatefulSet> = Api::namespaced(plane.client().await?, "default");
    let sts = as_json(&sets.get("web").await?);
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    let template = &spec["template"]["spec"];
    assert_eq!(template["restartPolicy"], "Always");
    assert_eq!(template["dnsPolicy"], "ClusterFirst");
    assert_eq!(template["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(sts["metadata"]["generation"], 1);

    // Before any controller observed it: waiting, not an error about the
    // update strategy (which an undefaulted StatefulSet gets).
    let out = plane.kubectl_ok(&["rollout", "status", "statefulset/web", "--watch=false"])?;
    assert!(
        out.contains("Waiting for statefulset spec update to be observed"),
        "{out}"
    );
    // As a StatefulSet controller reports a finished rollout.
    sets.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1,
            "currentReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
            "currentRevision": "web-5d4f", "updateRevision": "web-5d4f"}}),
        ),
    )
    .await?;
    // With upstream's defaults (a rollingUpdate with partition 0) kubectl
    // reports the partitioned form.
    let out = plane.kubectl_ok(&["rollout", "status", "statefulset/web", "--timeout=120s"])?;
    assert!(out.contains("roll out complete"), "{out}");
    // Re-applying the same manifest changes nothing (defaults are stable).
    let out = apply(&plane, "sts.yaml", STATEFULSET)?;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("unchanged"),
        "{out:?}"
    );
    assert_eq!(sets.get("web").await?.metadata.generation, Some(1));
    Ok(())
}

#[tokio::test]
async fn namespaces_carry_their_name_label_for_good() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let nss: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}}))?;
    let ns = nss.create(&PostParams::default(), &ns).await?;
    let label = |n: &Namespace| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/metadata.name"))
            .cloned()
    };
    assert_eq!(label(&ns).as_deref(), Some("team-a"));
    // Neither removed nor changed by a client.
    let ns = nss
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kubernetes.io/metadata.name": null, "x": "y"}}}),
            ),
        )
        .await?;
    assert_eq!(label(&ns).as_deref(), Some("team-a"));
    let ns = nss
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kubernetes.io/metadata.name": "other"}}}),
            ),
        )
        .await?;
    assert_eq!(label(&ns).as_deref(), Some("team-a"));
    assert_eq!(ns.metadata.generation, None);
    // Selectable by name, as network policies and admission rules do.
    let out = plane.kubectl_ok(&[
        "get",
        "ns",
        "-l",
        "kubernetes.io/metadata.name=team-a",
        "-o",
        "name",
    ])?;
    assert_eq!(out.trim(), "namespace/team-a");
    Ok(())
}

#[tokio::test]
async fn every_namespace_has_a_default_service_account_that_comes_back() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    // The namespaces the plane starts with.
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually(WAIT, &format!("{ns}/default ServiceAccount"), || {
            let sas = sas.clone();
            async move { sas.get_opt("default").await.ok().flatten() }
        })
        .await?;
    }
    // A new one.
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "fresh"}}))?,
    )
    .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "fresh");
    let first = eventually(WAIT, "fresh/default ServiceAccount", || {
        let sas = sas.clone();
        async move { sas.get_opt("default").await.ok().flatten() }
    })
    .await?;
    assert_eq!(first.metadata.generation, None);
    // Deleted: created again, a new object.
    sas.delete("default", &DeleteParams::default()).await?;
    let again = eventually(WAIT, "the default ServiceAccount re-created", || {
        let sas = sas.clone();
        let old = first.metadata.uid.clone();
        async move {
            sas.get_opt("default")
                .await
                .ok()
                .flatten()
                .filter(|s| s.metadata.uid != old)
        }
    })
    .await?;
    assert!(again.metadata.uid.is_some());
    // kubectl shows it, and a ServiceAccount of one's own applies cleanly.
    let out = apply(
        &plane,
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: builder\n  namespace: fresh\n",
    )?;
    assert!(out.status.success(), "{out:?}");
    let out = plane.kubectl_ok(&["get", "serviceaccounts", "-n", "fresh"])?;
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.contains("NAME") && header.contains("SECRETS"),
        "{out}"
    );
    assert!(out.contains("builder") && out.contains("default"), "{out}");
    Ok(())
}

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
"#;

#[tokio::test]
async fn services_endpoints_and_cluster_info() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let out = plane.kubectl_ok(&["cluster-info"])?;
    assert!(
        out.contains("Kubernetes control plane is running at"),
        "{out}"
    );

    // The `kubernetes` Service and where it leads: this API server.
    let out = plane.kubectl_ok(&["get", "svc,ep,endpointslices", "-n", "default"])?;
    assert!(out.contains("service/kubernetes"), "{out}");
    assert!(
        out.contains("10.96.0.1") && out.contains("443/TCP"),
        "{out}"
    );
    let port = plane
        .endpoint()?
        .0
        .rsplit(':')
        .next()
        .unwrap_or("")
        .to_string();
    assert!(out.contains("endpoints/kubernetes"), "{out}");
    assert!(out.contains(&format!("127.0.0.1:{port}")), "{out}");
    assert!(
        out.contains("endpointslice.discovery.k8s.io/kubernetes") && out.contains("IPv4"),
        "{out}"
    );

    // A Service of one's own: defaulted, given an address from the range.
    let out = apply(&plane, "svc.yaml", SERVICE)?;
    assert!(out.status.success(), "{out:?}");
    let svcs: Api<Service> = Api::namespaced(plane.client().await?, "default");
    let svc = as_json(&svcs.get("web").await?);
    let spec = &svc["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["ports"][0]["protocol"], "TCP");
    assert_eq!(spec["ports"][0]["targetPort"], 80);
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    let ip: std::net::Ipv4Addr = spec["clusterIP"].as_str().unwrap_or("").parse()?;
    let o = ip.octets();
    assert!(
        o[0] == 10 && (96..112).contains(&o[1]) && ip.to_string() != "10.96.0.1",
        "{ip}"
    );
    assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
    // Re-applied with a change, it keeps its address (kubectl apply never
    // sends it).
    let out = apply(
        &plane,
        "svc.yaml",
        &SERVICE.replace("port: 80", "port: 8080"),
    )?;
    assert!(out.status.success(), "{out:?}");
    let svc = svcs.get("web").await?;
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some(ip.to_string().as_str()));
    assert_eq!(svc.metadata.generation, None);
    // An address already taken is refused, as upstream does.
    let out = apply(
        &plane,
        "taken.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\nspec:\n  clusterIP: 10.96.0.1\n  ports:\n  - port: 1\n",
    )?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("provided IP is already allocated"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_terminating_namespace_reports_what_remains() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "leaving"}}))?,
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "leaving");
    let mut held = configmap("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await?;
    nss.delete("leaving", &DeleteParams::default()).await?;
    let condition = |n: &Namespace, ty: &str| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == ty))
            .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
    };
    // Only the held config map is left: its finalizer keeps it.
    let ns = eventually(WAIT, "conditions naming the held config map", || {
        let nss = nss.clone();
        async move {
            nss.get_opt("leaving").await.ok().flatten().filter(|n| {
                condition(n, "NamespaceContentRemaining").is_some_and(|(s, m)| {
                    s == "True"
                        && m == "Some resources are remaining: configmaps. has 1 resource instances"
                })
            })
        }
    })
    .await?;
    assert_eq!(
        condition(&ns, "NamespaceFinalizersRemaining"),
        Some((
            "True".into(),
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances".into()
        ))
    );
    assert_eq!(
        condition(&ns, "NamespaceDeletionDiscoveryFailure").map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    // The finalizer done, the namespace goes.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually(WAIT, "the namespace gone", || {
        let nss = nss.clone();
        async move { matches!(nss.get_opt("leaving").await, Ok(None)).then_some(()) }
    })
    .await?;
    Ok(())
}
