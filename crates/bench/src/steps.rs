//! Where a serial workflow step's time goes: the store handle of the node and of the workflow
//! worker, wrapped to note when each call a step makes starts and returns, and the timeline of
//! one step, median over the steps of a run, measured from the parent's write of the step.
//!
//! A step of the serial workflow is the parent's `append_batch` (its request, with the child
//! created), the child's run (today: the activity executor woken from `wait_for_pending`, its
//! `lock_pending`; with a waiting executor, the child created locked and handed to it), the
//! child's `append_outcome` (its `Finished` with the parent's response), and the parent woken
//! from `subscribe_to_next_responses`, which then writes the next step.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection, DbError, DbExecutor,
    DbSchedules, DbTimers, DbWorkflow, DueBacklog, ExecutionEvent, ExecutionId, ExecutionLog,
    ExecutionSummary, ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent,
    JoinSetResponseEventOuter, ListExecutionsFilter, LockPendingRequest, LockedExecution,
    OutcomeWrite, Pagination, PruneOutcome, PruneRequest, Version,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, FireOutcome, FireSchedulesRequest,
        ScheduleChanged, ScheduleCreated, ScheduleName, ScheduleRow, Tick, TriggerScheduleRequest,
        Triggered,
    },
};
use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

/// A moment of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// The parent's `append_batch` that creates a child is called.
    AppendCalled,
    /// It returned.
    AppendReturned,
    /// A `wait_for_pending` of the child's function returned.
    Woken,
    /// A `lock_pending` of the child's function is called.
    LockCalled,
    /// It returned with an execution locked.
    LockReturned,
    /// The child's `append_outcome` is called.
    OutcomeCalled,
    /// It returned.
    OutcomeReturned,
    /// The parent's `subscribe_to_next_responses` returned with a response.
    ParentWoken,
}

/// The marks of one step's timeline, in the order they are reported.
const TIMELINE: [(Mark, &str); 7] = [
    (Mark::AppendReturned, "the parent's append_batch returned"),
    (
        Mark::Woken,
        "the child's executor returned from wait_for_pending",
    ),
    (Mark::LockCalled, "it called lock_pending"),
    (Mark::LockReturned, "lock_pending returned the child"),
    (
        Mark::OutcomeCalled,
        "the child's append_outcome was called (its worker ran)",
    ),
    (Mark::OutcomeReturned, "the child's append_outcome returned"),
    (
        Mark::ParentWoken,
        "the parent returned from subscribe_to_next_responses",
    ),
];

/// Forwards every call to the real store and notes the moments of each step of a workflow
/// whose children run `child`.
pub(crate) struct StepTrace {
    inner: Arc<dyn DbConnection>,
    child: FunctionFqn,
    started: Instant,
    /// True while steps are noted.
    on: AtomicBool,
    marks: Mutex<Vec<(Mark, Duration)>>,
}

/// One step's timeline, median over the steps of a run.
pub(crate) struct Timeline {
    /// How many steps it is the median of.
    steps: usize,
    /// Each mark reached by at least half of the steps, with its median offset from the
    /// parent's `append_batch` call, and in how many steps it was reached.
    marks: Vec<(&'static str, Duration, usize)>,
    /// The median time from one step's `append_batch` call to the next one's.
    step: Duration,
    /// The mean, the 99th percentile and the longest of those times.
    spread: [Duration; 3],
}

impl StepTrace {
    /// Wraps `inner`, noting the steps whose child runs `child`.
    pub(crate) fn new(inner: Arc<dyn DbConnection>, child: FunctionFqn) -> Self {
        Self {
            inner,
            child,
            started: Instant::now(),
            on: AtomicBool::new(false),
            marks: Mutex::new(Vec::new()),
        }
    }

