//! Compile, cost and evaluation of `x-kubernetes-validations`.

use serde_json::{Value, json};

use super::{PER_RULE_LIMIT, Rules, crd_causes};

fn schema(spec_rules: Value, extra: Value) -> Value {
    let mut props = json!({
        "replicas": {"type": "integer"},
        "minReplicas": {"type": "integer"},
        "name": {"type": "string", "maxLength": 63},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 16}}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        props[k] = v.clone();
    }
    json!({"type": "object", "properties": {"spec": {
        "type": "object", "properties": props, "x-kubernetes-validations": spec_rules}}})
}

fn rules(spec_rules: Value) -> Rules {
    Rules::compile(&schema(spec_rules, json!({})), "s")
        .unwrap()
        .unwrap()
}

fn messages(r: &Rules, obj: Value, old: Option<Value>) -> Vec<String> {
    r.validate(&obj, old.as_ref())
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn compile_errors(spec_rules: Value, extra: Value) -> Vec<String> {
    match Rules::compile(&schema(spec_rules, extra), "s") {
        Ok(_) => vec![],
        Err(c) => c
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect(),
    }
}

#[test]
fn a_failing_rule_is_reported_with_its_message_path_and_reason() {
    let r = rules(json!([
        {"rule": "self.minReplicas <= self.replicas", "message": "min must not exceed replicas"},
        {"rule": "self.name.startsWith('a')", "fieldPath": ".name", "reason": "FieldValueForbidden",
         "messageExpression": "'name ' + self.name + ' must start with a'"},
        {"rule": "size(self.items) < 3"},
    ]));
    let ok = json!({"spec": {"replicas": 3, "minReplicas": 1, "name": "abc", "items": []}});
    assert!(messages(&r, ok, None).is_empty());
    let bad = json!({"spec": {"replicas": 1, "minReplicas": 2, "name": "xyz",
        "items": [{}, {}, {}]}});
    assert_eq!(
        messages(&r, bad, None),
        [
            "spec: Invalid value: \"object\": min must not exceed replicas",
            "spec.name: Forbidden: name xyz must start with a",
            "spec: Invalid value: \"object\": failed rule: size(self.items) < 3",
        ]
    );
}

#[test]
fn transition_rules_run_on_update_only_and_unchanged_values_are_ratcheted() {
    let r = rules(
        json!([{"rule": "self.name == oldSelf.name", "message": "name is immutable"},
        {"rule": "self.replicas > 0"}]),
    );
    let v = |name: &str, replicas: i64| json!({"spec": {"name": name, "replicas": replicas}});
    assert!(messages(&r, v("a", 1), None).is_empty());
    assert_eq!(
        messages(&r, v("b", 1), Some(v("a", 1))),
        ["spec: Invalid value: \"object\": name is immutable"]
    );
    // A stored value that breaks a rule may be written back unchanged.
    assert!(messages(&r, v("a", 0), Some(v("a", 0))).is_empty());
    assert_eq!(messages(&r, v("a", 0), None).len(), 1);
}

#[test]
fn optional_old_self_sees_an_absent_old_value() {
    let r = rules(
        json!([{"rule": "!oldSelf.hasValue() || self.name == oldSelf.value().name",
        "optionalOldSelf": true, "message": "immutable"}]),
    );
    let v = |name: &str| json!({"spec": {"name": name}});
    assert!(messages(&r, v("a"), None).is_empty());
    assert_eq!(messages(&r, v("b"), Some(v("a"))).len(), 1);
}

#[test]
fn kubernetes_extension_functions_work() {
    let bounded = json!({"items": {"type": "array", "maxItems": 10, "items": {"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 16}}}}});
    let s = schema(
        json!([
            {"rule": "self.name.lowerAscii() == 'abc' && self.name.upperAscii() == 'ABC'"},
            {"rule": "'a,b'.split(',').join('-') == 'a-b' && ' x '.trim() == 'x'"},
            {"rule": "[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6 && [3, 1].min() == 1 && [3, 1].max() == 3"},
            {"rule": "[1, 2, 3].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2 && 'abc'.indexOf('c') == 2"},
            {"rule": "self.items.all(i, i.name.size() < 5) && self.items.exists_one(i, i.name == 'x')"},
            {"rule": "self.items.map(i, i.name).filter(n, n != 'x').size() == 0"},
        {"rule": "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2]) && sets.intersects([1, 2], [2, 5]) && sets.equivalent([1, 2], [2, 1, 1])"},
        {"rule": "'abc 123 45'.find('[0-9]+') == '123' && 'abc'.find('[0-9]') == '' && 'a1b22c333'.findAll('[0-9]+') == ['1', '22', '333'] && 'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']"},
        ]),
        bounded,
    );
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let obj = json!({"spec": {"name": "AbC", "items": [{"name": "x"}]}});
    assert_eq!(messages(&r, obj, None), Vec::<String>::new());
}

#[test]
fn runtime_errors_name_the_rule() {
    let r = rules(json!([{"rule": "self.minReplicas <= self.replicas"}]));
    assert_eq!(
        messages(&r, json!({"spec": {"replicas": 1}}), None),
        [
            "spec: Invalid value: \"object\": no such key: minReplicas evaluating rule: self.minReplicas <= self.replicas"
        ]
    );
}

#[test]
fn rules_that_do_not_compile_refuse_the_crd() {
    let errs = compile_errors(
        json!([{"rule": "self.replicas >"}, {"rule": "foo(self)"},
        {"rule": "self.nope == 1"}, {"rule": "other == 1"}, {"rule": "true", "reason": "Bad"}]),
        json!({}),
    );
    assert_eq!(errs.len(), 5, "{errs:#?}");
    assert!(
        errs[0].starts_with(
            "s.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \
         apiextensions.ValidationRule{Rule:\"self.replicas >\", Message:\"\""
        ),
        "{}",
        errs[0]
    );
    assert!(
        errs[0].contains("compilation failed: ERROR: <input>:1:"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].ends_with("undeclared reference to 'foo' (in container '')"),
        "{}",
        errs[1]
    );
    assert!(errs[2].ends_with("undefined field 'nope'"), "{}", errs[2]);
    assert!(
        errs[3].contains("undeclared reference to 'other'"),
        "{}",
        errs[3]
    );
    assert!(errs[4].starts_with(
        "s.properties[spec].x-kubernetes-validations[4].reason: Unsupported value: \"Bad\""
    ));
}

#[test]
fn a_nested_comprehension_over_an_unbounded_list_is_over_budget() {
    let nested = json!([{"rule":
        "self.items.all(a, self.items.all(b, a == b || a.name != b.name))"}]);
    let errs = compile_errors(nested.clone(), json!({}));
    assert!(
        errs.iter().any(|e| e == "s.properties[spec].x-kubernetes-validations[0].rule: Forbidden: \
             estimated rule cost exceeds budget by factor of more than 100x (try simplifying the \
             rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings \
             are declared)"),
        "{errs:#?}"
    );
    // The same rule over a list of at most 100 items passes.
    let bounded = json!({"items": {"type": "array", "maxItems": 100, "items": {"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 16}}}}});
    assert_eq!(compile_errors(nested, bounded), Vec::<String>::new());
    // One comprehension over the unbounded list is within a rule's budget.
    let single = json!([{"rule": "self.items.all(a, a.name != '')"}]);
    assert_eq!(compile_errors(single, json!({})), Vec::<String>::new());
}

#[test]
fn the_estimate_grows_with_the_bounds() {
    let node = |max: u64| {
        super::schema::Node::parse(&json!({"type": "object", "properties": {"l": {
            "type": "array", "maxItems": max, "items": {"type": "string", "maxLength": 10}}}}))
    };
    let p = super::functions::env()
        .compile("self.l.all(x, self.l.exists(y, x == y))")
        .unwrap();
    let small = super::cost::estimate(p.expression(), &node(10));
    let big = super::cost::estimate(p.expression(), &node(1000));
    eprintln!("estimate at maxItems 10: {small}, at 1000: {big}");
    assert!(
        small < 1_000 && big > 1_000_000 && big < PER_RULE_LIMIT,
        "{small} {big}"
    );
}

#[test]
fn rules_on_list_items_total_over_the_crd_budget() {
    // Each item's rule is cheap alone but runs once per item of a list
    // nested in an unbounded list.
    let errs = compile_errors(
        json!([]),
        json!({"matrix": {"type": "array", "items": {
        "type": "array", "items": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.matches('^[a-z]+$')"}]}}}}),
    );
    assert!(
        errs.iter().any(|e| e.starts_with(
            "s: Forbidden: x-kubernetes-validations estimated rule cost \
             total for entire OpenAPIv3 schema exceeds budget"
        )),
        "{errs:#?}"
    );
}

#[test]
fn the_runtime_budget_stops_evaluation() {
    // Under the per-rule limit (9M), but one evaluation uses most of the
    // 10M budget: the next row is refused.
    let r = Rules::compile(
        &json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 5,
            "items": {"type": "array", "maxItems": 1000, "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.exists(y, x == y))"}]}}}}),
        "s",
    )
    .unwrap()
    .unwrap();
    let row: Vec<i64> = (0..1000).collect();
    let obj = json!({"l": [row, row, row, row, row]});
    let start = std::time::Instant::now();
    let causes = r.validate(&obj, None);
    eprintln!(
        "one 1000x1000 evaluation, then the budget refuses the next: {:?} (estimate {} each)",
        start.elapsed(),
        r.root.properties["l"].items.as_ref().unwrap().rules[0].cost
    );
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(causes[0].message.contains("running out of cost budget"));
}

#[test]
fn crd_causes_name_the_version() {
    let crd = json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema":
        schema(json!([{"rule": "self.x =="}]), json!({}))}}]}});
    let causes = crd_causes(None, &crd);
    assert_eq!(
        causes[0].field,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    // An update that leaves the schema as it was is not refused for it.
    assert!(crd_causes(Some(&crd), &crd).is_empty());
    let mut changed = crd.clone();
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"]["minimum"] = json!(0);
    assert_eq!(crd_causes(Some(&crd), &changed).len(), 1);
}

#[test]
fn root_rules_see_the_name_but_not_the_rest_of_metadata() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object"}},
        "x-kubernetes-validations": [{"rule": "self.metadata.name == 'singleton'",
            "message": "only one"}, {"rule": "self.kind == 'Thing'"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let obj = |name: &str| {
        json!({"apiVersion": "x/v1", "kind": "Thing",
        "metadata": {"name": name, "labels": {"a": "b"}}, "spec": {}})
    };
    assert!(r.validate(&obj("singleton"), None).is_empty());
    assert_eq!(
        r.validate(&obj("other"), None)[0].message,
        "Invalid value: \"object\": only one"
    );
    let labels = json!({"type": "object", "x-kubernetes-validations": [
        {"rule": "has(self.metadata.labels)"}]});
    let errs = Rules::compile(&labels, "s").unwrap_err();
    assert!(
        errs[0].message.ends_with("undefined field 'labels'"),
        "{errs:?}"
    );
}

fn map_list_rules(item_rules: Value) -> Rules {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "l": {"type": "array", "x-kubernetes-list-type": "map",
              "x-kubernetes-list-map-keys": ["k", "p"],
              "items": {"type": "object", "properties": {
                  "k": {"type": "string"}, "p": {"type": "integer"}, "v": {"type": "integer"}},
                  "x-kubernetes-validations": item_rules}}}}}});
    Rules::compile(&s, "s").unwrap().unwrap()
}

