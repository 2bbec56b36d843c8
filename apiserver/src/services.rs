//! Services, Endpoints and EndpointSlices: stored and served, with no proxy
//! behind them. What the plane adds, as kube-apiserver does:
//!
//! - a cluster IP for each new Service from [`SERVICE_CIDR`] (upstream's
//!   default `--service-cluster-ip-range`), single-stack IPv4, and node ports
//!   from 30000-32767 for NodePort and LoadBalancer Services;
//! - the `kubernetes` Service in `default` at the range's first address
//!   ([`kubernetes_ip`]; `controllers::bootstrap` writes it, with the
//!   Endpoints and EndpointSlice naming the API server's own address, so
//!   `kubectl cluster-info` and in-cluster discovery find it).
//!
//! Deviation: addresses are picked at random and checked against the stored
//! Services rather than reserved in a bitmap, so two Services created in the
//! same instant could in principle get one address; nothing routes to them.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use rand::Rng;
use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{Snapshot, Store};

/// The service cluster IP range, as `--service-cluster-ip-range`.
pub(crate) const SERVICE_CIDR: &str = "10.96.0.0/12";
const RANGE_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const RANGE_BITS: u32 = 12;
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

fn range_size() -> u32 {
    1 << (32 - RANGE_BITS)
}

fn in_range(ip: Ipv4Addr) -> bool {
    let v = u32::from(ip);
    // Neither the network nor the broadcast address.
    v > RANGE_BASE && v < RANGE_BASE + range_size() - 1
}

/// The `kubernetes` Service's address: the range's first.
pub(crate) fn kubernetes_ip() -> Ipv4Addr {
    Ipv4Addr::from(RANGE_BASE + 1)
}

fn is_services(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.resource == "services"
}

fn used(snap: &Snapshot, rt: &ResourceType) -> (BTreeSet<String>, BTreeSet<i64>) {
    let mut ips = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for s in snap.range(&rt.prefix(None), None) {
        let Ok(v) = s.value() else { continue };
        for ip in v
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .chain(v.pointer("/spec/clusterIP"))
            .filter_map(Value::as_str)
        {
            ips.insert(ip.to_string());
        }
        for p in v
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
                ports.insert(n);
            }
        }
    }
    (ips, ports)
}

fn invalid(rt: &ResourceType, name: &str, field: &str, message: String) -> ApiError {
    ApiError::invalid(
        rt,
        name,
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.into(),
        }],
    )
}

/// A new Service's cluster IP, IP families and node ports; its status.
pub(crate) fn allocate(store: &Store, rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    if !is_services(rt) {
        return Ok(());
    }
    let name = meta::name(obj).to_string();
    let snap = store.snapshot();
    let (ips, ports) = used(&snap, rt);
    obj["status"] = json!({"loadBalancer": {}});
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if ty == "ExternalName" {
        return Ok(());
    }
    let asked = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .or_else(|| {
            spec.get("clusterIPs")
                .and_then(|l| l.get(0))
                .and_then(Value::as_str)
        })
        .unwrap_or("")
        .to_string();
    let ip = match asked.as_str() {
        "None" => "None".to_string(),
        "" => {
            let mut rng = rand::rng();
            let free = (0..64)
                .map(|_| Ipv4Addr::from(RANGE_BASE + rng.random_range(2..range_size() - 1)))
                .map(|ip| ip.to_string())
                .find(|ip| !ips.contains(ip));
            match free {
                Some(ip) => ip,
                None => {
                    return Err(ApiError::internal(format!(
                        "failed to allocate a serviceIP: range {SERVICE_CIDR} is full"
                    )));
                }
            }
        }
        other => {
            let parsed: Option<Ipv4Addr> = other.parse().ok();
            if !parsed.is_some_and(in_range) {
                return Err(invalid(
                    rt,
                    &name,
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: [\"{other}\"]: failed to allocate IP {other}: the provided IP ({other}) is not in the valid range. The range of valid IPs is {SERVICE_CIDR}"
                    ),
                ));
            }
            if ips.contains(other) {
                return Err(invalid(
                    rt,
                    &name,
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: [\"{other}\"]: failed to allocate IP {other}: provided IP is already allocated"
                    ),
                ));
            }
            other.to_string()
        }
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    if ty == "NodePort" || ty == "LoadBalancer" {
        let mut taken = ports;
        let mut rng = rand::rng();
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if p.get("nodePort").and_then(Value::as_i64).is_some() {
                continue;
            }
            let free = (0..256)
                .map(|_| rng.random_range(NODE_PORTS))
                .find(|n| !taken.contains(n));
            if let Some(n) = free {
                taken.insert(n);
                p["nodePort"] = json!(n);
            }
        }
    }
    Ok(())
}

/// An update keeps what was allocated when the client left it out (as
/// upstream's `patchAllocatedValues`, which `kubectl apply` relies on).
pub(crate) fn keep_allocated(rt: &ResourceType, old: &Value, new: &mut Value) {
    if !is_services(rt) {
        return;
    }
    crate::meta::keep_unset_spec_fields(
        old,
        new,
        &["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"],
    );
    let (Some(o), Some(n)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return;
    };
    let old_ports: Vec<Value> = o
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for p in n
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if p.get("nodePort").is_some_and(|v| !v.is_null()) {
            continue;
        }
        if let Some(np) = old_ports
            .iter()
            .find(|q| q.get("port") == p.get("port") && q.get("protocol") == p.get("protocol"))
            .and_then(|q| q.get("nodePort"))
        {
            p["nodePort"] = np.clone();
        }
    }
}
