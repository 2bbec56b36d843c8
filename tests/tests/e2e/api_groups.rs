//! The API groups every client expects to find (issue 46 item 4), through
//! kubectl: PersistentVolumes, their claims, PodTemplates and Ingresses are
//! served, so `kubectl apply --prune` works with kubectl's default list;
//! they and HorizontalPodAutoscalers show upstream's columns; and
//! PriorityClasses resolve into pods' priority at admission, with the two
//! system classes always there.

use anyhow::Result;
use serde_json::{Value, json};
use wasmlet_e2e::Plane;

/// Writes `docs` as one YAML stream under `dir` and returns its path.
fn manifest(dir: &std::path::Path, name: &str, docs: &[Value]) -> Result<String> {
    let path = dir.join(name);
    let text: Vec<String> = docs
        .iter()
        .map(serde_yaml::to_string)
        .collect::<Result<_, _>>()?;
    std::fs::write(&path, text.join("---\n"))?;
    Ok(path.display().to_string())
}

fn labelled_cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "pruned"}},
        "data": {"k": "v"}})
}

fn claim(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "pruned"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_prune_works_with_kubectls_default_list() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let dir = tempfile::tempdir()?;
    let both = manifest(
        dir.path(),
        "both.yaml",
        &[labelled_cm("keep"), labelled_cm("drop"), claim("data")],
    )?;
    plane.kubectl_ok(&["apply", "--prune", "-l", "app=pruned", "-f", &both])?;
    let one = manifest(dir.path(), "one.yaml", &[labelled_cm("keep")])?;
    let out = plane.kubectl_ok(&["apply", "--prune", "-l", "app=pruned", "-f", &one])?;
    assert!(out.contains("configmap/drop pruned"), "{out}");
    assert!(out.contains("persistentvolumeclaim/data pruned"), "{out}");
    let left = plane.kubectl_ok(&["get", "configmaps,pvc", "-l", "app=pruned", "-o", "name"])?;
    assert_eq!(left.trim(), "configmap/keep", "{left}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_kinds_show_upstreams_columns() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let dir = tempfile::tempdir()?;
    let objects = manifest(
        dir.path(),
        "objects.yaml",
        &[
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "disk"},
                "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                    "hostPath": {"path": "/srv/disk"}, "storageClassName": "manual"}}),
            claim("data"),
            json!({"apiVersion": "v1", "kind": "PodTemplate",
                "metadata": {"name": "tpl", "namespace": "default"},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"ingressClassName": "nginx", "rules": [{"host": "web.example",
                    "http": {"paths": [{"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "maxReplicas": 5}}),
        ],
    )?;
    plane.kubectl_ok(&["create", "-f", &objects])?;

    let pv = plane.kubectl_ok(&["get", "pv"])?;
    let row: Vec<&str> = pv.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(
        row[..7],
        [
            "disk", "5Gi", "RWO,ROX", "Retain", "Pending", "manual", "<unset>"
        ],
        "{pv}"
    );
    let pvc = plane.kubectl_ok(&["get", "pvc", "data"])?;
    assert!(
        pvc.starts_with("NAME   STATUS    VOLUME   CAPACITY   ACCESS MODES"),
        "{pvc}"
    );
    assert!(
        pvc.lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("data   Pending"),
        "{pvc}"
    );
    let tpl = plane.kubectl_ok(&["get", "podtemplates"])?;
    assert!(
        tpl.contains("registry.example/app:1") && tpl.contains("app=web"),
        "{tpl}"
    );
    let ing = plane.kubectl_ok(&["get", "ingress"])?;
    let row: Vec<&str> = ing
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], ["web", "nginx", "web.example", "80"], "{ing}");
    let class = plane.kubectl_ok(&["get", "ingressclass"])?;
    assert!(class.contains("k8s.io/ingress-nginx   <none>"), "{class}");
    let hpa = plane.kubectl_ok(&["get", "hpa"])?;
    let row: Vec<&str> = hpa
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..6],
        ["web", "Deployment/web", "cpu:", "<unknown>/80%", "1", "5"],
        "{hpa}"
    );
    // `kubectl get all` lists autoscalers, as upstream's category says.
    let all = plane.kubectl_ok(&["get", "all"])?;
    assert!(
        all.contains("horizontalpodautoscaler.autoscaling/web"),
        "{all}"
    );

    // Upstream's rules for what is most often wrong.
    let bad = manifest(
        dir.path(),
        "bad.yaml",
        &[json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}})],
    )?;
    let out = plane.kubectl_fails(&["create", "-f", &bad])?;
    assert!(
        out.contains("spec.accessModes: Required value: at least 1 access mode is required"),
        "{out}"
    );
    let out = plane.kubectl_fails(&[
        "patch",
        "pvc",
        "data",
        "-p",
        r#"{"spec":{"storageClassName":"fast"}}"#,
    ])?;
    assert!(out.contains("spec is immutable after creation"), "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_classes_resolve_into_pods() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let classes = plane.kubectl_ok(&["get", "priorityclasses"])?;
    assert!(
        classes.contains("system-node-critical      2000001000"),
        "{classes}"
    );
    assert!(
        classes.contains("system-cluster-critical   2000000000"),
        "{classes}"
    );
    let out = plane.kubectl_fails(&["delete", "priorityclass", "system-node-critical"])?;
    assert!(
        out.contains("this is a system priority class and cannot be deleted"),
        "{out}"
    );

    plane.kubectl_ok(&["create", "priorityclass", "high", "--value=1000"])?;
    let out = plane.kubectl_fails(&["create", "priorityclass", "system-mine", "--value=1"])?;
    assert!(
        out.contains("prefix are reserved for system use only"),
        "{out}"
    );
    let out = plane.kubectl_fails(&["create", "priorityclass", "huge", "--value=1000000001"])?;
    assert!(
        out.contains("maximum allowed value of a user defined priority is 1000000000"),
        "{out}"
    );

    let dir = tempfile::tempdir()?;
    let pod = |name: &str, class: Option<&str>| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "app"}]}});
        if let Some(c) = class {
            p["spec"]["priorityClassName"] = json!(c);
        }
        manifest(dir.path(), &format!("{name}.yaml"), &[p])
    };
    let priority = |name: &str| -> Result<String> {
        plane.kubectl_ok(&[
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.spec.priorityClassName}/{.spec.priority}/{.spec.preemptionPolicy}",
        ])
    };
    plane.kubectl_ok(&["create", "-f", &pod("named", Some("high"))?])?;
    assert_eq!(priority("named")?, "high/1000/PreemptLowerPriority");
    plane.kubectl_ok(&["create", "-f", &pod("plain", None)?])?;
    assert_eq!(priority("plain")?, "/0/PreemptLowerPriority");
    let out = plane.kubectl_fails(&["create", "-f", &pod("lost", Some("nope"))?])?;
    assert!(
        out.contains("no PriorityClass with name nope was found"),
        "{out}"
    );

    // A global default class is what a pod without one gets; only one may exist.
    plane.kubectl_ok(&[
        "create",
        "priorityclass",
        "normal",
        "--value=10",
        "--global-default",
        "--preemption-policy=Never",
    ])?;
    plane.kubectl_ok(&["create", "-f", &pod("defaulted", None)?])?;
    assert_eq!(priority("defaulted")?, "normal/10/Never");
    let out = plane.kubectl_fails(&[
        "create",
        "priorityclass",
        "other",
        "--value=5",
        "--global-default",
    ])?;
    assert!(
        out.contains(
            "PriorityClass normal is already marked as default. Only one default can exist"
        ),
        "{out}"
    );
    let out = plane.kubectl_fails(&["patch", "priorityclass", "high", "-p", r#"{"value":7}"#])?;
    assert!(
        out.contains("value: Forbidden: may not be changed in an update."),
        "{out}"
    );
    Ok(())
}

/// An APIService per served group version, local and available; a CRD's
/// group gets one while it is served; one a user stores that names a
/// Service is kept but not available (there is no aggregation layer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_services_list_the_served_groups() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let row = |name: &'static str| {
        let plane = &plane;
        move || async move {
            let out = plane.kubectl_ok(&["get", "apiservices", name]).ok()?;
            let line = out.lines().nth(1)?.to_string();
            Some(
                line.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
    };
    let wait = std::time::Duration::from_secs(30);
    let got = wasmlet_e2e::eventually(wait, "v1.apps", row("v1.apps")).await?;
    assert_eq!(got, "v1.apps Local True");
    let got = wasmlet_e2e::eventually(wait, "v1.", row("v1.")).await?;
    assert_eq!(got, "v1. Local True");

    let dir = tempfile::tempdir()?;
    let crd = manifest(
        dir.path(),
        "crd.yaml",
        &[wasmlet_e2e::widget_crd("widgets", "Widget", "Namespaced")],
    )?;
    plane.kubectl_ok(&["create", "-f", &crd])?;
    let got =
        wasmlet_e2e::eventually(wait, "the CRD's APIService", row("v1.test.wasmlet.dev")).await?;
    assert_eq!(got, "v1.test.wasmlet.dev Local True");
    plane.kubectl_ok(&["delete", "-f", &crd])?;
    wasmlet_e2e::eventually(wait, "the CRD's APIService gone", || async {
        let out = plane
            .kubectl(&["get", "apiservices", "v1.test.wasmlet.dev"])
            .ok()?;
        (!out.status.success()).then_some(())
    })
    .await?;

    let aggregated = manifest(
        dir.path(),
        "metrics.yaml",
        &[
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                "service": {"namespace": "kube-system", "name": "metrics-server"},
                "groupPriorityMinimum": 100, "versionPriority": 100,
                "insecureSkipTLSVerify": true}}),
        ],
    )?;
    plane.kubectl_ok(&["create", "-f", &aggregated])?;
    let got = wasmlet_e2e::eventually(wait, "the aggregated APIService judged", || async {
        let got = row("v1beta1.metrics.k8s.io")().await?;
        got.contains("False").then_some(got)
    })
    .await?;
    assert_eq!(
        got,
        "v1beta1.metrics.k8s.io kube-system/metrics-server False"
    );
    Ok(())
}