#[test]
fn list_map_items_are_correlated_by_their_keys() {
    let r = map_list_rules(json!([{"rule": "self.v >= oldSelf.v", "message": "v may not shrink"}]));
    let old = json!({"spec": {"l": [{"k": "a", "p": 1, "v": 5}, {"k": "a", "p": 2, "v": 1}]}});
    // Reordered, one grown: each item meets its own old self.
    let new = json!({"spec": {"l": [{"k": "a", "p": 2, "v": 2}, {"k": "a", "p": 1, "v": 5},
        {"k": "b", "p": 1, "v": 0}]}});
    assert!(messages(&r, new, Some(old.clone())).is_empty());
    let shrunk = json!({"spec": {"l": [{"k": "a", "p": 2, "v": 1}, {"k": "a", "p": 1, "v": 4}]}});
    assert_eq!(
        messages(&r, shrunk, Some(old)),
        ["spec.l[1]: Invalid value: \"object\": v may not shrink"]
    );
}

#[test]
fn correlating_a_long_list_map_is_linear() {
    // 20,000 items each looked up among 20,000 old ones was 2·10⁸ key
    // comparisons (seconds); by an index it is 20,000 lookups.
    let r = map_list_rules(json!([{"rule": "self.v >= 0"}]));
    let items: Vec<Value> = (0..20_000)
        .map(|i| json!({"k": format!("k{i}"), "p": i, "v": 1}))
        .collect();
    let mut reversed = items.clone();
    reversed.reverse();
    let old = json!({"spec": {"l": items}});
    let new = json!({"spec": {"l": reversed}});
    // Correlated by key whatever the order (linear: 20,000 items took 32.7 s
    // pairwise and ~1 s by index in a debug build; a figure, not a test). A
    // far deadline: this checks the matching, not the machine's speed.
    let far = std::time::Instant::now() + std::time::Duration::from_secs(3600);
    assert!(r.validate_until(&new, Some(&old), far).is_empty());
}

