//! The driver of one workflow run: it polls the workflow's future itself, writes what the
//! workflow recorded when it must wait, waits warm or gives up the run cold, and turns the end
//! of the run into a [`WorkerResult`].
//!
//! The future is polled with a waker that nobody wakes: the only things that can complete
//! inside a workflow are workflow operations, which the driver re-polls after every new
//! response. A poll that returns `Pending` without an operation having registered a wait
//! means the workflow awaited something else (a timer, a channel, I/O): that is reported as a
//! determinism violation, never left hanging.
//!
//! A warm wait also watches the execution's cancellation: once someone else finished the
//! execution, the run ends without writing anything more (its next write would be refused).

use crate::{
    ctx::Shared,
    state::{Fault, Wait},
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    CreateRequest, DbError, ExecutionId, FinishedExecutionResult, FunctionFqn, HistoryEvent,
    JoinSetResponseEventOuter, Json, SupportedFunctionReturnValue, Version,
};
use executor::{FatalError, WorkerError, WorkerResult};
use futures_util::future::BoxFuture;
use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Duration,
};

/// Why a poll that returned `Pending` without a wait is a determinism violation.
const FOREIGN_AWAIT: &str = "the workflow awaited something that is not a workflow operation (a \
                             tokio sleep, a channel, I/O?); inside a workflow only `WorkflowCtx` \
                             and `JoinSet` operations may be awaited: use `ctx.sleep`, \
                             `ctx.call` or `ctx.step`";

/// What a workflow's future ends with (its join sets already closed).
pub(crate) enum Outcome {
    /// Its value.
    Value(Json),
    /// Its own error value.
    Failed(Json),
    /// A child failure it did not handle.
    UnhandledChild {
        child_execution_id: ExecutionId,
        root_cause_id: ExecutionId,
    },
    /// Its value or error could not be encoded.
    Trap(String),
}

/// What to do when a replay diverges from the log, or a workflow breaks determinism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NondeterminismPolicy {
    /// Keep the execution alive and park it: one `Unlocked` event with the reason, pending
    /// until [`concepts::PARKED_UNTIL`] and using up no retry, so that no executor locks it
    /// again while the code diverges. A prober (`executor::unpark`, which a node runs for each
    /// of its workers from its start, with pauses growing from a second to five minutes)
    /// replays its log through the worker's code without a lease and without writing
    /// ([`executor::Worker::probe`]), and unlocks it, due at once, only once the replay agrees
    /// with the log: a deployment with fixed code continues it within its first pass, and
    /// until then its log does not grow.
    #[default]
    Park,
    /// Finish the execution with `PermanentFailure { kind: NondeterminismDetected }`.
    Fail,
}

/// The storage a run needs; `store.rs` implements it over the storage traits.
#[async_trait]
pub(crate) trait RunIo: Send + Sync {
    /// Appends `events` at `version` and creates `children`, in one transaction. When
    /// `answered` (the batch creates one child, and the run waits for nothing else), a child
    /// started in this process hands its `Finished` to the run, which takes it as its response
    /// and records it with its next write.
    async fn append(
        &self,
        version: Version,
        now: DateTime<Utc>,
        events: Vec<HistoryEvent>,
        children: Vec<CreateRequest>,
        answered: bool,
    ) -> Result<Version, DbError>;

    /// Responses from index `start` on: at once if there are any, else when the next arrives.
    async fn next_responses(&self, start: usize)
    -> Result<Vec<JoinSetResponseEventOuter>, DbError>;

    /// The version of the `index`-th history event of the log, for error messages.
    async fn history_event_version(&self, index: usize) -> Option<Version>;

    /// The function and parameters of each of `children`, from their `Created` events.
    async fn children_created(
        &self,
        children: Vec<ExecutionId>,
    ) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError>;

    /// Completes once someone else finished this execution (a cancellation); asks nothing of
    /// the store until polled.
    fn cancelled(&self) -> BoxFuture<'static, FinishedExecutionResult>;

    /// Cancels `children` (promises nobody completed) at `now`; one already finished is left
    /// alone.
    async fn cancel(
        &self,
        children: Vec<ExecutionId>,
        now: DateTime<Utc>,
        reason: String,
    ) -> Result<(), DbError>;
}

