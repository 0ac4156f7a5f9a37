//! The drain of a spawned executor against a fake store, on tokio's paused clock: runs in
//! flight finish (their outcome writes included) until the deadline, the rest are aborted and
//! counted, and nothing is locked once the drain began.

use super::super::*;
use crate::LocalExecutors;
use async_trait::async_trait;
use concepts::{ExecutionMetadata, Json, Locked, OutcomeWrite, RunId, Version};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use tokio::sync::{Notify, mpsc};

/// Hands out the queued executions, records the outcomes written (each write takes
/// `write_time` of tokio's clock), and can hang in `lock_pending` like a store that stopped
/// answering.
struct FakeStore {
    queue: Mutex<VecDeque<LockedExecution>>,
    outcomes: Mutex<Vec<ExecutionId>>,
    outcome_written: Notify,
    locks: AtomicU64,
    lock_called: Notify,
    write_time: Duration,
    hang_locks: bool,
}

impl FakeStore {
    fn new(executions: Vec<LockedExecution>) -> Self {
        Self {
            queue: Mutex::new(executions.into()),
            outcomes: Mutex::new(Vec::new()),
            outcome_written: Notify::new(),
            locks: AtomicU64::new(0),
            lock_called: Notify::new(),
            write_time: Duration::from_millis(500),
            hang_locks: false,
        }
    }

    fn outcomes(&self) -> Vec<ExecutionId> {
        self.outcomes.lock().unwrap().clone()
    }

    /// Returns once the outcome of `id` was written.
    async fn written(&self, id: &ExecutionId) {
        loop {
            let notified = self.outcome_written.notified();
            if self.outcomes().contains(id) {
                return;
            }
            notified.await;
        }
    }
}

#[async_trait]
impl concepts::DbAwait for FakeStore {
    async fn wait_for_finished_result(
        &self,
        _execution_id: &ExecutionId,
        _timeout: Option<Duration>,
    ) -> Result<concepts::FinishedExecutionResult, DbError> {
        std::future::pending().await
    }
}

#[async_trait]
impl DbExecutor for FakeStore {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.locks.fetch_add(1, Ordering::SeqCst);
        self.lock_called.notify_waiters();
        if self.hang_locks {
            std::future::pending::<()>().await;
        }
        let mut queue = self.queue.lock().unwrap();
        let count = req.batch_size.min(queue.len());
        Ok(queue.drain(..count).collect())
    }

    async fn unlock_lost(
        &self,
        _executor_id: concepts::ExecutorId,
        _lock_expires_at: DateTime<Utc>,
        _now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        Ok(0)
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        tokio::time::sleep(self.write_time).await;
        self.outcomes.lock().unwrap().push(write.execution_id);
        self.outcome_written.notify_waiters();
        Ok(write.version)
    }

    async fn wait_for_pending(
        &self,
        _pending_at_or_sooner: DateTime<Utc>,
        _ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        tokio::time::sleep(max_wait).await;
    }
}