/// The estimate of `rule` on an object of `props`.
fn estimate_on(rule: &str, props: Value) -> u64 {
    let node = super::schema::Node::parse(&json!({"type": "object", "properties": props}));
    let p = super::functions::env().compile(rule).unwrap();
    super::cost::estimate(p.expression(), &node)
}

fn ints(max: u64) -> Value {
    json!({"type": "array", "maxItems": max, "items": {"type": "integer"}})
}

fn over_budget(rule: &str, props: Value) {
    let s = json!({"type": "object", "properties": props,
        "x-kubernetes-validations": [{"rule": rule}]});
    let errs: Vec<String> = match Rules::compile(&s, "s") {
        Ok(_) => vec![],
        Err(c) => c
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect(),
    };
    assert!(
        errs.iter().any(|e| e.starts_with(
            "s.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget"
        )),
        "{rule}: {errs:#?}"
    );
}

#[test]
fn a_conditional_is_priced_as_its_larger_branch() {
    // Three comprehensions nested through `cond ? [] : list`: 300³ steps.
    let rule = "self.l.all(a, (a > 0 ? [] : self.l).all(b, (b > 0 ? [] : self.l)\
                .all(c, c == a + b)))";
    over_budget(rule, json!({"l": ints(300)}));
    // Either branch order.
    let swapped = "self.l.all(a, (a < 0 ? self.l : []).all(b, (b < 0 ? self.l : [])\
                   .all(c, c == a + b)))";
    over_budget(swapped, json!({"l": ints(300)}));
}

