//! Deterministic simulation of Stele: one seed is one exact schedule of real executors, the
//! timers watcher, clients and workflows over the memory backend, with faults injected, and
//! the model's invariants checked after every step.
//!
//! A run ([`run`] of a [`Config`]) has two phases. During `config.steps` steps the harness
//! chooses from the seed what happens next: poll one task (an executor loop, a run it locked,
//! the watcher, a client), move the clock a little, submit an execution, kill a node (its
//! executors and their runs dropped at whatever await point they are), restart one, or jump
//! the clock; the store wrapper (`test_utils::forwarding::ForwardingDb` with [`SimHook`])
//! refuses writes before they commit, loses the replies of writes that committed, and loses
//! or delays wake-ups; the activity panics, fails, hangs past its lease or returns just after
//! it. Then faults stop, and every task is polled each step until everything finished, which
//! must happen within [`LIVENESS_BOUND`] of simulated time.
//!
//! After every step, [`invariants::check`] reads every log from the memory store and checks
//! the [`Invariant`]s: at most one `Finished` and nothing after it, dense versions, the stored
//! pending state equal to `derive_pending_state`, each child's result delivered to its parent
//! exactly once, and every write whose caller got a successful reply still in the log; and
//! the world's schedule, which a scheduler loop on each node fires, accounts for each of its
//! ticks exactly once (`Invariant::ScheduleOnce`).
//!
//! A failing run prints its seed, the invariant and the step; `STELE_SEED=<seed> cargo xtask
//! simulate` replays it exactly, and [`shrink`] looks for a shorter run (fewer faulty steps,
//! fault kinds and executions) that breaks the same invariant, whose schedule is printed.
//!
//! Nothing in a run reads the wall clock or depends on a thread: the runtime is tokio's
//! current-thread one with its clock paused (moved only with the `SimClock`), nothing is
//! spawned on it, every future is polled by the harness with a no-op waker, and every choice
//! comes from [`Rng`] streams of the seed. Two runs of one configuration have one
//! [`Outcome::fingerprint`].

pub mod faults;
pub mod invariants;
mod rng;
mod schedules;
mod shrink;
mod workers;
mod world;

pub use faults::{FaultKind, FaultSet, SimHook};
pub use invariants::Invariant;
pub use rng::Rng;
pub use shrink::shrink;
pub use workers::PANIC_MARKER;
pub use world::{Config, LEASE, LIVENESS_BOUND, Outcome, Violation, run};

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