    /// Starts noting steps, forgetting what was noted before.
    pub(crate) fn start(&self) {
        self.marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops noting steps.
    pub(crate) fn stop(&self) {
        self.on.store(false, Ordering::SeqCst);
    }

    fn note(&self, mark: Mark) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let at = self.started.elapsed();
        self.marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((mark, at));
    }

    /// The median timeline of the steps noted so far, leaving out the first `warm_up`.
    pub(crate) fn timeline(&self, warm_up: usize) -> Timeline {
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        // One step per `append_batch` call: from it to the next one.
        let starts: Vec<usize> = (marks.iter().enumerate())
            .filter(|(_, (mark, _))| *mark == Mark::AppendCalled)
            .map(|(idx, _)| idx)
            .collect();
        let mut offsets: Vec<Vec<Duration>> = vec![Vec::new(); TIMELINE.len()];
        let mut steps = Vec::new();
        for window in starts.windows(2).skip(warm_up) {
            let (from, to) = (window[0], window[1]);
            let begun = marks[from].1;
            steps.push(marks[to].1 - begun);
            for (slot, (wanted, _)) in offsets.iter_mut().zip(TIMELINE) {
                if let Some((_, at)) = marks[from..to].iter().find(|(mark, _)| *mark == wanted) {
                    slot.push(*at - begun);
                }
            }
        }
        let median = |samples: &mut Vec<Duration>| {
            samples.sort_unstable();
            samples.get(samples.len() / 2).copied().unwrap_or_default()
        };
        let count = steps.len();
        steps.sort_unstable();
        let spread = [
            steps.iter().sum::<Duration>() / u32::try_from(count.max(1)).unwrap_or(u32::MAX),
            steps.get(count * 99 / 100).copied().unwrap_or_default(),
            steps.last().copied().unwrap_or_default(),
        ];
        let timeline = (TIMELINE.iter().zip(offsets.iter_mut()))
            .filter(|(_, samples)| count > 0 && samples.len() * 2 >= count)
            .map(|((_, name), samples)| (*name, median(samples), samples.len()))
            .collect();
        Timeline {
            steps: count,
            marks: timeline,
            step: median(&mut steps),
            spread,
        }
    }
}

impl Timeline {
    /// The timeline as a Markdown table: each mark's median offset from the parent's write,
    /// and the time since the mark before it.
    pub(crate) fn table(&self, backend: &str) -> String {
        let mut out = format!(
            "\nA serial step's timeline on {backend}, median of {} steps (ms from the parent's \
             append_batch call):\n\n| moment | at (ms) | since the moment before (ms) | steps |\n|---|---:|---:|---:|\n",
            self.steps
        );
        let mut before = Duration::ZERO;
        for (name, at, reached) in &self.marks {
            out.push_str(&format!(
                "| {name} | {:.3} | {:.3} | {reached} |\n",
                ms(*at),
                ms(at.saturating_sub(before)),
            ));
            before = *at;
        }
        out.push_str(&format!(
            "| the parent's next append_batch was called | {:.3} | {:.3} | {} |\n",
            ms(self.step),
            ms(self.step.saturating_sub(before)),
            self.steps
        ));
        let [mean, p99, longest] = self.spread.map(ms);
        out.push_str(&format!(
            "\nA step: {mean:.3} ms on average, {p99:.3} ms at the 99th percentile, {longest:.3} ms at most.\n"
        ));
        out
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

#[async_trait]
impl DbAwait for StepTrace {
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        self.inner
            .wait_for_finished_result(execution_id, timeout)
            .await
    }
}

#[async_trait]
impl DbExecutor for StepTrace {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let child = req.ffqns.contains(&self.child);
        if child {
            self.note(Mark::LockCalled);
        }
        let locked = self.inner.lock_pending(req).await;
        if child && locked.as_ref().is_ok_and(|locked| !locked.is_empty()) {
            self.note(Mark::LockReturned);
        }
        locked
    }

