//! One `x-kubernetes-validations` entry compiled: its program, message,
//! reason, field path and estimated cost, or the causes that refuse the CRD
//! (shaped as apiextensions' `ValidateCustomResourceDefinition` reports them).

use cel::Program;
use cel::common::ast::{Expr, IdedExpr};
use serde_json::Value;

use super::functions::{KNOWN, env};
use super::guard::Guarded;
use super::schema::Node;
use crate::cause::Cause;

/// How a failed rule is reported (`reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// A compiled rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) source: String,
    pub(crate) program: Guarded,
    pub(crate) message: String,
    pub(crate) message_expression: Option<Guarded>,
    pub(crate) reason: Reason,
    /// `fieldPath` as a suffix of the node's path, e.g. `.minReplicas` or `[key]`.
    pub(crate) field_path: String,
    /// Uses `oldSelf`: evaluated on update only (unless `optional_old_self`).
    pub(crate) transition: bool,
    pub(crate) optional_old_self: bool,
    /// The static estimate ([`super::cost`]); also what one evaluation is
    /// charged against the request's runtime budget.
    pub(crate) cost: u64,
}

fn invalid(field: String, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message,
        field,
    }
}

/// Go's `%#v` of upstream's `apiextensions.ValidationRule`, the value its
/// compile errors print.
fn go_value(raw: &Value) -> String {
    let s = |k: &str| format!("{:?}", raw[k].as_str().unwrap_or(""));
    let reason = match raw["reason"].as_str() {
        Some(r) => format!("\"{r}\""),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".into(),
    };
    let old = match raw["optionalOldSelf"].as_bool() {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".into(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{old}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath")
    )
}

/// `ERROR: <input>:line:col: what`, cel-go's shape, at the node `id`.
fn at(program: &Program, id: u64, what: &str) -> String {
    let src = &program.source_info().source;
    let (line, col) = match program.source_info().offset_for(id) {
        Some((start, _)) => {
            let before = &src[..(start as usize).min(src.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            (line, col)
        }
        None => (1, 1),
    };
    format!("ERROR: <input>:{line}:{col}: {what}")
}

/// What the checker finds in a parsed program: undeclared variables and
/// functions, fields the schema cannot have, and whether `oldSelf` is used.
struct Check<'a> {
    program: &'a Program,
    errors: Vec<String>,
    uses_old_self: bool,
}

impl Check<'_> {
    /// Returns the schema node the expression evaluates to, when known.
    fn walk<'n>(
        &mut self,
        e: &IdedExpr,
        scope: &mut Vec<String>,
        node: Option<&'n Node>,
    ) -> Option<&'n Node> {
        match &e.expr {
            Expr::Ident(name) => {
                if scope.iter().any(|v| v == name) {
                    return None;
                }
                match name.as_str() {
                    "self" => return node,
                    "oldSelf" => {
                        self.uses_old_self = true;
                        return node;
                    }
                    "int" | "uint" | "double" | "bool" | "string" | "bytes" | "list" | "map"
                    | "null_type" | "type" | "optional_type" => {}
                    _ => self.errors.push(at(
                        self.program,
                        e.id,
                        &format!("undeclared reference to '{name}' (in container '')"),
                    )),
                }
                None
            }
            Expr::Select(s) => match self.walk(&s.operand, scope, node) {
                Some(p) if p.lacks_field(&s.field) => {
                    self.errors.push(at(
                        self.program,
                        e.id,
                        &format!("undefined field '{}'", s.field),
                    ));
                    None
                }
                Some(p) if !s.test => p.field(&s.field),
                _ => None,
            },
            Expr::Call(c) => {
                let namespace = match c.target.as_deref().map(|t| &t.expr) {
                    Some(Expr::Ident(ns))
                        if ["math", "strings", "lists", "optional", "sets"]
                            .contains(&ns.as_str())
                            && !scope.iter().any(|v| v == ns) =>
                    {
                        Some(ns.clone())
                    }
                    _ => None,
                };
                let name = match &namespace {
                    Some(ns) => format!("{ns}.{}", c.func_name),
                    None => c.func_name.clone(),
                };
                let operator = name.starts_with('_')
                    || name.starts_with('@')
                    || name.starts_with("!_")
                    || name.starts_with("-_")
                    || name.contains(".@");
                if !operator && !KNOWN.contains(&name.as_str()) {
                    let what = format!("undeclared reference to '{name}' (in container '')");
                    self.errors.push(at(self.program, e.id, &what));
                }
                if namespace.is_none()
                    && let Some(t) = &c.target
                {
                    self.walk(t, scope, node);
                }
                for a in &c.args {
                    self.walk(a, scope, node);
                }
                None
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.walk(el, scope, node);
                }
                None
            }
            Expr::Map(m) => {
                for en in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &en.expr {
                        self.walk(&me.key, scope, node);
                        self.walk(&me.value, scope, node);
                    }
                }
                None
            }
            Expr::Struct(s) => {
                self.errors.push(at(
                    self.program,
                    e.id,
                    &format!(
                        "undeclared reference to '{}' (in container '')",
                        s.type_name
                    ),
                ));
                None
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, scope, node);
                self.walk(&c.accu_init, scope, node);
                let depth = scope.len();
                scope.push(c.iter_var.clone());
                scope.extend(c.iter_var2.clone());
                scope.push(c.accu_var.clone());
                self.walk(&c.loop_cond, scope, node);
                self.walk(&c.loop_step, scope, node);
                self.walk(&c.result, scope, node);
                scope.truncate(depth);
                None
            }
            Expr::Literal(_) | Expr::Unspecified => None,
        }
    }
}