/// Sleeps (on tokio's clock) as long as its parameter says, in milliseconds; says when each
/// run starts, and sets `dropped` when a run's future is dropped before it returned.
struct Sleeper {
    ffqns: Vec<FunctionFqn>,
    started: mpsc::UnboundedSender<ExecutionId>,
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped unless disarmed.
struct DropFlag(Option<Arc<AtomicBool>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Worker for Sleeper {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let mut flag = DropFlag(Some(self.dropped.clone()));
        let _ = self.started.send(ctx.execution_id.clone());
        let millis = ctx.params.0[0].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(millis)).await;
        flag.0 = None;
        WorkerResult::Ok(concepts::SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

fn ffqn() -> FunctionFqn {
    "test:pkg/ifc.sleep".parse().unwrap()
}

/// A locked execution whose worker sleeps `millis`.
fn locked(millis: u64) -> LockedExecution {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    LockedExecution {
        execution_id: ExecutionId::generate_at(at),
        next_version: Version(2),
        metadata: ExecutionMetadata::default(),
        locked_event: Locked {
            component_id: ComponentId::new("test", "drain").unwrap(),
            executor_id: ExecutorId::generate_at(at),
            run_id: RunId::generate_at(at),
            lock_expires_at: at,
        },
        ffqn: ffqn(),
        params: Json(serde_json::json!([millis])),
        event_history: Vec::new(),
        responses: Vec::new(),
        scheduled_at: at,
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 0,
        parent: None,
        temporary_event_count: 0,
        due_at: at,
    }
}

/// A clock that stays put: the drain is measured on tokio's clock, not on this one.
#[derive(Clone)]
struct Fixed;

impl ClockFn for Fixed {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(1_000, 0).unwrap()
    }
}

struct Spawned {
    store: Arc<FakeStore>,
    handle: ExecutorTaskHandle,
    started: mpsc::UnboundedReceiver<ExecutionId>,
    dropped: Arc<AtomicBool>,
}

/// An executor over `store` that locks up to `batch_size` executions at once.
fn spawn(store: FakeStore, batch_size: usize) -> Spawned {
    spawn_with(store, batch_size, None)
}

/// As [`spawn`], running the reserved children of `local` too.
fn spawn_with(store: FakeStore, batch_size: usize, local: Option<&LocalExecutors>) -> Spawned {
    let store = Arc::new(store);
    let (tx, started) = mpsc::unbounded_channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let worker = Sleeper {
        ffqns: vec![ffqn()],
        started: tx,
        dropped: dropped.clone(),
    };
    let config = ExecConfig {
        lock_expiry: Duration::from_secs(60),
        tick_sleep: Duration::from_secs(1),
        batch_size,
        component_id: ComponentId::new("test", "drain").unwrap(),
        task_limiter: None,
    };
    let task = ExecTask::new(Arc::new(worker), config, Fixed, store.clone());
    let handle = match local {
        Some(local) => task.with_local_executors(local.clone()).spawn(),
        None => task.spawn(),
    };
    Spawned {
        store,
        handle,
        started,
        dropped,
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_finishes_what_ends_before_its_deadline_and_aborts_the_rest() {
    let (before, quick, endless) = (locked(0), locked(1_000), locked(3_600_000));
    let ids = [&before, &quick, &endless].map(|locked| locked.execution_id.clone());
    let mut spawned = spawn(FakeStore::new(vec![before, quick, endless]), 3);
    for _ in 0..3 {
        spawned.started.recv().await.unwrap();
    }
    // Ended before the drain: not counted.
    spawned.store.written(&ids[0]).await;
    let started = tokio::time::Instant::now();

    let outcome = spawned.handle.drain(Duration::from_secs(10)).await;

    assert_eq!(
        outcome,
        DrainOutcome {
            finished: 1,
            left: 1
        }
    );
    // The quick run's outcome write (500 ms of the fake store) was awaited; the endless one
    // wrote nothing and its future is gone.
    assert_eq!(spawned.store.outcomes(), ids[..2].to_vec());
    assert!(
        spawned.dropped.load(Ordering::SeqCst),
        "the endless run was aborted"
    );
    assert_eq!(
        tokio::time::Instant::now() - started,
        Duration::from_secs(10),
        "the drain waited until its deadline, as long as a run was left"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_stops_locking_and_returns_as_soon_as_every_run_ended() {
    let store = FakeStore::new(vec![locked(2_000)]);
    let mut spawned = spawn(store, 1);
    spawned.started.recv().await.unwrap();
    let locks = spawned.store.locks.load(Ordering::SeqCst);
    // Work that arrives during the drain is not taken.
    spawned.store.queue.lock().unwrap().push_back(locked(0));
    let started = tokio::time::Instant::now();

    let outcome = spawned.handle.drain(Duration::from_secs(60)).await;

    assert_eq!(
        outcome,
        DrainOutcome {
            finished: 1,
            left: 0
        }
    );
    assert!(tokio::time::Instant::now() - started < Duration::from_secs(60));
    assert_eq!(spawned.store.locks.load(Ordering::SeqCst), locks);
    assert_eq!(
        spawned.store.queue.lock().unwrap().len(),
        1,
        "still pending"
    );
    assert_eq!(spawned.store.outcomes().len(), 1);
    assert!(!spawned.dropped.load(Ordering::SeqCst));
    assert_eq!(
        spawned.handle.drain(Duration::from_secs(60)).await,
        DrainOutcome::default(),
        "a second drain has nothing left"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_aborts_a_loop_whose_lock_outlasts_the_deadline() {
    let mut store = FakeStore::new(vec![locked(0)]);
    store.hang_locks = true;
    let mut spawned = spawn(store, 1);
    loop {
        let called = spawned.store.lock_called.notified();
        if spawned.store.locks.load(Ordering::SeqCst) > 0 {
            break;
        }
        called.await;
    }
    // The lock never answers: the drain gives up on it at the deadline instead of hanging.
    let outcome = spawned.handle.drain(Duration::from_secs(5)).await;
    assert_eq!(outcome, DrainOutcome::default());
    assert!(spawned.store.outcomes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_drain_with_a_zero_timeout_leaves_every_run() {
    let mut spawned = spawn(FakeStore::new(vec![locked(1_000), locked(1_000)]), 2);
    for _ in 0..2 {
        spawned.started.recv().await.unwrap();
    }
    let outcome = spawned.handle.drain(Duration::ZERO).await;
    assert_eq!(
        outcome,
        DrainOutcome {
            finished: 0,
            left: 2
        }
    );
    assert!(spawned.store.outcomes().is_empty());
}

/// A run handed to the executor through a reservation taken before its drain and started while
/// the drain waits (a workflow's `append_batch` that was in flight) is drained too: awaited up
/// to the deadline, then aborted, so that nothing of the executor writes after the drain.
#[tokio::test(start_paused = true)]
async fn a_reserved_run_started_during_a_drain_is_drained_too() {
    let local = LocalExecutors::new();
    let Spawned {
        store,
        mut handle,
        mut started,
        ..
    } = spawn_with(FakeStore::new(vec![locked(2_000)]), 4, Some(&local));
    started.recv().await.unwrap();
    tokio::task::yield_now().await;
    let at = Fixed.now();
    let reservation = local.reserve(&ffqn(), at).expect("a free permit");
    let child = concepts::CreateRequest {
        created_at: at,
        execution_id: ExecutionId::generate_at(at),
        ffqn: ffqn(),
        params: Json(serde_json::json!([30_000])),
        parent: None,
        scheduled_at: at,
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 0,
        component_id: ComponentId::new("test", "drain").unwrap(),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    };
    let child_id = child.execution_id.clone();
    // The reserving write commits while the drain waits for the run in flight.
    let start_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reservation.start(child);
    });
    let outcome = handle.drain(Duration::from_secs(10)).await;
    start_later.await.unwrap();
    assert_eq!(
        outcome.left, 1,
        "the 30 s run started during the drain: {outcome:?}"
    );
    // Once the drain returned, nothing of this executor runs any more (paused time).
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !store.outcomes().contains(&child_id),
        "the run started during the drain wrote its outcome after the drain returned"
    );
}
