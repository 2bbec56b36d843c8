//! A layered (Sugiyama-style) layout of a provider's state graph, left to
//! right, for the status page's drawing: no crate in the tree lays out
//! graphs, and a state graph is small (tens of states), so the classic
//! steps are done plainly here:
//!
//! 1. edges that close a cycle (found by a depth-first walk from the initial
//!    state) are turned around, leaving an acyclic graph;
//! 2. each state's layer is its longest path from a source, so the usual
//!    path reads left to right (the initial state is a source: every edge
//!    into it closes a cycle); states on no edge (the host's own on-delete
//!    state) go to the last layer;
//! 3. an edge spanning several layers gets a waypoint in each layer between,
//!    so no edge is drawn through a node;
//! 4. each layer is ordered by the mean position of its neighbours in the
//!    layer before (then after), a fixed number of sweeps;
//! 5. layers become columns, stacked items rows, each column centred.
//!
//! Work is bounded by the caller's caps on states and edges
//! ([`MAX_STATES`], [`MAX_EDGES`]): waypoints are at most edges × layers.

use std::collections::{BTreeMap, HashMap};

/// Graphs with more states than this are listed, not drawn.
pub(super) const MAX_STATES: usize = 64;
/// Graphs with more edges than this are listed, not drawn.
pub(super) const MAX_EDGES: usize = 512;

/// Node height and the gaps between rows and columns, in SVG pixels.
pub(super) const NODE_H: f64 = 34.0;
const ROW_GAP: f64 = 22.0;
const COL_GAP: f64 = 56.0;
/// The height a waypoint takes in its column.
const WAYPOINT_H: f64 = 10.0;
/// Room around the drawing: above for self-loops and count badges.
pub(super) const MARGIN: f64 = 24.0;
/// Barycenter sweeps (each one down, then up).
const SWEEPS: usize = 6;

/// A placed state: its box's top-left corner and size.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    /// Index into the states given to [`layout`].
    pub(crate) state: usize,
    pub(crate) layer: usize,
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
}

impl Node {
    pub(super) fn mid_y(&self) -> f64 {
        self.y + NODE_H / 2.0
    }
}

/// A drawn edge: the points it passes, from its source's side to its
/// target's (waypoints between).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Edge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// Whether the edge runs right to left (it closes a cycle).
    pub(crate) back: bool,
    /// Empty for a self-loop (drawn at the node).
    pub(crate) points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    /// One per distinct state, in the order given.
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) width: f64,
    pub(crate) height: f64,
}

/// An item in a layer: a state, or a waypoint of edge `e`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Item {
    State(usize),
    Way(usize),
}

