//! The status page at `/` on the metrics address: read-only, plain
//! server-rendered HTML (a little JavaScript reloads it every 5 s). It shows
//! what an operator asks first: which plugins run (version, contract, faults,
//! swaps), how far behind each queue is (depth and oldest item per lane), the
//! last failed reconciles with their keys, the node's pods with their state and
//! how long they have been in it, and each provider's state graph.
//!
//! Sources are filled in as the host starts ([`StatusPage`] is shared with the
//! endpoint before the controller manager exists).

use std::fmt::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use crate::controller::Manager;
use crate::node::pods::PodRunner;
use crate::plugin::PluginSet;
use crate::plugin::manifest::PluginKind;
use crate::plugin::metrics::PluginMetrics;

/// What the page reads; each part is optional (a node-only host has no
/// controllers, a cluster host no pods).
#[derive(Default)]
pub struct StatusPage {
    pub plugins: OnceLock<Arc<PluginSet>>,
    pub manager: OnceLock<Arc<Manager>>,
    pub pods: OnceLock<(String, Arc<PodRunner>)>,
}

/// HTML-escapes text for element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1h02m`, `3m05s`, `12.3s`, `45ms`.
fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s >= 1 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A message cut to what a table cell can show (traps carry whole backtraces;
/// the log has them in full).
fn short(message: &str) -> String {
    const MAX: usize = 200;
    match message.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &message[..i]),
        None => message.to_string(),
    }
}

fn since(t: SystemTime) -> String {
    age(SystemTime::now().duration_since(t).unwrap_or_default())
}

