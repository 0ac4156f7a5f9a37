//! Shrinking a failing run: fewer faulty steps, fewer fault kinds, fewer executions, as long as
//! the same invariant still breaks.

use crate::world::{Config, Violation, run};

/// The most runs one shrink tries.
const MAX_TRIES: u32 = 80;

/// A smaller run that breaks the same invariant as `violation` (the same one when nothing
/// smaller does), and how many runs were tried.
#[must_use]
pub fn shrink(violation: &Violation) -> (Violation, u32) {
    let target = violation.broken.invariant;
    let mut best = violation.clone();
    let mut tries = 0;
    let attempt = |config: Config, tries: &mut u32| -> Option<Violation> {
        if *tries >= MAX_TRIES {
            return None;
        }
        *tries += 1;
        run(&config, false)
            .violation
            .filter(|found| found.broken.invariant == target)
    };
    // A violation found during the faulty steps needs no later ones.
    if best.step < best.config.steps {
        let config = Config {
            steps: best.step,
            ..best.config
        };
        if let Some(found) = attempt(config, &mut tries) {
            best = found;
        }
    }
    // Each fault kind that is not needed goes.
    for kind in best.config.faults.kinds().collect::<Vec<_>>() {
        let config = Config {
            faults: best.config.faults.without(kind),
            ..best.config
        };
        if let Some(found) = attempt(config, &mut tries) {
            best = found;
        }
    }
    // Fewer executions.
    while best.config.executions > 1 {
        let config = Config {
            executions: best.config.executions - 1,
            ..best.config
        };
        match attempt(config, &mut tries) {
            Some(found) => best = found,
            None => break,
        }
    }
    // Fewer faulty steps: a half, a quarter or an eighth fewer, while it still breaks.
    loop {
        let steps = best.config.steps;
        let shorter = [steps / 2, steps * 3 / 4, steps * 7 / 8]
            .into_iter()
            .filter(|&candidate| candidate < steps)
            .find_map(|candidate| {
                let config = Config {
                    steps: candidate,
                    ..best.config
                };
                attempt(config, &mut tries)
            });
        match shorter {
            Some(found) => best = found,
            None => break,
        }
    }
    (best, tries)
}