/// Lays out `states` (duplicates are placed once) with `edges` between them
/// (edges naming an unknown state are left out), starting at `initial`.
/// `width_of` gives a state's box width. Callers cap the graph's size
/// ([`MAX_STATES`], [`MAX_EDGES`]).
pub(super) fn layout(
    states: &[String],
    edges: &[(String, String)],
    initial: &str,
    width_of: impl Fn(&str) -> f64,
) -> Layout {
    // Distinct states, first occurrence wins.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for s in states {
        index.entry(s.as_str()).or_insert_with(|| {
            names.push(s);
            names.len() - 1
        });
    }
    let n = names.len();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (f, t) in edges {
        if let (Some(&f), Some(&t)) = (index.get(f.as_str()), index.get(t.as_str()))
            && !pairs.contains(&(f, t))
        {
            pairs.push((f, t));
        }
    }

    // 1. Cycle breaking: a depth-first walk from the initial state, then
    // from every state not reached yet; an edge to a state on the walk's
    // stack closes a cycle.
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(f, t) in &pairs {
        if f != t {
            out[f].push(t);
        }
    }
    let start = index.get(initial).copied().unwrap_or(0);
    let mut on_stack = vec![false; n];
    let mut seen = vec![false; n];
    let mut back = vec![false; pairs.len()];
    let mut finished: Vec<usize> = Vec::with_capacity(n);
    let roots = std::iter::once(start).chain(0..n);
    for root in roots {
        if n == 0 || seen[root] {
            continue;
        }
        // Iterative, so a long chain cannot overflow the stack.
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        seen[root] = true;
        on_stack[root] = true;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&w) = out[v].get(*next) {
                *next += 1;
                if on_stack[w] {
                    if let Some(i) = pairs.iter().position(|&p| p == (v, w)) {
                        back[i] = true;
                    }
                } else if !seen[w] {
                    seen[w] = true;
                    on_stack[w] = true;
                    stack.push((w, 0));
                }
            } else {
                on_stack[v] = false;
                finished.push(v);
                stack.pop();
            }
        }
    }
    // The acyclic edges, each (upper, lower) in layer order, and which of
    // them each drawn edge is (none for a self-loop).
    let mut dag: Vec<(usize, usize)> = Vec::with_capacity(pairs.len());
    let mut dag_of: Vec<Option<usize>> = Vec::with_capacity(pairs.len());
    for (&(f, t), &b) in pairs.iter().zip(&back) {
        if f == t {
            dag_of.push(None);
        } else {
            dag_of.push(Some(dag.len()));
            dag.push(if b { (t, f) } else { (f, t) });
        }
    }

    // 2. Longest-path layers, in topological order (reverse finish order).
    let mut layer = vec![0usize; n];
    for &v in finished.iter().rev() {
        for &(f, t) in &dag {
            if f == v {
                layer[t] = layer[t].max(layer[v] + 1);
            }
        }
    }
    let on_an_edge: Vec<bool> = (0..n)
        .map(|v| dag.iter().any(|&(f, t)| f == v || t == v))
        .collect();
    let last = layer.iter().copied().max().unwrap_or(0);
    for v in 0..n {
        if !on_an_edge[v] && v != start {
            layer[v] = last;
        }
    }
    let layers_n = layer.iter().copied().max().map_or(0, |m| m + 1);

    // 3. Layers with waypoints; each DAG edge becomes a chain of items.
    let mut layers: Vec<Vec<Item>> = vec![Vec::new(); layers_n];
    // Depth-first discovery order seeds each layer's order.
    let mut by_discovery: Vec<usize> = finished.iter().rev().copied().collect();
    by_discovery.sort_by_key(|&v| layer[v]);
    for &v in &by_discovery {
        layers[layer[v]].push(Item::State(v));
    }
    let mut chains: Vec<Vec<Item>> = Vec::with_capacity(dag.len());
    for (e, &(f, t)) in dag.iter().enumerate() {
        let mut chain = vec![Item::State(f)];
        for between in &mut layers[layer[f] + 1..layer[t]] {
            between.push(Item::Way(e));
            chain.push(Item::Way(e));
        }
        chain.push(Item::State(t));
        chains.push(chain);
    }
    // Neighbours of each item in the layer above and below.
    let mut up: HashMap<Item, Vec<Item>> = HashMap::new();
    let mut down: HashMap<Item, Vec<Item>> = HashMap::new();
    for chain in &chains {
        for w in chain.windows(2) {
            down.entry(w[0]).or_default().push(w[1]);
            up.entry(w[1]).or_default().push(w[0]);
        }
    }

    // 4. Barycenter ordering.
    for _ in 0..SWEEPS {
        for l in 1..layers_n {
            reorder(&mut layers, l, l - 1, &up);
        }
        for l in (0..layers_n.saturating_sub(1)).rev() {
            reorder(&mut layers, l, l + 1, &down);
        }
    }

    // 5. Coordinates: column widths, then rows centred in the tallest column.
    let widths: Vec<f64> = names.iter().map(|s| width_of(s)).collect();
    let col_w: Vec<f64> = layers
        .iter()
        .map(|items| {
            items
                .iter()
                .map(|i| match i {
                    Item::State(v) => widths[*v],
                    Item::Way(_) => 0.0,
                })
                .fold(0.0, f64::max)
        })
        .collect();
    let item_h = |i: &Item| match i {
        Item::State(_) => NODE_H,
        Item::Way(_) => WAYPOINT_H,
    };
    let col_h: Vec<f64> = layers
        .iter()
        .map(|items| {
            let h: f64 = items.iter().map(item_h).sum();
            h + ROW_GAP * items.len().saturating_sub(1) as f64
        })
        .collect();
    let tallest = col_h.iter().copied().fold(0.0, f64::max);
    let mut col_x = Vec::with_capacity(layers_n);
    let mut x = MARGIN;
    for w in &col_w {
        col_x.push(x);
        x += w + COL_GAP;
    }
    let width = x - COL_GAP + MARGIN;
    let mut nodes: BTreeMap<usize, Node> = BTreeMap::new();
    // A waypoint's (column, centre y).
    let mut way_at: HashMap<(usize, usize), f64> = HashMap::new();
    for (l, items) in layers.iter().enumerate() {
        let mut y = MARGIN + (tallest - col_h[l]) / 2.0;
        for item in items {
            match *item {
                Item::State(v) => {
                    // Centred in the column.
                    let x = col_x[l] + (col_w[l] - widths[v]) / 2.0;
                    nodes.insert(
                        v,
                        Node {
                            state: v,
                            layer: l,
                            x,
                            y,
                            w: widths[v],
                        },
                    );
                }
                Item::Way(e) => {
                    way_at.insert((e, l), y + WAYPOINT_H / 2.0);
                }
            }
            y += item_h(item) + ROW_GAP;
        }
    }
    let height = tallest + 2.0 * MARGIN;

    // Edge routes: out of the upper state's right side, along its
    // waypoints (straight through each column), into the lower state's left.
    let mut drawn = Vec::with_capacity(pairs.len());
    for (i, &(f, t)) in pairs.iter().enumerate() {
        let Some(e) = dag_of[i] else {
            drawn.push(Edge {
                from: f,
                to: t,
                back: false,
                points: Vec::new(),
            });
            continue;
        };
        let (a, b) = (&nodes[&dag[e].0], &nodes[&dag[e].1]);
        let mut points = vec![(a.x + a.w, a.mid_y())];
        for l in a.layer + 1..b.layer {
            let y = way_at.get(&(e, l)).copied().unwrap_or(a.mid_y());
            points.push((col_x[l], y));
            points.push((col_x[l] + col_w[l], y));
        }
        points.push((b.x, b.mid_y()));
        if back[i] {
            points.reverse();
        }
        drawn.push(Edge {
            from: f,
            to: t,
            back: back[i],
            points,
        });
    }

    spread_ports(&nodes, &mut drawn);
    Layout {
        nodes: nodes.into_values().collect(),
        edges: drawn,
        width: width.max(2.0 * MARGIN),
        height,
    }
}

