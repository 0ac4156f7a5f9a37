//! Parsing recorded libtest output: outcomes, captured sections, skip reasons.

use super::*;

/// What `cargo test --test conformance -- --show-output` printed for a binary with a passing,
/// a skipped, a nested, an ignored and a failing test.
const MIXED: &str = "
running 5 tests
test e3_trap ... ok
test inner::s2_nested ... ok
test p1_reopen ... ignored, why not
test s1_lifecycle ... ok
test s10_join ... FAILED

successes:

---- inner::s2_nested stdout ----
hello

---- s1_lifecycle stdout ----
some log
SKIPPED: not persistent


successes:
    e3_trap
    inner::s2_nested
    s1_lifecycle

failures:

---- s10_join stdout ----
before fail

thread 's10_join' (8596) panicked at tests/conformance.rs:3:50:
boom
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    s10_join

test result: FAILED. 3 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.09s
";

#[test]
fn outcomes_of_every_test_are_read() {
    let run = parse(MIXED);
    let outcomes: Vec<(&str, Outcome)> = run
        .outcomes
        .iter()
        .map(|(name, outcome)| (name.as_str(), *outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("e3_trap", Outcome::Passed),
            ("inner::s2_nested", Outcome::Passed),
            ("p1_reopen", Outcome::Ignored),
            ("s10_join", Outcome::Failed),
            ("s1_lifecycle", Outcome::Passed),
        ]
    );
    assert!(run.finished);
}

#[test]
fn captured_sections_end_at_the_next_header_or_the_closing_list() {
    let run = parse(MIXED);
    assert_eq!(run.outputs["inner::s2_nested"], "hello");
    assert_eq!(
        run.outputs["s1_lifecycle"],
        "some log\nSKIPPED: not persistent"
    );
    let failure = &run.outputs["s10_join"];
    assert!(failure.starts_with("before fail\n"), "{failure}");
    assert!(failure.contains("boom"), "{failure}");
    assert!(!failure.contains("failures:"), "{failure}");
    assert_eq!(run.outputs.len(), 3);
}

#[test]
fn skip_reason_is_read_from_the_captured_output() {
    let run = parse(MIXED);
    assert_eq!(run.skip_reason("s1_lifecycle"), Some("not persistent"));
    assert_eq!(run.skip_reason("inner::s2_nested"), None);
    assert_eq!(run.skip_reason("e3_trap"), None);
    assert_eq!(run.skip_reason("no_such_test"), None);
}

#[test]
fn a_binary_that_stopped_half_way_is_not_finished() {
    let run = parse("\nrunning 2 tests\ntest s1 ... ok\n");
    assert!(!run.finished);
    assert_eq!(run.outcomes.len(), 1);
    let run = parse("");
    assert!(!run.finished);
    assert!(run.outcomes.is_empty());
}

#[test]
fn lines_that_only_look_like_outcomes_are_left_alone() {
    let run = parse(
        "test s1 ... ok\n\
         test s2 has been running for over 60 seconds\n\
         test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
    );
    assert_eq!(run.outcomes.len(), 1);
    assert_eq!(run.outcomes["s1"], Outcome::Passed);
    assert!(run.finished);
}
