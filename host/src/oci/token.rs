//! The registry's bearer-token handshake (the distribution spec's token
//! authentication), with the token endpoint's answer capped before it is read.
//! `oci-client` reads that answer whole, so a registry (any a pod author can
//! name) answering with a gigabyte of "token" cost the node that much memory.
//!
//! `GET /v2/` answers 401 with `WWW-Authenticate: Bearer realm=...,service=...`;
//! the token comes from `realm` with `scope=repository:NAME:pull` (and the
//! credentials, when there are some). Without a bearer challenge, basic
//! credentials are sent on each request, or none.

use http_auth::ChallengeParser;
use oci_client::Reference;
use oci_client::secrets::RegistryAuth;

use super::capped::{RegistryError, read_up_to};

/// The most of a token endpoint's answer read: tokens are a few KiB.
pub(crate) const MAX_TOKEN_BODY_BYTES: u64 = 64 << 10;

/// How requests to the registry authenticate.
pub(crate) enum Authorization {
    None,
    Bearer(String),
    Basic(String, String),
}

/// Runs the handshake for pulls of `reference` over `scheme`.
pub(crate) async fn authorize(
    http: &reqwest::Client,
    reference: &Reference,
    auth: &RegistryAuth,
    scheme: &str,
) -> Result<Authorization, RegistryError> {
    let without_token = || match auth {
        RegistryAuth::Basic(u, p) => Authorization::Basic(u.clone(), p.clone()),
        RegistryAuth::Bearer(t) => Authorization::Bearer(t.clone()),
        RegistryAuth::Anonymous => Authorization::None,
    };
    if let RegistryAuth::Bearer(t) = auth {
        return Ok(Authorization::Bearer(t.clone()));
    }
    let shown = reference.to_string();
    let transport = |url: &str, e: reqwest::Error| RegistryError::Transport {
        reference: shown.clone(),
        url: url.into(),
        message: crate::oci::transport_message(&e),
    };
    let url = format!("{scheme}://{}/v2/", reference.resolve_registry());
    // Only the header is wanted: the body is dropped unread.
    let res = http
        .get(&url)
        .send()
        .await
        .map_err(|e| transport(&url, e))?;
    let Some((realm, service)) = res
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|h| h.to_str().ok())
        .and_then(bearer_challenge)
    else {
        return Ok(without_token());
    };
    drop(res);
    let mut query = vec![(
        "scope",
        format!("repository:{}:pull", reference.repository()),
    )];
    if let Some(s) = service {
        query.push(("service", s));
    }
    let mut req = http.get(&realm).query(&query);
    if let RegistryAuth::Basic(u, p) = auth {
        req = req.basic_auth(u, Some(p));
    }
    let mut res = req.send().await.map_err(|e| transport(&realm, e))?;
    let status = res.status();
    let too_large = || RegistryError::TooLarge {
        reference: shown.clone(),
        what: format!("token endpoint's answer ({realm})"),
        limit: MAX_TOKEN_BODY_BYTES,
    };
    if res
        .content_length()
        .is_some_and(|n| n > MAX_TOKEN_BODY_BYTES)
    {
        return Err(too_large());
    }
    // One byte over the cap tells a long answer from one exactly at it.
    let body = read_up_to(&mut res, MAX_TOKEN_BODY_BYTES + 1)
        .await
        .map_err(|e| transport(&realm, e))?;
    if body.len() as u64 > MAX_TOKEN_BODY_BYTES {
        return Err(too_large());
    }
    if !status.is_success() {
        let mut message = String::from_utf8_lossy(&body).trim().to_string();
        message.truncate(message.floor_char_boundary(1024));
        return Err(RegistryError::Status {
            reference: shown,
            url: realm,
            status: status.as_u16(),
            codes: vec![],
            message: format!("authenticating: {message}"),
        });
    }
    #[derive(serde::Deserialize)]
    struct Token {
        token: Option<String>,
        access_token: Option<String>,
    }
    let token: Token = serde_json::from_slice(&body).map_err(|e| RegistryError::Invalid {
        reference: shown.clone(),
        message: format!("the token endpoint {realm} answered no token: {e}"),
    })?;
    match token.token.or(token.access_token) {
        Some(t) => Ok(Authorization::Bearer(t)),
        None => Err(RegistryError::Invalid {
            reference: shown,
            message: format!("the token endpoint {realm} answered no token"),
        }),
    }
}

/// The realm and service of the first Bearer challenge in a
/// `WWW-Authenticate` header.
fn bearer_challenge(header: &str) -> Option<(String, Option<String>)> {
    ChallengeParser::new(header).flatten().find_map(|c| {
        if !c.scheme.eq_ignore_ascii_case("Bearer") {
            return None;
        }
        let param = |name: &str| {
            c.params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_unescaped())
        };
        Some((param("realm")?, param("service")))
    })
}

#[cfg(test)]
mod tests {
    use super::bearer_challenge;

    #[test]
    fn the_bearer_challenge_is_found_among_others() {
        assert_eq!(
            bearer_challenge(
                r#"Basic realm="x", Bearer realm="https://auth.example/token",service="registry.example""#
            ),
            Some((
                "https://auth.example/token".into(),
                Some("registry.example".into())
            ))
        );
        assert_eq!(bearer_challenge(r#"Basic realm="x""#), None);
        assert_eq!(bearer_challenge("Bearer service=\"s\""), None, "no realm");
    }
}
