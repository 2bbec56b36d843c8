//! A provider's state graph drawn as inline SVG for the status page (no
//! external assets, no script): boxes placed by [`super::layout`], the pods
//! now in each state as a badge on its box. State names come from plugins,
//! so every name is escaped, cut to a box's width in the drawing, and whole
//! in the box's tooltip.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::esc;
use super::layout::{self, Layout, MAX_EDGES, MAX_STATES, NODE_H};
use crate::plugin::provider::StateGraph;

/// Characters of a state name drawn in its box (the tooltip has all).
const LABEL_CHARS: usize = 28;
/// Width of a character of the 13 px label font, a little generous so a
/// label fits its box in any sans-serif font.
const CHAR_W: f64 = 7.6;
const MIN_BOX_W: f64 = 84.0;

/// The page's styles for the drawing (in the page's `<style>`).
pub(super) const CSS: &str = "\
svg.state-graph{display:block;max-width:100%;height:auto;margin:.4em 0}\
.state-graph .edge{fill:none;stroke:#7b8494;stroke-width:1.3}\
.state-graph .edge.back{stroke:#b9a7d6;stroke-dasharray:4 3}\
.state-graph rect{fill:#fff;stroke:#7b8494;stroke-width:1.5}\
.state-graph .ring{fill:none}\
.state-graph text{font:13px system-ui,sans-serif;fill:#222;dominant-baseline:central;text-anchor:middle}\
.state-graph .error rect{stroke:#c62828}\
.state-graph .deleted rect{stroke:#9e9e9e}.state-graph .deleted text{fill:#777}\
.state-graph .backoff rect{stroke-dasharray:5 3}\
.state-graph .occupied rect{fill:#e2f3e7;stroke:#2e7d4f;stroke-width:2}\
.state-graph .occupied text{font-weight:600}\
.state-graph .badge{fill:#2e7d4f;stroke:#fff;stroke-width:2}\
.state-graph text.count{font:bold 12px system-ui,sans-serif;fill:#fff}\
p.legend{color:#666;font-size:12px;margin:0 0 1.2em}";

/// A name as its box shows it.
fn label(state: &str) -> String {
    match state.char_indices().nth(LABEL_CHARS) {
        Some((i, _)) => format!("{}…", &state[..i]),
        None => state.to_string(),
    }
}

fn box_width(state: &str) -> f64 {
    (label(state).chars().count() as f64 * CHAR_W + 28.0).max(MIN_BOX_W)
}

/// An SVG path through `points`: a horizontal S-curve between each pair,
/// so an edge leaves and enters its boxes level.
fn path(points: &[(f64, f64)]) -> String {
    let mut d = String::new();
    if let Some((x, y)) = points.first() {
        let _ = write!(d, "M{x:.1},{y:.1}");
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        let mx = (x0 + x1) / 2.0;
        let _ = write!(d, " C{mx:.1},{y0:.1} {mx:.1},{y1:.1} {x1:.1},{y1:.1}");
    }
    d
}