#[test]
fn sort_by_is_priced_per_element_and_nests() {
    let one = estimate_on("self.l.sortBy(a, -a).size() > 0", json!({"l": ints(1000)}));
    assert!(one >= 1000, "{one}");
    over_budget(
        "self.l.sortBy(a, self.l.sortBy(b, self.l.sortBy(c, c - a - b).size()).size()).size() > 0",
        json!({"l": ints(300)}),
    );
}

#[test]
fn replace_is_priced_by_the_size_of_its_result() {
    let s = json!({"s": {"type": "string", "maxLength": 100}});
    // 100 characters, each '' replaced by the 100: 10,200 bytes, then ~10⁶,
    // ~10⁸, ~10¹⁰.
    over_budget(
        "self.s.replace('', self.s).replace('', self.s).replace('', self.s)\
         .replace('', self.s).size() > 0",
        s.clone(),
    );
    let once = estimate_on("self.s.replace('', self.s).size() > 0", s.clone());
    assert!(once >= 1_000, "{once}");
    // A fixed replacement stays cheap.
    let cheap = estimate_on("self.s.replace('-', '_') != ''", s);
    assert!(cheap < 100, "{cheap}");
}

#[test]
fn flatten_is_priced_by_the_size_of_its_result() {
    let m = json!({"m": {"type": "array", "maxItems": 1000, "items": ints(1000)}});
    let flat = estimate_on("self.m.flatten().size() > 0", m);
    assert!(flat >= 1_000_000, "{flat}");
    // A list of copies of the list: n².
    over_budget(
        "self.l.map(x, self.l).flatten().size() > 0",
        json!({"l": ints(5000)}),
    );
}

