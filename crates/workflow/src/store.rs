//! Every storage call of the workflow layer, in one place: the run's appends, waits and
//! cancellations of its promises ([`RunStore`]), and the typed client's creates, result
//! waits, cancellations and completions.
//!
//! Kept small on purpose: when the storage traits change shape, this is the module to adapt.

use crate::driver::RunIo;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, ChildAnswer, CompleteOutcome,
    CompleteRequest, CreateRequest, DbClient, DbConnection, DbError, ExecutionEventInner,
    ExecutionId, FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetResponseEventOuter,
    Json, Lease, OutcomeWrite, Version, is_lost_race,
};
use executor::{Cancellation, LocalExecutors, Reservation, WorkerError, WorkerResult};
use futures_util::{FutureExt as _, future::BoxFuture};
use std::{collections::HashMap, sync::Arc, time::Duration};
use tokio::sync::{Mutex, oneshot};

/// The storage of one run of one execution.
pub(crate) struct RunStore {
    pub db: Arc<dyn DbConnection>,
    pub execution_id: ExecutionId,
    /// The executor's watch on the execution's end.
    pub cancellation: Cancellation,
    /// The executors of this process, which run the children they give a lease at once.
    pub local: LocalExecutors,
    /// The answers of the children this run started in its process.
    pub answers: Mutex<Answers>,
}

/// The answers of a run's children ([`executor::Answer`]): a child the run waits for alone,
/// started in its process, hands its `Finished` to the run instead of writing it; the run takes
/// it as its next response and records it with its next write, so that a step commits once.
#[derive(Default)]
pub(crate) struct Answers {
    /// The children that may still hand their `Finished` over.
    listening: Vec<oneshot::Receiver<OutcomeWrite>>,
    /// Answers the run took as responses and has not recorded yet, in the order it took them.
    taken: Vec<ChildAnswer>,
}

impl Answers {
    /// An answer handed over already, if any.
    fn ready(&mut self) -> Option<OutcomeWrite> {
        let mut found = None;
        self.listening.retain_mut(|answer| {
            if found.is_some() {
                return true;
            }
            match answer.try_recv() {
                Ok(write) => {
                    found = Some(write);
                    false
                }
                Err(oneshot::error::TryRecvError::Empty) => true,
                Err(oneshot::error::TryRecvError::Closed) => false,
            }
        });
        found
    }

    /// The next answer handed over; `None` once no child listens any more (each closed its
    /// channel: its run wrote its outcome itself).
    async fn handed(&mut self) -> Option<OutcomeWrite> {
        while !self.listening.is_empty() {
            let (handed, idx, _) =
                futures_util::future::select_all(self.listening.iter_mut()).await;
            self.listening.swap_remove(idx);
            if let Ok(write) = handed {
                return Some(write);
            }
        }
        None
    }

    /// Takes `write` as the run's response number `start`, to be recorded with the next write;
    /// `None` for an outcome that answers no parent (which a child's `Finished` always does).
    fn take(&mut self, write: OutcomeWrite, start: usize) -> Option<JoinSetResponseEventOuter> {
        let (_, response) = write.parent_response()?;
        self.taken.push(ChildAnswer {
            outcome: write,
            response_idx: u64::try_from(start).unwrap_or(u64::MAX),
        });
        Some(response)
    }

    /// Stops listening and returns every answer not recorded: those taken, then those handed
    /// over but not taken. A child that had not handed its answer over writes it itself.
    fn unrecorded(&mut self) -> Vec<OutcomeWrite> {
        let mut unrecorded: Vec<OutcomeWrite> = (self.taken.drain(..))
            .map(|answer| answer.outcome)
            .collect();
        for mut answer in self.listening.drain(..) {
            // Closed first: a send after this fails, and the child's run writes the outcome.
            answer.close();
            if let Ok(write) = answer.try_recv() {
                unrecorded.push(write);
            }
        }
        unrecorded
    }
}

