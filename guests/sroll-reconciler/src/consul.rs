//! Service discovery: Consul's `GET /v1/health/service/NAME?dc=DC&passing`
//! through the host's allow-listed HTTP.

use std::time::Duration;

use serde_json::Value;
use wasmlet_sdk::http::{self, Request};

use crate::api::ServiceDiscovery;
use crate::plan::Health;

pub const DEFAULT_URL: &str = "http://127.0.0.1:8500";

/// The passing instances of every configured service. An unreachable agent
/// or an error answer is reported in `error` (which holds the rollout).
pub fn health(sd: &ServiceDiscovery) -> Health {
    let base = sd
        .url
        .as_deref()
        .unwrap_or(DEFAULT_URL)
        .trim_end_matches('/');
    let mut h = Health {
        passing: i32::MAX,
        ..Health::default()
    };
    for name in &sd.service_names {
        let url = format!("{base}/v1/health/service/{name}?dc={}&passing", sd.dc);
        let req = Request::get(&url)
            .header("accept", "application/json")
            .timeout(Duration::from_secs(2));
        let entries = match http::fetch(&req) {
            Ok(r) if r.status == 200 => match r.json::<Vec<Value>>() {
                Ok(v) => v,
                Err(e) => {
                    h.error = Some(format!("service {name}: bad answer: {e}"));
                    break;
                }
            },
            Ok(r) => {
                h.error = Some(format!("service {name}: HTTP {}", r.status));
                break;
            }
            Err(e) => {
                h.error = Some(format!("service {name}: {e}"));
                break;
            }
        };
        if !entries.is_empty() {
            h.services.push(name.clone());
        }
        h.passing = h.passing.min(entries.len() as i32);
        for e in &entries {
            for ptr in [
                "/Service/ID",
                "/Service/Address",
                "/Node/Node",
                "/Node/Address",
            ] {
                if let Some(s) = e.pointer(ptr).and_then(Value::as_str)
                    && !s.is_empty()
                {
                    h.members.push(s.to_owned());
                }
            }
        }
    }
    if h.passing == i32::MAX {
        h.passing = 0;
    }
    h
}
