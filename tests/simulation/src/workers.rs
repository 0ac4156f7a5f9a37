//! The functions the simulation runs: an activity whose every run draws its behaviour (return,
//! fail, panic, hang past its lease, return just after it) from the seed, and two workflows
//! through the `workflow` crate (a fan-out to activities with a durable sleep, and a workflow
//! calling that one and an activity), so children, join sets and timers are exercised.

use crate::faults::{Chaos, FaultKind};
use crate::rng::Rng;
use chrono::{DateTime, Utc};
use concepts::{ClockFn, ComponentId, DbConnection};
use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};
use test_utils::SimClock;
use workflow::{
    ActivityCtx, ActivityWorker, Function, RegistrationError, Response, WorkflowCtx, WorkflowError,
    WorkflowWorker,
};

/// Doubles its parameter (when it does not fail).
pub const DOUBLE: Function<u64, u64> = Function::new("sim:work/activities.double");
/// Sums the doubles of `1..=n` computed by `n` children, then sleeps durably.
pub const FAN: Function<u64, u64> = Function::new("sim:work/flows.fan");
/// Calls `FAN(n)` and then `DOUBLE` of its result.
pub const NEST: Function<u64, u64> = Function::new("sim:work/flows.nest");

/// The component of every execution of the simulation.
///
/// # Panics
/// Never: the id is legal.
#[must_use]
pub fn component() -> ComponentId {
    ComponentId::new("sim", "work").expect("a legal component id")
}

/// The marker of the simulation's panics, which the runner's panic hook keeps quiet.
pub const PANIC_MARKER: &str = "simulated worker panic";

/// What one run of the activity does.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Returns after being polled this many times.
    Return(u32),
    /// Returns its error value (retried while retries are left).
    Fail,
    /// Panics.
    Panic,
    /// Returns once the clock passed its lease's end by this much.
    Past(Duration),
}

/// Draws the activity's behaviours.
pub struct Behaviours {
    rng: Mutex<Rng>,
    chaos: Arc<Chaos>,
    lease: Duration,
}

impl Behaviours {
    /// Behaviours drawn from `rng`; faults from `chaos` (while it is active).
    #[must_use]
    pub fn new(rng: Rng, chaos: Arc<Chaos>, lease: Duration) -> Arc<Self> {
        Arc::new(Self {
            rng: Mutex::new(rng),
            chaos,
            lease,
        })
    }

    fn draw(&self) -> Behaviour {
        if self.chaos.inject(FaultKind::WorkerPanic, 40) {
            return Behaviour::Panic;
        }
        if self.chaos.inject(FaultKind::WorkerHang, 40) {
            let leases = 1 + u32::try_from(self.chaos.below(FaultKind::WorkerHang, 3)).unwrap_or(0);
            return Behaviour::Past(self.lease * leases);
        }
        if self.chaos.inject(FaultKind::WorkerLate, 40) {
            let millis = 1 + self.chaos.below(FaultKind::WorkerLate, 200);
            return Behaviour::Past(Duration::from_millis(millis));
        }
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        if rng.chance(50) {
            Behaviour::Fail
        } else {
            Behaviour::Return(u32::try_from(rng.below(4)).unwrap_or(0))
        }
    }
}

/// The activity worker: `DOUBLE`, with drawn behaviours.
///
/// # Errors
/// Never: the registration is legal.
pub fn activities(
    behaviours: Arc<Behaviours>,
    clock: SimClock,
) -> Result<ActivityWorker, RegistrationError> {
    ActivityWorker::new().register(&DOUBLE, move |ctx: ActivityCtx, n: u64| {
        let behaviour = behaviours.draw();
        let clock = clock.clone();
        async move {
            match behaviour {
                Behaviour::Return(polls) => Polls(polls).await,
                Behaviour::Fail => return Err(format!("simulated failure of double({n})")),
                Behaviour::Panic => panic!("{PANIC_MARKER}"),
                Behaviour::Past(by) => {
                    Until {
                        clock,
                        at: concepts::add_saturating(ctx.deadline, by),
                    }
                    .await;
                }
            }
            Ok(n.saturating_mul(2))
        }
    })
}

/// The workflow worker: `FAN` and `NEST`, over `db` (the faulty store).
///
/// # Errors
/// Never: the registrations are legal.
pub fn workflows(
    db: Arc<dyn DbConnection>,
    clock: SimClock,
) -> Result<WorkflowWorker<SimClock>, RegistrationError> {
    WorkflowWorker::new(db, clock)
        .child_settings(component(), 2, Duration::from_millis(100))
        .register(&FAN, fan)?
        .register(&NEST, nest)
}

async fn fan(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let doubles = ctx.join_set();
    for k in 1..=n {
        doubles.submit(&DOUBLE, &k);
    }
    let mut sum = 0u64;
    while let Some(response) = doubles.next().await {
        if let Response::Child(child) = response {
            sum = sum.saturating_add(child.into_result::<u64>()?);
        }
    }
    ctx.sleep(Duration::from_millis(300)).await;
    Ok(sum)
}

async fn nest(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let sum = ctx.call(&FAN, &n).await?;
    Ok(ctx.call(&DOUBLE, &sum).await?)
}

/// Pending for a number of polls: a run that takes several steps of the schedule.
struct Polls(u32);

impl Future for Polls {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

/// Pending until the simulated clock reaches `at` (the harness polls every task itself).
struct Until {
    clock: SimClock,
    at: DateTime<Utc>,
}

impl Future for Until {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now() >= self.at {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
