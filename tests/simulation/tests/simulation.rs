//! The simulation as a test: a seed is one exact schedule, its tape replays it, and a few
//! seeds keep every invariant while every kind of fault is injected and every part of the
//! workload (promises, cancelled trees, pruning) is exercised. The CI-sized run is
//! `cargo xtask simulate --seeds 500` (a step of `cargo xtask ci`).

use simulation::{Config, FaultKind, Tape, replay, run};

#[test]
fn a_seed_is_one_exact_schedule() {
    simulation::quiet_simulated_panics();
    let config = Config::new(test_utils::seed());
    let first = run(&config, true);
    let again = run(&config, true);
    assert_eq!(first.schedule, again.schedule);
    assert_eq!(first.fingerprint, again.fingerprint);
    assert_eq!(first.injected, again.injected);
    assert_eq!(first.tape, again.tape);
    let other = run(&Config::new(config.seed.wrapping_add(1)), true);
    assert_ne!(
        first.fingerprint, other.fingerprint,
        "two seeds, one schedule"
    );
}

#[test]
fn a_tape_read_back_from_its_text_replays_its_run() {
    simulation::quiet_simulated_panics();
    let seed = test_utils::seed();
    for seed in [seed, seed.wrapping_add(1), seed.wrapping_add(2)] {
        let drawn = run(&Config::new(seed), true);
        let text = drawn.tape.to_text();
        let tape = Tape::parse(&text).expect("a tape reads back");
        assert_eq!(tape, drawn.tape, "seed {seed}");
        let replayed = replay(&tape, true);
        assert_eq!(replayed.schedule, drawn.schedule, "seed {seed}");
        assert_eq!(replayed.fingerprint, drawn.fingerprint, "seed {seed}");
        assert_eq!(replayed.injected, drawn.injected, "seed {seed}");
        assert_eq!(replayed.tape, drawn.tape, "seed {seed}");
    }
}

#[test]
fn seeds_keep_every_invariant_under_every_fault() {
    simulation::quiet_simulated_panics();
    let mut injected = [0; FaultKind::ALL.len()];
    let mut totals = simulation::Counts::default();
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
        assert!(
            outcome.counts.seen.executions >= 5,
            "seed {seed} ran its executions"
        );
        for (total, count) in injected.iter_mut().zip(outcome.injected) {
            *total += count;
        }
        let c = outcome.counts;
        for (total, count) in totals.completions.iter_mut().zip(c.completions) {
            *total += count;
        }
        totals.trees_cancelled += c.trees_cancelled;
        totals.seen.pruned_trees += c.seen.pruned_trees;
        totals.seen.held_back += c.seen.held_back;
        totals.schedule_fires += c.schedule_fires;
    }
    for (kind, count) in FaultKind::ALL.iter().zip(injected) {
        assert!(count > 0, "no {} was injected in 40 seeds", kind.name());
    }
    let [completed, repeated, refused] = totals.completions;
    assert!(
        completed > 0 && repeated > 0 && refused > 0,
        "promises completed, completed again with the same value and refused another: \
         {completed}, {repeated}, {refused}"
    );
    assert!(
        totals.trees_cancelled > 0,
        "no tree cancelled with children in flight"
    );
    assert!(totals.seen.pruned_trees > 0, "nothing pruned");
    assert!(
        totals.seen.held_back > 0,
        "no tree past retention held back by an unfinished member"
    );
    assert!(totals.schedule_fires > 0, "the schedule fired nothing");
}
