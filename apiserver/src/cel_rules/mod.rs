//! `x-kubernetes-validations`: the CEL rules of a CRD's schema, compiled
//! when the CRD is written and enforced on every write of its objects, as
//! apiextensions-apiserver (v1.33) does.
//!
//! - **Compile** ([`Rules::compile`]): once per CRD version, when the CRD is
//!   created or updated (and when a stored CRD is served). A rule that does
//!   not parse, names a variable other than `self`/`oldSelf`, calls an
//!   unknown function or selects a field the schema cannot have refuses the
//!   CRD with a 422 naming the rule's schema path, as upstream.
//! - **Evaluate** ([`Rules::validate`]): on create, update, patch and apply
//!   of the object and of its `status` subresource, after defaulting,
//!   pruning and schema validation. `self` is the value at the rule's node,
//!   `oldSelf` the correlated old value; a rule using `oldSelf` (a
//!   transition rule) runs only on update when the old value exists, or
//!   always with `optionalOldSelf: true` (then `oldSelf` is an optional).
//!   A rule whose value is unchanged is not re-run (upstream's ratcheting),
//!   so status rules only run when status changes, i.e. on `/status` writes.
//!   Failures are 422s with the rule's `message` (or `messageExpression`),
//!   at `fieldPath` if set, with `reason` (default `FieldValueInvalid`).
//!
//! **Bounded work.** The `cel` crate has no cost meter, so the main bound
//! is static, as upstream's CRD-write check: `cost.rs` estimates each rule's
//! worst case from the schema (`maxItems`, `maxProperties`, `maxLength`,
//! else what fits in a 3 MiB request); comprehensions multiply by their
//! range's size, nested ones multiply again, a conditional is its larger
//! branch, and functions that build strings or lists (`replace`, `join`,
//! `flatten`, a written `+`, list literals copying their elements) are priced
//! by the size of what they build. A CRD is refused when one rule's
//! estimate exceeds [`PER_RULE_LIMIT`] (`StaticEstimatedCostLimit`) or when
//! the rules' estimates times how often each runs (the product of its
//! ancestors' list and map sizes) exceed [`PER_CRD_LIMIT`]
//! (`StaticEstimatedCRDCostLimit`), with upstream's messages. At runtime,
//! each evaluation is charged its rule's estimate against
//! `eval::RUNTIME_BUDGET` per write (upstream's `RuntimeCELCostBudget`,
//! which meters actual cost); when it runs out the write is refused. That
//! caps the evaluations per object (rules times items) and the work of each;
//! the request body limit (3 MiB) caps the object. Behind the estimate,
//! `guard.rs` stops a write's rules at a wall-time deadline (checked at
//! every comprehension step and in the functions that can build big
//! values), refuses oversized `replace`/`join`/`flatten` results before
//! building them, and compiles literal regexes once per rule.
//!
//! **Supported**: the CEL standard library (no `timestamp`/`duration`: the
//! crate's `chrono` feature is off, and upstream's `format: date-time`/
//! `duration` typing is not done), optionals, the strings extension
//! (`charAt`, `indexOf`, `lastIndexOf`, `join`, `lowerAscii`, `upperAscii`,
//! `replace`, `split`, `substring`, `trim`, `format`, `strings.quote`,
//! `reverse`), the lists extension (`slice`, `flatten`, `distinct`, `sort`,
//! `sortBy`, `lists.range`), the math extension (`math.greatest`,
//! `math.least`, `math.abs`, ...), Kubernetes' list library (`isSorted`,
//! `sum`, `min`, `max`, `indexOf`, `lastIndexOf` on lists), sets library
//! (`sets.contains`, `sets.intersects`, `sets.equivalent`) and regex library
//! (`find`, `findAll`).
//! **Not supported** (an `undeclared reference` at CRD write): Kubernetes'
//! `quantity`, `url`, `ip`/`cidr`, `semver`, `format.*` named formats,
//! `authorizer`, `base64`, `timestamp`/`duration` and `cel.bind`
//! (kube-rs' `kube-cel` crate has most of them, but is built on `cel` 0.13). Type checking is partial: a rule returning a non-bool or
//! comparing mismatched types is found when it runs (a 422 naming the
//! rule), not when the CRD is written.

mod cost;
mod eval;
mod functions;
mod guard;
mod rule;
mod schema;

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::cause::Cause;
use schema::Node;

/// upstream's `StaticEstimatedCostLimit`: one rule's estimated cost.
pub(crate) const PER_RULE_LIMIT: u64 = 10_000_000;
/// upstream's `StaticEstimatedCRDCostLimit`: all rules of a version, each
/// times the most values it can run on.
pub(crate) const PER_CRD_LIMIT: u64 = 100_000_000;

