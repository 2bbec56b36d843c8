//! The status page at `/` on the metrics address: read-only, plain
//! server-rendered HTML (a little JavaScript reloads it every 5 s). It shows
//! what an operator asks first: which plugins run (version, contract, faults,
//! swaps), how far behind each queue is (depth and oldest item per lane), the
//! last failed reconciles with their keys, the node's pods with their state and
//! how long they have been in it, and each provider's state graph.
//!
//! What a person would rather look at than read is drawn, as inline SVG made
//! here (no external assets): each provider's state graph with the pods now
//! in each state (`state_graph`, laid out by `layout`), and each
//! controller's queue depth and reconcile rate over the last ten minutes
//! (`sparkline`, from the fixed rings of `samples`).
//!
//! Sources are filled in as the host starts ([`StatusPage`] is shared with the
//! endpoint before the controller manager exists).

mod layout;
pub(crate) mod report;
mod samples;
mod sparkline;
mod state_graph;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::controller::Manager;
use crate::node::pods::PodRunner;
use crate::plugin::PluginSet;
use crate::plugin::manifest::PluginKind;
use crate::plugin::metrics::PluginMetrics;

/// What the page reads; each part is optional (a node-only host has no
/// controllers, a cluster host no pods).
#[derive(Default)]
pub(crate) struct StatusPage {
    pub(crate) plugins: OnceLock<Arc<PluginSet>>,
    pub(crate) manager: OnceLock<Arc<Manager>>,
    pub(crate) pods: OnceLock<(String, Arc<PodRunner>)>,
    /// The controllers' recent queue depths and reconcile counts.
    samples: samples::Samples,
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

/// The named clusters: reachable or since when not, and their CRDs.
fn clusters_section(out: &mut String, plugins: Option<&Arc<PluginSet>>) {
    let health = plugins.map(|p| p.cluster_health()).unwrap_or_default();
    if health.is_empty() {
        return;
    }
    out.push_str("<h2>Named clusters</h2>");
    let rows = health
        .into_iter()
        .map(|(name, h)| {
            let state = match (&h.checked_at, h.connected) {
                (None, _) => "not checked yet".to_string(),
                (_, true) => "connected".to_string(),
                (_, false) => format!(
                    "unreachable since {}",
                    h.unreachable_since.as_deref().unwrap_or("?")
                ),
            };
            vec![
                name,
                state,
                format!("{}/{}", h.crds_present, h.crds_wanted),
                h.crds_reapplied.to_string(),
                h.informers.to_string(),
                h.last_error.as_deref().map(short).unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        "clusters",
        &[
            "cluster",
            "state",
            "CRDs present",
            "CRDs re-applied",
            "last error",
        ],
        rows,
        "",
    );
}

impl StatusPage {
    pub(crate) fn render(&self) -> String {
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>wasmlet</title><style>\
             body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
             table{border-collapse:collapse;margin:.5em 0 1.5em}\
             th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
             th{background:#f3f3f3}h2{margin-top:1.2em}.empty{color:#777}\
             pre{background:#f7f7f7;padding:.6em;overflow:auto}",
        );
        out.push_str(state_graph::CSS);
        out.push_str(sparkline::CSS);
        out.push_str(
            "</style></head><body>\
             <h1>wasmlet</h1><p>Updated <span id=\"updated\">now</span>; this page reloads every 5 s.</p>",
        );
        let plugins = self.plugins.get();
        self.plugins_section(&mut out, plugins);
        self.queues_section(&mut out, plugins);
        clusters_section(&mut out, plugins);
        self.pods_section(&mut out);
        self.graphs_section(&mut out, plugins);
        self.history_section(&mut out, plugins);
        out.push_str(
            "<script>document.getElementById('updated').textContent=new Date().toISOString();\
             setTimeout(function(){location.reload()},5000);</script></body></html>",
        );
        out
    }

    /// Samples every controller each `samples::EVERY` (5 s), for as long as the
    /// process runs (the charts' history).
    pub(crate) async fn sample(self: Arc<Self>) {
        let mut tick = tokio::time::interval(samples::EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.samples.record(self.sample_now());
        }
    }

    /// One sample of each running controller.
    fn sample_now(&self) -> Vec<(String, samples::Sample)> {
        let (Some(plugins), Some(manager)) = (self.plugins.get(), self.manager.get()) else {
            return Vec::new();
        };
        let at = Instant::now();
        plugins
            .names()
            .into_iter()
            .filter_map(|name| {
                let c = manager.controller(&name)?;
                let d = c.queue.depth();
                let sample = samples::Sample {
                    at,
                    depth: (d.high + d.low) as u64,
                    reconciles: c.reconciles(),
                };
                Some((name, sample))
            })
            .collect()
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
        self.charts(out, &controllers);
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

    /// Each controller's queue depth and reconcile rate over the last
    /// minutes: the stored samples, and one taken now so a fresh page has
    /// its present.
    fn charts(
        &self,
        out: &mut String,
        controllers: &[(String, Arc<crate::controller::controller::Controller>)],
    ) {
        if controllers.is_empty() {
            return;
        }
        let minutes = (samples::KEPT as u64 * samples::EVERY.as_secs()) / 60;
        let _ = write!(
            out,
            "<h2>Queue depth and reconcile rate, last {minutes} minutes</h2><table id=\"charts\"><tr><th>controller</th><th>keys ready to run</th><th>reconciles per second</th></tr>"
        );
        let now: BTreeMap<String, samples::Sample> = self.sample_now().into_iter().collect();
        for (name, _) in controllers {
            let mut kept = self.samples.of(name);
            // A sample taken moments after the last stored one would make a
            // rate of noise.
            if let Some(s) = now.get(name)
                && kept
                    .last()
                    .is_none_or(|l| s.at.duration_since(l.at) >= Duration::from_secs(1))
            {
                kept.push(*s);
            }
            let depths: Vec<f64> = kept.iter().map(|s| s.depth as f64).collect();
            let rates = samples::rates(&kept);
            let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            let last = |v: &[f64]| v.last().copied().unwrap_or(0.0);
            let _ = write!(
                out,
                "<tr data-controller=\"{}\"><td>{}</td><td>{}<span class=\"figure\">now {} · max {}</span></td><td>{}<span class=\"figure\">now {} · max {}</span></td></tr>",
                esc(name),
                esc(name),
                sparkline::svg(
                    &depths,
                    samples::KEPT,
                    "depth",
                    &format!("{name}: keys ready to run")
                ),
                last(&depths),
                max(&depths),
                sparkline::svg(
                    &rates,
                    samples::KEPT,
                    "rate",
                    &format!("{name}: reconciles per second")
                ),
                sparkline::per_second(last(&rates)),
                sparkline::per_second(max(&rates)),
            );
        }
        out.push_str("</table>");
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
        for (i, name) in set.names().into_iter().enumerate() {
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
            // The node's pods per state, on this provider's graph only.
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            if let Some((_, runner)) = self.pods.get()
                && runner.provider() == name
            {
                for (_, state, _) in runner.pod_states() {
                    *counts.entry(state).or_default() += 1;
                }
            }
            out.push_str(&state_graph::svg(
                &name,
                graph,
                &format!("graph{i}"),
                &counts,
            ));
            out.push_str(
                "<p class=\"legend\">Double border: the initial state. Red: the error state; grey: the on-delete state \
                 (the host moves pods there from any state). Dashed: a back-off state. Green with a number: the pods in that \
                 state now. Light dashed lines run back (they close a cycle).</p>",
            );
            // Pods in a state the graph lacks: the host's own back-off.
            let elsewhere: Vec<String> = counts
                .iter()
                .filter(|(s, _)| !graph.states.contains(s))
                .map(|(s, n)| format!("{n} in {s}"))
                .collect();
            if !elsewhere.is_empty() {
                let _ = write!(
                    out,
                    "<p class=\"elsewhere\">Pods in states the host adds: {}.</p>",
                    esc(&elsewhere.join(", "))
                );
            }
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
            out.push_str("<details><summary>As a table</summary>");
            table(
                out,
                &format!("graph-{name}"),
                &["state", "may move to"],
                rows,
                "No states.",
            );
            out.push_str("</details>");
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
