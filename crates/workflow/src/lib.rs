//! Workflows as ordinary async Rust on Stele: a workflow is an
//! `async fn(WorkflowCtx, P) -> Result<R, WorkflowError<E>>`, an activity an
//! `async fn(ActivityCtx, P) -> Result<R, E>`, and this crate records every durable step of a
//! workflow in its execution log, replays it after a crash or on another machine, and detects
//! when the code no longer matches the log.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use concepts::{ComponentId, DbConnection};
//! use executor::Now;
//! use serde::{Deserialize, Serialize};
//! use workflow::{ActivityCtx, Client, Function, Response, WorkflowCtx, WorkflowError, WorkflowWorker, ActivityWorker};
//!
//! // Typed handles: the function's name plus its parameter and result types.
//! const DOUBLE: Function<u64, u64> = Function::new("demo:math/api.double");
//! const SUM_OF_DOUBLES: Function<Vec<u64>, u64> = Function::new("demo:math/flows.sum-of-doubles");
//!
//! async fn double(_ctx: ActivityCtx, n: u64) -> Result<u64, String> {
//!     n.checked_mul(2).ok_or_else(|| format!("{n} is too large to double"))
//! }
//!
//! async fn sum_of_doubles(ctx: WorkflowCtx, numbers: Vec<u64>) -> Result<u64, WorkflowError<String>> {
//!     let first = ctx.call(&DOUBLE, &1).await?;           // a child, awaited; `?` propagates its failure
//!     let doubles = ctx.join_set();                       // children that run in parallel
//!     for n in &numbers {
//!         doubles.submit(&DOUBLE, n);
//!     }
//!     let mut sum = first;
//!     while let Some(response) = doubles.next().await {   // in arrival order
//!         if let Response::Child(child) = response {
//!             sum += child.into_result::<u64>()?;
//!         }
//!     }
//!     ctx.sleep(Duration::from_secs(1)).await;            // durable: survives restarts
//!     let salt = ctx.random_u64(0..=9).await;             // recorded, the same on replay
//!     Ok(sum + salt - salt)
//! }
//!
//! // A program runs them in a node (the `node` crate), which registers the functions with its
//! // executors and runs the timers watcher the durable sleep needs:
//! //     let node = Node::builder(db.clone(), Now)
//! //         .workflow(&SUM_OF_DOUBLES, sum_of_doubles)
//! //         .activity(&DOUBLE, double)
//! //         .start()?;
//! // and submits through a client, from that process or any other:
//! async fn run(db: Arc<dyn DbConnection>) -> anyhow::Result<u64> {
//!     let client = Client::new(db, Now, ComponentId::new("demo", "flows")?);
//!     let handle = client.submit(&SUM_OF_DOUBLES, &vec![1, 2, 3]).await?;
//!     Ok(handle.result_within(Duration::from_secs(30)).await?)
//! }
//! # let _ = run;
//!
//! // Without a node, `WorkflowWorker` and `ActivityWorker` are the workers an executor runs:
//! fn workers(db: Arc<dyn DbConnection>) -> anyhow::Result<(WorkflowWorker<Now>, ActivityWorker)> {
//!     let workflows = WorkflowWorker::new(db, Now).register(&SUM_OF_DOUBLES, sum_of_doubles)?;
//!     let activities = ActivityWorker::new().register(&DOUBLE, double)?;
//!     Ok((workflows, activities))
//! }
//! # let _ = workers;
//! ```
//!
//! # What each operation records
//!
//! | operation | records |
//! |---|---|
//! | [`WorkflowCtx::call`] | `JoinSetCreate(o:<n>-<fn>)`, `JoinSetRequest(child)` with the child's creation, `JoinNext` |
//! | [`WorkflowCtx::sleep`] | `JoinSetCreate(o:<n>)`, `JoinSetRequest(delay)`, `JoinNext` |
//! | [`WorkflowCtx::join_set`], [`WorkflowCtx::join_set_named`] | `JoinSetCreate(g:<n>)` / `JoinSetCreate(n:<name>)` |
//! | [`JoinSet::submit`], [`JoinSet::submit_delay`] | `JoinSetRequest` (+ the child's creation) |
//! | [`WorkflowCtx::promise`] | `JoinSetCreate(n:<name>)`, `JoinSetRequest` with the creation of the stub child `<id>.n:<name>_1` (`stele:stub.<name>`) |
//! | [`JoinSet::submit_promise`] | `JoinSetRequest` with the creation of a stub child |
//! | [`Promise::wait`], [`Promise::wait_within`] | `JoinNext` (after a `JoinSetRequest(delay)` for `wait_within`) |
//! | [`JoinSet::next`] | `JoinNext`, answered by the set's next response in arrival order |
//! | [`WorkflowCtx::now`], [`WorkflowCtx::random_u64`], [`WorkflowCtx::random_string`], [`WorkflowCtx::uuid`], [`WorkflowCtx::step`] | `Persist` |
//!
//! Child ids are `<parent>.<join set>_<k>`; new events are written in one append (with the
//! children they create) at the next point where the workflow waits or ends. When the workflow
//! returns, every child it did not consume is awaited (closing `JoinNext`s); a failed one makes
//! it fail with `UnhandledChildExecutionError`. Delays and promises nobody awaits are dropped.
//!
//! # Promises and cancellation
//!
//! A durable promise ([`WorkflowCtx::promise`]) is a child execution of a stub function
//! (`concepts::FunctionFqn::stub`), which no executor runs: whoever knows its id
//! ([`Promise::id`], or [`promise_id`] from the workflow's id and the promise's name) completes
//! it once with [`Client::complete`], which answers the workflow in the same transaction. The
//! workflow awaits it like a child, warm or cold, and gives it a deadline like a child's, with
//! a delay in its join set ([`Promise::wait_within`]). When the workflow finishes, the promises
//! of the run nobody completed are cancelled, so that no member of its tree stays unfinished.
//!
//! [`Client::cancel`] finishes an execution and its unfinished descendants with
//! `Err(Cancelled { reason })`. A workflow that awaits a cancelled child gets it like any
//! failure, as [`FunctionFailure::Cancelled`]. A workflow run waiting warm when its own
//! execution is cancelled ends without writing anything more; an activity learns it through
//! [`ActivityCtx::cancelled`] and can stop early. Whatever either writes afterwards is refused
//! and logged by the executor as a lost race.
//!
//! [`Client::submit_with_id`] takes the caller's id as an idempotency key: repeated with the
//! same function and parameters it writes nothing and says the execution already existed
//! ([`Submitted::created`]); with others it is a [`ClientError::Conflict`].
//!
//! # Replay and determinism
//!
//! A run first replays the recorded history: each operation checks that the next recorded
//! event is what it would record (kind, join set, child id, persist kind, and a child's
//! function and parameters, read back from the children's `Created` events once per run
//! before the replay). A delay's duration is not compared: its expiry was computed from the
//! time of the first run. A mismatch is reported as
//! `the replay diverged at version V: the log holds X, the code Y (at file:line:column)`, the
//! source location of the operation the code made (the finished error reads
//! `nondeterminism detected: the replay diverged at ...`), and the worker's
//! [`NondeterminismPolicy`] decides: park the execution (the default: one `Unlocked` event,
//! no executor locks it until a probe finds that the code running now replays its log without
//! diverging; see [`NondeterminismPolicy::Park`]), or fail it permanently.
//!
//! The workflow's future is polled by this crate alone, with a waker nobody wakes: the only
//! things that complete inside a workflow are its operations. Awaiting anything else (a tokio
//! sleep, a channel, I/O), or two operations at once (`join!`, `select!`), is a determinism
//! violation, reported under the same policy; concurrency goes through join sets.
//!
//! # Changing a workflow's code
//!
//! Executions in flight replay their logs through the code that runs now, so a change of a
//! workflow's code must keep agreeing with the logs recorded by the code before it. A change
//! goes behind a patch ([`WorkflowCtx::patched`]); its life, step by step, for a workflow that
//! charges an order and must now charge it with tax:
//!
//! 1. Version 1 calls `ctx.call(&CHARGE, &order).await?`.
//! 2. Version 2 writes
//!    `if ctx.patched("charge-with-tax").await { ctx.call(&CHARGE_WITH_TAX, &order).await? }
//!    else { ctx.call(&CHARGE, &order).await? }`. A new execution, or one whose log ends
//!    before this point, records the patch's marker and takes the new branch; an execution
//!    whose log (recorded by version 1) holds something else here gets `false` and replays
//!    the old branch.
//! 3. Before deploying it, check it against recorded histories in a test: `stele executions
//!    export ID` prints one as JSON, and a [`Replayer`] replays it through the code without a
//!    store, naming the first event that differs, what the code did instead and where
//!    ([`ReplayError::Nondeterminism`]). The `order` example of the `cli` crate does this with
//!    its `order/history.json`.
//! 4. Once no execution that started before version 2 is unfinished
//!    (`stele executions list --ffqn ... --state ...` shows them), version 3 retires the patch:
//!    it keeps only the new branch and writes `ctx.deprecate_patch("charge-with-tax").await`
//!    where the patch was, so that the logs that hold the marker still replay.
//! 5. Once none of those is unfinished either, version 4 drops that line too.
//!
//! Removing a patch whose marker is in the log of an unfinished execution (skipping step 4) is
//! nondeterminism, handled by the worker's [`NondeterminismPolicy`]; under the default policy
//! the execution is parked, and deploying code that agrees with its log takes it up again.
//!
//! # Waiting
//!
//! A wait that can end within the lease is **warm**: the buffered events are written with
//! `run_expires_at` = the lease's end, and the run waits for responses in memory
//! (`subscribe_to_next_responses`), going on without a replay. A wait that cannot (a long
//! sleep), or one still waiting shortly before the lease ends (the last tenth of it, bounded
//! by the clock and by as much real time), is **cold**: the run ends and whoever locks the
//! execution when its response arrives replays it.
//!
//! A child the run waits for alone (its only unanswered request), run by an executor of the
//! same process, hands its result to the run instead of writing it: the run goes on at once
//! and records the child's `Finished` with its next write, so a step of `call`s commits once
//! (`docs/SEMANTICS.md` §6).
//!
//! Once a run has written a warm `JoinNext`, the execution is blocked, or due only at the
//! lease's end, so later `JoinNext`s are needed by nobody until the run ends: a buffer of
//! `JoinNext`s only is written with the next request, when the run gives up, or with the
//! result. A fan-out of n children therefore costs two writes of the parent, not n. Requests
//! are always written before the run waits: the children they create must exist.
//!
//! The result goes back to the executor as `WorkerResult::Ok` after the buffer is written with
//! `run_expires_at` = the lease's end, so nobody locks the execution between that write and
//! the executor's `Finished`: the last step is never replayed.
//!
//! This crate knows no storage backend and reads time only from the `ClockFn` it is given.

mod client;
mod ctx;
mod driver;
mod error;
mod function;
mod join_set;
mod replay;
mod schedules;
mod state;
mod store;
mod worker;

pub use client::{Client, ExecutionHandle, Submitted};
pub use ctx::{ChildResponse, Response, WorkflowCtx};
pub use driver::NondeterminismPolicy;
pub use error::{ChildError, ClientError, FunctionFailure, RegistrationError, WorkflowError};
pub use function::Function;
pub use join_set::{ChildOptions, JoinSet, Promise, TypedJoinSet, promise_id};
pub use replay::{RecordedChild, RecordedHistory, ReplayError, Replayer};
pub use schedules::Schedules;
pub use worker::{ActivityCtx, ActivityWorker, WorkflowWorker};

#[cfg(test)]
mod tests;
