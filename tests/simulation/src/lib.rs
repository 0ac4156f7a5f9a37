//! Deterministic simulation of Stele: one seed is one exact schedule of real executors, timers
//! watchers, pruners, clients and workflows over the memory backend, with faults injected, and
//! the model's invariants checked after every step.
//!
//! A run ([`run`] of a [`Config`]) has two phases. During `config.steps` steps the harness
//! chooses from the seed what happens next: poll one task (an executor loop, a run it locked,
//! a node's watcher or pruner, a client), move the clock a little, submit an execution, cancel
//! one (often a tree with children in flight), complete a workflow's promise (sometimes with a
//! second, different value), kill a node (its executors and their runs, its watcher and its
//! pruner dropped at whatever await point they are) or only its watcher or its pruner, restart
//! what was killed, or jump the clock; the store wrapper (`test_utils::forwarding::ForwardingDb`
//! with [`SimHook`]) refuses writes before they commit, loses the replies of writes that
//! committed, and loses or delays wake-ups; the activity panics, fails, hangs past its lease or
//! returns just after it. Then faults stop, and every task is polled each step until everything
//! finished and the schedule ended, which must happen within [`LIVENESS_BOUND`] of simulated
//! time.
//!
//! Every choice of the faulty steps is recorded on the run's [`Tape`]; [`replay`] runs a tape
//! again, and a tape read back from its text is the same run.
//!
//! After every step the checks ([`invariants::check`] and the module `history`) read every
//! log from the memory store and check the [`Invariant`]s: at most one `Finished` and nothing
//! after it, dense versions, the stored pending state equal to `derive_pending_state`, each
//! child's result delivered to its parent exactly once, every write whose caller got a
//! successful reply still in the log (or pruned with its whole tree), a repeated submit
//! answered as the same execution; the world's schedule, which the watcher of each node fires,
//! accounts for each of its ticks exactly once and misses none it could have fired; each promise holds its first accepted completion and its workflow
//! returns what follows from it; a cancelled tree has no unfinished member and none joins it;
//! the pruner removes only whole finished trees past retention and leaves nothing of them.
//! Once faults stop, a tree due for pruning is gone within a bounded time; once the run is
//! over, the schedule handled every tick up to its end.
//!
//! A failing run prints its seed, the invariant and the step; `STELE_SEED=<seed> cargo xtask
//! simulate` replays it exactly, and [`shrink`] cuts its tape down (whole fault kinds,
//! executions, ranges of steps, single steps, single faults) while the same invariant still
//! breaks; the shrunk tape is printed and written to a file that `cargo xtask simulate
//! --replay` replays.
//!
//! Nothing in a run reads the wall clock or depends on a thread: the runtime is tokio's
//! current-thread one with its clock paused (moved only with the `SimClock`), nothing is
//! spawned on it, every future is polled by the harness with a no-op waker, and every choice
//! comes from [`Rng`] streams of the seed or from the tape. Two runs of one configuration have
//! one [`Outcome::fingerprint`].

mod components;
pub mod faults;
mod history;
pub mod invariants;
mod rng;
mod schedules;
mod shrink;
pub mod tape;
mod workers;
mod world;

pub use components::{LEASE, PRUNE_INTERVAL, RETENTION};
pub use faults::{FaultKind, FaultSet, SimHook};
pub use invariants::Invariant;
pub use rng::Rng;
pub use shrink::{Shrunk, shrink};
pub use tape::Tape;
pub use workers::PANIC_MARKER;
pub use world::{Config, Counts, LIVENESS_BOUND, Outcome, Violation, replay, run};

/// Keeps the panics the simulation injects off standard error (the executor catches them;
/// they are counted as faults); every other panic is reported as before. Idempotent.
pub fn quiet_simulated_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied());
            if message != Some(PANIC_MARKER) {
                previous(info);
            }
        }));
    });
}
