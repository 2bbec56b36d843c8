//! ServiceAccount tokens: TokenRequest (`serviceaccounts/NAME/token`) issues
//! bound tokens, JWTs signed with a key the plane keeps in `DIR/pki/sa.key`,
//! with audiences, an expiry and the ServiceAccount's (and optionally a
//! pod's) uid; they authenticate requests and TokenReviews as
//! `system:serviceaccount:NS:NAME` in upstream's groups. A token stops working
//! when it expires or its ServiceAccount (or bound pod) is deleted or
//! recreated.
//!
//! Deviation: the signature is HS256 (a secret key only the plane reads)
//! rather than upstream's RS256, since nothing but the plane verifies them
//! (no OIDC discovery). The JWS compact form is three base64url parts; the
//! MAC is the `hmac` crate's, compared in constant time.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmlet_apimachinery::rbac::{UserInfo, service_account_groups, service_account_user};

use crate::resources::Resources;

/// The issuer, and the audience requests to the plane must carry (upstream's
/// default `--service-account-issuer` / `--api-audiences`).
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

#[derive(Debug, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("invalid bearer token: {0}")]
    Invalid(&'static str),
    #[error("the token's audiences {0:?} include none of {1:?}")]
    Audience(Vec<String>, Vec<String>),
    #[error("{0} \"{1}\" the token is bound to no longer exists or was recreated")]
    Gone(&'static str, String),
    #[error("reading the service-account key {path}: {source}")]
    Key {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Ref {
    name: String,
    uid: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Kube {
    namespace: String,
    serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Ref>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    nbf: i64,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kube: Kube,
}

/// The signing key.
pub(crate) struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// Loads `DIR/pki/sa.key`, creating it (0600) if missing.
    pub(crate) fn load_or_create(pki_dir: &Path) -> Result<Signer, TokenError> {
        use rand::Rng;
        use std::os::unix::fs::OpenOptionsExt;
        let path = pki_dir.join("sa.key");
        let err = |source| TokenError::Key {
            path: path.display().to_string(),
            source,
        };
        if !path.exists() {
            let bytes: [u8; 32] = rand::rng().random();
            let tmp = path.with_extension("tmp");
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?;
            std::io::Write::write_all(&mut f, &bytes).map_err(err)?;
            f.sync_all().map_err(err)?;
            std::fs::rename(&tmp, &path).map_err(err)?;
        }
        Ok(Signer {
            key: std::fs::read(&path).map_err(err)?,
        })
    }

    fn mac(&self) -> Hmac<sha2::Sha256> {
        Hmac::<sha2::Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let header = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let body = serde_json::to_vec(claims).map_err(|_| TokenError::Invalid("unencodable"))?;
        let signed = format!("{header}.{}", B64.encode(body));
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        Ok(format!(
            "{signed}.{}",
            B64.encode(mac.finalize().into_bytes())
        ))
    }

    /// The claims of a token whose HS256 signature is this key's.
    fn open(&self, token: &str) -> Result<Claims, TokenError> {
        let mut parts = token.rsplitn(2, '.');
        let (Some(sig), Some(signed)) = (parts.next(), parts.next()) else {
            return Err(TokenError::Invalid("not a JWT"));
        };
        let sig = B64
            .decode(sig)
            .map_err(|_| TokenError::Invalid("bad signature encoding"))?;
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        mac.verify_slice(&sig)
            .map_err(|_| TokenError::Invalid("signature mismatch"))?;
        let (header, body) = signed
            .split_once('.')
            .ok_or(TokenError::Invalid("not a JWT"))?;
        let header: Value = B64
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or(TokenError::Invalid("bad header"))?;
        if header["alg"] != "HS256" {
            return Err(TokenError::Invalid("unexpected algorithm"));
        }
        B64.decode(body)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(TokenError::Invalid("bad claims"))
    }

    /// A token for ServiceAccount `sa` (its stored object) valid for
    /// `seconds`, for `audiences`, optionally bound to `pod`.
    pub(crate) fn issue(
        &self,
        sa: &Value,
        audiences: Vec<String>,
        seconds: i64,
        pod: Option<&Value>,
    ) -> Result<(String, i64), TokenError> {
        let now = chrono::Utc::now().timestamp();
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let meta = &sa["metadata"];
        let ns = s(&meta["namespace"]);
        let name = s(&meta["name"]);
        let claims = Claims {
            iss: ISSUER.into(),
            sub: service_account_user(&ns, &name),
            aud: audiences,
            exp: now + seconds,
            iat: now,
            nbf: now,
            jti: uuid::Uuid::new_v4().to_string(),
            kube: Kube {
                namespace: ns,
                serviceaccount: Ref {
                    name,
                    uid: s(&meta["uid"]),
                },
                pod: pod.map(|p| Ref {
                    name: s(&p["metadata"]["name"]),
                    uid: s(&p["metadata"]["uid"]),
                }),
            },
        };
        let token = self.sign(&claims)?;
        Ok((token, claims.exp))
    }

    /// The user a token authenticates as, if its signature, expiry and
    /// audiences hold (`audiences` empty: the plane's own) and what it is
    /// bound to still exists. Returns the user and the token's audiences.
    pub(crate) fn verify(
        &self,
        resources: &Resources,
        token: &str,
        audiences: &[String],
    ) -> Result<(UserInfo, Vec<String>), TokenError> {
        let claims = self.open(token)?;
        let now = chrono::Utc::now().timestamp();
        if claims.iss != ISSUER {
            return Err(TokenError::Invalid("not issued by this plane"));
        }
        if now >= claims.exp || now < claims.nbf {
            return Err(TokenError::Invalid("expired or not yet valid"));
        }
        let wanted: Vec<String> = if audiences.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            audiences.to_vec()
        };
        let matched: Vec<String> = claims
            .aud
            .iter()
            .filter(|a| wanted.contains(a))
            .cloned()
            .collect();
        if matched.is_empty() {
            return Err(TokenError::Audience(claims.aud, wanted));
        }
        let k = &claims.kube;
        let alive = |resource: &'static str, r: &Ref| -> Result<(), TokenError> {
            let uid = resources
                .registry
                .get("", resource)
                .and_then(|rt| resources.store.get(&rt.key(&k.namespace, &r.name)))
                .and_then(|s| s.value().ok())
                .map(|v| v["metadata"]["uid"].as_str().unwrap_or("").to_string());
            match uid {
                Some(u) if u == r.uid => Ok(()),
                _ => Err(TokenError::Gone(resource, r.name.clone())),
            }
        };
        alive("serviceaccounts", &k.serviceaccount)?;
        if let Some(p) = &k.pod {
            alive("pods", p)?;
        }
        let user = UserInfo {
            name: claims.sub,
            groups: service_account_groups(&k.namespace),
        };
        Ok((user, matched))
    }
}

/// Answers a TokenRequest for ServiceAccount `sa` (stored object): fills in
/// `status.token` and `status.expirationTimestamp`.
pub(crate) fn token_request(
    signer: &Signer,
    resources: &Resources,
    sa: &Value,
    mut req: Value,
    user: &wasmlet_apimachinery::rbac::UserInfo,
) -> Result<Value, crate::status::ApiError> {
    use crate::status::ApiError;
    let spec = &req["spec"];
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_string()]);
    let seconds = spec["expirationSeconds"].as_i64().unwrap_or(3600);
    if !(600..=1 << 32).contains(&seconds) {
        return Err(ApiError::bad_request(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes or more than 2^32 seconds"
        )));
    }
    let ns = sa["metadata"]["namespace"].as_str().unwrap_or("");
    let bound = &spec["boundObjectRef"];
    let pod = match bound["kind"].as_str() {
        None => None,
        Some("Pod") => {
            let name = bound["name"].as_str().unwrap_or("");
            let rt = resources
                .registry
                .get("", "pods")
                .ok_or_else(|| ApiError::internal("pods are not served"))?;
            let p = resources.get(&rt, ns, name)?.value()?;
            if let Some(uid) = bound["uid"].as_str().filter(|u| !u.is_empty())
                && p["metadata"]["uid"] != uid
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "the UID in the bound object reference ({uid}) does not match the UID in record"
                    ),
                ));
            }
            // Upstream's TokenREST: a token of one ServiceAccount is never
            // bound to a pod that runs as another.
            let sa_name = sa["metadata"]["name"].as_str().unwrap_or("");
            let runs_as = p["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            if runs_as != sa_name {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount \"{sa_name}\" to pod running with different serviceaccount name."
                )));
            }
            Some(p)
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "spec.boundObjectRef.kind: Unsupported value: \"{other}\": supported values: \"Pod\""
            )));
        }
    };
    crate::auth::noderestriction::check_token_request(
        user,
        sa["metadata"]["name"].as_str().unwrap_or(""),
        &req,
        pod.as_ref(),
    )?;
    let (token, exp) = signer
        .issue(sa, audiences, seconds, pod.as_ref())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let when = chrono::DateTime::from_timestamp(exp, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"]["name"] = sa["metadata"]["name"].clone();
    req["metadata"]["namespace"] = json!(ns);
    req["spec"]["expirationSeconds"] = json!(seconds);
    req["status"] = json!({"token": token, "expirationTimestamp": when});
    Ok(req)
}
