//! `wasmlet status` and `wasmlet plugin list`: a running host's plugins
//! (version, state, queue) and node, read from its `GET /status` endpoint
//! (`crate::status_page::report`), as a table or as JSON.

use anyhow::{Context, Result, bail};

use crate::status_page::report::{HostStatus, PluginStatus};

#[derive(Debug, Clone, clap::Args)]
pub(super) struct StatusArgs {
    /// The running host's --metrics-addr.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) host: String,
    /// A bearer token allowed to get /status (needed unless the host is
    /// reached on 127.0.0.1 or ::1).
    #[arg(long, env = "WASMLET_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub(crate) output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Output {
    Table,
    Json,
}

async fn fetch(args: &StatusArgs) -> Result<HostStatus> {
    let url = format!("http://{}/status", args.host);
    // reqwest is built without a TLS provider of its own (plain HTTP here).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new().get(&url);
    if let Some(t) = &args.token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.with_context(|| {
        format!(
            "{url}: is a host running with --metrics-addr {}? (--host names another)",
            args.host
        )
    })?;
    if !response.status().is_success() {
        let status = response.status();
        bail!(
            "{url}: {status}: {}",
            response.text().await.unwrap_or_default().trim()
        );
    }
    response.json().await.with_context(|| {
        format!("{url}: not a wasmlet status (is it a wasmlet host's metrics address?)")
    })
}

/// `wasmlet status`.
pub(super) async fn status(args: &StatusArgs) -> Result<()> {
    let status = fetch(args).await?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&status)?),
        Output::Table => {
            print!("{}", plugin_table(&status.plugins));
            match &status.node {
                Some(n) => println!("\n{}", node_line(n)),
                None => println!("\nno node agent"),
            }
            for (name, h) in &status.clusters {
                println!("{}", cluster_line(name, h));
            }
        }
    }
    Ok(())
}

/// `wasmlet plugin list`.
pub(super) async fn plugin_list(args: &StatusArgs) -> Result<()> {
    let status = fetch(args).await?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&status.plugins)?),
        Output::Table => print!("{}", plugin_table(&status.plugins)),
    }
    Ok(())
}

/// `cluster eu-west: connected, CRDs 1/1` or `cluster eu-west: unreachable
/// since T (why), CRDs 0/1`.
fn cluster_line(name: &str, h: &crate::cluster::named::ClusterHealth) -> String {
    let state = match (&h.checked_at, h.connected, &h.unreachable_since) {
        (None, _, _) => "not checked yet".to_string(),
        (_, true, _) => "connected".to_string(),
        (_, false, since) => format!(
            "unreachable since {} ({})",
            since.as_deref().unwrap_or("?"),
            h.last_error.as_deref().unwrap_or("no answer")
        ),
    };
    format!(
        "cluster {name}: {state}, CRDs {}/{} (re-applied {}), informers {}",
        h.crds_present, h.crds_wanted, h.crds_reapplied, h.informers
    )
}

fn node_line(n: &crate::status_page::report::NodeStatus) -> String {
    let total: usize = n.pods.values().sum();
    let per_state: Vec<String> = n.pods.iter().map(|(s, c)| format!("{c} {s}")).collect();
    let pods = if total == 1 { "pod" } else { "pods" };
    let mut line = format!("node {} (provider {}): {total} {pods}", n.name, n.provider);
    if !per_state.is_empty() {
        line.push_str(&format!(" ({})", per_state.join(", ")));
    }
    line
}

/// The plugins as kubectl prints a list: upper-case headers, columns
/// padded to their widest cell, `<none>` for what does not apply.
fn plugin_table(plugins: &[PluginStatus]) -> String {
    if plugins.is_empty() {
        return "No plugins loaded.\n".into();
    }
    let none = || "<none>".to_string();
    let mut rows = vec![
        [
            "NAME", "KIND", "VERSION", "STATE", "READY", "RATE", "CALLS", "FAULTS", "SWAPS",
            "MESSAGE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in plugins {
        let queue = p.queue.as_ref();
        rows.push(vec![
            p.name.clone(),
            p.kind.clone().unwrap_or_else(none),
            // `sha256:` and 12 hex digits, as `docker images` shortens.
            p.version
                .as_deref()
                .map(|v| v.chars().take(19).collect())
                .unwrap_or_else(none),
            p.state.clone(),
            queue.map(|q| q.ready.to_string()).unwrap_or_else(none),
            queue
                .and_then(|q| q.reconciles_per_second)
                .map(|r| format!("{r:.2}/s"))
                .unwrap_or_else(none),
            p.calls.to_string(),
            p.faults.to_string(),
            p.swaps.to_string(),
            p.message.clone().unwrap_or_default(),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 3));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status_page::report::{NodeStatus, QueueStatus};

    #[test]
    fn the_table_aligns_and_says_none_where_nothing_applies() {
        let plugins = vec![
            PluginStatus {
                name: "configmap-summary".into(),
                kind: Some("reconciler".into()),
                version: Some(format!("sha256:{}", "a".repeat(64))),
                state: "reconciling".into(),
                message: None,
                queue: Some(QueueStatus {
                    ready: 2,
                    scheduled: 1,
                    processing: 0,
                    reconciles_per_second: Some(0.4),
                }),
                calls: 7,
                faults: 0,
                swaps: 1,
            },
            PluginStatus {
                name: "broken".into(),
                kind: None,
                version: None,
                state: "rejected".into(),
                message: Some("not a component".into()),
                queue: None,
                calls: 0,
                faults: 0,
                swaps: 0,
            },
        ];
        let table = plugin_table(&plugins);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(
            lines[0].starts_with("NAME                KIND         VERSION"),
            "{table}"
        );
        assert!(
            lines[1].starts_with(
                "configmap-summary   reconciler   sha256:aaaaaaaaaaaa   reconciling   2        0.40/s"
            ),
            "{table}"
        );
        assert!(
            lines[2].starts_with("broken              <none>       <none>"),
            "{table}"
        );
        assert!(lines[2].ends_with("not a component"), "{table}");
        let node = NodeStatus {
            name: "n1".into(),
            provider: "wasi-runner".into(),
            pods: [("Running".to_string(), 2), ("Registered".to_string(), 1)].into(),
        };
        assert_eq!(
            node_line(&node),
            "node n1 (provider wasi-runner): 3 pods (1 Registered, 2 Running)"
        );
    }
}