/// Parses and checks one expression; `Err` is upstream's detail text.
fn compile_expr(source: &str, node: &Node) -> Result<(Program, bool), String> {
    let program = env()
        .compile(source)
        .map_err(|e| format!("compilation failed: {e}"))?;
    let mut check = Check {
        program: &program,
        errors: vec![],
        uses_old_self: false,
    };
    check.walk(program.expression(), &mut vec![], Some(node));
    if !check.errors.is_empty() {
        return Err(format!("compilation failed: {}", check.errors.join("\n")));
    }
    let old = check.uses_old_self;
    Ok((program, old))
}

/// Normalises a rule's `fieldPath` (`.a.b`, `.a['k']`, `.a[0]` is refused
/// as upstream) against `node`, into the suffix printed after the node's path.
fn field_path(fp: &str, node: &Node) -> Result<String, String> {
    let mut out = String::new();
    let mut cur = Some(node);
    let mut rest = fp;
    if rest.is_empty() {
        return Ok(out);
    }
    while !rest.is_empty() {
        let (name, tail) = if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unclosed bracket")?;
            (&r[..end], &r[end + 2..])
        } else {
            return Err("expected a '.' or \"['\"".into());
        };
        if name.is_empty() {
            return Err("empty field name".into());
        }
        let next = cur.and_then(|n| n.field(name));
        if cur.is_some_and(|n| n.lacks_field(name))
            || next.is_none() && cur.is_some_and(|n| !n.open)
        {
            return Err(format!("field {name} does not exist"));
        }
        if cur.is_some_and(|n| n.properties.contains_key(name)) || cur.is_none_or(|n| n.open) {
            out.push('.');
            out.push_str(name);
        } else {
            out.push_str(&format!("[{name}]"));
        }
        cur = next;
        rest = tail;
    }
    Ok(out)
}

impl Rule {
    /// Compiles entry `i` of a node's rules; `path` is the node's path in the
    /// CRD (`spec.versions[0].schema.openAPIV3Schema.properties[spec]`).
    pub(crate) fn compile(
        raw: &Value,
        i: usize,
        path: &str,
        node: &Node,
    ) -> Result<Rule, Vec<Cause>> {
        let base = format!("{path}.x-kubernetes-validations[{i}]");
        let mut causes = Vec::new();
        let source = raw["rule"].as_str().unwrap_or("").to_string();
        let compiled = if source.trim().is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: format!("{base}.rule"),
            });
            None
        } else {
            match compile_expr(&source, node) {
                Ok(p) => Some(p),
                Err(detail) => {
                    causes.push(invalid(
                        format!("{base}.rule"),
                        format!("Invalid value: {}: {detail}", go_value(raw)),
                    ));
                    None
                }
            }
        };
        let message_expression = match raw["messageExpression"].as_str() {
            Some(m) if !m.trim().is_empty() => match compile_expr(m, node) {
                Ok((p, _)) => Some(p),
                Err(detail) => {
                    causes.push(invalid(
                        format!("{base}.messageExpression"),
                        format!("Invalid value: {}: message{detail}", go_value(raw))
                            .replace("messagecompilation", "messageExpression compilation"),
                    ));
                    None
                }
            },
            _ => None,
        };
        let reason = match raw["reason"].as_str() {
            None | Some("FieldValueInvalid") => Reason::Invalid,
            Some("FieldValueForbidden") => Reason::Forbidden,
            Some("FieldValueRequired") => Reason::Required,
            Some("FieldValueDuplicate") => Reason::Duplicate,
            Some(other) => {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!(
                        "Unsupported value: \"{other}\": supported values: \"FieldValueDuplicate\", \
                         \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                    ),
                    field: format!("{base}.reason"),
                });
                Reason::Invalid
            }
        };
        let fp = raw["fieldPath"].as_str().unwrap_or("");
        let field_path = field_path(fp, node).unwrap_or_else(|e| {
            causes.push(invalid(
                format!("{base}.fieldPath"),
                format!("Invalid value: \"{fp}\": fieldPath must be a valid path: {e}"),
            ));
            String::new()
        });
        let message = raw["message"].as_str().unwrap_or("").to_string();
        if message.contains('\n') {
            causes.push(invalid(
                format!("{base}.message"),
                format!(
                    "Invalid value: {:?}: message must not contain line breaks",
                    message
                ),
            ));
        }
        let optional_old_self = raw["optionalOldSelf"] == true;
        let Some((program, transition)) = compiled else {
            return Err(causes);
        };
        if optional_old_self && !transition {
            causes.push(invalid(
                format!("{base}.optionalOldSelf"),
                "Invalid value: true: may not be set if oldSelf is not used in rule".into(),
            ));
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        let mut cost = super::cost::estimate(program.expression(), node);
        if let Some(m) = &message_expression {
            cost = cost.saturating_add(super::cost::estimate(m.expression(), node));
        }
        let guarded = |p: &Program, field: &str| {
            Guarded::new(p).map_err(|e| {
                vec![invalid(
                    format!("{base}.{field}"),
                    format!("Invalid value: {}: compilation failed: {e}", go_value(raw)),
                )]
            })
        };
        let program = guarded(&program, "rule")?;
        let message_expression = match &message_expression {
            Some(m) => Some(guarded(m, "messageExpression")?),
            None => None,
        };
        Ok(Rule {
            source,
            program,
            message,
            message_expression,
            reason,
            field_path,
            transition,
            optional_old_self,
            cost,
        })
    }
}
