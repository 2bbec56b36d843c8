//! A static estimate of a rule's worst-case cost, in the spirit of cel-go's
//! `checker.Cost` that apiextensions runs on every rule when a CRD is written:
//! every value a rule can reach is bounded by its schema (`maxItems`,
//! `maxProperties`, `maxLength`, else what fits in a request), and the
//! estimate is the cost of the most expensive path through the expression
//! with every collection at its bound.
//!
//! The units follow cel-go's loosely: selecting a field or calling a function
//! costs 1; traversing a string costs a tenth of its length; traversing or
//! copying a list costs its length; a comprehension (`all`, `exists`,
//! `exists_one`, `map`, `filter`, and the `map` `sortBy` expands to) costs
//! its range's size times the cost of its body, so nested comprehensions
//! multiply. The size of what an expression evaluates to is tracked too:
//! a conditional is the larger of its branches, `map` a list of its body's
//! results, `replace` as long as replacing `''` makes it, `flatten` its
//! elements' elements, `+` both operands; a function building a value costs
//! its size (a written `+` included, as this crate copies: only the
//! accumulation of `map` and `filter` is in place). The figures differ from
//! cel-go's in detail (it prices each overload separately): a rule near the
//! budget may be refused here and accepted upstream, or the reverse.

use std::collections::HashMap;

use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, LiteralValue};

use super::schema::{MAX_REQUEST_BYTES, Node};

/// What the estimate knows of a value: its schema node, if any, the most
/// elements, entries or bytes it can hold (1 for a scalar), for a list the
/// expression built, the most one of its elements holds, and whether it is a
/// string.
#[derive(Clone, Copy)]
struct Ty<'a> {
    node: Option<&'a Node>,
    size: u64,
    elem: Option<u64>,
    text: bool,
}

impl<'a> Ty<'a> {
    fn of(node: &'a Node) -> Ty<'a> {
        Ty {
            node: Some(node),
            size: node.max_size(),
            elem: None,
            text: node.typ == "string",
        }
    }
    fn sized(size: u64) -> Ty<'a> {
        Ty {
            node: None,
            size,
            elem: None,
            text: false,
        }
    }
    fn string(size: u64) -> Ty<'a> {
        Ty {
            text: true,
            ..Ty::sized(size)
        }
    }
    fn scalar() -> Ty<'a> {
        Ty::sized(1)
    }
    /// A value the schema does not describe: as big as a request.
    fn unknown() -> Ty<'a> {
        Ty::sized(MAX_REQUEST_BYTES)
    }
    /// The element of a list (or key of a map) this value holds.
    fn element(&self) -> Ty<'a> {
        match self.node {
            Some(n) if n.typ == "array" => n.items.as_deref().map_or(Ty::unknown(), Ty::of),
            Some(n) if n.typ == "object" => Ty::sized(n.max_size().min(MAX_REQUEST_BYTES)),
            _ => self.elem.map_or(Ty::unknown(), Ty::sized),
        }
    }
    /// The larger of two values one expression may evaluate to (the two
    /// branches of a conditional).
    fn max(self, other: Ty<'a>) -> Ty<'a> {
        let same = match (self.node, other.node) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        };
        let empty = |t: &Ty| t.size == 0 && t.node.is_none();
        if same || empty(&other) {
            return self;
        }
        if empty(&self) {
            return other;
        }
        Ty {
            node: None,
            size: self.size.max(other.size),
            elem: Some(self.element().size.max(other.element().size)),
            text: self.text || other.text,
        }
    }
    /// What copying this value costs: a tenth of a string's bytes, a
    /// collection's elements; nothing for a scalar.
    fn copy_cost(&self) -> u64 {
        if self.text {
            tenth(self.size)
        } else if self.size > 1 {
            self.size
        } else {
            0
        }
    }
}

