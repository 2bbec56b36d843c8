//! Plugin manifests: `Manifest::parse` on text, and the permission checks of
//! whatever it accepts.

use std::path::Path;

use arbitrary::{Result, Unstructured};
use wasmlet::internals::Manifest;

use crate::generate;

const SECTIONS: &[&str] = &[
    "[plugin]",
    "[reconciles]",
    "[permissions]",
    "[limits]",
    "[[owns]]",
    "[[watches]]",
    "[[permissions.rules]]",
    "[bogus]",
];
const KEYS: &[&str] = &[
    "kind",
    "contract",
    "api-version",
    "namespace",
    "label-selector",
    "map",
    "rules",
    "http-hosts",
    "http-private-addresses",
    "concurrency",
    "memory-mib",
    "deadline-ms",
    "reuse-instances",
    "finalizer",
    "crds",
    "api-groups",
    "resources",
    "verbs",
    "owns",
    "watches",
];
const VALUES: &[&str] = &[
    "\"reconciler\"",
    "\"provider\"",
    "\"0.1.0\"",
    "\"0.2.0\"",
    "\"v1\"",
    "\"ConfigMap\"",
    "\"a=b,c notin (d)\"",
    "\"!x\"",
    "\"label:app\"",
    "\"field:spec.x\"",
    "\"annotation:\"",
    "\"example.com/x\"",
    "\"*.example.com:443\"",
    "\"host:99999\"",
    "[\"../crd.yaml\"]",
    "[\"/etc/passwd\"]",
    "[\"crd.yaml\"]",
    "[\"\"]",
    "0",
    "1",
    "-1",
    "4096",
    "4097",
    "4294967296",
    "18446744073709551615",
    "true",
    "1e9",
    "[]",
    "[{ api-groups = [\"\"], resources = [\"pods\"], verbs = [\"get\", \"*\"] }]",
    "[\"get\", \"bogus\"]",
    "\"\u{e9}\u{1f600}\"",
    "'''\nx'''",
    "{ a = 1 }",
];

/// TOML-ish text: sections and `key = value` lines from the lists above.
fn text(u: &mut Unstructured) -> Result<String> {
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=16)? {
        match u.int_in_range(0..=5)? {
            0 => s.push_str(u.choose(SECTIONS)?),
            1 => s.push_str(&generate::short_string(u)?),
            _ => {
                s.push_str(u.choose(KEYS)?);
                s.push_str(" = ");
                s.push_str(u.choose(VALUES)?);
            }
        }
        s.push('\n');
    }
    Ok(s)
}

pub fn manifest(data: &[u8]) {
    let path = Path::new("/nonexistent/wasmlet-fuzz/plugin.toml");
    let raw = String::from_utf8_lossy(data);
    let generated = text(&mut Unstructured::new(data)).unwrap_or_default();
    for t in [raw.as_ref(), generated.as_str()] {
        if let Ok(m) = Manifest::parse(t, path) {
            let mut u = Unstructured::new(data);
            let host = generate::word(&mut u).unwrap_or_default();
            let _ = m.allows_http_host(&host, u.arbitrary().ok());
            let _ = m.allows("", &host, "get");
            let _ = m.may_allow("", Some(&host), "*");
        }
    }
}