fn table(out: &mut String, id: &str, head: &[&str], rows: Vec<Vec<String>>, empty: &str) {
    if rows.is_empty() {
        let _ = write!(out, "<p class=\"empty\" id=\"{id}\">{}</p>", esc(empty));
        return;
    }
    let _ = write!(out, "<table id=\"{id}\"><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", esc(&cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

impl StatusPage {
    pub fn render(&self) -> String {
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>wasmlet</title><style>\
             body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
             table{border-collapse:collapse;margin:.5em 0 1.5em}\
             th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
             th{background:#f3f3f3}h2{margin-top:1.2em}.empty{color:#777}\
             pre{background:#f7f7f7;padding:.6em;overflow:auto}</style></head><body>\
             <h1>wasmlet</h1><p>Updated <span id=\"updated\">now</span>; this page reloads every 5 s.</p>",
        );
        let plugins = self.plugins.get();
        self.plugins_section(&mut out, plugins);
        self.queues_section(&mut out, plugins);
        self.history_section(&mut out, plugins);
        self.pods_section(&mut out);
        self.graphs_section(&mut out, plugins);
        out.push_str(
            "<script>document.getElementById('updated').textContent=new Date().toISOString();\
             setTimeout(function(){location.reload()},5000);</script></body></html>",
        );
        out
    }

    fn plugins_section(&self, out: &mut String, plugins: Option<&Arc<PluginSet>>) {
        out.push_str("<h2>Plugins</h2>");
        let mut rows = Vec::new();
        for name in plugins.map(|p| p.names()).unwrap_or_default() {
            let Some(set) = plugins else { break };
            let Some(loaded) = set.get(&name) else {
                continue;
            };
            let m = set.metrics(&name);
            let n = |c: &std::sync::atomic::AtomicU64| PluginMetrics::get(c).to_string();
            let faults = PluginMetrics::get(&m.traps)
                + PluginMetrics::get(&m.timeouts)
                + PluginMetrics::get(&m.out_of_memory)
                + PluginMetrics::get(&m.malformed)
                + PluginMetrics::get(&m.oversized);
            rows.push(vec![
                name.clone(),
                format!("{:?}", loaded.manifest.plugin.kind).to_lowercase(),
                format!("wasmlet:plugin@{}", loaded.manifest.plugin.contract),
                loaded.digest.chars().take(19).collect(),
                n(&m.calls),
                faults.to_string(),
                n(&m.denied),
                n(&m.swaps),
                n(&m.load_failures),
            ]);
        }
        table(
            out,
            "plugins",
            &[
                "plugin",
                "kind",
                "contract",
                "version (sha256)",
                "calls",
                "faults",
                "denied",
                "swaps",
                "rejected versions",
            ],
            rows,
            "No plugins loaded.",
        );
    }

    fn queues_section(&self, out: &mut String, plugins: Option<&Arc<PluginSet>>) {
        let Some(manager) = self.manager.get() else {
            return;
        };
        out.push_str("<h2>Queues</h2>");
        let names = plugins.map(|p| p.names()).unwrap_or_default();
        let controllers: Vec<_> = names
            .iter()
            .filter_map(|n| Some((n.clone(), manager.controller(n)?)))
            .collect();
        let opt = |d: Option<Duration>| d.map(age).unwrap_or_else(|| "-".into());
        let rows = controllers
            .iter()
            .map(|(name, c)| {
                let d = c.queue.depth();
                let (high, low) = c.queue.oldest();
                vec![
                    name.clone(),
                    d.high.to_string(),
                    opt(high),
                    d.low.to_string(),
                    opt(low),
                    d.scheduled.to_string(),
                    d.processing.to_string(),
                ]
            })
            .collect();
        table(
            out,
            "queues",
            &[
                "controller",
                "high",
                "oldest high",
                "low",
                "oldest low",
                "scheduled",
                "processing",
            ],
            rows,
            "No controllers.",
        );
        out.push_str("<h2>Recent reconcile errors</h2>");
        // One row per key: its newest failure and how many of the remembered
        // ones it had (a retried failure repeats itself).
        let mut rows: Vec<(SystemTime, Vec<String>)> = Vec::new();
        for (name, c) in &controllers {
            let mut seen: std::collections::HashMap<String, usize> = Default::default();
            for e in c.recent_errors() {
                if let Some(&i) = seen.get(&e.key) {
                    let n: usize = rows[i].1[3].parse().unwrap_or(1);
                    rows[i].1[3] = (n + 1).to_string();
                    continue;
                }
                seen.insert(e.key.clone(), rows.len());
                rows.push((
                    e.at,
                    vec![
                        format!("{} ago", since(e.at)),
                        name.clone(),
                        e.key,
                        "1".into(),
                        e.reason,
                        short(&e.message),
                    ],
                ));
            }
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
        table(
            out,
            "errors",
            &["last", "controller", "key", "times", "reason", "message"],
            rows.into_iter().map(|(_, r)| r).collect(),
            "No failed reconciles.",
        );
    }

    fn history_section(&self, out: &mut String, plugins: Option<&Arc<PluginSet>>) {
        let Some(set) = plugins else { return };
        out.push_str("<h2>Plugin changes</h2>");
        let rows = set
            .history()
            .into_iter()
            .map(|c| vec![format!("{} ago", since(c.at)), c.plugin, c.what])
            .collect();
        table(
            out,
            "history",
            &["when", "plugin", "change"],
            rows,
            "No changes yet.",
        );
    }

    fn pods_section(&self, out: &mut String) {
        let Some((node, runner)) = self.pods.get() else {
            return;
        };
        let _ = write!(out, "<h2>Pods on node {}</h2>", esc(node));
        let rows = runner
            .pod_states()
            .into_iter()
            .map(|(key, state, at)| vec![key, state, since(at)])
            .collect();
        table(
            out,
            "pods",
            &["pod", "state", "in it for"],
            rows,
            "No pods on this node.",
        );
    }

    fn graphs_section(&self, out: &mut String, plugins: Option<&Arc<PluginSet>>) {
        let Some(set) = plugins else { return };
        for name in set.names() {
            let Some(loaded) = set.get(&name) else {
                continue;
            };
            let (PluginKind::Provider, Some(graph)) = (&loaded.manifest.plugin.kind, &loaded.graph)
            else {
                continue;
            };
            let _ = write!(
                out,
                "<h2>State graph of {}</h2><p>Initial state <b>{}</b>; deleted pods go to <b>{}</b>, errors to <b>{}</b>.</p>",
                esc(&name),
                esc(&graph.initial),
                esc(&graph.on_delete),
                esc(&graph.error_state)
            );
            let rows = graph
                .states
                .iter()
                .map(|s| {
                    let next: Vec<&str> = graph
                        .edges
                        .iter()
                        .filter(|(f, _)| f == s)
                        .map(|(_, t)| t.as_str())
                        .collect();
                    vec![s.clone(), next.join(", ")]
                })
                .collect();
            table(
                out,
                &format!("graph-{name}"),
                &["state", "may move to"],
                rows,
                "No states.",
            );
            let _ = write!(
                out,
                "<details><summary>Graphviz DOT</summary><pre>{}</pre></details>",
                esc(&graph.to_dot(&name))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_ages_read_well() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(age(Duration::from_millis(45)), "45ms");
        assert_eq!(age(Duration::from_secs(185)), "3m05s");
        assert_eq!(age(Duration::from_secs(3720)), "1h02m");
    }

    #[test]
    fn an_empty_host_says_so() {
        let page = StatusPage::default().render();
        assert!(page.contains("No plugins loaded."), "{page}");
        assert!(!page.contains("Queues"), "no manager, no queue section");
    }
}
