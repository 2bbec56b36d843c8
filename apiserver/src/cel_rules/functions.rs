//! The CEL environment rules run in: the standard library, the `cel` crate's
//! strings, lists and math extensions, and Kubernetes' list library
//! (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf` on lists),
//! sets library (`sets.contains`, `sets.intersects`, `sets.equivalent`) and
//! regex library (`find`, `findAll`), which the crate does not have. Built
//! once per process.

use std::sync::{Arc, LazyLock};

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
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(b.iter().all(|x| a.contains(x))))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(b.iter().any(|x| a.contains(x))))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args)?;
    out(Value::Bool(
        b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)),
    ))
}

/// The receiver, the pattern compiled (the regex crate matches in linear
/// time and bounds a compiled pattern's size), and the optional limit.
fn regex_args(
    args: &[CowVal<'_, '_>],
    name: &str,
) -> Result<(Arc<String>, regex::Regex, Option<i64>), ExecutionError> {
    let arg = |i: usize| args.get(i).map(|a| Value::try_from(a.as_ref()));
    let (Some(Ok(Value::String(s))), Some(Ok(Value::String(p)))) = (arg(0), arg(1)) else {
        return Err(ExecutionError::function_error(
            name,
            "expected a string and a pattern",
        ));
    };
    let re = regex::Regex::new(&p).map_err(|e| ExecutionError::function_error(name, e))?;
    let limit = match arg(2) {
        Some(Ok(Value::Int(n))) => Some(n),
        _ => None,
    };
    Ok((s, re, limit))
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
