//! Unit tests of the differential test's own parts: run ids become ordinals, derived seeds
//! differ.

use super::*;

#[test]
fn run_ids_become_ordinals_of_first_appearance() {
    let a = RunId::from_parts(ID_MS, 1);
    let b = RunId::from_parts(ID_MS, 2);
    let mut lines = vec![format!("x {b} y {a}"), format!("{a}{b} Run_short")];
    normalize_run_ids(&mut lines);
    assert_eq!(
        lines,
        vec![
            "x Run#0 y Run#1".to_string(),
            "Run#1Run#0 Run_short".to_string()
        ]
    );
}

#[test]
fn derived_seeds_differ() {
    assert_ne!(derive_seed(7, 1), derive_seed(7, 2));
    assert_ne!(derive_seed(7, 1), 7);
}
