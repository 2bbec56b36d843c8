//! What bounds a rule while it runs. The `cel` crate meters nothing, so the
//! bound on a rule's work is its static estimate (`cost.rs`) and this
//! backstop, for when the estimate is wrong:
//!
//! - **A deadline per write** ([`RUNTIME_DEADLINE`]): every loop step of
//!   every comprehension (`all`, `exists`, `exists_one`, `map`, `filter`,
//!   `sortBy`'s keys) first calls [`TICK`], which [`instrument`] inserts at
//!   compile time, and the functions below check it too. Past the deadline
//!   they fail, the rule's result is dropped, and the write is refused with
//!   upstream's budget error; no further rule runs.
//! - **Sizes checked before allocating**: `replace`, `join` and `flatten`
//!   (the functions whose result can be far larger than their arguments)
//!   compute their result's size first and fail over [`MAX_STRING`] bytes or
//!   [`MAX_LIST`] elements. `instrument` routes the calls to them.
//! - **Regexes**: a literal pattern is compiled once, with the rule (when
//!   the CRD is written); another is looked up in a small cache
//!   ([`REGEX_CACHE`] entries) and compiled on a miss, after a deadline
//!   check. Every compile is bounded by [`REGEX_SIZE_LIMIT`], so one compile
//!   (up to ~0.4 s) is what a write can overrun its deadline by.
//!
//! What runs inside one built-in function (`sort`, `distinct`, `+` on lists
//! and strings, `==` on big lists) is not interrupted: the estimate bounds it.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue};
use cel::common::value::CowVal;
use cel::{Context, ExecutionError, Program, Value};

use super::schema::MAX_REQUEST_BYTES;

/// What all rule evaluations of one write may take, wall time: ten times
/// the worst admitted rule in a debug build (~0.55 s), so that a loaded
/// machine does not refuse a legitimate write, and still a bound on a rule
/// the estimate underprices.
pub(crate) const RUNTIME_DEADLINE: Duration = Duration::from_secs(5);
/// The longest string `replace` and `join` make: what a request can hold.
pub(crate) const MAX_STRING: usize = MAX_REQUEST_BYTES as usize;
/// The longest list `flatten` makes.
pub(crate) const MAX_LIST: usize = MAX_REQUEST_BYTES as usize;
/// The most a compiled regex may take (the `regex` crate's default,
/// explicit): `^[\p{L}\p{N}]{1,63}$` needs most of it and compiles in about
/// 90 ms (release), `\p{L}{1000}` is refused after about 0.4 s. Lower limits
/// refuse such Unicode name patterns, which upstream (RE2) accepts.
pub(crate) const REGEX_SIZE_LIMIT: usize = 10 << 20;
/// How many patterns that are not literals stay compiled.
const REGEX_CACHE: usize = 64;

/// The per-loop-step check [`instrument`] inserts.
pub(crate) const TICK: &str = "@tick";

/// Upstream's runtime budget message (after `Invalid value: "<type>": `).
pub(crate) const BUDGET_MESSAGE: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// Compiled patterns by their source.
pub(crate) type Regexes = HashMap<String, Arc<regex::Regex>>;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static EXPIRED: Cell<bool> = const { Cell::new(false) };
    static REGEXES: RefCell<Option<Arc<Regexes>>> =
        const { RefCell::new(None) };
}

/// Fails once the running write's deadline has passed, or its client has
/// gone (and remembers it).
pub(crate) fn check(name: &str) -> Result<(), ExecutionError> {
    let past = EXPIRED.get()
        || DEADLINE.get().is_some_and(|d| Instant::now() >= d)
        || crate::cancel::cancelled();
    if past {
        EXPIRED.set(true);
        return Err(ExecutionError::function_error(name, BUDGET_MESSAGE));
    }
    Ok(())
}

/// [`TICK`]: `true` until the deadline.
pub(crate) fn tick<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    check(TICK)?;
    let b: Box<dyn cel::common::value::Val> = Value::Bool(true).try_into()?;
    Ok(CowVal::from(b))
}

