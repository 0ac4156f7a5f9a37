//! The simulation as a test: a seed is one exact schedule, and a few seeds keep every
//! invariant while every kind of fault is injected. The CI-sized run is
//! `cargo xtask simulate --seeds 300` (a step of `cargo xtask ci`).

use simulation::{Config, FaultKind, run};

#[test]
fn a_seed_is_one_exact_schedule() {
    simulation::quiet_simulated_panics();
    let config = Config::new(test_utils::seed());
    let first = run(&config, true);
    let again = run(&config, true);
    assert_eq!(first.schedule, again.schedule);
    assert_eq!(first.fingerprint, again.fingerprint);
    assert_eq!(first.injected, again.injected);
    let other = run(&Config::new(config.seed.wrapping_add(1)), true);
    assert_ne!(
        first.fingerprint, other.fingerprint,
        "two seeds, one schedule"
    );
}

#[test]
fn seeds_keep_every_invariant_under_every_fault() {
    simulation::quiet_simulated_panics();
    let mut injected = [0; FaultKind::ALL.len()];
    for seed in 1..=40 {
        let outcome = run(&Config::new(seed), false);
        if let Some(violation) = outcome.violation {
            panic!(
                "seed {seed}, step {}: {}: {}; replay: {}",
                violation.step,
                violation.broken.invariant,
                violation.broken.detail,
                violation.config.replay_command()
            );
        }
        assert!(outcome.executions >= 5, "seed {seed} ran its executions");
        for (total, count) in injected.iter_mut().zip(outcome.injected) {
            *total += count;
        }
    }
    for (kind, count) in FaultKind::ALL.iter().zip(injected) {
        assert!(count > 0, "no {} was injected in 40 seeds", kind.name());
    }
}
