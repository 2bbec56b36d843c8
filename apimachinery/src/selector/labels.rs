//! Label selectors: the [`Labels`] lookup trait, one [`Requirement`]
//! (`key op values`, validated like upstream `labels.NewRequirement`), and
//! [`LabelSelector`], parsed from the query string or built from a
//! `metav1.LabelSelector` object, with upstream's canonical string form.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::Value;

use super::SelectorError;
use super::parser::parse_requirements;
use crate::goquote::go_quote;
use crate::names::{is_qualified_name, is_valid_label_value};

/// Anything that can answer "what is the value of label `key`?".
///
/// Implemented for `BTreeMap<String, String>`, `HashMap<String, String>`,
/// `serde_json::Map` and `serde_json::Value` (an object of labels; `null` or a
/// missing `metadata.labels` is the empty set, non-string values are ignored).
pub trait Labels {
    /// The value of label `key`, or `None` when the label is not set.
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
        let mut errs = Errors::default();
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
            // Kept sorted, as upstream's sets are: a set of any size matches
            // by binary search, so a list costs O(objects x log values).
            let mut values = values;
            values.sort_unstable();
            values.dedup();
            Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            })
        } else {
            Err(SelectorError(errs.message()))
        }
    }

    /// The label key the requirement tests.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How the key's value is compared (`in`, `notin`, `exists`, ...).
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and deduplicated.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let got = labels.get_label(&self.key);
        let has = |v: &str| self.values.binary_search_by(|x| x.as_str().cmp(v)).is_ok();
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
        // Sorted already, as upstream prints them.
        f.write_str(&self.values.join(","))?;
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
        let mut reqs = parse_requirements(s).map_err(SelectorError)?;
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

pub(super) fn validate_label_key(key: &str, path: &str) -> Option<String> {
    let errs = is_qualified_name(key);
    (!errs.is_empty()).then(|| {
        format!(
            "{path}: Invalid value: {}: {}",
            go_quote(key),
            errs.join("; ")
        )
    })
}

/// How much of an aggregate message lists errors beyond the first: each bad
/// value's error repeats the key, so a 400 KiB set of three-byte bad values
/// would otherwise make a message of tens of megabytes.
pub const MAX_AGGREGATE_BYTES: usize = 16 * 1024;

/// Errors collected for upstream's `utilerrors.Aggregate` message: one error
/// alone, else `[a, b]` with duplicates dropped. Past [`MAX_AGGREGATE_BYTES`]
/// the rest are counted, not kept (`..., and 123 more errors]`), so the work
/// and memory of a refusal stay bounded whatever the number of bad values.
#[derive(Default)]
struct Errors {
    listed: Vec<String>,
    seen: BTreeSet<String>,
    bytes: usize,
    more: usize,
}

impl Errors {
    fn push(&mut self, e: String) {
        if !self.listed.is_empty() && self.bytes + e.len() > MAX_AGGREGATE_BYTES {
            self.more += 1;
        } else if self.seen.insert(e.clone()) {
            self.bytes += e.len() + 2;
            self.listed.push(e);
        }
    }

    fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    fn message(mut self) -> String {
        if self.listed.len() == 1 && self.more == 0 {
            return self.listed.pop().unwrap_or_default();
        }
        let shown = self.listed.join(", ");
        match self.more {
            0 => format!("[{shown}]"),
            n => format!("[{shown}, and {n} more errors]"),
        }
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
