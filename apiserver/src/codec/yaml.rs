//! YAML bodies, checked before `serde_yaml` builds them.
//!
//! libyaml (under `serde_yaml`) scans flow collections in time quadratic in
//! their nesting (every token walks the stack of open levels), and
//! `serde_yaml` refuses depth only after the whole document was scanned: a
//! 117 KiB body of `[` took 12.8 s of CPU. [`check_depth`] measures nesting in
//! one pass over the bytes first. Aliases replay their anchor's node wherever
//! they appear; `serde_yaml` bounds the number of replays but not what they
//! build (an anchored list of 50,000 items named 50,000 times is a 300 KB body
//! of 2.5 billion values), so [`check_expansion`] counts what the document
//! expands to, without building it, before it is built.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deepest nesting a YAML body may have: the bound JSON patches and the
/// protobuf codec keep (serde_json reads at most 127 levels of JSON).
pub(crate) const MAX_DEPTH: usize = wasmlet_apimachinery::patch::bounds::MAX_DEPTH;

/// The nesting of `body`'s collections, measured in one pass without parsing
/// it, and an error once it passes `max`. Flow collections (`[`, `{`, where
/// libyaml's cost is quadratic) are counted wherever one may open, erring
/// towards more; block collections by their indentation and by compact
/// entries (`- - a`); quoted scalars, block scalars (`|`, `>`) and comments
/// are skipped. Block nesting the scan misses costs libyaml linear time,
/// and `serde_yaml` still refuses it past 128 levels.
pub(crate) fn check_depth(body: &[u8], max: usize) -> Result<(), String> {
    let too_deep = || format!("the YAML body nests deeper than {max} levels");
    // Block levels: the column each open block node starts at, and whether it
    // is a sequence (an indentless sequence shares its mapping's column).
    let mut block: Vec<(usize, bool)> = Vec::new();
    let mut flow = 0usize;
    let mut lines = body.split(|&b| b == b'\n').peekable();
    // Inside a quoted scalar that runs on past its line, and its quote.
    let mut quoted: Option<u8> = None;
    while let Some(line) = lines.next() {
        let mut i;
        let mut node_start;
        if let Some(q) = quoted {
            let Some(end) = close_quote(line, 0, q) else {
                continue;
            };
            quoted = None;
            i = end;
            node_start = false;
        } else {
            let indent = line.iter().take_while(|&&b| b == b' ').count();
            let rest = &line[indent..];
            if rest.iter().all(u8::is_ascii_whitespace) || rest.starts_with(b"#") {
                continue;
            }
            i = indent;
            node_start = true;
            if rest.starts_with(b"---") || rest.starts_with(b"...") {
                // A new document; a node may follow the marker on its line.
                block.clear();
                flow = 0;
                i += 3;
            } else if flow == 0 && !is_indicator(line, i) {
                // An entry indicator opens its own level below.
                open_block(&mut block, indent, false);
            }
        }
        // Column of the entry the rest of the line belongs to: a block
        // scalar's lines are those indented past it.
        let mut entry = i;
        while i < line.len() {
            let c = line[i];
            match c {
                b' ' | b'\t' | b'\r' => {
                    i += 1;
                    continue;
                }
                b'#' if i == 0 || matches!(line[i - 1], b' ' | b'\t') => break,
                b'[' | b'{' if node_start || flow > 0 => {
                    flow += 1;
                    node_start = true;
                }
                b']' | b'}' if flow > 0 => {
                    flow -= 1;
                    node_start = false;
                }
                b',' if flow > 0 => node_start = true,
                b'-' | b'?' if node_start && is_indicator(line, i) => {
                    if flow == 0 {
                        // A block entry (`- - a`, `? a`) opens a level at its column.
                        open_block(&mut block, i, c == b'-');
                        entry = i;
                    }
                }
                b':' if is_indicator(line, i)
                    || flow > 0 && matches!(line.get(i + 1), Some(b',' | b']' | b'}')) =>
                {
                    node_start = true;
                }
                b'\'' | b'"' if node_start => {
                    if flow == 0 {
                        entry = i;
                    }
                    match close_quote(line, i + 1, c) {
                        Some(end) => {
                            i = end;
                            node_start = false;
                            continue;
                        }
                        None => {
                            quoted = Some(c);
                            break;
                        }
                    }
                }
                b'|' | b'>' if node_start && flow == 0 => {
                    // Skip the scalar's lines: blank, or indented past its entry.
                    while let Some(next) = lines.peek() {
                        let ind = next.iter().take_while(|&&b| b == b' ').count();
                        if ind > entry || next[ind..].iter().all(u8::is_ascii_whitespace) {
                            lines.next();
                        } else {
                            break;
                        }
                    }
                    break;
                }
                b'&' | b'!' if node_start => {
                    // An anchor or tag: the node follows it.
                    while i < line.len()
                        && !matches!(line[i], b' ' | b'\t' | b',' | b'[' | b']' | b'{' | b'}')
                    {
                        i += 1;
                    }
                    continue;
                }
                _ => {
                    if node_start && flow == 0 {
                        entry = i;
                    }
                    node_start = false;
                }
            }
            if block.len() + flow > max {
                return Err(too_deep());
            }
            i += 1;
        }
        if block.len() + flow > max {
            return Err(too_deep());
        }
    }
    Ok(())
}