/// Spreads the ends of the edges on each side of a box along its height,
/// ordered by where each edge goes next, so edges fan out instead of
/// leaving from one point (and a pair of edges both ways is two lines).
fn spread_ports(nodes: &BTreeMap<usize, Node>, edges: &mut [Edge]) {
    /// An edge's end on a box: (edge, its last point?, the next point's y).
    type End = (usize, bool, f64);
    // By (state, right side?).
    let mut ends: BTreeMap<(usize, bool), Vec<End>> = BTreeMap::new();
    for (i, e) in edges.iter().enumerate() {
        let k = e.points.len();
        if k < 2 {
            continue;
        }
        for (state, last, end, next) in [
            (e.from, false, e.points[0], e.points[1]),
            (e.to, true, e.points[k - 1], e.points[k - 2]),
        ] {
            let right = nodes.get(&state).is_some_and(|n| end.0 > n.x);
            ends.entry((state, right))
                .or_default()
                .push((i, last, next.1));
        }
    }
    for ((state, _), mut list) in ends {
        let Some(n) = nodes.get(&state) else { continue };
        list.sort_by(|a, b| a.2.total_cmp(&b.2));
        let k = list.len() as f64;
        for (j, (i, last, _)) in list.into_iter().enumerate() {
            let y = n.y + NODE_H * (j as f64 + 1.0) / (k + 1.0);
            let points = &mut edges[i].points;
            let p = if last { points.len() - 1 } else { 0 };
            points[p].1 = y;
        }
    }
}

