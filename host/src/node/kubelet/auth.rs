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
//! denied for 30 seconds (`--authorization-webhook-cache-authorized-ttl`,
//! `-unauthorized-ttl`), tokens for 2 minutes whether accepted or refused
//! (`--authentication-token-webhook-cache-ttl`, which upstream's delegating
//! authenticator uses for both), so a bad token repeated costs one review.
//! Each cache holds at most [`MAX_CACHED`] entries ([`super::review_cache`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use super::review_cache::ReviewCache;

const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);
const TOKEN_TTL: Duration = Duration::from_secs(120);
/// Entries per cache: a 32-byte token digest with its user (or none), or a
/// user and request attributes with the decision; a few MiB at most.
pub(crate) const MAX_CACHED: usize = 4096;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
    pub(crate) uid: Option<String>,
}

impl User {
    /// The user a verified client certificate names: CN is the user, each O a
    /// group (as kube-apiserver and the kubelet read x509 client certificates).
    pub(crate) fn from_certificate(der: &[u8]) -> Option<User> {
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
pub(crate) struct Attributes {
    pub(crate) verb: &'static str,
    pub(crate) subresource: &'static str,
}

impl Attributes {
    /// The kubelet's mapping from request to `nodes/<subresource>` and verb.
    pub(crate) fn of(method: &http::Method, path: &str) -> Attributes {
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

/// The bearer token of a request's `Authorization` header, if any (the
/// kubelet port's and the metrics address's guards read it alike).
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Why a request was refused: 401 or 403, as the kubelet answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Unauthenticated,
    Forbidden(String),
}

/// Token reviews by the token's SHA-256: the user (`None`: refused).
type TokenCache = ReviewCache<[u8; 32], Option<User>>;
/// Access reviews: allowed, or the refusal message.
type DecisionCache = ReviewCache<(User, Access), Result<(), String>>;

/// What a SubjectAccessReview asks about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Access {
    /// A kubelet route: `nodes/<subresource>` on this node.
    Node(Attributes),
    /// A non-resource URL (the metrics address's status page).
    Path { verb: &'static str, path: String },
}

/// Authenticates and authorizes callers of one node's kubelet API.
pub(crate) struct Gate {
    client: kube::Client,
    node: String,
    tokens: Mutex<TokenCache>,
    decisions: Mutex<DecisionCache>,
}

impl Gate {
    pub(crate) fn new(client: kube::Client, node: String) -> Gate {
        Gate {
            client,
            node,
            tokens: Mutex::new(ReviewCache::new(MAX_CACHED)),
            decisions: Mutex::new(ReviewCache::new(MAX_CACHED)),
        }
    }

    /// The caller, by certificate (`cert`, already verified against the CA by
    /// the TLS layer) or bearer token, allowed to do `attrs` on this node.
    pub(crate) async fn admit(
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
        self.authorize(&user, &Access::Node(attrs.clone()))
            .await
            .map_err(Refusal::Forbidden)?;
        Ok(user)
    }

    /// A bearer-token caller allowed `verb` on the non-resource URL `path`
    /// (as kube-rbac-proxy asks for a path it guards: the request's path and
    /// the HTTP method's verb), for endpoints other than the kubelet's.
    pub(crate) async fn admit_path(
        &self,
        bearer: Option<&str>,
        method: &http::Method,
        path: &str,
    ) -> Result<User, Refusal> {
        let token = bearer.ok_or(Refusal::Unauthenticated)?;
        let user = self
            .token_user(token)
            .await
            .ok_or(Refusal::Unauthenticated)?;
        let verb = Attributes::of(method, path).verb;
        self.authorize(
            &user,
            &Access::Path {
                verb,
                path: path.to_string(),
            },
        )
        .await
        .map_err(Refusal::Forbidden)?;
        Ok(user)
    }

    async fn token_user(&self, token: &str) -> Option<User> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = lock(&self.tokens).get(&digest, Instant::now(), |_| TOKEN_TTL) {
            return user;
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
        lock(&self.tokens).insert(digest, user.clone(), Instant::now());
        user
    }

    async fn authorize(&self, user: &User, access: &Access) -> Result<(), String> {
        let key = (user.clone(), access.clone());
        if let Some(decision) = lock(&self.decisions).get(&key, Instant::now(), decision_ttl) {
            return decision;
        }
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            uid: user.uid.clone(),
            ..Default::default()
        };
        match access {
            Access::Node(attrs) => {
                spec.resource_attributes = Some(ResourceAttributes {
                    verb: Some(attrs.verb.into()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(attrs.subresource.into()),
                    name: Some(self.node.clone()),
                    ..Default::default()
                })
            }
            Access::Path { verb, path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    verb: Some(verb.to_string()),
                    path: Some(path.clone()),
                })
            }
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let forbidden = || match access {
            Access::Node(attrs) => format!(
                "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
                user.name, attrs.verb, attrs.subresource
            ),
            Access::Path { verb, path } => {
                format!("Forbidden (user={}, verb={verb}, path={path})", user.name)
            }
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
        lock(&self.decisions).insert(key, decision.clone(), Instant::now());
        decision
    }
}

fn decision_ttl(d: &Result<(), String>) -> Duration {
    if d.is_ok() { ALLOWED_TTL } else { DENIED_TTL }
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

    /// A Gate whose API server is a stub: `good` authenticates as `alice`
    /// (allowed everything), any other token is refused; counts the reviews.
    fn stub_gate() -> (Gate, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let reviews = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = reviews.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                let path = req.uri().path().to_string();
                let body = http_body_util::BodyExt::collect(req.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                let mut obj: serde_json::Value = serde_json::from_slice(&body).unwrap();
                obj["status"] = if path.ends_with("/tokenreviews") {
                    if obj["spec"]["token"] == "good" {
                        serde_json::json!({"authenticated": true, "user": {"username": "alice"}})
                    } else {
                        serde_json::json!({"authenticated": false})
                    }
                } else {
                    serde_json::json!({"allowed": true})
                };
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from(obj.to_string()),
                )))
            }
        });
        let client = kube::Client::new(svc, "default");
        (Gate::new(client, "n".into()), reviews)
    }

    #[tokio::test]
    async fn random_tokens_keep_the_cache_bounded_and_a_repeated_bad_token_is_reviewed_once() {
        use std::sync::atomic::Ordering;
        let (gate, reviews) = stub_gate();
        let attrs = Attributes::of(&http::Method::GET, "/containerLogs/a/b/c");
        let n = MAX_CACHED * 3;
        for i in 0..n {
            let token = format!("random-{i}");
            let refused = gate.admit(None, Some(&token), &attrs).await;
            assert_eq!(refused, Err(Refusal::Unauthenticated));
        }
        assert_eq!(reviews.load(Ordering::Relaxed), n);
        let tokens = lock(&gate.tokens).len();
        assert!(tokens <= MAX_CACHED, "{tokens} tokens cached");
        // The same bad token again and again: one review.
        let before = reviews.load(Ordering::Relaxed);
        for _ in 0..100 {
            let refused = gate.admit(None, Some("bad"), &attrs).await;
            assert_eq!(refused, Err(Refusal::Unauthenticated));
        }
        assert_eq!(reviews.load(Ordering::Relaxed), before + 1);
        // A valid token still works after the flood (a token review and an
        // access review), then from the cache.
        let user = gate.admit(None, Some("good"), &attrs).await.unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(reviews.load(Ordering::Relaxed), before + 3);
        gate.admit(None, Some("good"), &attrs).await.unwrap();
        assert_eq!(reviews.load(Ordering::Relaxed), before + 3);
        let path = gate
            .admit_path(Some("good"), &http::Method::GET, "/")
            .await
            .unwrap();
        assert_eq!(path.name, "alice");
        assert_eq!(
            gate.admit_path(None, &http::Method::GET, "/").await,
            Err(Refusal::Unauthenticated)
        );
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
