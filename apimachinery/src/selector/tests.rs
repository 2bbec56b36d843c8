//! Unit tests of label and field selectors.

use std::collections::BTreeMap;

use serde_json::Value;

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
    let fs =
        FieldSelector::parse("status.phase!=Failed,metadata.name==web-0,spec.nodeName=n1").unwrap();
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

/// Found by the fuzzer (`selectors` target): terms were ordered by their raw
/// text, so `a=aa,a==b` printed as `a=b,a=aa`, which parsed and printed as
/// `a=aa,a=b`: printing was not a fixed point.
#[test]
fn a_printed_field_selector_parses_to_the_same_print() {
    let s = FieldSelector::parse("a=aa,a==b").unwrap();
    let printed = s.to_string();
    assert_eq!(FieldSelector::parse(&printed).unwrap().to_string(), printed);
    // Canonical input keeps upstream's order (sorted raw terms).
    assert_eq!(
        FieldSelector::parse("b=1,a!=2,a=3").unwrap().to_string(),
        "a!=2,a=3,b=1"
    );
}

/// Each bad value's error repeats the key: a set of 100,000 three-byte bad
/// values under a long key made a message of tens of megabytes. Past
/// `MAX_AGGREGATE_BYTES` the errors are counted, not listed.
#[test]
fn errors_of_a_huge_set_are_counted_not_listed() {
    let key = "k".repeat(60);
    let values: Vec<String> = (0..100_000).map(|i| format!("-{i}")).collect();
    let text = format!("{key} in ({})", values.join(","));
    let err = LabelSelector::parse(&text).unwrap_err().to_string();
    assert!(
        err.len() <= crate::selector::MAX_AGGREGATE_BYTES + 1024,
        "{} bytes",
        err.len()
    );
    assert!(
        err.starts_with("unable to parse requirement: [values[0]["),
        "{err:.200}"
    );
    assert!(err.ends_with("more errors]"), "{}", &err[err.len() - 80..]);
    // A few errors are all listed, as upstream.
    let err = LabelSelector::parse("a in (-x,-y)")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("values[0][a]") && err.contains("values[1][a]") && !err.contains("more"),
        "{err}"
    );
}

/// A set matches by binary search over its sorted values, whatever order
/// they were given in.
#[test]
fn a_set_matches_whatever_the_order_given() {
    let labels = BTreeMap::from([("a".to_string(), "m".to_string())]);
    let sel = LabelSelector::from_label_selector(
        &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["z", "m", "b", "m"]}]}),
    )
    .unwrap();
    assert!(sel.matches(&labels));
    assert_eq!(sel.requirements()[0].values(), ["b", "m", "z"]);
    let many: Vec<String> = (0..10_000).map(|i| format!("v{i}")).rev().collect();
    let sel = LabelSelector::parse(&format!("a notin ({})", many.join(","))).unwrap();
    assert!(sel.matches(&labels));
    assert!(!sel.matches(&BTreeMap::from([("a".to_string(), "v77".to_string())])));
}