pub(crate) fn string_size(name: &str, size: usize) -> Result<(), ExecutionError> {
    if size > MAX_STRING {
        return Err(ExecutionError::function_error(
            name,
            format!("result of {size} bytes is over the limit of {MAX_STRING}"),
        ));
    }
    Ok(())
}

pub(crate) fn list_size(name: &str, size: usize) -> Result<(), ExecutionError> {
    if size > MAX_LIST {
        return Err(ExecutionError::function_error(
            name,
            format!("result of more than {MAX_LIST} elements is over the limit"),
        ));
    }
    Ok(())
}

fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

type Recent = VecDeque<(String, Arc<regex::Regex>)>;

/// Recently compiled patterns that are not literals, oldest first.
static DYNAMIC: LazyLock<Mutex<Recent>> =
    LazyLock::new(|| Mutex::new(VecDeque::with_capacity(REGEX_CACHE)));

/// `pattern` compiled: the running rule's literal, a cached one, or
/// compiled now (and cached).
pub(crate) fn regex(pattern: &str) -> Result<Arc<regex::Regex>, String> {
    let literal = REGEXES.with_borrow(|r| r.as_ref().and_then(|m| m.get(pattern).cloned()));
    if let Some(re) = literal {
        return Ok(re);
    }
    {
        let cache = DYNAMIC.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, re)) = cache.iter().find(|(p, _)| p == pattern) {
            return Ok(re.clone());
        }
    }
    let re = Arc::new(compile_regex(pattern)?);
    let mut cache = DYNAMIC.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= REGEX_CACHE {
        cache.pop_front();
    }
    cache.push_back((pattern.to_string(), re.clone()));
    Ok(re)
}

/// A compiled expression as it runs: rewritten by [`instrument`], with its
/// literal regex patterns compiled.
#[derive(Debug)]
pub(crate) struct Guarded {
    expr: IdedExpr,
    regexes: Arc<Regexes>,
}

/// How one evaluation ended.
pub(crate) struct Outcome {
    pub(crate) result: Result<Value, ExecutionError>,
    /// The deadline passed: `result` is not to be trusted (an error inside
    /// `all` may be absorbed by a later `false`).
    pub(crate) expired: bool,
}

impl Guarded {
    /// `program` instrumented; `Err` names a literal pattern that does not
    /// compile (or compiles over [`REGEX_SIZE_LIMIT`]).
    pub(crate) fn new(program: &Program) -> Result<Guarded, String> {
        let mut expr = program.expression().clone();
        let mut literals = Vec::new();
        instrument(&mut expr, &mut literals);
        let mut regexes = HashMap::new();
        for p in literals {
            if let std::collections::hash_map::Entry::Vacant(v) = regexes.entry(p) {
                let re = compile_regex(v.key())
                    .map_err(|e| format!("invalid regex {:?}: {e}", v.key()))?;
                v.insert(Arc::new(re));
            }
        }
        Ok(Guarded {
            expr,
            regexes: Arc::new(regexes),
        })
    }

    /// Runs with `ctx` until `deadline`.
    pub(crate) fn execute(&self, ctx: &Context, deadline: Instant) -> Outcome {
        DEADLINE.set(Some(deadline));
        EXPIRED.set(false);
        REGEXES.set(Some(self.regexes.clone()));
        let result = Value::resolve(&self.expr, ctx);
        let expired = EXPIRED.get() || Instant::now() >= deadline;
        DEADLINE.set(None);
        EXPIRED.set(false);
        REGEXES.set(None);
        Outcome { result, expired }
    }
}

/// `TICK() ? e : null`: `e`, once the deadline is checked. The inserted
/// nodes reuse `e`'s id: ids only place errors in the source.
fn ticked(e: IdedExpr) -> IdedExpr {
    let id = e.id;
    let tick = IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: TICK.into(),
            target: None,
            args: vec![],
        }),
    };
    let null = IdedExpr {
        id,
        expr: Expr::Literal(LiteralValue::Null),
    };
    IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: "_?_:_".into(),
            target: None,
            args: vec![tick, e, null],
        }),
    }
}

fn take(e: &mut IdedExpr) -> IdedExpr {
    std::mem::replace(
        e,
        IdedExpr {
            id: e.id,
            expr: Expr::Unspecified,
        },
    )
}

