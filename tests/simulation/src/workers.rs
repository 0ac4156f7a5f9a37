//! The functions the simulation runs: an activity whose every run draws its behaviour (return,
//! fail, panic, hang past its lease, return just after it) from the seed or a tape, and three
//! workflows through the `workflow` crate (a fan-out to activities with a durable sleep, a
//! workflow calling that one and an activity, and a workflow awaiting a durable promise that
//! clients complete), so children, join sets, timers and promises are exercised.

use crate::{faults::Chaos, tape::Behaviour};
use chrono::{DateTime, Utc};
use concepts::{ClockFn, ComponentId, DbConnection};
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
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
/// Awaits its durable promise ([`PROMISE`]), which a client completes with a number, and
/// returns `DOUBLE` of that number: the workflow's result shows the value it was given.
pub const PROMISED: Function<u64, u64> = Function::new("sim:work/flows.promised");
/// The name of `PROMISED`'s promise.
pub const PROMISE: &str = "answer";

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

/// The activity worker: `DOUBLE`, each run doing what `chaos` says (drawn, or from a tape).
///
/// # Errors
/// Never: the registration is legal.
pub fn activities(
    chaos: Arc<Chaos>,
    lease: Duration,
    clock: SimClock,
) -> Result<ActivityWorker, RegistrationError> {
    ActivityWorker::new().register(&DOUBLE, move |ctx: ActivityCtx, n: u64| {
        let behaviour = chaos.behaviour(lease);
        let clock = clock.clone();
        async move {
            match behaviour {
                Behaviour::Return(polls) => Polls(polls).await,
                Behaviour::Fail => return Err(format!("simulated failure of double({n})")),
                Behaviour::Panic => panic!("{PANIC_MARKER}"),
                Behaviour::Hang(by) | Behaviour::Late(by) => {
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

/// The workflow worker: `FAN`, `NEST` and `PROMISED`, over `db` (the faulty store).
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
        .register(&NEST, nest)?
        .register(&PROMISED, promised)
}

/// The parameter with which `FAN` and `PROMISED` panic once their children or their promise
/// are started: a bug in workflow code, retried and then a permanent trap that finishes the
/// workflow while its children or its promise are unfinished (its tree kept from the pruner
/// until they finish).
pub const TRAP: u64 = 4;

async fn fan(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let doubles = ctx.join_set();
    for k in 1..=n {
        doubles.submit(&DOUBLE, &k);
    }
    if n == TRAP {
        // Children are created at the next wait: this one gets them written first.
        ctx.sleep(Duration::from_millis(100)).await;
        panic!("{PANIC_MARKER}");
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

async fn promised(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let promise = ctx.promise::<u64>(PROMISE);
    if n == TRAP {
        ctx.sleep(Duration::from_millis(100)).await;
        panic!("{PANIC_MARKER}");
    }
    let value = promise.wait().await?;
    Ok(ctx.call(&DOUBLE, &value).await?)
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
