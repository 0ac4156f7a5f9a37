//! D1 across backends: for the printed seed (replay with `STELE_SEED`) and a few seeds derived
//! from it, the differential sequence runs on the memory backend (the reference) and on every
//! other backend, each time on a fresh store, and the canonical dumps must be identical.
//! A failure names the seed and the first line that differs.
//!
//! The stores are those of the backends' conformance runs (`test_support::factories`), so
//! PostgreSQL joins when `STELE_TEST_POSTGRES_URL` names a server (a fresh database per run,
//! dropped afterwards); without it the PostgreSQL test prints `SKIPPED: <reason>` and passes,
//! except under `CI=true`, where a missing server fails it.

use conformance::{
    StoreFactory,
    differential::{Dump, derive_seed, run_differential},
};
use std::time::Instant;
use test_support::factories::{MemoryFactory, PostgresFactory, SqliteFactory};

/// Seeds derived from the printed one and run after it.
const DERIVED_SEEDS: u64 = 3;

/// The printed seed, then the seeds derived from it.
fn seeds() -> Vec<u64> {
    let base = test_utils::seed();
    let mut seeds = vec![base];
    for idx in 1..=DERIVED_SEEDS {
        let seed = derive_seed(base, idx);
        eprintln!("derived seed #{idx} = {seed} (replays with the base seed)");
        seeds.push(seed);
    }
    seeds
}

/// A dump that compares nothing (no successes, or no refusals) would make equality vacuous.
fn assert_meaningful(dump: &Dump) {
    let ok = dump.lines.iter().filter(|l| l.contains(" -> Ok(")).count();
    let err = dump.lines.iter().filter(|l| l.contains(" -> Err(")).count();
    assert!(
        ok > 0 && err > 0,
        "seed {}: the dump has {ok} successes and {err} errors; nothing was compared",
        dump.seed
    );
}

/// Runs every seed on the memory reference and on `backend`; their dumps must be identical.
async fn compare_with_memory<F: StoreFactory>(backend: &F) {
    let started = Instant::now();
    let mut lines = 0;
    for seed in seeds() {
        let reference = run_differential(&MemoryFactory, seed).await;
        assert_meaningful(&reference);
        let dump = run_differential(backend, seed).await;
        reference.assert_same(
            &dump,
            &format!(
                "memory (left) vs {} (right), replay with {}=<base seed printed above>",
                backend.name(),
                test_utils::SEED_ENV
            ),
        );
        lines += dump.lines.len();
    }
    eprintln!(
        "memory and {} agree on {} seeds ({lines} dump lines) in {:?}",
        backend.name(),
        DERIVED_SEEDS + 1,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dumps_equal_memory_dumps() {
    test_utils::set_up();
    compare_with_memory(&SqliteFactory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dumps_equal_memory_dumps() {
    test_utils::set_up();
    if let Some(reason) = PostgresFactory.unavailable() {
        test_utils::skip("postgres_dumps_equal_memory_dumps", &reason);
        return;
    }
    compare_with_memory(&PostgresFactory).await;
}