/// A version's compiled rules: the schema tree with each node's rules.
#[derive(Debug)]
pub(crate) struct Rules {
    root: Node,
}

fn forbidden(field: String, message: String) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {message}"),
        field,
    }
}

/// Upstream's `getCostErrorMessage`.
fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, \
         maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// One compiled rule's place, for the CRD-wide total.
struct Placed {
    field: String,
    total: u64,
}

fn compile_node(
    schema: &Value,
    node: &mut Node,
    path: &str,
    cardinality: u64,
    causes: &mut Vec<Cause>,
    placed: &mut Vec<Placed>,
) {
    for (i, raw) in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        match rule::Rule::compile(raw, i, path, node) {
            Ok(r) => {
                let field = format!("{path}.x-kubernetes-validations[{i}].rule");
                if r.cost > PER_RULE_LIMIT {
                    causes.push(forbidden(
                        field.clone(),
                        cost_message("estimated rule cost", r.cost, PER_RULE_LIMIT),
                    ));
                }
                placed.push(Placed {
                    field,
                    total: r.cost.saturating_mul(cardinality),
                });
                node.rules.push(r);
            }
            Err(c) => causes.extend(c),
        }
    }
    let mut has = !node.rules.is_empty();
    let here = node.max_size();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            if let Some(child) = node.properties.get_mut(k) {
                let p = format!("{path}.properties[{k}]");
                compile_node(s, child, &p, cardinality, causes, placed);
                has |= child.has_rules;
            }
        }
    }
    for (key, child) in [
        ("additionalProperties", node.additional.as_deref_mut()),
        ("items", node.items.as_deref_mut()),
    ] {
        if let (Some(child), Some(s)) = (child, schema.get(key)) {
            let p = format!("{path}.{key}");
            compile_node(
                s,
                child,
                &p,
                cardinality.saturating_mul(here),
                causes,
                placed,
            );
            has |= child.has_rules;
        }
    }
    node.has_rules = has;
}

impl Rules {
    /// Compiles the rules of `schema` (an `openAPIV3Schema`); `path` is where
    /// it sits in the CRD, for the causes. `Ok(None)` when it has no rules.
    pub(crate) fn compile(schema: &Value, path: &str) -> Result<Option<Rules>, Vec<Cause>> {
        let mut root = Node::parse(schema);
        root.add_root_fields();
        let (mut causes, mut placed) = (Vec::new(), Vec::new());
        compile_node(schema, &mut root, path, 1, &mut causes, &mut placed);
        let total = placed.iter().fold(0u64, |s, p| s.saturating_add(p.total));
        if total > PER_CRD_LIMIT {
            // Upstream names each rule that is more than 1% of the limit.
            for p in placed.iter().filter(|p| p.total > PER_CRD_LIMIT / 100) {
                causes.push(forbidden(
                    p.field.clone(),
                    "contributed to estimated rule & messageExpression cost total exceeding cost \
                     limit for entire OpenAPIv3 schema"
                        .into(),
                ));
            }
            causes.push(forbidden(
                path.to_string(),
                cost_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total,
                    PER_CRD_LIMIT,
                ),
            ));
        }
        if !causes.is_empty() {
            return Err(causes);
        }
        Ok(root.has_rules.then_some(Rules { root }))
    }

    /// The causes `obj` (replacing `old` on an update) fails, empty if none.
    pub(crate) fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut walk = eval::Walk::new();
        walk.node(&self.root, "", obj, old, true);
        walk.causes
    }

    /// [`Rules::validate`] with another deadline than `guard::RUNTIME_DEADLINE`.
    #[cfg(test)]
    pub(crate) fn validate_until(
        &self,
        obj: &Value,
        old: Option<&Value>,
        deadline: std::time::Instant,
    ) -> Vec<Cause> {
        let mut walk = eval::Walk::new();
        walk.deadline = deadline;
        walk.node(&self.root, "", obj, old, true);
        walk.causes
    }
}

/// Every rule of a CRD that does not compile or is over budget, for the
/// CRD's create and update (`old`). A version whose schema an update leaves
/// as it was is not checked again (so a CRD stored before a check stays
/// writable), and a stored CRD is served whatever its rules say.
pub(crate) fn crd_causes(old: Option<&Value>, crd: &Value) -> Vec<Cause> {
    let schema_of = |c: &Value, name: &Value| {
        c.pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| vs.iter().find(|v| v["name"] == *name))
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
            .cloned()
    };
    let mut causes = Vec::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
            continue;
        };
        if old.and_then(|o| schema_of(o, &v["name"])).as_ref() == Some(schema) {
            continue;
        }
        if let Err(c) = Rules::compile(
            schema,
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        ) {
            causes.extend(c);
        }
    }
    causes
}
