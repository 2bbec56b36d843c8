//! Label and field selectors: the `labelSelector` / `fieldSelector` query
//! parameters of LIST and WATCH, and `metav1.LabelSelector` objects.
//!
//! Parsing follows `k8s.io/apimachinery/pkg/labels/selector.go` and
//! `pkg/fields/selector.go` (v0.33): same grammar, same error strings, same
//! canonical string form (requirements sorted by key, set values sorted).
//!
//! ```
//! use std::collections::BTreeMap;
//! use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};
//!
//! let sel = LabelSelector::parse("app in (web, api), tier!=cache, !legacy").unwrap();
//! let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
//! assert!(sel.matches(&labels));
//! // A label map straight out of an object works too (a missing map is no labels):
//! let pod = serde_json::json!({"metadata": {"labels": {"app": "db"}}});
//! assert!(!sel.matches(&pod["metadata"]["labels"]));
//! assert_eq!(sel.to_string(), "app in (api,web),!legacy,tier!=cache");
//!
//! let fs = FieldSelector::parse("spec.nodeName=node-1,status.phase!=Succeeded").unwrap();
//! assert!(fs.matches(|f| match f {
//!     "spec.nodeName" => Some("node-1".into()),
//!     "status.phase" => Some("Running".into()),
//!     _ => None,
//! }));
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::Value;

use crate::names::{is_qualified_name, is_valid_label_value};

/// A selector that could not be parsed or built. The message is upstream's,
/// ready for a `BadRequest` Status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

// ---------------------------------------------------------------------------
// Labels

/// Anything that can answer "what is the value of label `key`?".
///
/// Implemented for `BTreeMap<String, String>`, `HashMap<String, String>`,
/// `serde_json::Map` and `serde_json::Value` (an object of labels; `null` or a
/// missing `metadata.labels` is the empty set, non-string values are ignored).
pub trait Labels {
    fn get_label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for serde_json::Map<String, Value> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

impl Labels for Value {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.as_object().and_then(|m| m.get_label(key))
    }
}

/// A label requirement's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `a=b`
    Equals,
    /// `a==b`
    DoubleEquals,
    /// `a!=b` (also true when the label is absent)
    NotEquals,
    /// `a in (x,y)`
    In,
    /// `a notin (x,y)` (also true when the label is absent)
    NotIn,
    /// `a`
    Exists,
    /// `!a`
    DoesNotExist,
    /// `a>5` (integer comparison; upstream syntax, rarely used)
    GreaterThan,
    /// `a<5`
    LessThan,
}