/// The loop step of a `map` or `filter` comprehension (the crate appends to
/// its accumulator in place): its guard, if any, and the appended element.
fn append_step(c: &ComprehensionExpr) -> Option<(Option<&IdedExpr>, &[IdedExpr])> {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    // `accu + [items]`: the items.
    fn items<'e>(e: &'e IdedExpr, is_accu: &dyn Fn(&IdedExpr) -> bool) -> Option<&'e [IdedExpr]> {
        match &e.expr {
            Expr::Call(call) if call.func_name == "_+_" && call.target.is_none() => {
                match call.args.as_slice() {
                    [lhs, rhs] if is_accu(lhs) => match &rhs.expr {
                        Expr::List(l) => Some(&l.elements),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        }
    }
    if !is_accu(&c.result) || !matches!(c.loop_cond.expr, Expr::Literal(_)) {
        return None;
    }
    match &c.loop_step.expr {
        Expr::Call(call) if call.func_name == "_?_:_" && call.target.is_none() => {
            match call.args.as_slice() {
                [guard, step, otherwise] if is_accu(otherwise) => {
                    Some((Some(guard), items(step, &is_accu)?))
                }
                _ => None,
            }
        }
        _ => Some((None, items(&c.loop_step, &is_accu)?)),
    }
}

/// n·⌈log₂ n⌉: the comparisons of a sort.
fn n_log_n(n: u64) -> u64 {
    n.saturating_mul(u64::from(64 - n.leading_zeros()).max(1))
}

/// What compiling a regex pattern that is not a literal is priced: the
/// pattern is compiled (or found in a small cache) on every call, and a
/// compiled pattern is bounded by `guard::REGEX_SIZE_LIMIT`.
pub(crate) const REGEX_COMPILE_COST: u64 = 5_000;

/// The most elements `lists.range` makes (the `cel` crate's limit).
const LISTS_RANGE_MAX: u64 = 1_000_000;

/// A tenth of `n`, rounded up: cel-go's string traversal factor.
fn tenth(n: u64) -> u64 {
    n.div_ceil(10)
}

/// The estimated cost of `expr` evaluated with `self` (and `oldSelf`) a
/// value of `node`. Saturates rather than overflows.
pub(crate) fn estimate(expr: &IdedExpr, node: &Node) -> u64 {
    let mut scope = HashMap::new();
    scope.insert("self".to_string(), Ty::of(node));
    scope.insert("oldSelf".to_string(), Ty::of(node));
    walk(expr, &mut scope).0
}

fn walk<'a>(e: &IdedExpr, scope: &mut HashMap<String, Ty<'a>>) -> (u64, Ty<'a>) {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => (0, Ty::string(s.inner().len() as u64)),
        Expr::Literal(_) | Expr::Unspecified => (0, Ty::scalar()),
        Expr::Ident(name) => (1, scope.get(name).copied().unwrap_or_else(Ty::scalar)),
        Expr::Select(s) => {
            let (c, t) = walk(&s.operand, scope);
            let ty = match t.node {
                Some(n) => n.field(&s.field).map_or(Ty::unknown(), Ty::of),
                None => Ty::unknown(),
            };
            (c.saturating_add(1), if s.test { Ty::scalar() } else { ty })
        }
        Expr::List(l) => {
            // Each element is copied into the new list.
            let (mut c, mut elem) = (1u64, 0u64);
            for el in &l.elements {
                let (ec, et) = walk(el, scope);
                c = c.saturating_add(ec).saturating_add(et.copy_cost());
                elem = elem.max(et.size);
            }
            (
                c,
                Ty {
                    elem: Some(elem),
                    ..Ty::sized(l.elements.len() as u64)
                },
            )
        }
        Expr::Map(m) => {
            let mut c = 1u64;
            for en in &m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &en.expr {
                    let (kc, kt) = walk(&me.key, scope);
                    let (vc, vt) = walk(&me.value, scope);
                    c = c
                        .saturating_add(kc)
                        .saturating_add(vc)
                        .saturating_add(kt.copy_cost())
                        .saturating_add(vt.copy_cost());
                }
            }
            (c, Ty::sized(m.entries.len() as u64))
        }
        Expr::Struct(_) => (1, Ty::scalar()),
        Expr::Comprehension(c) => {
            let (range_cost, range) = walk(&c.iter_range, scope);
            let (init_cost, init) = walk(&c.accu_init, scope);
            let n = range.size;
            let saved: Vec<(String, Option<Ty<'a>>)> = [&c.iter_var, &c.accu_var]
                .into_iter()
                .chain(c.iter_var2.as_ref())
                .map(|v| (v.clone(), scope.get(v).copied()))
                .collect();
            let elem = range.element();
            scope.insert(c.iter_var.clone(), elem);
            if let Some(v2) = &c.iter_var2 {
                // Two-variable form: (index, element) or (key, value).
                let value = match range.node {
                    Some(nd) if nd.typ == "object" => {
                        nd.additional.as_deref().map_or(Ty::unknown(), Ty::of)
                    }
                    _ => elem,
                };
                scope.insert(c.iter_var.clone(), Ty::scalar());
                scope.insert(v2.clone(), value);
            }
            // The accumulator of `map`/`filter` (a list) grows to the
            // range's size; the others' start as their initial value (a
            // scalar for `all`, `exists`, `exists_one`; the bound list for
            // the binding `sortBy` expands to).
            let appended = append_step(c);
            let accu = if matches!(c.accu_init.expr, Expr::List(_)) {
                Ty {
                    elem: None,
                    ..Ty::sized(init.size.max(n))
                }
            } else {
                init
            };
            scope.insert(c.accu_var.clone(), accu);
            let mut body = walk(&c.loop_cond, scope).0;
            match appended {
                // `map` and `filter` append in place: each step costs its
                // guard and the element it copies in, not the list so far.
                Some((guard, items)) => {
                    body = body.saturating_add(1);
                    if let Some(g) = guard {
                        body = body.saturating_add(walk(g, scope).0);
                    }
                    let mut elem = 0u64;
                    for it in items {
                        let (ic, it) = walk(it, scope);
                        body = body.saturating_add(ic).saturating_add(it.copy_cost());
                        elem = elem.max(it.size);
                    }
                    scope.insert(
                        c.accu_var.clone(),
                        Ty {
                            elem: Some(elem),
                            ..accu
                        },
                    );
                }
                None => body = body.saturating_add(walk(&c.loop_step, scope).0),
            }
            let (result_cost, result) = walk(&c.result, scope);
            for (k, v) in saved {
                match v {
                    Some(t) => scope.insert(k, t),
                    None => scope.remove(&k),
                };
            }
            let cost = range_cost
                .saturating_add(init_cost)
                .saturating_add(n.saturating_mul(body))
                .saturating_add(result_cost);
            (cost, result)
        }
        Expr::Call(call) => {
            let mut cost = 1u64;
            let target = call.target.as_ref().map(|t| walk(t, scope));
            if let Some((c, _)) = target {
                cost = cost.saturating_add(c);
            }
            let mut args = Vec::with_capacity(call.args.len());
            for a in &call.args {
                let (c, t) = walk(a, scope);
                cost = cost.saturating_add(c);
                args.push(t);
            }
            let recv = target.map(|(_, t)| t).or_else(|| args.first().copied());
            let rs = recv.map_or(1, |t| t.size);
            let a1 = args
                .get(if target.is_some() { 0 } else { 1 })
                .map_or(1, |t| t.size);
            let (extra, ty) = match call.func_name.as_str() {
                "_&&_"
                | "_||_"
                | "!_"
                | "_?_:_"
                | "@not_strictly_false"
                | "size"
                | "int"
                | "uint"
                | "double"
                | "bool"
                | "type"
                | "dyn" => {
                    // A conditional may be either branch: the larger.
                    let ty = if call.func_name == "_?_:_" {
                        match (args.get(1), args.get(2)) {
                            (Some(a), Some(b)) => a.max(*b),
                            _ => Ty::scalar(),
                        }
                    } else {
                        Ty::scalar()
                    };
                    (0, ty)
                }
                "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => {
                    let sz = args.iter().map(|t| t.size).min().unwrap_or(1);
                    // Strings compare bytewise (a tenth); lists and maps
                    // element by element.
                    let collection = args.iter().any(|t| {
                        t.node
                            .is_some_and(|n| n.typ == "array" || n.typ == "object")
                    });
                    (if collection { sz } else { tenth(sz) }, Ty::scalar())
                }
                "_[_]" | "_[?_]" => {
                    let ty = match recv.and_then(|t| t.node) {
                        Some(n) if n.typ == "array" => {
                            n.items.as_deref().map_or(Ty::unknown(), Ty::of)
                        }
                        Some(n) => match call.args.get(1).map(|a| &a.expr) {
                            Some(Expr::Literal(LiteralValue::String(k))) => {
                                n.field(k.inner()).map_or(Ty::unknown(), Ty::of)
                            }
                            _ => n.additional.as_deref().map_or(Ty::unknown(), Ty::of),
                        },
                        None => recv.map_or(Ty::unknown(), |t| t.element()),
                    };
                    (0, ty)
                }
                "_+_" => {
                    // A `+` written in a rule copies both operands into a
                    // new string or list (`map` and `filter` appending in
                    // place are priced with their comprehension).
                    let total: u64 = args.iter().fold(0u64, |s, t| s.saturating_add(t.size));
                    let mut ty = args
                        .iter()
                        .copied()
                        .reduce(Ty::max)
                        .unwrap_or_else(Ty::scalar);
                    ty.size = total;
                    let cost = if ty.text {
                        tenth(total)
                    } else if total <= 2 {
                        1 // numbers
                    } else {
                        total
                    };
                    (cost, ty)
                }
                "@in" => (args.get(1).map_or(1, |t| t.size), Ty::scalar()),
                // Kubernetes' regex cost: a tenth of the string times a
                // quarter of the pattern; a pattern that is not a literal is
                // compiled when called, priced as [`REGEX_COMPILE_COST`].
                "matches" | "find" | "findAll" => {
                    let pattern = call.args.get(if target.is_some() { 0 } else { 1 });
                    let constant = pattern
                        .is_some_and(|p| matches!(p.expr, Expr::Literal(LiteralValue::String(_))));
                    let compile = if constant { 0 } else { REGEX_COMPILE_COST };
                    let ty = match call.func_name.as_str() {
                        "matches" => Ty::scalar(),
                        "find" => Ty::string(rs),
                        _ => Ty {
                            elem: Some(rs),
                            ..Ty::sized(rs)
                        },
                    };
                    (
                        tenth(rs)
                            .saturating_mul(a1.div_ceil(4))
                            .saturating_add(compile),
                        ty,
                    )
                }
                // Each element of one looked up in the other.
                "sets.contains" | "sets.intersects" | "sets.equivalent" => {
                    let a = args.first().map_or(1, |t| t.size);
                    let b = args.get(1).map_or(1, |t| t.size);
                    (a.saturating_mul(b).saturating_mul(2), Ty::scalar())
                }
                "contains" | "startsWith" | "endsWith" => {
                    (tenth(rs.saturating_add(a1)), Ty::scalar())
                }
                "charAt" | "lowerAscii" | "upperAscii" | "trim" | "substring" => {
                    (tenth(rs), Ty::string(rs))
                }
                "strings.quote" => {
                    let size = rs.saturating_mul(2).saturating_add(2);
                    (tenth(size), Ty::string(size))
                }
                // Replacing the empty string puts the replacement between
                // every two characters (and at both ends): the result is
                // at most len + (len + 1) × len(replacement).
                "replace" => {
                    let with = args.get(1).map_or(1, |t| t.size);
                    let size = rs.saturating_add(rs.saturating_add(1).saturating_mul(with));
                    (tenth(size), Ty::string(size))
                }
                // Each element, and the separator between two.
                "join" => {
                    let elem = recv.map_or(Ty::unknown(), |t| t.element()).size;
                    let sep = if call.args.is_empty() { 0 } else { a1 };
                    let size = rs.saturating_mul(elem.saturating_add(sep));
                    (tenth(size), Ty::string(size))
                }
                // `'%s and %d'.format([a, b])`: the format and the values.
                "format" => {
                    let values = args.first().copied().unwrap_or_else(Ty::scalar);
                    let size = rs.saturating_add(values.size.saturating_mul(values.element().size));
                    (tenth(size), Ty::string(size))
                }
                "split" => (
                    tenth(rs),
                    Ty {
                        elem: Some(rs),
                        ..Ty::sized(rs)
                    },
                ),
                "indexOf" | "lastIndexOf" => {
                    // On a string a tenth of its length; on a list its length.
                    let is_list = recv.is_some_and(|t| !t.text);
                    (
                        if is_list {
                            rs
                        } else {
                            tenth(rs.saturating_add(a1))
                        },
                        Ty::scalar(),
                    )
                }
                "isSorted" | "sum" => (rs, Ty::scalar()),
                "min" | "max" => (rs, recv.map_or(Ty::scalar(), |t| t.element())),
                "slice" | "reverse" => {
                    let ty = recv.unwrap_or_else(Ty::scalar);
                    (if ty.text { tenth(rs) } else { rs }, ty)
                }
                // Every element of every nested list, `depth` levels down
                // (1 when not given, at most 3 priced when not a literal).
                "flatten" => {
                    let depth = match call.args.first().map(|a| &a.expr) {
                        None => 1,
                        Some(Expr::Literal(LiteralValue::Int(d))) => (*d.inner()).clamp(0, 8),
                        Some(_) => 3,
                    };
                    let mut ty = recv.unwrap_or_else(Ty::scalar);
                    let mut size = ty.size;
                    for _ in 0..depth {
                        ty = ty.element();
                        size = size.saturating_mul(ty.size.max(1));
                    }
                    (
                        size,
                        Ty {
                            elem: Some(ty.size),
                            ..Ty::sized(size)
                        },
                    )
                }
                // n log n comparisons (`sortBy` also maps the list first,
                // priced with that comprehension).
                "sort" | "@sortByAssociatedKeys" => (n_log_n(rs), recv.unwrap_or_else(Ty::scalar)),
                // Each element compared with those kept before it.
                "distinct" => (rs.saturating_mul(rs), recv.unwrap_or_else(Ty::scalar)),
                // The list it builds: a literal's length, else the crate's
                // most (1,000,000).
                "lists.range" => {
                    let n = match call.args.first().map(|a| &a.expr) {
                        Some(Expr::Literal(LiteralValue::Int(n))) => {
                            (*n.inner()).clamp(0, LISTS_RANGE_MAX as i64) as u64
                        }
                        _ => LISTS_RANGE_MAX,
                    };
                    (
                        n,
                        Ty {
                            elem: Some(1),
                            ..Ty::sized(n)
                        },
                    )
                }
                _ => (0, Ty::scalar()),
            };
            (cost.saturating_add(extra), ty)
        }
    }
}
