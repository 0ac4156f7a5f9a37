//! Scenario ordering, the union over backends, and the rendered table.

use super::*;

fn backend(name: &str, stdout: &str) -> BackendRun {
    BackendRun {
        backend: name.to_owned(),
        run: libtest::parse(stdout),
    }
}

const MEMORY: &str = "
running 4 tests
test s1_lifecycle ... ok
test s10_join_sets ... ok
test e2_notified ... ok
test p1_reopen ... ok

successes:

---- p1_reopen stdout ----
SKIPPED: the store is not persistent


successes:
    e2_notified
    p1_reopen
    s10_join_sets
    s1_lifecycle

test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.20s
";

const SQLITE: &str = "
running 4 tests
test suite::s1_lifecycle ... ok
test suite::s2_expired_lease ... FAILED
test suite::d1_differential ... ok
test suite::p1_reopen ... ok

successes:

successes:
    suite::d1_differential
    suite::p1_reopen
    suite::s1_lifecycle

failures:

---- suite::s2_expired_lease stdout ----
thread 'suite::s2_expired_lease' panicked at tests/conformance.rs:1:1:
assertion failed


failures:
    suite::s2_expired_lease

test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.30s
";

#[test]
fn scenarios_sort_by_group_then_number() {
    let mut names = vec![
        "p3_durability",
        "zz_other",
        "s10_join_sets",
        "d1_differential",
        "e10_hanging",
        "s2_expired",
        "e2_notified",
        "s1_lifecycle",
        "setup_smoke",
        "p1_reopen",
        "w10_nondeterminism",
        "w2_sleep",
        "l10_watcher",
        "S3_upper",
        "l2_conflict",
        "c10_later",
        "c2_policy",
    ];
    names.sort_by(|a, b| scenario_order(a, b));
    assert_eq!(
        names,
        [
            "s1_lifecycle",
            "s2_expired",
            "S3_upper",
            "s10_join_sets",
            "e2_notified",
            "e10_hanging",
            "d1_differential",
            "p1_reopen",
            "p3_durability",
            "w2_sleep",
            "w10_nondeterminism",
            "l2_conflict",
            "l10_watcher",
            "c2_policy",
            "c10_later",
            "setup_smoke",
            "zz_other",
        ]
    );
}

#[test]
fn table_is_the_union_of_scenarios_over_backends() {
    let table = Table::new(&[backend("memory", MEMORY), backend("sqlite", SQLITE)]);
    let skip = Cell::Skip("the store is not persistent".to_owned());
    assert_eq!(
        table,
        Table {
            backends: vec!["memory".to_owned(), "sqlite".to_owned()],
            rows: vec![
                ("s1_lifecycle".to_owned(), vec![Cell::Pass, Cell::Pass]),
                (
                    "s2_expired_lease".to_owned(),
                    vec![Cell::Missing, Cell::Fail]
                ),
                ("s10_join_sets".to_owned(), vec![Cell::Pass, Cell::Missing]),
                ("e2_notified".to_owned(), vec![Cell::Pass, Cell::Missing]),
                (
                    "d1_differential".to_owned(),
                    vec![Cell::Missing, Cell::Pass]
                ),
                ("p1_reopen".to_owned(), vec![skip, Cell::Pass]),
            ],
        }
    );
    assert_eq!(
        table.counts(),
        Counts {
            passed: 6,
            failed: 1,
            skipped: 1
        }
    );
}

#[test]
fn rendered_table_aligns_columns_and_lists_skip_reasons() {
    let table = Table::new(&[backend("memory", MEMORY), backend("sqlite", SQLITE)]);
    let expected = "\
scenario          memory  sqlite
s1_lifecycle      pass    pass
s2_expired_lease  -       FAIL
s10_join_sets     pass    -
e2_notified       pass    -
d1_differential   -       pass
p1_reopen         skip    pass
skipped:
  p1_reopen on memory: the store is not persistent
";
    assert_eq!(table.render(), expected);
}

#[test]
fn ignored_test_is_a_skip_with_a_reason() {
    let table = Table::new(&[backend(
        "memory",
        "test s1_a ... ignored\ntest result: ok. 0 passed; 0 failed; 1 ignored\n",
    )]);
    assert!(
        matches!(&table.rows[0].1[0], Cell::Skip(reason) if reason.contains("#[ignore]")),
        "{table:?}"
    );
}

#[test]
fn empty_runs_render_a_header_only() {
    let table = Table::new(&[backend("memory", "")]);
    assert_eq!(table.render(), "scenario  memory\n");
    assert_eq!(table.counts(), Counts::default());
}

#[test]
fn backend_column_is_named_after_the_crate() {
    assert_eq!(backend_name("storage-sqlite"), "sqlite");
    assert_eq!(backend_name("other"), "other");
    assert_eq!(tail("a\nb\nc", 2), "b\nc");
    assert_eq!(tail("a", 5), "a");
}

#[test]
fn discovery_finds_backends_with_a_conformance_test() {
    let root = std::env::temp_dir().join(format!("xtask-discover-{}", std::process::id()));
    let make = |path: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    };
    make("crates/storage-sqlite/tests/conformance.rs");
    make("crates/storage-memory/tests/conformance.rs");
    make("crates/storage-postgres/src/lib.rs");
    make("crates/executor/tests/conformance.rs");
    let found = discover(&root);
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(found.unwrap(), ["storage-memory", "storage-sqlite"]);
}

#[test]
fn skip_reasons_are_grouped_per_backend() {
    let all_skipped = "\
test s1_a ... ok
test e1_b ... ok
successes:
---- s1_a stdout ----
SKIPPED: no server
---- e1_b stdout ----
SKIPPED: no server
successes:
test result: ok. 2 passed; 0 failed
";
    let some_skipped = "\
test s1_a ... ok
test s2_c ... ok
test e1_b ... ok
test p1_d ... ok
successes:
---- s1_a stdout ----
SKIPPED: slow
---- e1_b stdout ----
SKIPPED: slow
---- p1_d stdout ----
SKIPPED: not persistent
successes:
test result: ok. 4 passed; 0 failed
";
    let table = Table::new(&[backend("pg", all_skipped), backend("mem", some_skipped)]);
    assert_eq!(
        table.skip_notes(),
        [
            "all 2 scenarios on pg: no server",
            "s1_a, e1_b on mem: slow",
            "p1_d on mem: not persistent",
        ]
    );
    assert!(table.render().ends_with(
        "skipped:\n  all 2 scenarios on pg: no server\n  s1_a, e1_b on mem: slow\n  \
         p1_d on mem: not persistent\n"
    ));
}
