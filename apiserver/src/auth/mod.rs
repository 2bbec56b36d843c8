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
