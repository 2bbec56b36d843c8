//! Server-side apply and non-apply updates (managed fields), and `fieldsV1`.

use arbitrary::Unstructured;
use wasmlet_apimachinery::builtin::BuiltinListTypes;
use wasmlet_apimachinery::managedfields::fieldpath::{PathElement, Set};
use wasmlet_apimachinery::managedfields::{self, ApplyError, Scope, Writer};

use crate::generate;

const NOW: &str = "2026-01-01T00:00:00Z";

pub fn apply(data: &[u8]) {
    let Some([live, config, other]) = generate::json_or_value::<3>(data) else {
        return;
    };
    let mut u = Unstructured::new(data);
    let (group, kind) = *u
        .choose(&[("", "Pod"), ("apps", "Deployment"), ("", "ConfigMap")])
        .unwrap_or(&("", "Pod"));
    let lists = BuiltinListTypes::for_apply(group, kind);
    let scope = if u.ratio(1, 3).unwrap_or(false) {
        Scope {
            subresource: Some("status".into()),
            ignored: vec![vec!["spec".into()]],
        }
    } else {
        Scope::default()
    };
    let force = u.arbitrary().unwrap_or(false);
    let alice = Writer::new("alice", "v1", &lists, NOW)
        .scoped(&scope)
        .forced(force);
    let bob = Writer::new("bob", "v1", &lists, NOW);

    // Whatever the live object (its managedFields included) and the
    // configuration: a result or an error, never a panic.
    let _ = managedfields::apply(Some(&live), &config, &alice);
    let _ = managedfields::update(Some(&live), &other, &bob);

    // Applying the same configuration twice is a no-op the second time.
    if let Ok(stored) = managedfields::apply(None, &config, &alice) {
        match managedfields::apply(Some(&stored), &config, &alice) {
            Ok(again) => assert_eq!(
                again, stored,
                "re-applying the same configuration changed the object"
            ),
            Err(e) => panic!("re-applying an accepted configuration failed: {e}"),
        }
        // Another manager's update, then alice's apply again: conflicts are
        // reported (without force), never an invalid live object.
        let updated = managedfields::update(Some(&stored), &other, &bob);
        if let Err(ApplyError::Invalid(m)) = managedfields::apply(Some(&updated), &config, &alice) {
            assert!(
                !m.contains("live object"),
                "an update produced a live object apply refuses: {m}"
            );
        }
    }

    // fieldsV1 parses, prints and parses to the same set.
    if let Ok(set) = Set::from_fields_v1(&other) {
        let printed = set.to_fields_v1();
        let again = Set::from_fields_v1(&printed).expect("a printed fieldsV1 parses");
        assert_eq!(again, set, "fieldsV1 round trip changed the set");
    }
    if let Ok(s) = generate::short_string(&mut u)
        && let Ok(pe) = PathElement::parse(&s)
    {
        assert_eq!(PathElement::parse(pe.as_str()).as_ref(), Ok(&pe));
    }
}
