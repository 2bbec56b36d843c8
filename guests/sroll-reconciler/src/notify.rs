//! Chat notifications in Slack's Web API shape, and the deploy callback.
//!
//! One message per rollout (`chat.postMessage`), then `chat.update` of it;
//! pods are listed 50 per message, the first page in the message and the
//! rest in thread replies. Chat APIs allow about one update a second per
//! channel, and a 1,000-pod rollout has hundreds of passes, so:
//! - the summary is brought up to date once per batch (the pass that
//!   evicts it) and when the phase moves on otherwise, never because one
//!   more pod turned ready, and at most every [`SUMMARY_EVERY`];
//! - the pod pages in the thread are sent only when the rollout ends, fails
//!   or pauses (then at once, with the summary: the last word is always
//!   exact); while it runs the summary's counts and first page say enough;
//! - and then only the messages whose text changed.
//!
//! So a rollout of N pods in B batches costs about one message, B updates
//! and ceil(N / 50) - 1 thread replies. A milestone held back by the rate is
//! sent on a later pass (the rollout requeues itself while it runs).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use wasmlet_sdk::http::{self, Request};
use wasmlet_sdk::prelude::*;

use crate::api::{CallbackKey, NotificationMessage, StatefulsetRollout, StatefulsetRolloutStatus};
use crate::plan::phase;
use crate::spec::digest;

/// Pods listed per chat message.
pub const PODS_PER_MESSAGE: usize = 50;

/// The least time between two updates of the summary message.
pub const SUMMARY_EVERY: SignedDuration = SignedDuration::from_secs(10);

/// Keys of `sent` besides the message indexes: the milestone the messages
/// were last brought up to date at, and when the summary was.
const MILESTONE: &str = "milestone";
const SUMMARY_AT: &str = "summary-at";

/// Phases whose message goes out at once: the rollout's end, and a pause.
fn at_once(st: &StatefulsetRolloutStatus) -> bool {
    crate::plan::is_final(&st.phase) || st.phase == phase::PAUSED
}

/// Whether the time stored under `key` is `every` or more before `now`.
fn due(msg: &NotificationMessage, key: &str, every: SignedDuration, now: Timestamp) -> bool {
    msg.sent
        .get(key)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_none_or(|t| now.duration_since(t) >= every)
}

/// Phases a running rollout moves between within each batch: one milestone.
fn rolling(phase: &str) -> bool {
    [
        phase::ROLLING,
        phase::WAITING_FOR_PODS,
        phase::WAITING_FOR_INTERVAL,
        phase::WAITING_FOR_BUDGET,
    ]
    .contains(&phase)
}

/// What a chat reader follows: while rolling, each batch (its eviction
/// time); otherwise the phase and its reason. Live counts are not part of it.
fn milestone(st: &StatefulsetRolloutStatus) -> String {
    if rolling(&st.phase) {
        digest(&json!([phase::ROLLING, st.last_eviction_time]))
    } else {
        digest(&json!([st.phase, st.reason, st.paused]))
    }
}