#[test]
fn a_written_list_concatenation_is_priced_by_its_result() {
    over_budget(
        "self.l.all(a, (self.l + [a]).size() > 0)",
        json!({"l": ints(5000)}),
    );
    // `map` and `filter` append in place: linear.
    let mapped = estimate_on(
        "self.l.map(x, x * 2).filter(y, y > 0).size() > 0",
        json!({"l": ints(5000)}),
    );
    assert!(mapped < 100_000, "{mapped}");
}

#[test]
fn a_literal_unicode_regex_checks_a_thousand_items_within_the_deadline() {
    // The pattern is compiled with the rule (once per call, 1,000 items took
    // half a minute, far past the write's deadline; now ~0.2 s).
    let s = json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 1000,
        "items": {"type": "string", "maxLength": 63}}},
        "x-kubernetes-validations": [{"rule": "self.l.all(x, x.matches('^[\\\\p{L}\\\\p{N}]{1,63}$'))",
            "message": "names are letters and digits"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let names: Vec<String> = (0..1000).map(|i| format!("náme{i}")).collect();
    assert!(r.validate(&json!({"l": names}), None).is_empty());
    let bad = json!({"l": ["ok", "not ok"]});
    assert_eq!(
        r.validate(&bad, None)[0].message,
        "Invalid value: \"object\": names are letters and digits"
    );
}

#[test]
fn regexes_over_the_size_limit_are_refused() {
    // At CRD creation when literal.
    let s = json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 10}},
        "x-kubernetes-validations": [{"rule": "self.s.matches('\\\\p{L}{1000}')"}]});
    let errs = Rules::compile(&s, "s").unwrap_err();
    assert!(
        errs[0].field == "s.x-kubernetes-validations[0].rule"
            && errs[0]
                .message
                .contains("compilation failed: invalid regex"),
        "{errs:?}"
    );
    // When it runs when taken from the object.
    let s = json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 10},
        "p": {"type": "string", "maxLength": 100}},
        "x-kubernetes-validations": [{"rule": "self.s.matches(self.p)"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let causes = r.validate(&json!({"s": "a", "p": "\\p{L}{1000}"}), None);
    assert!(
        causes[0].message.contains("exceeds size limit"),
        "{causes:?}"
    );
    assert!(r.validate(&json!({"s": "a", "p": "^a$"}), None).is_empty());
    // A dynamic pattern is priced as a compile per call.
    let per_item = estimate_on(
        "self.l.all(x, x.matches(self.p))",
        json!({"l": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 10}},
            "p": {"type": "string", "maxLength": 10}}),
    );
    assert!(
        per_item >= 100 * super::cost::REGEX_COMPILE_COST,
        "{per_item}"
    );
}

