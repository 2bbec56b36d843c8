//! The signers of the plane's own client certificates, as
//! kube-controller-manager's `csrsigning` runs them: an approved
//! CertificateSigningRequest for `kubernetes.io/kube-apiserver-client` (any
//! client) or `kubernetes.io/kube-apiserver-client-kubelet` (a node:
//! `system:node:NAME` in `system:nodes`) is signed by the plane's CA, which
//! its TLS authenticates clients by, so the certificate logs in as the
//! request's subject. A request the signer's rules refuse gets a `Failed`
//! condition instead. Requests for other signers are left to them.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;
use crate::resources::{Resources, WriteOptions};
use crate::validation::certificates::request_pem;

/// The field manager of the signer's writes.
const MANAGER: &str = "wasmlet-certificate-signer";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client";
const KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Upstream's `--cluster-signing-duration` default: a year.
const MAX_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// What a client certificate may be used for.
const ALLOWED_USAGES: [&str; 3] = ["client auth", "digital signature", "key encipherment"];

/// Signs a client certificate request (PEM) for a validity: the plane's CA
/// (`Pki::sign_client_request`), given by whoever holds it.
pub(crate) type Sign = Arc<dyn Fn(&str, Duration) -> anyhow::Result<String> + Send + Sync>;

pub(crate) struct Controller {
    resources: Resources,
    sign: Sign,
}

impl Controller {
    pub(crate) fn new(resources: Resources, sign: Sign) -> Controller {
        Controller { resources, sign }
    }

    /// Runs until the store stops; logs rather than failing.
    pub(crate) async fn run(self) {
        let Ok(rt) = self.resources.registry.builtin(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
        ) else {
            return tracing::error!("csrsigning controller: type not registered");
        };
        loop {
            let snap = self.resources.store.snapshot();
            let Ok(mut sub) = self.resources.store.watch(&rt.prefix(None), snap.rv) else {
                tracing::warn!("csrsigning controller: watch failed, restarting");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            for s in snap.range(&rt.prefix(None), None) {
                if let Ok(v) = s.value() {
                    self.handle(&rt, &v).await;
                }
            }
            while let Some(e) = sub.live.recv().await {
                if let Ok(v) = e.object.value() {
                    self.handle(&rt, &v).await;
                }
            }
            tracing::info!("csrsigning controller: resynchronising");
        }
    }

    async fn handle(&self, rt: &ResourceType, csr: &Value) {
        let signer = csr.pointer("/spec/signerName").and_then(Value::as_str);
        if !matches!(signer, Some(CLIENT | KUBELET))
            || !condition(csr, "Approved")
            || condition(csr, "Denied")
            || condition(csr, "Failed")
            || csr.pointer("/status/certificate").is_some()
        {
            return;
        }
        let outcome = self.sign(csr);
        let name = meta::name(csr).to_string();
        let written = self
            .resources
            .modify(rt, "", &name, &WriteOptions::by(MANAGER), |cur| {
                if cur.pointer("/status/certificate").is_some() {
                    return None;
                }
                let mut new = cur.clone();
                match &outcome {
                    Ok(pem) => {
                        new["status"]["certificate"] =
                            json!(base64::engine::general_purpose::STANDARD.encode(pem.as_bytes()));
                    }
                    Err(why) => {
                        let mut conds = cur
                            .pointer("/status/conditions")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        let now = meta::now_rfc3339();
                        conds.push(json!({"type": "Failed", "status": "True",
                            "reason": "SignerValidationFailure", "message": why,
                            "lastUpdateTime": now, "lastTransitionTime": now}));
                        new["status"]["conditions"] = json!(conds);
                    }
                }
                Some(new)
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(csr = %name, error = %e, "writing the signer's answer failed");
        }
    }

    /// The signed certificate's PEM, or why the signer refuses the request.
    fn sign(&self, csr: &Value) -> Result<String, String> {
        let usages: Vec<&str> = csr
            .pointer("/spec/usages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !usages.contains(&"client auth") {
            return Err("usages must include \"client auth\"".into());
        }
        if let Some(u) = usages.iter().find(|u| !ALLOWED_USAGES.contains(u)) {
            return Err(format!(
                "usage {u:?} is not allowed for a client certificate"
            ));
        }
        let pem = request_pem(csr).ok_or("spec.request is not a PEM certificate request")?;
        if csr.pointer("/spec/signerName").and_then(Value::as_str) == Some(KUBELET) {
            kubelet_subject(&pem)?;
        }
        let asked = csr
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_u64)
            .map_or(MAX_VALIDITY, Duration::from_secs);
        (self.sign)(&pem, asked.min(MAX_VALIDITY)).map_err(|e| format!("signing failed: {e}"))
    }
}

/// A kubelet's client request names a node, in `system:nodes`, and nothing else.
fn kubelet_subject(pem: &str) -> Result<(), String> {
    use x509_parser::prelude::FromDer;
    let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&der.contents)
            .map_err(|e| e.to_string())?;
    let subject = &req.certification_request_info.subject;
    let cn: Vec<&str> = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect();
    let orgs: Vec<&str> = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .collect();
    match (cn.as_slice(), orgs.as_slice()) {
        ([name], ["system:nodes"]) if name.starts_with("system:node:") => Ok(()),
        _ => Err("a kubelet client certificate names \"system:node:<name>\" in the organization \"system:nodes\" only".into()),
    }
}

fn condition(csr: &Value, kind: &str) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}
