//! The CEL environment rules run in: the standard library, the `cel` crate's
//! strings, lists and math extensions, and Kubernetes' list library
//! (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf` on lists),
//! sets library (`sets.contains`, `sets.intersects`, `sets.equivalent`) and
//! regex library (`find`, `findAll`), which the crate does not have. Built
//! once per process.

use std::sync::{Arc, LazyLock};

use super::guard;

use cel::common::types::{DYN_TYPE, INT_TYPE, LIST_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{Env, ExecutionError, Value, extensions};

/// The shared environment.
pub(crate) fn env() -> &'static Arc<Env> {
    static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
        let mut env = Env::stdlib();
        // The extensions and the overloads below are distinct by
        // construction: a clash is a bug caught by the first unit test.
        env.add_extension(extensions::strings)
            .expect("strings extension");
        env.add_extension(extensions::lists)
            .expect("lists extension");
        env.add_extension(extensions::math).expect("math extension");
        let list = |env: &mut Env, name: &str, f: cel::common::functions::Function| {
            env.add_member_overload(name, &format!("list.{name}()"), LIST_TYPE, vec![], f)
                .expect("kubernetes list function");
        };
        list(&mut env, "isSorted", is_sorted);
        list(&mut env, "sum", sum);
        list(&mut env, "min", min);
        list(&mut env, "max", max);
        for (name, f) in [
            ("indexOf", index_of as cel::common::functions::Function),
            ("lastIndexOf", last_index_of),
        ] {
            env.add_member_overload(
                name,
                &format!("list.{name}(dyn)"),
                LIST_TYPE,
                vec![DYN_TYPE],
                f,
            )
            .expect("kubernetes list function");
        }
        for (name, f) in [
            (
                "sets.contains",
                sets_contains as cel::common::functions::Function,
            ),
            ("sets.intersects", sets_intersects),
            ("sets.equivalent", sets_equivalent),
        ] {
            env.add_overload(
                name,
                &format!("{name}_list_list"),
                vec![LIST_TYPE, LIST_TYPE],
                f,
            )
            .expect("kubernetes sets function");
        }
        let string =
            |env: &mut Env, name: &str, args: Vec<_>, f: cel::common::functions::Function| {
                let id = format!("string.{name}({})", args.len());
                env.add_member_overload(name, &id, STRING_TYPE, args, f)
                    .expect("kubernetes regex function");
            };
        string(&mut env, "find", vec![STRING_TYPE], find);
        string(&mut env, "findAll", vec![STRING_TYPE], find_all);
        string(&mut env, "findAll", vec![STRING_TYPE, INT_TYPE], find_all);
        // What `guard::instrument` rewrites calls into: names a rule cannot
        // write (`@`), so they clash with nothing.
        let guarded =
            |env: &mut Env, name: &str, args: Vec<_>, f: cel::common::functions::Function| {
                let id = format!("{name}({})", args.len());
                env.add_overload(name, &id, args, f)
                    .expect("guarded function");
            };
        guarded(&mut env, guard::TICK, vec![], guard::tick);
        guarded(
            &mut env,
            "@replace",
            vec![STRING_TYPE, STRING_TYPE, STRING_TYPE],
            replace,
        );
        guarded(
            &mut env,
            "@replace",
            vec![STRING_TYPE, STRING_TYPE, STRING_TYPE, INT_TYPE],
            replace,
        );
        guarded(
            &mut env,
            "@matches",
            vec![STRING_TYPE, STRING_TYPE],
            matches,
        );
        guarded(&mut env, "@join", vec![LIST_TYPE], join);
        guarded(&mut env, "@join", vec![LIST_TYPE, STRING_TYPE], join);
        guarded(&mut env, "@flatten", vec![LIST_TYPE], flatten);
        guarded(&mut env, "@flatten", vec![LIST_TYPE, INT_TYPE], flatten);
        Arc::new(env)
    });
    &ENV
}

/// Functions and namespaced functions a rule may call; anything else is an
/// `undeclared reference` at compile time, as upstream's type checker says.
/// Operators (`_+_`, `@in`, ...) and macros are always known.
pub(crate) const KNOWN: &[&str] = &[
    // standard library
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    // optional values (`optionalOldSelf`)
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "orValue",
    "or",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "format",
    "strings.quote",
    "reverse",
    // lists extension and Kubernetes' lists library
    "slice",
    "flatten",
    "distinct",
    "sort",
    "@sortByAssociatedKeys",
    "lists.range",
    "isSorted",
    "sum",
    "min",
    "max",
    // Kubernetes' sets and regex libraries
    "sets.contains",
    "sets.intersects",
    "sets.equivalent",
    "find",
    "findAll",
    // math extension
    "math.@max",
    "math.@min",
    "math.abs",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.sign",
    "math.sqrt",
    "math.trunc",
    "math.isFinite",
    "math.isInf",
    "math.isNaN",
    "math.bitAnd",
    "math.bitOr",
    "math.bitXor",
    "math.bitNot",
    "math.bitShiftLeft",
    "math.bitShiftRight",
];

