//! Who may call the kubelet API, decided as a kubelet in webhook mode does
//! (`--authentication-token-webhook`, `--authorization-mode=Webhook`):
//!
//! - **Authentication**: a client certificate signed by the client CA names the
//!   user (CN) and groups (O); otherwise a bearer token is sent to the API
//!   server in a TokenReview (with no audiences, so the server checks the token
//!   against its own, as the kubelet's implicit audiences do).
//! - **Authorization**: every request becomes a SubjectAccessReview for
//!   `nodes/<subresource>` on this node, with the verb of the HTTP method:
//!   `/containerLogs` is `nodes/proxy`, `/logs` `nodes/log`, `/stats`
//!   `nodes/stats`, `/metrics` `nodes/metrics`. On a real cluster the API
//!   server's own kubelet client is bound to `system:kubelet-api-admin`; a
//!   ServiceAccount is not, so it reads no logs.
//!
//! Decisions are cached as the kubelet caches them: allowed for 5 minutes,
//! denied for 30 seconds, tokens for 2 minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
const TOKEN_TTL: Duration = Duration::from_secs(120);

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
}

impl User {
    /// The user a verified client certificate names: CN is the user, each O a
    /// group (as kube-apiserver and the kubelet read x509 client certificates).
    pub fn from_certificate(der: &[u8]) -> Option<User> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        groups.push("system:authenticated".into());
        Some(User {
            name,
            groups,
            uid: None,
        })
    }
}

/// What a request asks to do, in SubjectAccessReview terms.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
}

impl Attributes {
    /// The kubelet's mapping from request to `nodes/<subresource>` and verb.
    pub fn of(method: &http::Method, path: &str) -> Attributes {
        let verb = match *method {
            http::Method::POST => "create",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "get",
        };
        let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let subresource = match first {
            "stats" => "stats",
            "metrics" => "metrics",
            "logs" => "log",
            "spec" => "spec",
            "checkpoint" => "checkpoint",
            _ => "proxy",
        };
        Attributes { verb, subresource }
    }
}

/// Why a request was refused: 401 or 403, as the kubelet answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Unauthenticated,
    Forbidden(String),
}

/// Token reviews by the token's SHA-256: the user (`None`: refused) and when.
type TokenCache = HashMap<[u8; 32], (Option<User>, Instant)>;
/// Access reviews: allowed, or the refusal message, and when.
type DecisionCache = HashMap<(User, Attributes), (Result<(), String>, Instant)>;

/// Authenticates and authorizes callers of one node's kubelet API.
pub struct Gate {
    client: kube::Client,
    node: String,
    tokens: Mutex<TokenCache>,
    decisions: Mutex<DecisionCache>,
}

impl Gate {
    pub fn new(client: kube::Client, node: String) -> Gate {
        Gate {
            client,
            node,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
        }
    }

    /// The caller, by certificate (`cert`, already verified against the CA by
    /// the TLS layer) or bearer token, allowed to do `attrs` on this node.
    pub async fn admit(
        &self,
        cert: Option<&User>,
        bearer: Option<&str>,
        attrs: &Attributes,
    ) -> Result<User, Refusal> {
        let user = match (cert, bearer) {
            (Some(u), _) => u.clone(),
            (None, Some(token)) => self
                .token_user(token)
                .await
                .ok_or(Refusal::Unauthenticated)?,
            (None, None) => return Err(Refusal::Unauthenticated),
        };
        self.authorize(&user, attrs)
            .await
            .map_err(Refusal::Forbidden)?;
        Ok(user)
    }

    async fn token_user(&self, token: &str) -> Option<User> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((user, at)) = lock(&self.tokens).get(&digest)
            && at.elapsed() < TOKEN_TTL
        {
            return user.clone();
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let user = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(r) => r
                .status
                .filter(|s| s.authenticated == Some(true))
                .and_then(|s| s.user)
                .and_then(|u| {
                    Some(User {
                        name: u.username.filter(|n| !n.is_empty())?,
                        groups: u.groups.unwrap_or_default(),
                        uid: u.uid,
                    })
                }),
            // Not cached: the API server may be back in a moment.
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed");
                return None;
            }
        };
        let mut tokens = lock(&self.tokens);
        tokens.retain(|_, (_, at)| at.elapsed() < TOKEN_TTL);
        tokens.insert(digest, (user.clone(), Instant::now()));
        user
    }

    async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<(), String> {
        let key = (user.clone(), attrs.clone());
        if let Some((decision, at)) = lock(&self.decisions).get(&key) {
            let ttl = if decision.is_ok() {
                ALLOWED_TTL
            } else {
                DENIED_TTL
            };
            if at.elapsed() < ttl {
                return decision.clone();
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                uid: user.uid.clone(),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.into()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(attrs.subresource.into()),
                    name: Some(self.node.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let forbidden = || {
            format!(
                "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
                user.name, attrs.verb, attrs.subresource
            )
        };
        let decision = match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Ok(()),
            Ok(r) => Err(match r.status.and_then(|s| s.reason) {
                Some(reason) if !reason.is_empty() => format!("{}: {reason}", forbidden()),
                _ => forbidden(),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                return Err(forbidden());
            }
        };
        let mut decisions = lock(&self.decisions);
        decisions
            .retain(|_, (d, at)| at.elapsed() < if d.is_ok() { ALLOWED_TTL } else { DENIED_TTL });
        decisions.insert(key, (decision.clone(), Instant::now()));
        decision
    }
}

// The maps are caches: a panic mid-update leaves at worst a stale entry.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_node_subresources_as_the_kubelet_maps_them() {
        let get = http::Method::GET;
        let of = |p| Attributes::of(&get, p);
        assert_eq!(of("/containerLogs/default/p/c").subresource, "proxy");
        assert_eq!(of("/logs/syslog").subresource, "log");
        assert_eq!(of("/stats/summary").subresource, "stats");
        assert_eq!(of("/metrics").subresource, "metrics");
        assert_eq!(of("/exec/default/p/c").subresource, "proxy");
        assert_eq!(
            Attributes::of(&http::Method::POST, "/run/a/b/c").verb,
            "create"
        );
        assert_eq!(of("/containerLogs/default/p/c").verb, "get");
    }

    #[test]
    fn a_certificate_names_the_user_and_its_groups() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mallory");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "team-a");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = User::from_certificate(cert.der()).unwrap();
        assert_eq!(user.name, "mallory");
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
    }
}
