//! Durability: `kill -9` at a random moment during concurrent writes loses no
//! acknowledged write, and the resourceVersion counter carries on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use rand::Rng;
use wasmlet_e2e::*;

#[tokio::test]
async fn kill9_loses_no_acknowledged_write() -> anyhow::Result<()> {
    let mut plane = Plane::start(&[]).await?;
    // name → resourceVersion of every create that got a success response.
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    for round in 0..3 {
        let client = plane.client().await?;
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let mut tasks = Vec::new();
        for t in 0..8 {
            let cms = cms.clone();
            let acked = acked.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("r{round}-t{t}-{i}");
                    match cms
                        .create(
                            &PostParams::default(),
                            &configmap(&name, &[("round", &round.to_string())]),
                        )
                        .await
                    {
                        Ok(c) => {
                            acked.lock().unwrap().insert(name, rv_of(&c));
                        }
                        Err(_) => return, // the server died under us
                    }
                }
            }));
        }
        // Enough of this round's writes acknowledged to prove something (a
        // loaded machine may need longer for them than any fixed pause), then
        // the kill at a random moment while the writers go on. The pause
        // picks that moment; it waits for nothing.
        let prefix = format!("r{round}-");
        eventually(
            Duration::from_secs(60),
            "writes acknowledged in this round",
            || {
                let n = acked
                    .lock()
                    .unwrap()
                    .keys()
                    .filter(|k| k.starts_with(&prefix))
                    .count();
                std::future::ready((n > 8).then_some(()))
            },
        )
        .await?;
        let delay = rand::rng().random_range(0..550);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        plane.kill9();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("a writer hung after the kill")?;
        }
        let before = acked.lock().unwrap().clone();
        let max_rv = before.values().copied().max().unwrap_or(0);
        assert!(
            before.len() > 8,
            "round {round}: too few writes acknowledged ({}) to prove anything",
            before.len()
        );

        plane.spawn().await?;
        let client = plane.client().await?;
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let list = cms.list(&ListParams::default()).await?;
        let stored: BTreeMap<String, u64> = list
            .items
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap(), rv_of(c)))
            .collect();
        let lost: Vec<&String> = before.keys().filter(|n| !stored.contains_key(*n)).collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged creates lost, e.g. {:?}",
            lost.len(),
            lost.first()
        );
        for (name, rv) in &before {
            assert_eq!(
                stored[name], *rv,
                "{name} changed its resourceVersion across the restart"
            );
        }
        let list_rv: u64 = list.metadata.resource_version.unwrap().parse()?;
        assert!(
            list_rv >= max_rv,
            "the counter went back: list at {list_rv}, acknowledged up to {max_rv}"
        );
        let probe = cms
            .create(
                &PostParams::default(),
                &configmap(&format!("probe-{round}"), &[]),
            )
            .await?;
        assert!(
            rv_of(&probe) > max_rv.max(list_rv),
            "new write's rv {} not above {max_rv}",
            rv_of(&probe)
        );
        acked
            .lock()
            .unwrap()
            .insert(format!("probe-{round}"), rv_of(&probe));
    }

    // The history survives a restart too: a watch from an old revision replays.
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let first_probe = acked.lock().unwrap()["probe-0"];
    let mut s = cms
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &(first_probe - 1).to_string(),
        )
        .await?
        .boxed();
    match tokio::time::timeout(Duration::from_secs(60), s.next()).await {
        Ok(Some(Ok(WatchEvent::Added(c)))) => {
            assert_eq!(c.metadata.name.as_deref(), Some("probe-0"))
        }
        other => panic!(
            "expected probe-0 replayed, got {:?}",
            other.map(|o| o.map(|e| e.map(|_| ())))
        ),
    }
    Ok(())
}
