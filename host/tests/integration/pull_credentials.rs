//! A private image pulled with one namespace's pull secret is not another
//! namespace's for the asking (issue 8, finding 5; the kubelet's
//! `KubeletEnsureSecretPulledImages`): with `IfNotPresent` a pod uses a stored
//! private image only once the registry accepted that pod's own credentials for it.
//! Runs Debian's `docker-registry` with htpasswd authentication when it is installed.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::Path;

use wasmlet::internals::workloads::*;
use wasmlet_e2e::registry::{self, Registry};

/// `htpasswd -nbB alice pw-alice`.
const ALICE: (&str, &str, &str) = (
    "alice",
    "pw-alice",
    "$2y$05$uun.X4YNo.Cirs.qNlqPkOKzIoBdorqs6YxB3kwN.Xgd9asEHRnQq",
);

fn request(image: &str, policy: PullPolicy, ns: &str, secrets: Vec<PullSecret>) -> FetchRequest {
    FetchRequest {
        image: image.into(),
        pull_policy: policy,
        namespace: ns.into(),
        pull_secrets: secrets,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_is_not_another_pods_without_its_own_credentials() {
    if !Path::new(registry::BIN).exists() {
        eprintln!(
            "SKIPPED: {} is missing (apt-get install -y docker-registry)",
            registry::BIN
        );
        return;
    }
    let registry = Registry::start_with_users(&[ALICE]).await.unwrap();
    let module = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
    registry
        .push(
            "private:v1",
            module,
            "application/wasm",
            "application/vnd.wasm.config.v0+json",
        )
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut config = WorkloadConfig::new(tmp.path());
    config.insecure_registries = vec![registry.addr.clone()];
    let engine = WorkloadEngine::new(&tmp.path().join("cache")).unwrap();
    let m = WorkloadManager::new(config, engine).unwrap();
    let image = format!("{}/private:v1", registry.addr);
    let addr = registry.addr.clone();
    let secret = |user: &str, password: &str| {
        vec![PullSecret {
            registry: addr.clone(),
            username: user.into(),
            password: password.into(),
        }]
    };
    let alice = || secret(ALICE.0, ALICE.1);
    let if_not_present = PullPolicy::IfNotPresent;

    // team-a pulls it with its pull secret.
    let pulled = m
        .fetch_wait(&request(&image, if_not_present, "team-a", alice()))
        .await
        .unwrap();

    // team-b, with no pull secret or a wrong one, does not get the stored copy: the
    // registry is asked with team-b's credentials, and refuses.
    for (what, secrets) in [("none", vec![]), ("wrong", secret(ALICE.0, "guess"))] {
        let got = m
            .fetch_wait(&request(&image, if_not_present, "team-b", secrets.clone()))
            .await;
        assert!(
            matches!(got, Err(FetchError::Unauthorized(_))),
            "credentials {what}: {got:?}"
        );
        let got = m
            .fetch_wait(&request(&image, PullPolicy::Never, "team-b", secrets))
            .await;
        assert!(
            matches!(got, Err(FetchError::Unauthorized(_))),
            "credentials {what}, Never: {got:?}"
        );
    }

    // Verified credentials use the store, without the registry.
    drop(registry);
    for policy in [if_not_present, PullPolicy::Never] {
        let got = m
            .fetch_wait(&request(&image, policy, "team-c", alice()))
            .await;
        assert_eq!(got.as_ref(), Ok(&pulled), "{policy:?}");
    }
}
