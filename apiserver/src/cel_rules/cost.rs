//! A static estimate of a rule's worst-case cost, in the spirit of cel-go's
//! `checker.Cost` that apiextensions runs on every rule when a CRD is written:
//! every value a rule can reach is bounded by its schema (`maxItems`,
//! `maxProperties`, `maxLength`, else what fits in a request), and the
//! estimate is the cost of the most expensive path through the expression
//! with every collection at its bound.
//!
//! The units follow cel-go's loosely: selecting a field or calling a function
//! costs 1; traversing a string costs a tenth of its length; traversing a
//! list costs its length; a comprehension (`all`, `exists`, `exists_one`,
//! `map`, `filter`) costs its range's size times the cost of its body, so
//! nested comprehensions multiply. The figures differ from cel-go's in
//! detail (it prices each overload separately): a rule near the budget may be
//! refused here and accepted upstream, or the reverse.

use std::collections::HashMap;

use cel::common::ast::{Expr, IdedExpr, LiteralValue};

use super::schema::{MAX_REQUEST_BYTES, Node};

/// What the estimate knows of a value: its schema node, if any, and the most
/// elements, entries or bytes it can hold (1 for a scalar).
#[derive(Clone, Copy)]
struct Ty<'a> {
    node: Option<&'a Node>,
    size: u64,
}

impl<'a> Ty<'a> {
    fn of(node: &'a Node) -> Ty<'a> {
        Ty {
            node: Some(node),
            size: node.max_size(),
        }
    }
    fn scalar() -> Ty<'a> {
        Ty {
            node: None,
            size: 1,
        }
    }
    /// A value the schema does not describe: as big as a request.
    fn unknown() -> Ty<'a> {
        Ty {
            node: None,
            size: MAX_REQUEST_BYTES,
        }
    }
    /// The element of a list (or key of a map) this value holds.
    fn element(&self) -> Ty<'a> {
        match self.node {
            Some(n) if n.typ == "array" => n.items.as_deref().map_or(Ty::unknown(), Ty::of),
            Some(n) if n.typ == "object" => Ty {
                node: None,
                size: n.max_size().min(MAX_REQUEST_BYTES),
            },
            _ => Ty::unknown(),
        }
    }
}

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
        Expr::Literal(LiteralValue::String(s)) => (
            0,
            Ty {
                node: None,
                size: s.inner().len() as u64,
            },
        ),
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
            let mut c = 1u64;
            for el in &l.elements {
                c = c.saturating_add(walk(el, scope).0);
            }
            (
                c,
                Ty {
                    node: None,
                    size: l.elements.len() as u64,
                },
            )
        }
        Expr::Map(m) => {
            let mut c = 1u64;
            for en in &m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &en.expr {
                    c = c
                        .saturating_add(walk(&me.key, scope).0)
                        .saturating_add(walk(&me.value, scope).0);
                }
            }
            (
                c,
                Ty {
                    node: None,
                    size: m.entries.len() as u64,
                },
            )
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
            // range's size; the others' are scalars.
            let accu = if matches!(c.accu_init.expr, Expr::List(_)) {
                Ty {
                    node: None,
                    size: init.size.max(n),
                }
            } else {
                Ty::scalar()
            };
            scope.insert(c.accu_var.clone(), accu);
            let body = walk(&c.loop_cond, scope)
                .0
                .saturating_add(walk(&c.loop_step, scope).0);
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
                    let ty = if call.func_name == "_?_:_" {
                        args.get(1).copied().unwrap_or_else(Ty::scalar)
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
                        None => Ty::unknown(),
                    };
                    (0, ty)
                }
                "_+_" => {
                    let total: u64 = args.iter().fold(0u64, |s, t| s.saturating_add(t.size));
                    // Appending a list literal (how `map` and `filter`
                    // accumulate) is priced per element added, not per
                    // element already there.
                    let append = call.args.iter().any(|a| matches!(a.expr, Expr::List(_)));
                    (
                        if append { 1 } else { tenth(total) },
                        Ty {
                            node: None,
                            size: total,
                        },
                    )
                }
                "@in" => (args.get(1).map_or(1, |t| t.size), Ty::scalar()),
                "matches" | "find" => (tenth(rs).saturating_mul(a1.div_ceil(4)), Ty::scalar()),
                "findAll" => (
                    tenth(rs).saturating_mul(a1.div_ceil(4)),
                    Ty {
                        node: None,
                        size: rs,
                    },
                ),
                // Each element of one looked up in the other.
                "sets.contains" | "sets.intersects" | "sets.equivalent" => {
                    let a = args.first().map_or(1, |t| t.size);
                    let b = args.get(1).map_or(1, |t| t.size);
                    (a.saturating_mul(b).saturating_mul(2), Ty::scalar())
                }
                "contains" | "startsWith" | "endsWith" | "charAt" | "lowerAscii" | "upperAscii"
                | "trim" | "substring" | "replace" | "format" | "strings.quote" => {
                    let size = rs.saturating_add(a1);
                    (
                        tenth(size),
                        Ty {
                            node: None,
                            size: rs.max(size),
                        },
                    )
                }
                "split" => (
                    tenth(rs),
                    Ty {
                        node: None,
                        size: rs,
                    },
                ),
                "join" => (rs, Ty::unknown()),
                "indexOf" | "lastIndexOf" => {
                    // On a string a tenth of its length; on a list its length.
                    let is_list = recv.and_then(|t| t.node).is_some_and(|n| n.typ == "array");
                    (
                        if is_list {
                            rs
                        } else {
                            tenth(rs.saturating_add(a1))
                        },
                        Ty::scalar(),
                    )
                }
                "isSorted" | "sum" | "min" | "max" | "flatten" | "slice" | "reverse" => {
                    let elem = recv.map_or(Ty::scalar(), |t| t.element());
                    let ty = if matches!(call.func_name.as_str(), "min" | "max") {
                        elem
                    } else {
                        Ty {
                            node: recv.and_then(|t| t.node),
                            size: rs,
                        }
                    };
                    (rs, ty)
                }
                // n log n, priced as n²: the estimate errs high.
                "sort" | "distinct" | "@sortByAssociatedKeys" => (
                    rs.saturating_mul(rs),
                    Ty {
                        node: recv.and_then(|t| t.node),
                        size: rs,
                    },
                ),
                "lists.range" => (1, Ty::unknown()),
                _ => (0, Ty::scalar()),
            };
            (cost.saturating_add(extra), ty)
        }
    }
}