/// The texts to send: the summary (with the first pod page), then one per extra page.
pub fn texts(sroll: &StatefulsetRollout, st: &StatefulsetRolloutStatus) -> Vec<String> {
    let name = sroll.metadata.name.clone().unwrap_or_default();
    let ns = sroll.metadata.namespace.clone().unwrap_or_default();
    let mut head = format!(
        "Rollout {ns}/{name} of StatefulSet {}: {} ({}% deployed, {} of {} updated, {} ready, asked {}%)",
        st.statefulset_name.clone().unwrap_or_default(),
        st.phase,
        st.percent_deployed,
        st.updated_replicas,
        st.replicas,
        st.ready_replicas,
        sroll.spec.percent
    );
    if !st.reason.is_empty() {
        head.push_str(&format!("\n{}", st.reason));
    }
    if let Some(b) = &st.build_metadata {
        head.push_str(&format!(
            "\nbuild: {} {}",
            b.branch.clone().unwrap_or_default(),
            b.commit.clone().unwrap_or_default()
        ));
    }
    let pages: Vec<String> = st
        .pods
        .chunks(PODS_PER_MESSAGE)
        .map(|c| {
            c.iter()
                .map(|p| {
                    format!(
                        "{} {} {}",
                        p.name,
                        p.revision,
                        if p.ready { "ready" } else { "not ready" }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let mut out = vec![match pages.first() {
        Some(p) => format!("{head}\n{p}"),
        None => head,
    }];
    out.extend(pages.into_iter().skip(1));
    out
}

fn token(ctx: &Context, ns: &str, sroll: &StatefulsetRollout) -> Result<String, String> {
    let n = sroll
        .spec
        .notifications
        .as_ref()
        .ok_or("no notifications")?;
    let key = n.token_secret.key.clone().unwrap_or_else(|| "token".into());
    let secret: Secret = ctx
        .client()
        .get(ns, &n.token_secret.name)
        .map_err(|e| format!("Secret {ns}/{}: {e}", n.token_secret.name))?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&key))
        .ok_or_else(|| format!("Secret {ns}/{} has no key {key}", n.token_secret.name))?;
    String::from_utf8(bytes.0.clone()).map_err(|e| e.to_string())
}

fn call(base: &str, method: &str, token: &str, body: Value) -> Result<Value, String> {
    let url = format!("{}/{method}", base.trim_end_matches('/'));
    let req = Request::post(&url, body.to_string())
        .header("content-type", "application/json; charset=utf-8")
        .header("authorization", &format!("Bearer {token}"))
        .timeout(Duration::from_secs(3));
    let resp = http::fetch(&req).map_err(|e| format!("{method}: {e}"))?;
    let v: Value = resp
        .json()
        .map_err(|e| format!("{method}: HTTP {}: {e}", resp.status))?;
    if v["ok"] != json!(true) {
        return Err(format!(
            "{method}: {}",
            v["error"].as_str().unwrap_or("not ok")
        ));
    }
    Ok(v)
}

/// How soon to try again after a failed send: nothing else may wake a
/// finished or paused rollout.
pub const RETRY: Duration = Duration::from_secs(10);

/// Brings the chat message up to date with `st` (opening it for a new
/// generation). Failures are logged and retried on a later pass (they never
/// hold the rollout): the answer is then when, [`RETRY`].
pub fn sync(
    ctx: &Context,
    sroll: &StatefulsetRollout,
    st: &mut StatefulsetRolloutStatus,
    now: Timestamp,
) -> Option<Duration> {
    let (Some(n), Some(channel)) = (&sroll.spec.notifications, &sroll.spec.channel) else {
        return None;
    };
    let ns = sroll.metadata.namespace.clone().unwrap_or_default();
    let generation = sroll.metadata.generation.unwrap_or(0);
    let at = milestone(st);
    let last = at_once(st);
    if let Some(m) = &st.notification_message
        && m.generation == generation
        && (m.sent.get(MILESTONE) == Some(&at) || !last && !due(m, SUMMARY_AT, SUMMARY_EVERY, now))
    {
        return None;
    }
    let texts = texts(sroll, st);
    // The token is read only when a message is about to go out: a pass with
    // nothing to send (a finished rollout's, say) makes no call at all.
    let mut token: Option<String> = None;
    let mut send = |method: &str, body: Value| -> Result<Value, String> {
        let t = match &token {
            Some(t) => t,
            None => token.insert(self::token(ctx, &ns, sroll)?),
        };
        call(&n.url, method, t, body)
    };
    // The object this pass got may predate the status write of the pass that
    // opened the message; the cache may have it by now (never open two).
    let fresh = || {
        ctx.client()
            .get_opt::<StatefulsetRollout>(
                ns.as_str(),
                sroll.metadata.name.as_deref().unwrap_or_default(),
            )
            .ok()
            .flatten()
            .and_then(|o| o.status)
            .and_then(|s| s.notification_message)
            .filter(|m| m.generation == generation)
    };
    let mut msg = match st
        .notification_message
        .take()
        .filter(|m| m.generation == generation)
        .or_else(fresh)
    {
        // The API answers with the channel's id, not the name asked for; a new
        // channel is a new generation anyway.
        Some(m) if m.generation == generation => m,
        _ => {
            let text = &texts[0];
            match send(
                "chat.postMessage",
                json!({"channel": channel, "text": text}),
            ) {
                Ok(v) => NotificationMessage {
                    channel: v["channel"].as_str().unwrap_or(channel).to_owned(),
                    ts: v["ts"].as_str().unwrap_or_default().to_owned(),
                    pages: Vec::new(),
                    generation,
                    sent: [("0".to_owned(), digest(&json!(text)))].into(),
                },
                Err(e) => {
                    ctx.warn(&format!("notifications: {e}"));
                    return Some(RETRY);
                }
            }
        }
    };
    let mut all_sent = true;
    // The pages go out with the last word only (see the module docs).
    let sending = if last { texts.len() } else { 1 };
    for (i, text) in texts.iter().enumerate().take(sending) {
        let d = digest(&json!(text));
        if msg.sent.get(&i.to_string()) == Some(&d) {
            continue;
        }
        let result = if i == 0 {
            send(
                "chat.update",
                json!({"channel": msg.channel, "ts": msg.ts, "text": text}),
            )
        } else if let Some(ts) = msg.pages.get(i - 1).cloned() {
            send(
                "chat.update",
                json!({"channel": msg.channel, "ts": ts, "text": text}),
            )
        } else {
            send(
                "chat.postMessage",
                json!({"channel": msg.channel, "thread_ts": msg.ts, "text": text}),
            )
            .map(|v| {
                msg.pages
                    .push(v["ts"].as_str().unwrap_or_default().to_owned());
                v
            })
        };
        match result {
            Ok(_) => {
                msg.sent.insert(i.to_string(), d);
            }
            Err(e) => {
                ctx.warn(&format!("notifications: {e}"));
                all_sent = false;
                break;
            }
        }
    }
    // A failed send is tried again on a later pass, milestone or not.
    msg.sent.insert(SUMMARY_AT.to_owned(), now.to_string());
    if all_sent {
        msg.sent.insert(MILESTONE.to_owned(), at);
    }
    st.notification_message = Some(msg);
    (!all_sent).then_some(RETRY)
}

/// Back-off before callback attempt `n` (1-based): 1, 2, 4, ... 60 seconds.
pub fn backoff(attempts: i32) -> Duration {
    Duration::from_secs(1u64 << attempts.clamp(0, 6)).min(Duration::from_secs(60))
}

/// What the callback for `st` (a final phase) reports, as recorded once sent.
fn callback_key(sroll: &StatefulsetRollout, st: &StatefulsetRolloutStatus) -> Option<CallbackKey> {
    let cb = sroll.spec.callback.as_ref()?;
    Some(CallbackKey {
        stage_id: cb.stage_id.clone(),
        rollout_identity: sroll.spec.rollout_identity.clone(),
        generation: sroll.metadata.generation.unwrap_or(0),
        outcome: if st.phase == phase::DONE {
            "success"
        } else {
            "failure"
        }
        .into(),
    })
}

/// Whether the report `key` was delivered already. A status written before
/// `lastCallback` existed names the stage only: taken as delivered for it,
/// so an upgrade never reports a rollout twice.
fn delivered(st: &StatefulsetRolloutStatus, key: &CallbackKey) -> bool {
    match &st.last_callback {
        Some(last) => last == key,
        None => st.last_callback_stage_id.as_deref() == Some(key.stage_id.as_str()),
    }
}

/// Reports a final phase to `callback.url` once per (stage id,
/// rolloutIdentity, generation) and outcome: on success `lastCallback`
/// records it; on failure the attempt is counted and the returned delay says
/// when to try again. A retry through a new `rolloutIdentity` is a new report.
pub fn callback(
    ctx: &Context,
    sroll: &StatefulsetRollout,
    st: &mut StatefulsetRolloutStatus,
    now: Timestamp,
) -> Option<Duration> {
    let cb = sroll.spec.callback.as_ref()?;
    let key = callback_key(sroll, st)?;
    if delivered(st, &key) {
        return None;
    }
    if let Some(next) = st
        .next_callback_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        && now < next
    {
        return Some(next.duration_since(now).unsigned_abs());
    }
    let body = json!({
        "stageId": cb.stage_id,
        "outcome": key.outcome,
        "phase": st.phase,
        "reason": st.reason,
        "namespace": sroll.metadata.namespace,
        "name": sroll.metadata.name,
        "statefulset": st.statefulset_name,
        "percent": st.percent_deployed,
        "rolloutIdentity": sroll.spec.rollout_identity,
        "generation": key.generation,
    });
    // The key doubles as an idempotency key: a host killed after the POST
    // but before the status write sends it again, and the receiver can tell.
    let idempotency = format!(
        "{}:{}:{}:{}",
        key.stage_id,
        key.rollout_identity.as_deref().unwrap_or_default(),
        key.generation,
        key.outcome
    );
    let req = Request::post(&cb.url, body.to_string())
        .header("content-type", "application/json")
        .header("idempotency-key", &idempotency)
        .timeout(Duration::from_secs(3));
    match http::fetch(&req) {
        Ok(r) if (200..300).contains(&r.status) => {
            st.last_callback_stage_id = Some(cb.stage_id.clone());
            st.last_callback = Some(key);
            st.callback_attempts = 0;
            st.next_callback_time = None;
            None
        }
        other => {
            let why = match other {
                Ok(r) => format!("HTTP {}", r.status),
                Err(e) => e.to_string(),
            };
            st.callback_attempts += 1;
            let wait = backoff(st.callback_attempts);
            st.next_callback_time =
                Some((now + SignedDuration::try_from(wait).unwrap_or_default()).to_string());
            ctx.warn(&format!(
                "callback to {} failed ({why}); retrying in {wait:?}",
                cb.url
            ));
            Some(wait)
        }
    }
}
