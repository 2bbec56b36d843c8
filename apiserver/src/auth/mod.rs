//! Who a request is and what it may do: authentication (bearer tokens,
//! client certificates, ServiceAccount tokens), authorization (RBAC and the
//! Node authorizer), the admission checks that depend on the user
//! (NodeRestriction, RBAC escalation, run through `resources::Admit`), the
//! self-reviews, and the CA and TLS that identities rest on. Grouped so that
//! `resources`, `rest` and the rest see one layer (see `tests/layers.rs`).

pub(crate) mod authn;
pub(crate) mod authz;
pub(crate) mod nodeauthz;
pub(crate) mod noderestriction;
pub(crate) mod pki;
pub(crate) mod rbac;
pub(crate) mod requester;
pub(crate) mod satoken;
pub(crate) mod selfreview;
pub(crate) mod tls;

/// Whether `user` is exempt from the bounds on requests in flight
/// (`crate::inflight`): `system:masters`, as APF's exempt priority level, and
/// the plane's own components (the controller host, nodes), which APF's
/// system levels give shares no tenant can take.
pub(crate) fn exempt_from_inflight_bounds(user: &wasmlet_apimachinery::rbac::UserInfo) -> bool {
    user.name == authz::CONTROLLER_USER
        || user
            .groups
            .iter()
            .any(|g| g == "system:masters" || g == "system:nodes")
}