/// The limits of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunLimits {
    /// The version the first append carries.
    pub version: Version,
    /// The lease's end: warm waits write it as `run_expires_at`.
    pub deadline: DateTime<Utc>,
    /// When a warm wait gives up the run (a margin before the deadline).
    pub give_up_at: DateTime<Utc>,
    /// The longest real time one wait for responses lasts before the clock is read again.
    pub wait_slice: Duration,
    pub policy: NondeterminismPolicy,
}

/// Runs the workflow's future to the end of this run.
pub(crate) async fn drive(
    shared: Arc<Shared>,
    future: BoxFuture<'static, Outcome>,
    io: &dyn RunIo,
    limits: RunLimits,
) -> WorkerResult {
    let mut driver = Driver {
        shared,
        io,
        version: limits.version,
        appended: false,
        limits,
        cancelled: None,
    };
    driver.run(future).await
}

struct Driver<'a> {
    shared: Arc<Shared>,
    io: &'a dyn RunIo,
    limits: RunLimits,
    version: Version,
    appended: bool,
    /// The execution's cancellation, watched from the first warm wait to the end of the run.
    cancelled: Option<BoxFuture<'static, FinishedExecutionResult>>,
}

enum Step {
    Done(Outcome),
    Blocked(Wait),
    Faulted(Fault),
}