fn list_arg(args: &[CowVal<'_, '_>]) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match args.first().map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(Value::List(l))) => Ok(l),
        _ => Err(ExecutionError::function_error("list", "expected a list")),
    }
}

fn out<'b, 'v>(v: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn cel::common::value::Val> = v.try_into()?;
    Ok(CowVal::from(boxed))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let l = list_arg(&args)?;
    let mut sorted = true;
    for w in l.windows(2) {
        match w[0].partial_cmp(&w[1]) {
            Some(std::cmp::Ordering::Greater) => sorted = false,
            Some(_) => {}
            None => {
                return Err(ExecutionError::ValuesNotComparable(
                    w[0].clone(),
                    w[1].clone(),
                ));
            }
        }
    }
    out(Value::Bool(sorted))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let l = list_arg(&args)?;
    let overflow = || ExecutionError::function_error("sum", "integer overflow");
    let total = match l.first() {
        None | Some(Value::Int(_)) => {
            let mut t = 0i64;
            for v in l.iter() {
                let Value::Int(i) = v else {
                    return Err(ExecutionError::function_error("sum", "mixed element types"));
                };
                t = t.checked_add(*i).ok_or_else(overflow)?;
            }
            Value::Int(t)
        }
        Some(Value::UInt(_)) => {
            let mut t = 0u64;
            for v in l.iter() {
                let Value::UInt(i) = v else {
                    return Err(ExecutionError::function_error("sum", "mixed element types"));
                };
                t = t.checked_add(*i).ok_or_else(overflow)?;
            }
            Value::UInt(t)
        }
        Some(_) => {
            let mut t = 0f64;
            for v in l.iter() {
                match v {
                    Value::Float(f) => t += f,
                    _ => return Err(ExecutionError::function_error("sum", "mixed element types")),
                }
            }
            Value::Float(t)
        }
    };
    out(total)
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    name: &str,
    want: std::cmp::Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let l = list_arg(&args)?;
    let Some(mut best) = l.first() else {
        return Err(ExecutionError::function_error(
            name,
            format!("{name} called on empty list"),
        ));
    };
    for v in l.iter().skip(1) {
        match v.partial_cmp(best) {
            Some(o) if o == want => best = v,
            Some(_) => {}
            None => return Err(ExecutionError::ValuesNotComparable(v.clone(), best.clone())),
        }
    }
    out(best.clone())
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", std::cmp::Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", std::cmp::Ordering::Greater)
}

fn position<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let l = list_arg(&args)?;
    let needle = match args.get(1).map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(v)) => v,
        _ => return Err(ExecutionError::invalid_argument_count(1, 0)),
    };
    let found = if last {
        l.iter().rposition(|v| *v == needle)
    } else {
        l.iter().position(|v| *v == needle)
    };
    out(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, true)
}

/// The argument `i` as a string.
fn str_arg(args: &[CowVal<'_, '_>], i: usize, name: &str) -> Result<Arc<String>, ExecutionError> {
    match args.get(i).map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(Value::String(s))) => Ok(s),
        _ => Err(ExecutionError::function_error(name, "expected a string")),
    }
}

/// The argument `i` as an int, if there is one.
fn int_arg(args: &[CowVal<'_, '_>], i: usize) -> Option<i64> {
    match args.get(i).map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(Value::Int(n))) => Some(n),
        _ => None,
    }
}

/// `s.replace(from, to)`, `s.replace(from, to, n)` (the first `n`, all when
/// negative), refused before allocating when the result would be over
/// [`guard::MAX_STRING`]: replacing `''` puts `to` between every two
/// characters.
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("replace")?;
    let s = str_arg(&args, 0, "replace")?;
    let from = str_arg(&args, 1, "replace")?;
    let to = str_arg(&args, 2, "replace")?;
    let limit = int_arg(&args, 3).and_then(|n| usize::try_from(n).ok());
    let found = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from.as_str()).count()
    };
    let n = limit.map_or(found, |l| l.min(found));
    let size = (s.len() - n * from.len()).saturating_add(n.saturating_mul(to.len()));
    guard::string_size("replace", size)?;
    let out_s = match limit {
        Some(l) => s.replacen(from.as_str(), &to, l),
        None => s.replace(from.as_str(), &to),
    };
    out(Value::String(Arc::new(out_s)))
}