/// Whether the `-`, `?` or `:` at `i` is an indicator: followed by a space or
/// the end of the line.
fn is_indicator(line: &[u8], i: usize) -> bool {
    matches!(line.get(i), Some(b'-' | b'?' | b':'))
        && line
            .get(i + 1)
            .is_none_or(|n| matches!(n, b' ' | b'\t' | b'\r'))
}

/// Opens a block level at `col` (closing those deeper), unless one is open there.
fn open_block(block: &mut Vec<(usize, bool)>, col: usize, seq: bool) {
    while let Some(&(c, s)) = block.last() {
        if c > col || c == col && s && !seq {
            block.pop();
        } else {
            break;
        }
    }
    match block.last() {
        Some(&(c, s)) if c == col && (s == seq || !seq) => {}
        _ => block.push((col, seq)),
    }
}

/// Where the quoted scalar opened by `quote` closes on `line` (just past its
/// closing quote), searching from `from`.
fn close_quote(line: &[u8], from: usize, quote: u8) -> Option<usize> {
    let mut i = from;
    while i < line.len() {
        match line[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && line.get(i + 1) == Some(&b'\'') => i += 2,
            c if c == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Refuses a document that expands, through its aliases, to more than
/// `budget` nodes and bytes of scalars. A document without aliases is about
/// as large as its text, so a budget of twice the body (and some room for
/// small documents) only refuses aliases that multiply it.
pub(crate) fn check_expansion(body: &[u8], budget: usize) -> Result<(), String> {
    let left = Cell::new(budget);
    let over = Cell::new(false);
    let count = Count {
        left: &left,
        over: &over,
    };
    // Other errors are the parser's to report, with its own message.
    let _ = count.deserialize(serde_yaml::Deserializer::from_slice(body));
    if over.get() {
        return Err(format!(
            "the YAML body expands, through its aliases, past {budget} nodes and bytes: document contains excessive aliasing"
        ));
    }
    Ok(())
}

/// The expansion budget of a YAML body of `len` bytes.
pub(crate) fn expansion_budget(len: usize) -> usize {
    2 * len + (64 << 10)
}

#[derive(Clone, Copy)]
struct Count<'a> {
    left: &'a Cell<usize>,
    over: &'a Cell<bool>,
}

impl Count<'_> {
    fn spend<E: serde::de::Error>(self, n: usize) -> Result<(), E> {
        match self.left.get().checked_sub(n) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.over.set(true);
                Err(E::custom("document contains excessive aliasing"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        self.spend(1 + s.len())
    }
    fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<(), E> {
        self.spend(1 + b.len())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.spend(1)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.spend(1)?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.spend(1)?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use serde::de::VariantAccess;
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(yaml: &str) -> bool {
        check_depth(yaml.as_bytes(), MAX_DEPTH).is_ok()
    }

    /// Nested `n` levels in block style: mappings, with a sequence every
    /// other level (an indentless one, as kubectl writes them).
    fn block(n: usize) -> String {
        let mut s = String::new();
        for level in 0..n {
            let pad = " ".repeat(level);
            if level % 2 == 0 {
                s.push_str(&format!("{pad}k{level}:\n"));
            } else {
                s.push_str(&format!("{pad}- \n"));
            }
        }
        s.push_str(&" ".repeat(n));
        s.push_str("leaf\n");
        s
    }

    #[test]
    fn flow_nesting_past_the_limit_is_refused_at_once() {
        let deep = format!("a: {}{}", "[".repeat(60_000), "]".repeat(60_000));
        let started = std::time::Instant::now();
        let e = check_depth(deep.as_bytes(), MAX_DEPTH).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_millis(200));
        assert_eq!(e, "the YAML body nests deeper than 100 levels");
        assert!(!depth_ok(&format!(
            "{}{}",
            "{a: ".repeat(101),
            "}".repeat(101)
        )));
        assert!(depth_ok(&format!("{}{}", "[".repeat(90), "]".repeat(90))));
    }

    #[test]
    fn block_nesting_is_counted_by_indentation_and_compact_entries() {
        assert!(depth_ok(&block(90)));
        assert!(!depth_ok(&block(110)));
        // Compact sequences: every `- ` on one line is a level.
        assert!(!depth_ok(&format!("{}a\n", "- ".repeat(101))));
        assert!(depth_ok(&format!("{}a\n", "- ".repeat(90))));
        // Flow inside block adds up.
        assert!(!depth_ok(&format!(
            "{}{}{}\n",
            block(60).trim_end_matches("leaf\n"),
            "[".repeat(50),
            "]".repeat(50)
        )));
    }

    #[test]
    fn brackets_in_scalars_and_comments_are_not_nesting() {
        let brackets = "[".repeat(200);
        for yaml in [
            format!("a: '{brackets}'\n"),
            format!("a: \"{brackets}\"\n"),
            format!("a: \"multi\n  line {brackets}\"\n"),
            format!("a: x{brackets}\n"),
            format!("# {brackets}\na: 1\n"),
            format!("a: 1 # {brackets}\n"),
            format!("a: |\n  {brackets}\n\n  {brackets}\nb: 1\n"),
            format!("- k: >-\n    {brackets}\n- 2\n"),
            format!("a: [\"{brackets}\", '{brackets}']\n"),
        ] {
            assert!(depth_ok(&yaml), "{yaml}");
            // The same documents parse as the scan read them.
            serde_yaml::from_str::<serde_json::Value>(&yaml).unwrap();
        }
    }

    #[test]
    fn real_manifests_pass() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels: {app: a}\nspec:\n  containers:\n  - name: c\n    image: i\n    args: [\"-c\", 'x']\n    command:\n    - sh\n    env:\n    - name: A\n      value: |\n        multi\n          line\n";
        assert!(depth_ok(pod));
        // JSON is YAML: a pretty-printed object 90 levels deep.
        let mut v = serde_json::json!("leaf");
        for _ in 0..90 {
            v = serde_json::json!({ "k": v });
        }
        assert!(depth_ok(&serde_json::to_string_pretty(&v).unwrap()));
    }

    #[test]
    fn aliases_that_multiply_the_document_are_refused() {
        let items = vec!["1"; 5_000].join(",");
        let aliases = vec!["*a"; 5_000].join(",");
        let bomb = format!("a: &a [{items}]\nb: [{aliases}]\n");
        let started = std::time::Instant::now();
        let e = check_expansion(bomb.as_bytes(), expansion_budget(bomb.len())).unwrap_err();
        assert!(e.contains("excessive aliasing"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Modest reuse is fine.
        let ok = "base: &b {cpu: 1, memory: 2}\nx: *b\ny: *b\n";
        check_expansion(ok.as_bytes(), expansion_budget(ok.len())).unwrap();
    }
}