impl Driver<'_> {
    async fn run(&mut self, mut future: BoxFuture<'static, Outcome>) -> WorkerResult {
        let requested = self.shared.lock().recorded_child_requests();
        if !requested.is_empty() {
            match self.io.children_created(requested).await {
                Ok(children) => self.shared.lock().recorded_children = children,
                Err(err) => return WorkerResult::Err(WorkerError::DbError(err)),
            }
        }
        loop {
            match self.poll(&mut future) {
                Step::Faulted(fault) => return self.report(fault).await,
                Step::Done(outcome) => return self.finish(outcome).await,
                Step::Blocked(wait) => {
                    if let Some(result) = self.wait(&wait).await {
                        return result;
                    }
                }
            }
        }
    }

    fn poll(&self, future: &mut BoxFuture<'static, Outcome>) -> Step {
        self.shared.lock().wait = None;
        let mut cx = Context::from_waker(Waker::noop());
        // A panic is a trap at the version this run reached (retried, then permanent), not an
        // activity trap at the version the run started from, which the log has moved past.
        let polled =
            match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                Ok(polled) => polled,
                Err(payload) => {
                    let message = payload
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| payload.downcast_ref::<&str>().copied())
                        .unwrap_or("a panic without a message");
                    return Step::Faulted(Fault::Trap(format!("the workflow panicked: {message}")));
                }
            };
        let mut state = self.shared.lock();
        if let Some(fault) = state.fault.take() {
            return Step::Faulted(fault);
        }
        match polled {
            Poll::Ready(outcome) => Step::Done(outcome),
            Poll::Pending => match state.wait.take() {
                Some(wait) => Step::Blocked(wait),
                None => Step::Faulted(Fault::Determinism(FOREIGN_AWAIT.to_string())),
            },
        }
    }

    /// Writes the buffered events with `JoinNext`s expiring at `run_expires_at`.
    async fn flush(&mut self, run_expires_at: DateTime<Utc>) -> Result<(), DbError> {
        let (mut events, children, answered): (_, Vec<CreateRequest>, _) = {
            let mut state = self.shared.lock();
            state.buffered_requests = 0;
            // No other response can come before the child's: its answer, handed over, takes
            // the place the run consumes it at.
            let answered = state.children.len() == 1 && state.unanswered_requests() == 1;
            (
                std::mem::take(&mut state.buffer),
                std::mem::take(&mut state.children),
                answered,
            )
        };
        if events.is_empty() {
            return Ok(());
        }
        for event in &mut events {
            if let HistoryEvent::JoinNext {
                run_expires_at: at, ..
            } = event
            {
                *at = run_expires_at;
            }
        }
        let now = (self.shared.clock)();
        // A child is created, and due, when the transaction that creates it commits.
        let children = children
            .into_iter()
            .map(|child| CreateRequest {
                created_at: now,
                scheduled_at: now,
                ..child
            })
            .collect();
        self.version = (self.io)
            .append(self.version, now, events, children, answered)
            .await?;
        self.appended = true;
        Ok(())
    }

    /// Blocked on a response: write, then wait warm or give up the run. `None` when the
    /// response arrived and the workflow can go on.
    async fn wait(&mut self, wait: &Wait) -> Option<WorkerResult> {
        let now = (self.shared.clock)();
        let give_up_at = self.limits.give_up_at;
        let cold = now >= give_up_at
            || self
                .shared
                .lock()
                .wait_outlasts(&wait.join_set_id, give_up_at);
        // Warm: nobody locks the execution before the deadline, even if the response arrives
        // at once. Cold: the response makes it due at once.
        let run_expires_at = if cold { now } else { self.limits.deadline };
        // Once this run has written a warm `JoinNext`, the execution is blocked or due only at
        // the deadline: nobody needs further `JoinNext`s until this run gives up or ends, so
        // a buffer of nothing else waits for the next write (a fan-out's awaits cost no
        // transaction each). Requests are written at once: their children must exist.
        let deferred = !cold && self.appended && self.shared.lock().awaits_only();
        if !deferred && let Err(err) = self.flush(run_expires_at).await {
            return Some(WorkerResult::Err(WorkerError::DbError(err)));
        }
        if cold {
            return Some(self.give_up().await);
        }
        // Bounded by the clock and by the same span of real time, so that a clock that does
        // not move (a simulated one) cannot keep a run waiting forever.
        let budget = (give_up_at - now).to_std().unwrap_or_default();
        let started = tokio::time::Instant::now();
        loop {
            let now = (self.shared.clock)();
            let by_clock = (give_up_at - now).to_std().unwrap_or_default();
            let left = by_clock.min(budget.saturating_sub(started.elapsed()));
            if left.is_zero() {
                return Some(self.give_up().await);
            }
            let start = self.shared.lock().response_count();
            let slice = left.min(self.limits.wait_slice);
            let io = self.io;
            let cancelled = self.cancelled.get_or_insert_with(|| io.cancelled());
            // Biased: a cancellation delivers the cancelled children's responses too, and
            // nothing the workflow would do with them could be written.
            let waited = tokio::select! {
                biased;
                result = cancelled => {
                    tracing::info!(
                        execution_id = %self.shared.lock().execution_id(),
                        "finished by someone else while waiting ({result:?}); the run ends \
                         without writing"
                    );
                    return Some(WorkerResult::DbUpdatedByWorker);
                }
                waited = tokio::time::timeout(slice, io.next_responses(start)) => waited,
            };
            match waited {
                Ok(Ok(responses)) if !responses.is_empty() => {
                    self.shared.lock().add_responses(responses);
                    return None;
                }
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(err)) => return Some(WorkerResult::Err(WorkerError::DbError(err))),
            }
        }
    }

    /// Ends the run while the execution waits, after writing what is buffered (warm: the
    /// `JoinNext`s expire at the deadline); whoever locks it later replays it.
    async fn give_up(&mut self) -> WorkerResult {
        if let Err(err) = self.flush(self.limits.deadline).await {
            return WorkerResult::Err(WorkerError::DbError(err));
        }
        if self.appended {
            WorkerResult::DbUpdatedByWorker
        } else {
            // Nothing written in this run: the lease expires and the watcher acts.
            WorkerResult::Err(WorkerError::TemporaryTimeoutHandledByWatcher)
        }
    }

    async fn finish(&mut self, outcome: Outcome) -> WorkerResult {
        let unreplayed = self
            .shared
            .lock()
            .unreplayed()
            .map(|(index, event)| (index, crate::state::describe(event)));
        if let Some((history_index, log_holds)) = unreplayed {
            let fault = Fault::Nondeterminism {
                history_index,
                log_holds,
                code_asked: "returned".to_string(),
                code_at: None,
            };
            return self.report(fault).await;
        }
        // The deadline, not now: nobody locks the execution before `Finished` is written.
        if let Err(err) = self.flush(self.limits.deadline).await {
            return WorkerResult::Err(WorkerError::DbError(err));
        }
        if !matches!(outcome, Outcome::Trap(_))
            && let Err(err) = self.cancel_unanswered_promises().await
        {
            return WorkerResult::Err(WorkerError::DbError(err));
        }
        match outcome {
            Outcome::Value(value) => WorkerResult::Ok(
                SupportedFunctionReturnValue::InfallibleOrResultOk(value),
                self.version,
            ),
            Outcome::Failed(value) => WorkerResult::Ok(
                SupportedFunctionReturnValue::FallibleResultErr(value),
                self.version,
            ),
            Outcome::UnhandledChild {
                child_execution_id,
                root_cause_id,
            } => WorkerResult::Err(WorkerError::FatalError(
                FatalError::UnhandledChildExecutionError {
                    child_execution_id,
                    root_cause_id,
                },
                self.version,
            )),
            Outcome::Trap(reason) => WorkerResult::Err(WorkerError::TemporaryWorkflowTrap {
                reason,
                detail: None,
                version: self.version,
            }),
        }
    }

    /// The workflow finishes: its promises nobody completed are cancelled, so that no member
    /// of its tree stays unfinished (which would also keep the tree from being pruned).
    /// Idempotent: a crashed run's successor cancels what is still unanswered.
    async fn cancel_unanswered_promises(&mut self) -> Result<(), DbError> {
        let (unanswered, execution_id) = {
            let state = self.shared.lock();
            (state.unanswered_stubs(), state.execution_id().clone())
        };
        if unanswered.is_empty() {
            return Ok(());
        }
        let reason = format!("workflow {execution_id} finished without awaiting this promise");
        self.io
            .cancel(unanswered, (self.shared.clock)(), reason)
            .await
    }

    async fn report(&mut self, fault: Fault) -> WorkerResult {
        let at = match &fault {
            Fault::Nondeterminism { history_index, .. } => {
                match self.io.history_event_version(*history_index).await {
                    Some(version) => format!("version {version}"),
                    None => format!("history event {history_index}"),
                }
            }
            Fault::Determinism(_) | Fault::Trap(_) => String::new(),
        };
        let reason = match fault {
            Fault::Trap(reason) => {
                return WorkerResult::Err(WorkerError::TemporaryWorkflowTrap {
                    reason,
                    detail: None,
                    version: self.version,
                });
            }
            fault => fault.reason(&at),
        };
        tracing::warn!(execution_id = %self.shared.lock().execution_id(), "{reason}");
        match self.limits.policy {
            NondeterminismPolicy::Park => WorkerResult::Err(WorkerError::Parked {
                reason,
                version: self.version,
            }),
            NondeterminismPolicy::Fail => WorkerResult::Err(WorkerError::FatalError(
                FatalError::NondeterminismDetected { reason },
                self.version,
            )),
        }
    }
}