/// A certificate request for one of the plane's client signers, written with
/// rcgen as `openssl req` would: the key's PEM and the request's.
fn client_request(cn: &str, org: &str) -> Result<(String, String)> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, org);
    let csr = params.serialize_request(&key)?;
    Ok((key.serialize_pem(), csr.pem()?))
}

fn csr_manifest(name: &str, request_pem: &str, signer: &str) -> Value {
    use base64::Engine;
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(request_pem),
            "signerName": signer, "usages": ["client auth"], "expirationSeconds": 3600}})
}

/// CertificateSigningRequests as `kubectl certificate` drives them: approved
/// only by a user the signer lets approve, signed by the plane's client
/// signer into a certificate that logs in as its subject; denied ones and
/// ones the signer's rules refuse are never signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_requests_are_approved_and_signed() -> Result<()> {
    use base64::Engine;
    let plane = Plane::start(&[]).await?;
    let dir = tempfile::tempdir()?;
    let signer = "kubernetes.io/kube-apiserver-client";
    let (jane_key, jane_req) = client_request("jane", "devs")?;
    let (_, other_req) = client_request("mallory", "devs")?;
    let (_, node_req) = client_request("not-a-node", "devs")?;
    let requests = manifest(
        dir.path(),
        "csrs.yaml",
        &[
            csr_manifest("jane", &jane_req, signer),
            csr_manifest("mallory", &other_req, signer),
            csr_manifest(
                "node",
                &node_req,
                "kubernetes.io/kube-apiserver-client-kubelet",
            ),
        ],
    )?;
    plane.kubectl_ok(&["create", "-f", &requests])?;
    let condition = |name: &str| -> Result<String> {
        let out = plane.kubectl_ok(&["get", "csr", name, "--no-headers"])?;
        Ok(out.split_whitespace().last().unwrap_or("").to_string())
    };
    assert_eq!(condition("jane")?, "Pending");
    let requestor = plane.kubectl_ok(&["get", "csr", "jane", "-o", "jsonpath={.spec.username}"])?;
    assert_eq!(requestor, "wasmlet-admin");

    plane.kubectl_ok(&["certificate", "approve", "jane"])?;
    plane.kubectl_ok(&["certificate", "deny", "mallory"])?;
    plane.kubectl_ok(&["certificate", "approve", "node"])?;
    let wait = std::time::Duration::from_secs(30);
    wasmlet_e2e::eventually(wait, "jane's certificate", || async {
        (condition("jane").ok()? == "Approved,Issued").then_some(())
    })
    .await?;
    wasmlet_e2e::eventually(wait, "the kubelet signer's refusal", || async {
        (condition("node").ok()? == "Approved,Failed").then_some(())
    })
    .await?;
    assert_eq!(condition("mallory")?, "Denied");
    // kubectl refuses to approve a denied request itself; the server does too.
    let client = plane.client().await?;
    let mut denied: Value =
        serde_json::from_str(&plane.kubectl_ok(&["get", "csr", "mallory", "-o", "json"])?)?;
    let approved = json!({"type": "Approved", "status": "True", "reason": "Sneaky"});
    denied["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(approved);
    let put = http::Request::put(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/mallory/approval",
    )
    .header("Content-Type", "application/json")
    .body(serde_json::to_vec(&denied)?)?;
    match client.request_text(put).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("Approved and Denied conditions are mutually exclusive"),
            "{s:?}"
        ),
        other => panic!("approving a denied request was answered: {other:?}"),
    }

    // The certificate logs in as its subject.
    let cert = plane.kubectl_ok(&["get", "csr", "jane", "-o", "jsonpath={.status.certificate}"])?;
    let cert = base64::engine::general_purpose::STANDARD.decode(cert.trim())?;
    let mut kc: Value = serde_yaml::from_str(&std::fs::read_to_string(plane.kubeconfig())?)?;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    kc["users"][0]["user"] = json!({"client-certificate-data": b64(&cert),
        "client-key-data": b64(jane_key.as_bytes())});
    let jane_kc = dir.path().join("jane.kubeconfig");
    std::fs::write(&jane_kc, serde_yaml::to_string(&kc)?)?;
    let jane = |args: &[&str]| {
        std::process::Command::new(wasmlet_e2e::kubectl_bin())
            .arg("--kubeconfig")
            .arg(&jane_kc)
            .args(args)
            .env("HOME", dir.path())
            .output()
    };
    let whoami = jane(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}/{.status.userInfo.groups}",
    ])?;
    let text = String::from_utf8_lossy(&whoami.stdout);
    assert!(
        text.starts_with("jane/") && text.contains("devs"),
        "{text}{}",
        String::from_utf8_lossy(&whoami.stderr)
    );

    // Allowed to update approvals but not to approve for the signer: refused.
    let (_, late_req) = client_request("late", "devs")?;
    let late = manifest(
        dir.path(),
        "late.yaml",
        &[csr_manifest("late", &late_req, signer)],
    )?;
    plane.kubectl_ok(&["create", "-f", &late])?;
    plane.kubectl_ok(&[
        "create",
        "clusterrole",
        "csr-updater",
        "--verb=get,list,update",
        "--resource=certificatesigningrequests,certificatesigningrequests/approval",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "jane-csr",
        "--clusterrole=csr-updater",
        "--user=jane",
    ])?;
    let refused = jane(&["certificate", "approve", "late"])?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{text}"
    );
    assert_eq!(condition("late")?, "Pending");
    Ok(())
}
