//! The CI step list and how its commands are shown.

use super::*;

#[test]
fn steps_run_in_the_documented_order() {
    let names: Vec<&str> = STEPS.iter().map(|step| step.name).collect();
    assert_eq!(
        names,
        [
            "fmt",
            "clippy",
            "tests",
            "doc tests",
            "docs",
            "dependency edges",
            "conformance",
            "simulation"
        ]
    );
}

#[test]
fn described_commands_can_be_pasted_into_a_shell() {
    let docs = STEPS.iter().find(|step| step.name == "docs").unwrap();
    assert_eq!(
        describe(&docs.action),
        "RUSTDOCFLAGS='-D warnings' cargo doc --no-deps --workspace --features cli/otel"
    );
    let tests = STEPS.iter().find(|step| step.name == "tests").unwrap();
    assert_eq!(
        describe(&tests.action),
        "cargo nextest run --workspace --features cli/otel -E \
         'not (package(storage-*) & kind(test) & binary(conformance))'"
    );
}