impl Operator {
    /// Upstream's `selection.Operator` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a validated requirement (upstream `labels.NewRequirement`): the
    /// key must be a qualified name, each value a label value, and the number
    /// of values must fit the operator.
    pub fn new(
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        let mut errs = Vec::new();
        if let Some(e) = validate_label_key(key, "key") {
            errs.push(e);
        }
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(format!(
                "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
                go_string_slice(&values)
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
                errs.push(format!(
                    "values: Invalid value: {}: exact-match compatibility requires one single value",
                    go_string_slice(&values)
                ))
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(format!(
                "values: Invalid value: {}: values set must be empty for exists and does not exist",
                go_string_slice(&values)
            )),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        go_string_slice(&values)
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            go_quote(v)
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let problems = is_valid_label_value(v);
            if !problems.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    go_quote(v),
                    problems.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            })
        } else {
            Err(SelectorError(aggregate(errs)))
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values in the order given (the parser gives them sorted and deduplicated).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let got = labels.get_label(&self.key);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => got.is_some_and(has),
            Operator::NotIn | Operator::NotEquals => !got.is_some_and(has),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(got), [want]) = (got, self.values.as_slice()) else {
                    return false;
                };
                let (Ok(got), Ok(want)) = (got.parse::<i64>(), want.parse::<i64>()) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    got > want
                } else {
                    got < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        // Upstream sorts values on output without touching the requirement.
        let mut vals: Vec<&str> = self.values.iter().map(String::as_str).collect();
        vals.sort_unstable();
        f.write_str(&vals.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed label selector: the AND of its requirements. The empty selector
/// matches everything; [`LabelSelector::nothing`] matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every object (`""`).
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// The selector that matches no object: what a missing (`null`)
    /// `metav1.LabelSelector` means upstream (e.g. a PDB without a selector).
    pub fn nothing() -> LabelSelector {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the string syntax of `?labelSelector=`:
    /// `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
    /// `a>1`, `a<1`, comma-separated; whitespace between tokens is ignored.
    ///
    /// ```
    /// use wasmlet_apimachinery::selector::LabelSelector;
    /// assert!(LabelSelector::parse("").unwrap().is_empty());
    /// let err = LabelSelector::parse("a in b").unwrap_err();
    /// assert_eq!(err.to_string(), "unable to parse requirement: found 'b' expected: '('");
    /// ```
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut p = Parser {
            items: lex(s),
            pos: 0,
        };
        let mut reqs = p.parse().map_err(SelectorError)?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements: reqs,
            nothing: false,
        })
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON object
    /// (`matchLabels` + `matchExpressions` with `In`, `NotIn`, `Exists`,
    /// `DoesNotExist`), as upstream `LabelSelectorAsSelector`. `null` gives
    /// [`LabelSelector::nothing`]; `{}` gives the selector matching everything.
    pub fn from_label_selector(v: &Value) -> Result<LabelSelector, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError(format!(
                    "label selector must be an object, got {}",
                    json_kind(other)
                )));
            }
        };
        let mut reqs = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(ml)) => {
                for (k, v) in ml {
                    let v = v.as_str().ok_or_else(|| {
                        SelectorError(format!(
                            "matchLabels[{k}]: must be a string, got {}",
                            json_kind(v)
                        ))
                    })?;
                    reqs.push(Requirement::new(k, Operator::Equals, vec![v.to_string()])?);
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "matchLabels: must be an object, got {}",
                    json_kind(other)
                )));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, e) in exprs.iter().enumerate() {
                    reqs.push(expression_requirement(i, e)?);
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "matchExpressions: must be an array, got {}",
                    json_kind(other)
                )));
            }
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements: reqs,
            nothing: false,
        })
    }

    /// The AND-ed requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector matches everything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether an object with these labels is selected. Accepts a
    /// `BTreeMap<String, String>`, a `HashMap`, a `serde_json::Map`, or a
    /// `serde_json::Value` such as `&obj["metadata"]["labels"]`.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form; parses back to an equal selector.
    /// (Like upstream, `nothing()` prints as the empty string.)
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

fn expression_requirement(i: usize, e: &Value) -> Result<Requirement, SelectorError> {
    let bad = |what: &str| SelectorError(format!("matchExpressions[{i}].{what}"));
    let key = e
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("key: must be a string"))?;
    let op = match e.get("operator") {
        Some(Value::String(s)) => s.as_str(),
        _ => return Err(bad("operator: must be a string")),
    };
    let op = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError(format!(
                "{} is not a valid label selector operator",
                go_quote(other)
            )));
        }
    };
    let values = match e.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad("values: must be an array of strings"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("values: must be an array of strings")),
    };
    Requirement::new(key, op, values)
}

fn validate_label_key(key: &str, path: &str) -> Option<String> {
    let errs = is_qualified_name(key);
    (!errs.is_empty()).then(|| {
        format!(
            "{path}: Invalid value: {}: {}",
            go_quote(key),
            errs.join("; ")
        )
    })
}

/// Upstream's `utilerrors.Aggregate` message: one error alone, else `[a, b]`
/// with duplicates dropped.
fn aggregate(errs: Vec<String>) -> String {
    if errs.len() == 1 {
        return errs.into_iter().next().unwrap_or_default();
    }
    let mut seen = BTreeSet::new();
    let uniq: Vec<String> = errs
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    if uniq.len() == 1 {
        uniq.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", uniq.join(", "))
    }
}

/// Go's `%#v` of a `[]string`, as upstream prints a bad `values` field.
fn go_string_slice(v: &[String]) -> String {
    if v.is_empty() {
        // The values of a matchExpression come in as a nil slice upstream.
        return "[]string(nil)".to_string();
    }
    format!(
        "[]string{{{}}}",
        v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(", ")
    )
}

/// Go's `%q` (strconv.Quote) for the strings that appear in messages.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// --- lexer and parser: a transliteration of upstream's, so errors match ---

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Eos,
    ClosePar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    Gt,
    Ident,
    In,
    Lt,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosePar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::Gt,
        "in" => Tok::In,
        "<" => Tok::Lt,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into tokens, ending with `Eos`. Every byte that ends a