    async fn unlock_lost(
        &self,
        executor_id: concepts::ExecutorId,
        lock_expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        self.inner
            .unlock_lost(executor_id, lock_expires_at, now)
            .await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        let child = write.parent.is_some();
        if child {
            self.note(Mark::OutcomeCalled);
        }
        let written = self.inner.append_outcome(write).await;
        if child {
            self.note(Mark::OutcomeReturned);
        }
        written
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let child = ffqns.contains(&self.child);
        self.inner
            .wait_for_pending(pending_at_or_sooner, ffqns, max_wait)
            .await;
        if child {
            self.note(Mark::Woken);
        }
    }
}

#[async_trait]
impl DbWorkflow for StepTrace {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        let step = !req.children.is_empty();
        if step {
            self.note(Mark::AppendCalled);
        }
        let appended = self.inner.append_batch(req).await;
        if step {
            self.note(Mark::AppendReturned);
        }
        appended
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let responses = self
            .inner
            .subscribe_to_next_responses(execution_id, start_idx)
            .await;
        if responses.as_ref().is_ok_and(|r| !r.is_empty()) {
            self.note(Mark::ParentWoken);
        }
        responses
    }
}

#[async_trait]
impl DbTimers for StepTrace {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        self.inner.get_expired_timers(at).await
    }

    async fn append_outcomes(
        &self,
        writes: Vec<OutcomeWrite>,
    ) -> Result<Vec<Result<Version, DbError>>, DbError> {
        self.inner.append_outcomes(writes).await
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        self.inner
            .append_response(now, execution_id, response)
            .await
    }
}

#[async_trait]
impl DbClient for StepTrace {
    async fn create(&self, req: CreateRequest) -> Result<CreateOutcome, DbError> {
        self.inner.create(req).await
    }

    async fn create_locked(
        &self,
        req: CreateRequest,
        locked: concepts::Locked,
    ) -> Result<CreateOutcome, DbError> {
        self.inner.create_locked(req, locked).await
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        self.inner.create_batch(reqs).await
    }

    async fn cancel(&self, req: CancelRequest) -> Result<CancelOutcome, DbError> {
        self.inner.cancel(req).await
    }

    async fn complete(&self, req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        self.inner.complete(req).await
    }

    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError> {
        self.inner.prune(req).await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        self.inner.get(execution_id).await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        self.inner.get_execution_event(execution_id, version).await
    }

    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        self.inner.created_events(execution_ids).await
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        self.inner.list_events(execution_id, from, limit).await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        self.inner.list_executions(filter, pagination).await
    }

    async fn due_backlog(
        &self,
        ffqn: &FunctionFqn,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<DueBacklog, DbError> {
        self.inner.due_backlog(ffqn, at, limit).await
    }
}

#[async_trait]
impl DbSchedules for StepTrace {
    async fn create_schedule(
        &self,
        req: CreateScheduleRequest,
    ) -> Result<ScheduleCreated, DbError> {
        self.inner.create_schedule(req).await
    }

    async fn change_schedule(
        &self,
        req: ChangeScheduleRequest,
    ) -> Result<ScheduleChanged, DbError> {
        self.inner.change_schedule(req).await
    }

    async fn fire_schedules(&self, req: FireSchedulesRequest) -> Result<FireOutcome, DbError> {
        self.inner.fire_schedules(req).await
    }

    async fn trigger_schedule(&self, req: TriggerScheduleRequest) -> Result<Triggered, DbError> {
        self.inner.trigger_schedule(req).await
    }

    async fn get_schedule(&self, name: &ScheduleName) -> Result<ScheduleRow, DbError> {
        self.inner.get_schedule(name).await
    }

    async fn list_schedules(
        &self,
        after: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        self.inner.list_schedules(after, limit).await
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        self.inner.schedule_ticks(name, limit).await
    }
}

#[async_trait]
impl DbConnection for StepTrace {
    async fn close(&self) {
        self.inner.close().await;
    }
}