/// Orders layer `l` by each item's mean position among its neighbours in
/// layer `by` (items without any keep their place); a stable sort, so ties
/// keep the current order.
fn reorder(layers: &mut [Vec<Item>], l: usize, by: usize, neighbours: &HashMap<Item, Vec<Item>>) {
    let pos: HashMap<Item, usize> = layers[by]
        .iter()
        .enumerate()
        .map(|(i, &it)| (it, i))
        .collect();
    let keys: Vec<f64> = layers[l]
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let ps: Vec<usize> = neighbours
                .get(it)
                .into_iter()
                .flatten()
                .filter_map(|n| pos.get(n).copied())
                .collect();
            if ps.is_empty() {
                i as f64
            } else {
                ps.iter().sum::<usize>() as f64 / ps.len() as f64
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..layers[l].len()).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let items = order.iter().map(|&i| layers[l][i]).collect();
    layers[l] = items;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    fn pairs(xs: &[(&str, &str)]) -> Vec<(String, String)> {
        xs.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// The wasi-runner's graph (guests/wasi-runner/src/lib.rs).
    fn wasi_runner() -> (Vec<String>, Vec<(String, String)>) {
        let states = strings(&[
            "Registered",
            "ImagePull",
            "ImagePullBackOff",
            "VolumeMount",
            "ContainerConfigError",
            "Initializing",
            "Starting",
            "Running",
            "Completed",
            "Error",
            "CrashLoopBackOff",
            "Terminated",
        ]);
        let mut edges = Vec::new();
        for (from, tos) in [
            ("Registered", &["ImagePull", "Error"][..]),
            ("ImagePull", &["VolumeMount", "ImagePullBackOff", "Error"]),
            ("ImagePullBackOff", &["ImagePullBackOff", "ImagePull"]),
            (
                "VolumeMount",
                &["Initializing", "ContainerConfigError", "Error"],
            ),
            ("ContainerConfigError", &["VolumeMount"]),
            (
                "Initializing",
                &[
                    "Initializing",
                    "Starting",
                    "Error",
                    "ContainerConfigError",
                    "ImagePull",
                    "VolumeMount",
                ],
            ),
            (
                "Starting",
                &[
                    "Running",
                    "Error",
                    "CrashLoopBackOff",
                    "ContainerConfigError",
                    "ImagePull",
                ],
            ),
            (
                "Running",
                &[
                    "Running",
                    "Completed",
                    "Error",
                    "CrashLoopBackOff",
                    "VolumeMount",
                ],
            ),
            ("Error", &["CrashLoopBackOff", "Running"]),
            ("CrashLoopBackOff", &["Starting", "Initializing"]),
        ] {
            for to in tos {
                edges.push((from.to_string(), to.to_string()));
            }
        }
        (states, edges)
    }

    fn overlap(a: &Node, b: &Node) -> bool {
        a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + NODE_H && b.y < a.y + NODE_H
    }

    /// Every state placed once, inside the drawing, no two boxes overlapping,
    /// every edge between placed states with its ends on their boxes.
    fn check(states: &[String], edges: &[(String, String)], l: &Layout) {
        let mut distinct = states.to_vec();
        distinct.sort();
        distinct.dedup();
        assert_eq!(l.nodes.len(), distinct.len(), "{l:?}");
        for (i, a) in l.nodes.iter().enumerate() {
            assert!(a.x >= 0.0 && a.y >= 0.0, "{a:?}");
            assert!(a.x + a.w <= l.width && a.y + NODE_H <= l.height, "{a:?}");
            for b in &l.nodes[i + 1..] {
                assert!(!overlap(a, b), "{a:?} overlaps {b:?}");
                assert_ne!(a.state, b.state);
            }
        }
        let node = |s: usize| l.nodes.iter().find(|n| n.state == s);
        let mut known = edges.to_vec();
        known.sort();
        known.dedup();
        assert_eq!(l.edges.len(), known.len());
        for e in &l.edges {
            let (a, b) = (node(e.from).expect("placed"), node(e.to).expect("placed"));
            assert_eq!(states[a.state], states[e.from]);
            if e.from == e.to {
                assert!(e.points.is_empty());
                continue;
            }
            let on = |n: &Node, (x, y): (f64, f64)| {
                (x == n.x || x == n.x + n.w) && y >= n.y && y <= n.y + NODE_H
            };
            assert!(on(a, e.points[0]), "{e:?} starts off {a:?}");
            assert!(on(b, *e.points.last().unwrap()), "{e:?} ends off {b:?}");
        }
    }

    #[test]
    fn the_wasi_runner_graph_reads_left_to_right_without_overlaps() {
        let (states, edges) = wasi_runner();
        let l = layout(&states, &edges, "Registered", |s| {
            20.0 + 8.0 * s.len() as f64
        });
        check(&states, &edges, &l);
        let layer = |s: &str| {
            let i = states.iter().position(|x| x == s).unwrap();
            l.nodes.iter().find(|n| n.state == i).unwrap().layer
        };
        // The usual path runs left to right.
        let path = [
            "Registered",
            "ImagePull",
            "VolumeMount",
            "Initializing",
            "Starting",
            "Running",
        ];
        for w in path.windows(2) {
            assert!(layer(w[0]) < layer(w[1]), "{w:?}: {l:?}");
        }
        assert_eq!(layer("Registered"), 0);
        // The on-delete state (on no edge) sits in the last column.
        let last = l.nodes.iter().map(|n| n.layer).max().unwrap();
        assert_eq!(layer("Terminated"), last);
        // Edges that close a cycle are marked, and run right to left.
        let back: Vec<_> = l.edges.iter().filter(|e| e.back).collect();
        assert!(!back.is_empty());
        for e in back {
            assert!(e.points[0].0 > e.points.last().unwrap().0, "{e:?}");
        }
    }

    #[test]
    fn long_edges_pass_beside_the_nodes_of_the_columns_they_cross() {
        // a -> b -> c -> d, and a -> d across two columns.
        let states = strings(&["a", "b", "c", "d"]);
        let edges = pairs(&[("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]);
        let l = layout(&states, &edges, "a", |_| 60.0);
        check(&states, &edges, &l);
        let long = l.edges.iter().find(|e| e.from == 0 && e.to == 3).unwrap();
        // Out, two waypoints per column crossed, in.
        assert_eq!(long.points.len(), 2 + 2 * 2);
        for &(x, y) in &long.points[1..long.points.len() - 1] {
            for n in &l.nodes {
                let inside = x > n.x && x < n.x + n.w && y > n.y - 1.0 && y < n.y + NODE_H + 1.0;
                assert!(!inside, "waypoint ({x},{y}) inside {n:?}");
            }
        }
    }

    #[test]
    fn odd_graphs_are_still_placed() {
        for (states, edges, initial) in [
            (strings(&[]), pairs(&[]), "x"),
            (strings(&["only"]), pairs(&[("only", "only")]), "only"),
            // Duplicates, an unknown initial state, edges to unknown states,
            // a repeated edge, two components.
            (
                strings(&["a", "b", "a", "c", "d"]),
                pairs(&[("a", "b"), ("a", "b"), ("b", "zz"), ("c", "d"), ("d", "c")]),
                "nope",
            ),
        ] {
            let l = layout(&states, &edges, initial, |s| 10.0 * s.len() as f64 + 20.0);
            let known: Vec<(String, String)> = edges
                .iter()
                .filter(|(a, b)| states.contains(a) && states.contains(b))
                .cloned()
                .collect();
            check(&states, &known, &l);
        }
    }

    #[test]
    fn a_graph_at_the_caps_lays_out() {
        // A complete-ish graph at the caps: every state to the next eight.
        let states: Vec<String> = (0..MAX_STATES).map(|i| format!("s{i}")).collect();
        let mut edges = Vec::new();
        'all: for i in 0..MAX_STATES {
            for j in 1..=8 {
                if edges.len() == MAX_EDGES {
                    break 'all;
                }
                edges.push((states[i].clone(), states[(i + j * 7) % MAX_STATES].clone()));
            }
        }
        let l = layout(&states, &edges, "s0", |_| 50.0);
        let mut known = edges.clone();
        known.sort();
        known.dedup();
        check(&states, &known, &l);
    }
}