impl RunStore {
    /// Records `outcomes` (children's answers) on their own, in one transaction; an answer
    /// somebody else recorded already (a lost race, an earlier attempt whose reply was lost) is
    /// no error. A retriable failure is tried again as a run's outcome write is, at least
    /// [`executor::OUTCOME_WRITE_ATTEMPTS`] times in all, before the children's leases are
    /// left to expire.
    async fn record(&self, outcomes: Vec<OutcomeWrite>) -> Result<(), DbError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let mut pauses = executor::outcome_retry_pauses(Duration::ZERO);
        loop {
            let err = match self.db.append_outcomes(outcomes.clone()).await {
                Ok(results) => {
                    for (outcome, result) in outcomes.iter().zip(results) {
                        match result {
                            Ok(_) => {}
                            // Recorded already only if the log holds this very outcome: a
                            // child whose lease expired before its answer was recorded may
                            // have been timed out, retried or cancelled since, and the run
                            // consumed a result its log contradicts.
                            Err(err) if is_lost_race(&err) => {
                                if !recorded_already(self.db.as_ref(), outcome).await {
                                    return Err(err);
                                }
                            }
                            Err(err) => return Err(err),
                        }
                    }
                    return Ok(());
                }
                Err(err) => err,
            };
            match pauses.next() {
                Some(pause) if err.is_retriable() => tokio::time::sleep(pause).await,
                _ => return Err(err),
            }
        }
    }

    /// Ends the run: the answers it did not record with a write are recorded now, before the
    /// executor writes the run's `result`; if that fails, the run ends with the store's error
    /// instead, and whoever runs the execution next replays it.
    pub(crate) async fn settle(&self, result: WorkerResult) -> WorkerResult {
        let unrecorded = self.answers.lock().await.unrecorded();
        match self.record(unrecorded).await {
            Ok(()) => result,
            Err(err) => {
                tracing::warn!(
                    execution_id = %self.execution_id,
                    "cannot record the answers of this run's children: {err}"
                );
                WorkerResult::Err(WorkerError::DbError(err))
            }
        }
    }
}

impl Drop for RunStore {
    /// A run that ended without [`RunStore::settle`] (its task was dropped) still records the
    /// answers it holds, in a task of its own.
    fn drop(&mut self) {
        let unrecorded = self.answers.get_mut().unrecorded();
        if unrecorded.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let db = Arc::clone(&self.db);
        runtime.spawn(async move {
            if let Err(err) = db.append_outcomes(unrecorded).await {
                tracing::warn!("cannot record the answers of a dropped run's children: {err}");
            }
        });
    }
}

#[async_trait]
impl RunIo for RunStore {
    async fn append(
        &self,
        version: Version,
        now: DateTime<Utc>,
        events: Vec<HistoryEvent>,
        children: Vec<CreateRequest>,
        answered: bool,
    ) -> Result<Version, DbError> {
        let leased = reserve(&self.local, &children, now);
        let mut answers = self.answers.lock().await;
        let request = AppendBatchRequest {
            execution_id: self.execution_id.clone(),
            version,
            now,
            events: events
                .into_iter()
                .map(|event| ExecutionEventInner::HistoryEvent { event })
                .collect(),
            children,
            leases: (leased.iter())
                .map(|(reservation, child)| Lease {
                    execution_id: child.execution_id.clone(),
                    locked: reservation.locked().clone(),
                })
                .collect(),
            // Kept until the write commits: if it fails, the run ends and records them alone.
            answers: answers.taken.clone(),
        };
        match self.db.append_batch(request).await {
            Ok(version) => {
                answers.taken.clear();
                for (reservation, child) in leased {
                    if answered && child.parent.is_some() {
                        let (answer, listening) = oneshot::channel();
                        answers.listening.push(listening);
                        reservation.start_answering(child, answer);
                    } else {
                        reservation.start(child);
                    }
                }
                Ok(version)
            }
            Err(err) => {
                if err.is_retriable() && !leased.is_empty() {
                    executor::start_if_written(self.db.as_ref(), leased).await;
                }
                Err(err)
            }
        }
    }