/// token is ASCII, so slicing the `&str` at those offsets is always valid.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            out.push((Tok::Eos, String::new()));
            return out;
        }
        let start = i;
        if is_special(b[i]) {
            // Longest run of special symbols that still forms a token ("!=", "==").
            let mut best = None;
            while i < b.len() && is_special(b[i]) {
                match keyword(&s[start..=i]) {
                    Some(t) => best = Some((t, i + 1)),
                    None if best.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            match best {
                Some((t, end)) => {
                    i = end;
                    out.push((t, s[start..end].to_string()));
                }
                // Unreachable with the current symbol table (every single special
                // is a token), kept so a future table change cannot loop forever.
                None => {
                    out.push((Tok::Ident, s[start..i].to_string()));
                }
            }
        } else {
            while i < b.len() && !is_special(b[i]) && !is_ws(b[i]) {
                i += 1;
            }
            let lit = &s[start..i];
            out.push((keyword(lit).unwrap_or(Tok::Ident), lit.to_string()));
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn at(&self, pos: usize, ctx: Ctx) -> (Tok, String) {
        // Past the end we keep answering Eos, so malformed input cannot index out of bounds.
        let (t, l) = self
            .items
            .get(pos)
            .cloned()
            .unwrap_or((Tok::Eos, String::new()));
        // In a value position, `in` and `notin` are plain identifiers.
        let t = if ctx == Ctx::Values && matches!(t, Tok::In | Tok::NotIn) {
            Tok::Ident
        } else {
            t
        };
        (t, l)
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.at(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.at(self.pos, ctx);
        self.pos += 1;
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Ident | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::Eos => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::Eos => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(&key, op, Vec::new()).map_err(|e| e.0);
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values.into_iter().collect()).map_err(|e| e.0)
    }

    /// Returns the key, and `Some(op)` when the requirement is unary (`a`, `!a`).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut not = false;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            not = true;
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Ident {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        // Upstream validates the key here with a nil field path, hence "<nil>".
        if let Some(e) = validate_label_key(&lit, "<nil>") {
            return Err(e);
        }
        let (next, _) = self.lookahead(Ctx::Values);
        if not {
            return Ok((lit, Some(Operator::DoesNotExist)));
        }
        if next == Tok::Eos || next == Tok::Comma {
            return Ok((lit, Some(Operator::Exists)));
        }
        Ok((lit, None))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                if self.consume(Ctx::Values).0 != Tok::ClosePar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosePar => {
                // "()" is the set holding the empty string.
                self.consume(Ctx::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut s = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Ident => {
                    s.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                // Empty values: "(,a)", "(a,)", "(a,,b)".
                Tok::Comma => {
                    if s.is_empty() {
                        s.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosePar {
                        s.insert(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::Eos || tok == Tok::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Ident {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

// ---------------------------------------------------------------------------
// Fields

/// `=`/`==` or `!=` in a field selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `a=b` or `a==b`.
    Equals,
    /// `a!=b`.
    NotEquals,
}

/// One `field op value` term; `value` is unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

/// A parsed field selector: the AND of its terms. Which fields exist is the
/// caller's business (upstream answers `field label not supported: X`);
/// use [`FieldSelector::fields`] to check them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `a=b`, `a==b`, `a!=b`, comma-separated. In values, `\,` `\=`
    /// and `\\` stand for `,` `=` and `\`; a bare `,`/`=` or another escape is
    /// an error, as upstream.
    ///
    /// ```
    /// use wasmlet_apimachinery::selector::FieldSelector;
    /// let s = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
    /// assert_eq!(s.requirements()[0].value, "a,b");
    /// assert_eq!(FieldSelector::parse("x").unwrap_err().to_string(), "invalid selector: 'x'; can't understand 'x'");
    /// ```
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(selector);
        // Upstream sorts the raw terms, which fixes the canonical order.
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            terms.push(FieldRequirement {
                field: lhs.to_string(),
                operator: op,
                value: unescape_value(rhs)?,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// The terms, in canonical (sorted) order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// The field names used, for the caller to validate against what a kind supports.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// The value a field must equal, when some `field=value` term demands it
    /// (lets a LIST with `metadata.name=x` become a point lookup).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.operator == FieldOperator::Equals)
            .map(|t| t.value.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object is selected; `get` returns the object's value for a
    /// field name (`metadata.name`, `spec.nodeName`, ...). As upstream, a
    /// field `get` does not know reads as the empty string.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let v = get(&t.field).unwrap_or_default();
            match t.operator {
                FieldOperator::Equals => v == t.value,
                FieldOperator::NotEquals => v != t.value,
            }
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.operator == FieldOperator::Equals {
                "="
            } else {
                "!="
            };
            write!(f, "{}{op}{}", t.field, escape_value(&t.value))?;
        }
        Ok(())
    }
}

/// Escapes a literal for use as a field selector value (upstream `EscapeValue`).
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas that are not escaped; escapes are kept for `unescape_value`.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The first operator occurrence splits the term; `!=` and `==` win over `=`
/// at the same position.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (tok, op) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(rhs) = rest.strip_prefix(tok) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                return Err(SelectorError(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn match_table() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (x)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("  app  =  web ,  tier in ( front , back )  ", true),
            ("n>4", true),
            ("n<5", false),
            ("app>1", false),
            ("missing=", false),
            ("app in (in,notin)", false),
        ];
        for (s, want) in cases {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(sel.matches(&l), *want, "{s:?}");
        }
    }

    #[test]
    fn empty_value_matches_empty_label() {
        let l = labels(&[("a", "")]);
        assert!(LabelSelector::parse("a=").unwrap().matches(&l));
        assert!(LabelSelector::parse("a in ()").unwrap().matches(&l));
        assert!(LabelSelector::parse("a in (,x)").unwrap().matches(&l));
        assert!(!LabelSelector::parse("a in (x)").unwrap().matches(&l));
    }

    #[test]
    fn matches_json_labels() {
        let sel = LabelSelector::parse("app=web").unwrap();
        let obj = json!({"metadata": {"labels": {"app": "web"}}});
        assert!(sel.matches(&obj["metadata"]["labels"]));
        assert!(!sel.matches(&json!({})["metadata"]["labels"]));
        assert!(LabelSelector::parse("!app").unwrap().matches(&Value::Null));
        assert!(sel.matches(obj["metadata"]["labels"].as_object().unwrap()));
    }

    #[test]
    fn canonical_string_form() {
        let sel = LabelSelector::parse("z in (b,a,b), a!=x, !m, e, k==v, n>3").unwrap();
        assert_eq!(sel.to_string(), "a!=x,e,k==v,!m,n>3,z in (a,b)");
        // It parses back to the same selector.
        assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
        assert_eq!(sel.requirements()[5].values(), ["a", "b"]);
    }

    #[test]
    fn syntax_errors_match_upstream() {
        let cases: &[(&str, &str)] = &[
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a in (b",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "a in (b c)",
                "unable to parse requirement: found 'c', expected: ',' or ')'",
            ),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("a=b,", "found '', expected: identifier after ','"),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            (
                "a=(b)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "a (b)",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "a in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier",
            ),
            (
                "a in (b,=)",
                "unable to parse requirement: found '=', expected: ',', or identifier",
            ),
        ];
        for (s, msg) in cases {
            assert_eq!(
                LabelSelector::parse(s).unwrap_err().to_string(),
                *msg,
                "{s:?}"
            );
        }
    }

    #[test]
    fn invalid_keys_and_values() {
        let e = LabelSelector::parse("-a=b").unwrap_err().to_string();
        assert_eq!(
            e,
            "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        let e = LabelSelector::parse("a=-b").unwrap_err().to_string();
        assert!(e.starts_with("unable to parse requirement: values[0][a]: Invalid value: \"-b\": a valid label must be an empty string"), "{e}");
        let long = "v".repeat(64);
        let e = LabelSelector::parse(&format!("a in ({long}, -x)"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unable to parse requirement: [values[0][a]: Invalid value: \"-x\""),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "values[1][a]: Invalid value: \"{long}\": must be no more than 63 characters"
            )),
            "{e}"
        );
        assert!(
            LabelSelector::parse("a>x")
                .unwrap_err()
                .to_string()
                .contains("the value must be an integer")
        );
        assert!(LabelSelector::parse("example.com/app=x,app.kubernetes.io/name").is_ok());
    }

    #[test]
    fn from_metav1_label_selector() {
        let sel = LabelSelector::from_label_selector(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
            ]
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,env notin (prod),!legacy,tier in (a,b),zone"
        );
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "a"), ("zone", "z")])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("zone", "z"),
            ("legacy", "1")
        ])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("zone", "z"),
            ("env", "prod")
        ])));

        let all = LabelSelector::from_label_selector(&json!({})).unwrap();
        assert!(all.is_empty() && all.matches(&labels(&[])));
        let none = LabelSelector::from_label_selector(&Value::Null).unwrap();
        assert!(!none.is_empty() && !none.matches(&labels(&[])));
    }

    #[test]
    fn metav1_label_selector_errors() {
        let err = |v: Value| {
            LabelSelector::from_label_selector(&v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})),
            "\"Gt\" is not a valid label selector operator"
        );
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            err(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})),
            "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist"
        );
        assert!(
            err(json!({"matchLabels": {"a b": "c"}}))
                .starts_with("key: Invalid value: \"a b\": name part must consist")
        );
        assert!(err(json!({"matchLabels": {"a": 1}})).contains("must be a string"));
        assert!(err(json!([1])).contains("must be an object"));
    }

    #[test]
    fn field_selector_parse_and_match() {
        let fs = FieldSelector::parse("status.phase!=Failed,metadata.name==web-0,spec.nodeName=n1")
            .unwrap();
        assert_eq!(
            fs.fields().collect::<Vec<_>>(),
            ["metadata.name", "spec.nodeName", "status.phase"]
        );
        assert_eq!(fs.requires_exact_match("metadata.name"), Some("web-0"));
        assert_eq!(fs.requires_exact_match("status.phase"), None);
        let pod = |name: &str, node: &str, phase: &str| {
            let (name, node, phase) = (name.to_string(), node.to_string(), phase.to_string());
            move |f: &str| match f {
                "metadata.name" => Some(name.clone()),
                "spec.nodeName" => Some(node.clone()),
                "status.phase" => Some(phase.clone()),
                _ => None,
            }
        };
        assert!(fs.matches(pod("web-0", "n1", "Running")));
        assert!(!fs.matches(pod("web-0", "n1", "Failed")));
        assert!(!fs.matches(pod("web-1", "n1", "Running")));
        // An unknown or absent field reads as "", so `f=` selects it and `f!=` does not.
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(|_| None)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName!=")
                .unwrap()
                .matches(|_| None)
        );
        assert!(FieldSelector::parse("").unwrap().matches(|_| None));
        assert_eq!(
            fs.to_string(),
            "metadata.name=web-0,spec.nodeName=n1,status.phase!=Failed"
        );
    }

    #[test]
    fn field_selector_escapes() {
        let fs = FieldSelector::parse(r"a=x\,y\=z\\w,b!=q").unwrap();
        assert_eq!(fs.requirements()[0].value, r"x,y=z\w");
        assert_eq!(fs.requirements()[1].operator, FieldOperator::NotEquals);
        assert_eq!(fs.to_string(), r"a=x\,y\=z\\w,b!=q");
        assert_eq!(FieldSelector::parse(&fs.to_string()).unwrap(), fs);
        let err = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
        assert_eq!(
            err(r"a=\q"),
            r"invalid field selector: invalid escape sequence: \q"
        );
        assert_eq!(
            err(r"a=b\"),
            r"invalid field selector: invalid escape sequence: \"
        );
        assert_eq!(
            err("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            err("a=b,nope"),
            "invalid selector: 'a=b,nope'; can't understand 'nope'"
        );
        // `==` is taken before `=`: the value is "b", not "=b".
        assert_eq!(
            FieldSelector::parse("a==b").unwrap().requirements()[0].value,
            "b"
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        for s in [
            "(",
            ")",
            "!",
            "!=",
            "==",
            "a in",
            "a notin (",
            "é=ü",
            "in",
            "notin in (in)",
            "a,,b",
            "\u{0}",
            "a=\u{7f}",
        ] {
            let _ = LabelSelector::parse(s);
            let _ = FieldSelector::parse(s);
        }
        // Keywords are values inside a set, as upstream.
        assert!(LabelSelector::parse("a in (in,notin)").is_ok());
    }
}