/// `list.join()`, `list.join(sep)`, its size checked before it is built.
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("join")?;
    let l = list_arg(&args)?;
    let sep = match args.get(1) {
        Some(_) => str_arg(&args, 1, "join")?,
        None => Arc::new(String::new()),
    };
    let mut size = sep.len().saturating_mul(l.len().saturating_sub(1));
    let mut parts = Vec::with_capacity(l.len());
    for v in l.iter() {
        let Value::String(p) = v else {
            return Err(ExecutionError::function_error(
                "join",
                "expected a list of strings",
            ));
        };
        size = size.saturating_add(p.len());
        parts.push(p.as_str());
    }
    guard::string_size("join", size)?;
    out(Value::String(Arc::new(parts.join(&sep))))
}

/// How many elements `v` flattened `depth` levels makes, stopping past
/// `max`.
fn flat_len(v: &Value, depth: u64, max: usize) -> usize {
    match v {
        Value::List(l) if depth > 0 => {
            let mut n = 0usize;
            for x in l.iter() {
                n = n.saturating_add(flat_len(x, depth - 1, max));
                if n > max {
                    break;
                }
            }
            n
        }
        _ => 1,
    }
}

fn flatten_into(v: &Value, depth: u64, flat: &mut Vec<Value>) {
    match v {
        Value::List(l) if depth > 0 => l.iter().for_each(|x| flatten_into(x, depth - 1, flat)),
        other => flat.push(other.clone()),
    }
}

/// `list.flatten()`, `list.flatten(depth)`, its length checked before it is
/// built (a list of `n` copies of an `n`-list is `n²`).
fn flatten<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("flatten")?;
    let l = list_arg(&args)?;
    let depth = match int_arg(&args, 1) {
        None => 1,
        Some(d) => u64::try_from(d)
            .map_err(|_| ExecutionError::function_error("flatten", "level must be non-negative"))?,
    };
    let mut n = 0usize;
    for x in l.iter() {
        n = n.saturating_add(flat_len(x, depth, guard::MAX_LIST));
        guard::list_size("flatten", n)?;
    }
    let mut flat = Vec::with_capacity(n);
    for x in l.iter() {
        flatten_into(x, depth, &mut flat);
    }
    out(Value::List(Arc::new(flat)))
}

/// Two list arguments, as `Value`s.
type ListPair = (Arc<Vec<Value>>, Arc<Vec<Value>>);

fn two_lists(args: &[CowVal<'_, '_>]) -> Result<ListPair, ExecutionError> {
    let list = |i: usize| match args.get(i).map(|a| Value::try_from(a.as_ref())) {
        Some(Ok(Value::List(l))) => Ok(l),
        _ => Err(ExecutionError::function_error("sets", "expected two lists")),
    };
    Ok((list(0)?, list(1)?))
}

/// Every element of the second list is in the first.
fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("sets.contains")?;
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(b.iter().all(|x| a.contains(x))))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("sets.intersects")?;
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(b.iter().any(|x| a.contains(x))))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    guard::check("sets.equivalent")?;
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(
        b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)),
    ))
}

/// A regex call's string, compiled pattern and optional limit.
type RegexArgs = (Arc<String>, Arc<regex::Regex>, Option<i64>);

/// The receiver, the pattern compiled (or found compiled: see
/// [`guard::regex`]), and the optional limit.
fn regex_args(args: &[CowVal<'_, '_>], name: &str) -> Result<RegexArgs, ExecutionError> {
    guard::check(name)?;
    let s = str_arg(args, 0, name)?;
    let p = str_arg(args, 1, name)?;
    let re = guard::regex(&p).map_err(|e| ExecutionError::function_error(name, e))?;
    Ok((s, re, int_arg(args, 2)))
}

/// `s.matches(re)` and `matches(s, re)`.
fn matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (s, re, _) = regex_args(&args, "matches")?;
    out(Value::Bool(re.is_match(&s)))
}

/// The first match, or `""`.
fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (s, re, _) = regex_args(&args, "find")?;
    let m = re.find(&s).map_or("", |m| m.as_str());
    out(Value::String(Arc::new(m.to_string())))
}

/// Every match (at most `limit` when one is given and not negative).
fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (s, re, limit) = regex_args(&args, "findAll")?;
    let take = limit.filter(|n| *n >= 0).map_or(usize::MAX, |n| n as usize);
    let found = re
        .find_iter(&s)
        .take(take)
        .map(|m| Value::String(Arc::new(m.as_str().to_string())))
        .collect();
    out(Value::List(Arc::new(found)))
}