/// The graph of the provider `name` as an `<svg>` (or a note when it is too
/// large to draw), `pods` the number of pods now in each state. `id` makes
/// the drawing's element ids unique on the page.
pub(super) fn svg(
    name: &str,
    graph: &StateGraph,
    id: &str,
    pods: &BTreeMap<String, usize>,
) -> String {
    if graph.states.len() > MAX_STATES || graph.edges.len() > MAX_EDGES {
        return format!(
            "<p class=\"empty\">{} states and {} edges: more than the page draws ({MAX_STATES} states, {MAX_EDGES} edges); the table below lists them.</p>",
            graph.states.len(),
            graph.edges.len()
        );
    }
    let Layout {
        nodes,
        edges,
        width,
        height,
    } = layout::layout(&graph.states, &graph.edges, &graph.initial, box_width);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"state-graph\" id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"State graph of {}\">",
        esc(name)
    );
    let _ = write!(
        out,
        "<defs><marker id=\"{id}-arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#7b8494\"/></marker>\
         <marker id=\"{id}-back\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#b9a7d6\"/></marker></defs>"
    );
    let node = |state: usize| nodes.iter().find(|n| n.state == state);
    // Edges first, under the boxes.
    for e in &edges {
        let (from, to) = (&graph.states[e.from], &graph.states[e.to]);
        let d = if e.points.is_empty() {
            // A self-loop over the box's top, left of the badge.
            let Some(n) = node(e.from) else { continue };
            let (cx, y) = (n.x + n.w * 0.4, n.y);
            format!(
                "M{:.1},{y:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{y:.1}",
                cx + 9.0,
                cx + 24.0,
                y - 26.0,
                cx - 24.0,
                y - 26.0,
                cx - 9.0
            )
        } else {
            path(&e.points)
        };
        let (class, marker) = if e.back {
            ("edge back", "back")
        } else {
            ("edge", "arrow")
        };
        let _ = write!(
            out,
            "<path class=\"{class}\" d=\"{d}\" marker-end=\"url(#{id}-{marker})\" data-from=\"{}\" data-to=\"{}\"><title>{} → {}</title></path>",
            esc(from),
            esc(to),
            esc(from),
            esc(to)
        );
    }
    for n in &nodes {
        let state = &graph.states[n.state];
        let count = pods.get(state).copied().unwrap_or(0);
        let mut class = String::from("state");
        for (is, c) in [
            (*state == graph.initial, " initial"),
            (*state == graph.error_state, " error"),
            (*state == graph.on_delete, " deleted"),
            (graph.backoff_states.contains(state), " backoff"),
            (count > 0, " occupied"),
        ] {
            if is {
                class.push_str(c);
            }
        }
        let pods_word = if count == 1 { "pod" } else { "pods" };
        let _ = write!(
            out,
            "<g class=\"{class}\" data-state=\"{}\" data-pods=\"{count}\"><title>{}: {count} {pods_word}</title>",
            esc(state),
            esc(state)
        );
        if *state == graph.initial {
            let _ = write!(
                out,
                "<rect class=\"ring\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"10\"/>",
                n.x - 4.0,
                n.y - 4.0,
                n.w + 8.0,
                NODE_H + 8.0
            );
        }
        let _ = write!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{NODE_H:.1}\" rx=\"7\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            n.x,
            n.y,
            n.w,
            n.x + n.w / 2.0,
            n.mid_y(),
            esc(&label(state))
        );
        if count > 0 {
            let r = if count > 99 { 14.0 } else { 11.0 };
            let _ = write!(
                out,
                "<circle class=\"badge\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{r}\"/><text class=\"count\" x=\"{:.1}\" y=\"{:.1}\">{count}</text>",
                n.x + n.w - 4.0,
                n.y,
                n.x + n.w - 4.0,
                n.y
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(states: &[&str], edges: &[(&str, &str)]) -> StateGraph {
        let s = |x: &str| x.to_string();
        StateGraph {
            states: states.iter().map(|x| s(x)).collect(),
            edges: edges.iter().map(|(a, b)| (s(a), s(b))).collect(),
            initial: s(states[0]),
            on_delete: s(states[states.len() - 1]),
            error_state: s(states[1]),
            backoff_states: vec![],
        }
    }

    #[test]
    fn every_state_is_drawn_with_its_pods() {
        let g = graph(
            &["Start", "Error", "Running", "Gone"],
            &[
                ("Start", "Running"),
                ("Running", "Running"),
                ("Running", "Error"),
            ],
        );
        let pods = BTreeMap::from([("Running".to_string(), 3)]);
        let svg = svg("p", &g, "g0", &pods);
        assert!(svg.starts_with("<svg class=\"state-graph\""), "{svg}");
        assert!(svg.ends_with("</svg>"));
        for s in ["Start", "Error", "Gone"] {
            assert!(
                svg.contains(&format!("data-state=\"{s}\" data-pods=\"0\"")),
                "{s}: {svg}"
            );
        }
        assert!(
            svg.contains("class=\"state occupied\" data-state=\"Running\" data-pods=\"3\""),
            "{svg}"
        );
        assert!(svg.contains("<text class=\"count\""), "{svg}");
        assert_eq!(svg.matches("class=\"edge").count(), 3, "{svg}");
        assert!(svg.contains("class=\"state initial\""), "{svg}");
        assert!(svg.contains("class=\"ring\""), "{svg}");
    }

    #[test]
    fn hostile_state_names_are_escaped() {
        let evil = "<script>alert(1)</script>";
        let quote = "x\" onmouseover=\"alert(2)";
        let g = graph(
            &["Start", evil, quote, "Gone"],
            &[("Start", evil), (evil, quote)],
        );
        let pods = BTreeMap::from([(evil.to_string(), 1)]);
        let svg = svg("<b>p</b>", &g, "g0", &pods);
        assert!(!svg.contains("<script"), "{svg}");
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(!svg.contains("\" onmouseover"), "{svg}");
        assert!(
            svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{svg}"
        );
        assert!(
            svg.contains("data-state=\"x&quot; onmouseover=&quot;alert(2)\""),
            "{svg}"
        );
    }

    #[test]
    fn long_names_are_cut_in_the_box_and_whole_in_the_tooltip() {
        let long = "A".repeat(500);
        let g = graph(&["Start", "Error", &long], &[("Start", &long)]);
        let svg = svg("p", &g, "g0", &BTreeMap::new());
        assert!(
            svg.contains(&format!(">{}…</text>", "A".repeat(LABEL_CHARS))),
            "{svg}"
        );
        assert!(svg.contains(&format!("<title>{long}: 0 pods</title>")));
    }

    #[test]
    fn a_graph_past_the_caps_is_not_drawn() {
        let names: Vec<String> = (0..=MAX_STATES).map(|i| format!("s{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let g = graph(&refs, &[]);
        let out = svg("p", &g, "g0", &BTreeMap::new());
        assert!(!out.contains("<svg"), "{out}");
        assert!(out.contains("65 states and 0 edges"), "{out}");
    }
}