/// Rewrites a parsed rule so that it can be stopped and its big results
/// refused (see the module doc): a [`TICK`] at the start of every loop step,
/// and `replace`, `matches`, `join` and `flatten` calls routed to the
/// checked `@replace`, `@matches`, `@join` and `@flatten`. The loop steps
/// keep the shapes the interpreter recognises (`@result && p`,
/// `@result + [e]`, `g ? @result + [e] : @result`): the tick goes inside.
/// Collects the literal regex patterns into `literals`.
pub(crate) fn instrument(e: &mut IdedExpr, literals: &mut Vec<String>) {
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(t) = call.target.as_deref_mut() {
                instrument(t, literals);
            }
            for a in &mut call.args {
                instrument(a, literals);
            }
            let routed = match (
                call.func_name.as_str(),
                call.target.is_some(),
                call.args.len(),
            ) {
                ("replace", true, 2 | 3) => Some("@replace"),
                ("matches", true, 1) | ("matches", false, 2) => Some("@matches"),
                ("join", true, 0 | 1) => Some("@join"),
                ("flatten", true, 0 | 1) => Some("@flatten"),
                _ => None,
            };
            if let Some(name) = routed {
                if let Some(t) = call.target.take() {
                    call.args.insert(0, *t);
                }
                call.func_name = name.into();
            }
            let regex_call = call.func_name == "@matches"
                || (matches!(call.func_name.as_str(), "find" | "findAll") && call.target.is_some());
            let pattern = if call.func_name == "@matches" {
                call.args.get(1)
            } else {
                call.args.first()
            };
            if regex_call
                && let Some(Expr::Literal(LiteralValue::String(p))) = pattern.map(|p| &p.expr)
            {
                literals.push(p.inner().to_string());
            }
        }
        Expr::Select(s) => instrument(&mut s.operand, literals),
        Expr::List(l) => l.elements.iter_mut().for_each(|x| instrument(x, literals)),
        Expr::Map(m) => {
            for en in &mut m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &mut en.expr {
                    instrument(&mut me.key, literals);
                    instrument(&mut me.value, literals);
                }
            }
        }
        Expr::Struct(s) => {
            for en in &mut s.entries {
                if let cel::common::ast::EntryExpr::StructField(f) = &mut en.expr {
                    instrument(&mut f.value, literals);
                }
            }
        }
        Expr::Comprehension(c) => {
            instrument(&mut c.iter_range, literals);
            instrument(&mut c.accu_init, literals);
            instrument(&mut c.loop_cond, literals);
            instrument(&mut c.loop_step, literals);
            instrument(&mut c.result, literals);
            let accu = c.accu_var.clone();
            let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == accu);
            let appends = |e: &IdedExpr| match &e.expr {
                Expr::Call(k) if k.func_name == "_+_" && k.target.is_none() => {
                    matches!(k.args.as_slice(), [l, r] if is_accu(l) && matches!(r.expr, Expr::List(_)))
                }
                _ => false,
            };
            let step = &mut c.loop_step;
            let shape = match &step.expr {
                Expr::Call(k) if k.target.is_none() => {
                    match (k.func_name.as_str(), k.args.as_slice()) {
                        ("_&&_" | "_||_", [a, _]) if is_accu(a) => 1,
                        ("_+_", _) if appends(step) => 2,
                        ("_?_:_", [_, s, o]) if appends(s) && is_accu(o) => 3,
                        _ => 0,
                    }
                }
                _ => 0,
            };
            match (shape, &mut step.expr) {
                // `@result && p`: tick before `p`.
                (1, Expr::Call(k)) => k.args[1] = ticked(take(&mut k.args[1])),
                // `@result + [e]`: tick before `e`.
                (2, Expr::Call(k)) => {
                    if let Expr::List(l) = &mut k.args[1].expr
                        && let Some(x) = l.elements.first_mut()
                    {
                        *x = ticked(take(x));
                    }
                }
                // `g ? @result + [e] : @result`: tick before `g`.
                (3, Expr::Call(k)) => k.args[0] = ticked(take(&mut k.args[0])),
                _ => *step = ticked(take(step)),
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}