#[test]
fn big_results_are_refused_before_they_are_built() {
    // Within the estimate (an unbounded string is a request's worth), but
    // a 2 MiB string with 'ab' between every two characters is 6 MiB.
    let s = json!({"type": "object", "properties": {"s": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.s.replace('', 'ab').size() > 0"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let causes = r.validate(&json!({"s": "x".repeat(2 << 20)}), None);
    assert!(
        causes[0].message.contains("over the limit") && causes[0].message.contains("replace"),
        "{causes:?}"
    );
    assert!(r.validate(&json!({"s": "xyz"}), None).is_empty());
}

#[test]
fn the_deadline_stops_a_rule_mid_loop_and_the_rules_after_it() {
    // 490,000 steps, within the estimate; a deadline 20 ms away stops them.
    let s = json!({"type": "object", "properties": {"l": ints(700),
        "n": {"type": "integer"}},
        "x-kubernetes-validations": [
            {"rule": "self.l.all(a, self.l.all(b, a + b >= 0 || b != 1))"},
            {"rule": "self.n > 0"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let l: Vec<i64> = (0..700).collect();
    let obj = json!({"l": l, "n": 0});
    let start = std::time::Instant::now();
    let causes = r.validate_until(&obj, None, start + std::time::Duration::from_millis(20));
    // Stopped, with the budget's message (run to its end, the first rule
    // passes and only the second fails).
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        causes[0].message,
        "Invalid value: \"object\": validation failed due to running out of cost budget, \
         no further validation rules will be run"
    );
    // Given the time, both run (and the second fails).
    let small = json!({"l": [1, 2, 3], "n": 0});
    let causes = r.validate(&small, None);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(causes[0].message.ends_with("failed rule: self.n > 0"));
}

#[test]
fn an_expired_loop_is_not_absorbed_by_a_false_step() {
    // `all` keeps an error only until a later step is false; the deadline
    // must win anyway.
    let s = json!({"type": "object", "properties": {"l": ints(700)},
        "x-kubernetes-validations": [{"rule": "self.l.all(a, self.l.exists(b, b == a + 1))"}]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let l: Vec<i64> = (0..700).collect();
    let start = std::time::Instant::now();
    let causes = r.validate_until(&json!({"l": l}), None, start);
    assert!(
        causes[0].message.contains("running out of cost budget"),
        "{causes:?}"
    );
}

#[test]
fn the_checked_functions_keep_their_meaning() {
    let s = json!({"type": "object", "properties": {"n": {"type": "integer"}},
    "x-kubernetes-validations": [
        {"rule": "[[1, 2], [3], 4].flatten() == [1, 2, 3, 4]"},
        {"rule": "[[1, [2]]].flatten(0) == [[1, [2]]]"},
        {"rule": "['a', 'b'].join('-') == 'a-b' && ['a', 'b'].join() == 'ab' && [].join(',') == ''"},
        {"rule": "'aaa'.replace('a', 'b', 2) == 'bba' && 'aaa'.replace('a', 'b', -1) == 'bbb'"},
        {"rule": "'ab'.replace('', '-') == '-a-b-' && 'ab'.replace('x', 'y') == 'ab'"},
        {"rule": "'abc'.matches('^a') && matches('abc', 'c$') && !'abc'.matches('^b')"},
        {"rule": "[1, 2].all(x, [3, 4].exists(y, x < y)) && [1, 2].exists_one(x, x == 2)"},
        {"rule": "[3, 1, 2].sortBy(x, x) == [1, 2, 3] && [1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]"},
    ]});
    let r = Rules::compile(&s, "s").unwrap().unwrap();
    let causes = r.validate(&json!({"n": 1}), None);
    assert!(causes.is_empty(), "{causes:#?}");
    let bad = json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "[[1], -1].flatten(-1) == []"}]});
    let r = Rules::compile(&bad, "s").unwrap().unwrap();
    let causes = r.validate(&json!({"n": 1}), None);
    assert!(
        causes[0].message.contains("level must be non-negative"),
        "{causes:?}"
    );
}
