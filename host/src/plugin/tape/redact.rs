//! What a record never holds (unless the manifest says `keep-secrets`):
//! Secret values, credentials in HTTP headers, the bodies of sensitive HTTP
//! calls. Applied to every entry as it is taped, and to a replaying guest's
//! requests before they are matched, so both sides compare alike.

use serde_json::Value;

use super::Entry;

/// What replaces a redacted value.
pub(super) const REDACTED: &str = "<redacted>";
/// What replaces a redacted Secret `data` value: `<redacted>` in base64, so a
/// guest decoding the Secret in a replay still can.
pub(super) const REDACTED_B64: &str = "PHJlZGFjdGVkPg==";

/// Headers whose values are credentials.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Debug, Clone, Default)]
pub(crate) struct Redaction {
    /// Record everything as it is (`[record] keep-secrets = true`).
    pub(crate) keep_secrets: bool,
    /// Hosts whose request and response bodies are redacted (`[record] sensitive-http-hosts`).
    pub(crate) sensitive_hosts: Vec<String>,
}

impl Redaction {
    pub(crate) fn redacts(&self) -> bool {
        !self.keep_secrets
    }

    /// Redacts a Kubernetes object in place (anything but a Secret is left alone).
    pub(crate) fn object(&self, v: &mut Value) {
        if self.keep_secrets || !is_secret(v) {
            return;
        }
        redact_values(v);
        if let Some(a) = v
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            && let Some(x) = a.get_mut(LAST_APPLIED)
        {
            *x = Value::String(REDACTED.into());
        }
    }

    /// Redacts an import entry's arguments and result in place.
    pub(crate) fn entry(&self, e: &mut Entry) {
        if self.keep_secrets {
            return;
        }
        // A named cluster's calls carry what `client`'s do.
        let op = match e.op.strip_prefix("clusters.") {
            Some(rest) => format!("client.{rest}"),
            None => e.op.clone(),
        };
        match op.as_str() {
            "client.get"
            | "client.create"
            | "client.update"
            | "client.patch"
            | "client.patch-status" => {
                if let Some(ok) = e.result.get_mut("ok") {
                    self.object(ok);
                }
            }
            "client.list" => {
                if let Some(Value::Array(items)) = e.result.get_mut("ok") {
                    items.iter_mut().for_each(|i| self.object(i));
                }
            }
            _ => {}
        }
        match op.as_str() {
            "client.create" | "client.update" => {
                if let Some(obj) = e.args.get_mut("obj") {
                    self.object(obj);
                }
            }
            "client.patch" | "client.patch-status" => {
                let secret = e
                    .args
                    .pointer("/target/kind")
                    .is_some_and(|k| k == "Secret");
                if secret && let Some(body) = e.args.get_mut("body") {
                    redact_patch(body);
                }
            }
            "http.fetch" => self.http(e),
            "workloads.prepare-volume" => redact_volume_files(&mut e.args),
            "workloads.spawn" => redact_env(&mut e.args),
            _ => {}
        }
    }

    fn http(&self, e: &mut Entry) {
        let host = e
            .args
            .get("url")
            .and_then(Value::as_str)
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        let sensitive = self.sensitive_hosts.iter().any(|h| {
            h == &host
                || h.strip_prefix("*.")
                    .is_some_and(|s| host.ends_with(&format!(".{s}")))
        });
        redact_headers(e.args.get_mut("headers"));
        if let Some(ok) = e.result.get_mut("ok") {
            redact_headers(ok.get_mut("headers"));
            if sensitive && let Some(b) = ok.get_mut("body") {
                *b = serde_json::json!({ "text": REDACTED });
            }
        }
        if sensitive && let Some(b) = e.args.get_mut("body") {
            *b = serde_json::json!({ "text": REDACTED });
        }
    }
}

/// A provider's `files` volume may hold a Secret's values (decoded): every
/// file's contents go, whatever the volume's source was (the host cannot tell).
fn redact_volume_files(args: &mut Value) {
    if let Some(Value::Array(files)) = args.pointer_mut("/req/source/Files") {
        for f in files {
            if let Some(c) = f.get_mut("contents") {
                *c = Value::String(REDACTED.into());
            }
        }
    }
}

/// A workload's environment may hold a Secret's values (`secretKeyRef`,
/// `envFrom`): every value goes, the names stay.
fn redact_env(args: &mut Value) {
    if let Some(Value::Array(env)) = args.pointer_mut("/spec/env") {
        for pair in env {
            if let Some(v) = pair.get_mut(1) {
                *v = Value::String(REDACTED.into());
            }
        }
    }
}

fn is_secret(v: &Value) -> bool {
    v.get("kind").is_some_and(|k| k == "Secret") && v.get("apiVersion").is_none_or(|a| a == "v1")
}