/// How far a probe's replay got ([`probe`]).
pub(crate) enum Probed {
    /// The code agrees with every recorded event it reached.
    Agrees,
    /// The code diverges from the log, or breaks determinism.
    Diverges(Fault),
}

/// Replays `future` against the recorded history of `shared`'s state (made with
/// `RunState::probing`), polling it once: every response known is in the state, so the replay
/// runs until it ends, waits for a response that has not arrived, would record something new
/// (which a probe never does: no step's closure runs), or diverges. A trap or a panic is not a
/// divergence: a run handles it as it does any trap.
pub(crate) fn probe(shared: &Shared, future: &mut BoxFuture<'static, Outcome>) -> Probed {
    let mut cx = Context::from_waker(Waker::noop());
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)));
    let mut state = shared.lock();
    match state.fault.take() {
        Some(Fault::Trap(_)) => return Probed::Agrees,
        Some(fault) => return Probed::Diverges(fault),
        None => {}
    }
    match polled {
        Err(_panic) => Probed::Agrees,
        Ok(Poll::Ready(_)) => match state.unreplayed() {
            Some((history_index, event)) => Probed::Diverges(Fault::Nondeterminism {
                history_index,
                log_holds: crate::state::describe(event),
                code_asked: "returned".to_string(),
                code_at: None,
            }),
            None => Probed::Agrees,
        },
        Ok(Poll::Pending) if state.wait.is_some() || state.probe_reached_end => Probed::Agrees,
        Ok(Poll::Pending) => Probed::Diverges(Fault::Determinism(FOREIGN_AWAIT.to_string())),
    }
}
