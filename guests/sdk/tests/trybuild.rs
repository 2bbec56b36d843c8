//! The typestate guarantee: a provider transition compiles only along a declared edge.

#[test]
fn transitions_compile_only_along_declared_edges() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/declared_edge.rs");
    t.compile_fail("tests/ui/undeclared_edge.rs");
}