/// A patch to a Secret: every value under `data`/`stringData` of a merge or
/// apply body, every operation's value of a JSON patch.
fn redact_patch(body: &mut Value) {
    match body {
        Value::Array(ops) => {
            for op in ops {
                if let Some(v) = op.get_mut("value") {
                    *v = Value::String(REDACTED.into());
                }
            }
        }
        Value::Object(_) => {
            redact_values(body);
            if let Some(a) = body
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
                && let Some(x) = a.get_mut(LAST_APPLIED)
            {
                *x = Value::String(REDACTED.into());
            }
        }
        _ => {}
    }
}

/// Every value of `data` (base64) and `stringData` (text).
fn redact_values(v: &mut Value) {
    for (field, with) in [("data", REDACTED_B64), ("stringData", REDACTED)] {
        if let Some(Value::Object(m)) = v.get_mut(field) {
            for val in m.values_mut() {
                *val = Value::String(with.into());
            }
        }
    }
}

/// Headers as the contract carries them: `[[name, value], ...]`.
fn redact_headers(headers: Option<&mut Value>) {
    let Some(Value::Array(hs)) = headers else {
        return;
    };
    for h in hs {
        if let Some([name, value]) = h.as_array_mut().map(Vec::as_mut_slice)
            && name
                .as_str()
                .is_some_and(|n| SECRET_HEADERS.contains(&n.to_ascii_lowercase().as_str()))
        {
            *value = Value::String(REDACTED.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_lose_their_values_and_nothing_else_does() {
        let r = Redaction::default();
        let mut s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{\"data\":{\"p\":\"aHVudGVyMg==\"}}", "x": "y"}},
            "data": {"p": "aHVudGVyMg=="}, "stringData": {"q": "hunter2"}});
        r.object(&mut s);
        let text = s.to_string();
        assert!(
            !text.contains("aHVudGVyMg") && !text.contains("hunter2"),
            "{text}"
        );
        assert_eq!(s["data"]["p"], REDACTED_B64);
        assert_eq!(s["stringData"]["q"], REDACTED);
        assert_eq!(s["metadata"]["annotations"]["x"], "y");
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"p": "v"}});
        r.object(&mut cm);
        assert_eq!(cm["data"]["p"], "v");
        let keep = Redaction {
            keep_secrets: true,
            ..Default::default()
        };
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "data": {"p": "aHVudGVyMg=="}});
        keep.object(&mut s);
        assert_eq!(s["data"]["p"], "aHVudGVyMg==");
    }

    #[test]
    fn http_credentials_and_sensitive_bodies_are_redacted() {
        let r = Redaction {
            keep_secrets: false,
            sensitive_hosts: vec!["vault.example.com".into()],
        };
        let entry = |url: &str| Entry {
            op: "http.fetch".into(),
            args: json!({"method": "GET", "url": url,
                "headers": [["Authorization", "Bearer t0ken"], ["accept", "*/*"]],
                "body": {"text": "req-secret"}}),
            result: json!({"ok": {"status": 200, "headers": [["set-cookie", "sid=1"]], "body": {"text": "resp-secret"}}}),
        };
        let mut e = entry("https://vault.example.com/v1/x");
        r.entry(&mut e);
        let text = serde_json::to_string(&e).unwrap();
        for secret in ["t0ken", "sid=1", "req-secret", "resp-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(e.args["headers"][1][1], "*/*");
        let mut e = entry("https://api.example.com/");
        r.entry(&mut e);
        let text = serde_json::to_string(&e).unwrap();
        assert!(
            !text.contains("t0ken") && text.contains("resp-secret"),
            "{text}"
        );
    }

    #[test]
    fn workload_env_values_and_volume_files_are_redacted_names_kept() {
        let mut spawn = Entry {
            op: "workloads.spawn".into(),
            args: json!({"spec": {"module": "sha256:ab", "args": ["main"],
                "env": [["TOKEN", "hunter2"], ["MODE", "fast"]]}}),
            result: json!({"ok": 3}),
        };
        let mut volume = Entry {
            op: "workloads.prepare-volume".into(),
            args: json!({"req": {"pod_uid": "u", "name": "creds",
                "source": {"Files": [{"path": "token", "contents": [104, 117, 110], "mode": 420}]}}}),
            result: json!({"ok": 1}),
        };
        let kept = (spawn.clone(), volume.clone());
        Redaction::default().entry(&mut spawn);
        Redaction::default().entry(&mut volume);
        assert_eq!(
            spawn.args["spec"]["env"],
            json!([["TOKEN", REDACTED], ["MODE", REDACTED]])
        );
        assert_eq!(spawn.args["spec"]["args"], json!(["main"]));
        let file = &volume.args["req"]["source"]["Files"][0];
        assert_eq!(
            (file["path"].as_str(), &file["contents"]),
            (Some("token"), &json!(REDACTED))
        );
        let keep = Redaction {
            keep_secrets: true,
            ..Default::default()
        };
        let (mut s, mut v) = kept.clone();
        keep.entry(&mut s);
        keep.entry(&mut v);
        assert_eq!((s, v), kept);
    }
}