    /// The answer a child hands over, taken as response `start` and recorded with the next
    /// write, or the stored responses from `start` on. A run listening for answers waits for
    /// nothing else (it started a child when it had no other request unanswered), so it asks
    /// the store only once its children stopped listening (a child whose run wrote its outcome
    /// itself, a retry, say). Answers taken already and not recorded are recorded first when
    /// none other is handed over at once, so that the store holds every response the run
    /// consumed before the run waits.
    async fn next_responses(
        &self,
        start: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let mut answers = self.answers.lock().await;
        loop {
            if let Some(write) = answers.ready() {
                match answers.take(write, start) {
                    Some(response) => return Ok(vec![response]),
                    None => continue,
                }
            }
            if !answers.taken.is_empty() {
                let taken = (answers.taken.iter()).map(|answer| answer.outcome.clone());
                self.record(taken.collect()).await?;
                answers.taken.clear();
            }
            if answers.listening.is_empty() {
                return (self.db)
                    .subscribe_to_next_responses(&self.execution_id, start)
                    .await;
            }
            if let Some(handed) = answers.handed().await
                && let Some(response) = answers.take(handed, start)
            {
                return Ok(vec![response]);
            }
        }
    }

    async fn history_event_version(&self, index: usize) -> Option<Version> {
        let log = self.db.get(&self.execution_id).await.ok()?;
        crate::worker::history_version(&log, index)
    }

    async fn children_created(
        &self,
        children: Vec<ExecutionId>,
    ) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError> {
        children_created(self.db.as_ref(), children).await
    }

    fn cancelled(&self) -> BoxFuture<'static, FinishedExecutionResult> {
        self.cancellation.cancelled(&self.execution_id).boxed()
    }

    async fn cancel(
        &self,
        children: Vec<ExecutionId>,
        now: DateTime<Utc>,
        reason: String,
    ) -> Result<(), DbError> {
        for execution_id in children {
            let request = CancelRequest {
                execution_id,
                now,
                reason: reason.clone(),
            };
            self.db.cancel(request).await?;
        }
        Ok(())
    }
}

/// True when the log of `outcome`'s execution holds the `Finished` it carries (an earlier
/// write recorded it), not another one.
async fn recorded_already(db: &dyn DbConnection, outcome: &OutcomeWrite) -> bool {
    let ExecutionEventInner::Finished { result } = &outcome.event else {
        return false;
    };
    (db.get_execution_event(&outcome.execution_id, outcome.version).await)
        .is_ok_and(|event| matches!(&event.event, ExecutionEventInner::Finished { result: stored } if stored == result))
}

/// A lease of a local executor for each of `children` whose function one runs with a permit
/// free (`LocalExecutors::reserve`), with the child's request; once a function has no free
/// permit, its further children are not asked for (a fan-out creates thousands).
fn reserve(
    local: &LocalExecutors,
    children: &[CreateRequest],
    now: DateTime<Utc>,
) -> Vec<(Reservation, CreateRequest)> {
    let mut leased = Vec::new();
    let mut exhausted: Vec<&FunctionFqn> = Vec::new();
    for child in children {
        if child.scheduled_at > now || exhausted.contains(&&child.ffqn) {
            continue;
        }
        match local.reserve(&child.ffqn, now) {
            Some(reservation) => leased.push((reservation, child.clone())),
            None => exhausted.push(&child.ffqn),
        }
    }
    leased
}

/// The function and parameters of each of `children`, from their `Created` events, read at
/// once.
pub(crate) async fn children_created(
    db: &dyn DbClient,
    children: Vec<ExecutionId>,
) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError> {
    let events = db.created_events(&children).await?;
    let created = children
        .into_iter()
        .zip(events)
        .filter_map(|(child, event)| {
            let created = *event.event.into_created()?;
            Some((child, (created.ffqn, created.params)))
        });
    Ok(created.collect())
}

/// Cancels an execution and its unfinished descendants.
pub(crate) async fn cancel(
    db: &dyn DbClient,
    request: CancelRequest,
) -> Result<CancelOutcome, DbError> {
    db.cancel(request).await
}

/// Completes a stub execution (a promise).
pub(crate) async fn complete(
    db: &dyn DbClient,
    request: CompleteRequest,
) -> Result<CompleteOutcome, DbError> {
    db.complete(request).await
}

/// The finished result, waiting at most `timeout` (`None`: without limit).
pub(crate) async fn wait_for_result(
    db: &dyn DbClient,
    execution_id: &ExecutionId,
    timeout: Option<Duration>,
) -> Result<FinishedExecutionResult, DbError> {
    db.wait_for_finished_result(execution_id, timeout).await
}
