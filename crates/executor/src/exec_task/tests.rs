//! The loop's building blocks that need no database: permits, panicking workers, a lost lock's
//! leases given back before the next lock, and how a refused retry of an outcome tells its own
//! earlier write from another writer's.

use super::outcome::{Writing, written_earlier};
use super::*;
use async_trait::async_trait;
use concepts::{
    ExecutionEventInner, ExecutionMetadata, FinishedExecutionResult, Json, OutcomeWrite, RunId,
    SupportedFunctionReturnValue, Version,
};

#[test]
fn take_free_takes_at_most_what_is_free_and_asked() {
    let limiter = Arc::new(Semaphore::new(3));
    let permits = take_free(&limiter, 2);
    assert_eq!(permits.len(), 2);
    assert_eq!(limiter.available_permits(), 1);
    let more = take_free(&limiter, 5);
    assert_eq!(more.len(), 1);
    drop((permits, more));
    assert_eq!(
        limiter.available_permits(),
        3,
        "dropping permits releases them"
    );
}

#[test]
fn the_own_bound_is_two_batches_within_what_a_semaphore_holds() {
    assert_eq!(own_bound(64), 128);
    assert_eq!(own_bound(0), 2);
    assert_eq!(own_bound(usize::MAX), Semaphore::MAX_PERMITS);
}

#[test]
fn the_loop_locks_once_a_batch_of_its_own_bound_is_free() {
    assert_eq!(own_lock_at(own_bound(64)), 64);
    assert_eq!(own_lock_at(own_bound(0)), 1);
    assert!(own_lock_at(own_bound(usize::MAX)) >= 1);
}

struct Panicking(Vec<FunctionFqn>);

#[async_trait]
impl Worker for Panicking {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        panic!("cannot handle {}", ctx.params);
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.0
    }
}

/// The context of one run of `ffqn`, locked at `at`.
fn context(at: DateTime<Utc>, ffqn: &FunctionFqn) -> WorkerContext {
    WorkerContext {
        execution_id: ExecutionId::generate_at(at),
        run_id: RunId::generate_at(at),
        metadata: ExecutionMetadata::default(),
        ffqn: ffqn.clone(),
        params: Json(serde_json::json!([1])),
        event_history: Vec::new(),
        responses: Vec::new(),
        version: Version(2),
        execution_deadline: at,
        can_be_retried: true,
        temporary_event_count: 0,
        worker_span: tracing::Span::none(),
        cancellation: crate::Cancellation::never(),
        local_executors: crate::LocalExecutors::new(),
    }
}

#[tokio::test]
async fn a_panicking_worker_is_an_activity_trap() {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    let ffqn: FunctionFqn = "test:pkg/ifc.fn".parse().unwrap();
    let ctx = context(at, &ffqn);
    let result = run_catching_panics(&Panicking(vec![ffqn]), ctx).await;
    let WorkerResult::Err(WorkerError::ActivityTrap {
        reason,
        detail: None,
    }) = result
    else {
        panic!("expected a trap, got {result:?}")
    };
    assert_eq!(reason, "worker panicked: cannot handle [1]");
}

/// Refuses every outcome with the given error, counting the attempts; reports `finished` as
/// the execution's result (`None`: closed).
struct Refusing {
    error: DbError,
    attempts: std::sync::Mutex<u32>,
    finished: Option<FinishedExecutionResult>,
}

impl Refusing {
    /// A store whose execution finished with `result`.
    fn holding(result: FinishedExecutionResult) -> Self {
        Self {
            error: DbError::Closed,
            attempts: std::sync::Mutex::new(0),
            finished: Some(result),
        }
    }
}

#[async_trait]
impl concepts::DbAwait for Refusing {
    async fn wait_for_finished_result(
        &self,
        _execution_id: &ExecutionId,
        _timeout: Option<Duration>,
    ) -> Result<concepts::FinishedExecutionResult, DbError> {
        self.finished.clone().ok_or(DbError::Closed)
    }
}

#[async_trait]
impl DbExecutor for Refusing {
    async fn lock_pending(
        &self,
        _req: LockPendingRequest,
    ) -> Result<Vec<LockedExecution>, DbError> {
        Ok(Vec::new())
    }

    async fn unlock_lost(
        &self,
        _executor_id: concepts::ExecutorId,
        _lock_expires_at: DateTime<Utc>,
        _now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        Err(self.error.clone())
    }

    async fn append_outcome(&self, _write: OutcomeWrite) -> Result<Version, DbError> {
        *self.attempts.lock().unwrap() += 1;
        Err(self.error.clone())
    }

    async fn wait_for_pending(
        &self,
        _pending_at_or_sooner: DateTime<Utc>,
        _ffqns: Arc<[FunctionFqn]>,
        _max_wait: Duration,
    ) {
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_refused_because_someone_else_finished_the_execution_is_not_retried() {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    let write = OutcomeWrite::new(
        ExecutionId::generate_at(at),
        Version(2),
        at,
        concepts::ExecutionEventInner::Finished {
            result: Ok(concepts::SupportedFunctionReturnValue::None),
        },
        None,
    );
    let refusals = [
        (
            DbError::Validation(concepts::ValidationError::AlreadyFinished),
            1,
        ),
        (
            DbError::VersionMismatch {
                appending_version: Version(2),
                expected_version: Version(3),
            },
            1,
        ),
        (
            DbError::Connection("reset".to_string()),
            OUTCOME_WRITE_ATTEMPTS,
        ),
    ];
    for (error, expected) in refusals {
        let db = Refusing {
            error: error.clone(),
            attempts: std::sync::Mutex::new(0),
            finished: None,
        };
        let mut writing = Writing::start(&db, write.clone());
        writing.finish(&db, || Duration::ZERO).await;
        assert_eq!(*db.attempts.lock().unwrap(), expected, "{error}");
    }
    // With a lease left, retried until the pauses fill it (20 ms doubling, capped at 1 s).
    let lease_left = Duration::from_secs(3);
    let pauses: Vec<_> = crate::outcome_retry_pauses(lease_left).collect();
    assert_eq!(
        pauses,
        [20, 40, 80, 160, 320, 640, 1000].map(Duration::from_millis),
        "the pauses sum to 2.26 s; one more second would pass the lease"
    );
    let db = Refusing {
        error: DbError::Connection("reset".to_string()),
        attempts: std::sync::Mutex::new(0),
        finished: None,
    };
    let mut writing = Writing::start(&db, write.clone());
    writing.finish(&db, move || lease_left).await;
    assert_eq!(
        *db.attempts.lock().unwrap(),
        8,
        "the first attempt and seven retries"
    );
    assert_eq!(crate::outcome_write_attempts(lease_left), 8);
}

/// A run's task future is allocated once per execution: the futures it awaits hold their
/// first boxed future, or borrow the outcome's write, not their arguments a second time
/// beside it.
#[test]
fn the_futures_a_run_awaits_hold_their_arguments_once() {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    let ffqn: FunctionFqn = "test:pkg/ifc.fn".parse().unwrap();
    let worker = Panicking(vec![ffqn.clone()]);
    let running = run_catching_panics(&worker, context(at, &ffqn));
    let size = std::mem::size_of_val(&running);
    assert!(size < std::mem::size_of::<WorkerContext>(), "{size} bytes");
    let db = Refusing {
        error: DbError::Closed,
        attempts: std::sync::Mutex::new(0),
        finished: None,
    };
    let finished = concepts::ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    };
    let write = OutcomeWrite::new(ExecutionId::generate_at(at), Version(2), at, finished, None);
    let mut writing = Writing::start(&db, write);
    let finishing = writing.finish(&db, || Duration::ZERO);
    let size = std::mem::size_of_val(&finishing);
    assert!(size < std::mem::size_of::<OutcomeWrite>(), "{size} bytes");
}

#[tokio::test]
async fn a_refused_retry_knows_its_own_finished_from_another_writers() {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    let ours: FinishedExecutionResult = Ok(SupportedFunctionReturnValue::None);
    let write =
        |event| OutcomeWrite::new(ExecutionId::generate_at(at), Version(2), at, event, None);
    let finished = write(ExecutionEventInner::Finished {
        result: ours.clone(),
    });
    assert!(written_earlier(&Refusing::holding(ours.clone()), &finished).await);
    let timed_out = Refusing::holding(Err(concepts::FinishedExecutionError::PermanentTimeout));
    assert!(!written_earlier(&timed_out, &finished).await);
    let retry = write(ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: at,
    });
    assert!(
        !written_earlier(&Refusing::holding(ours), &retry).await,
        "only a `Finished` can be read back"
    );
}

mod drain;

/// A clock that stands still.
#[derive(Clone)]
struct Stopped(DateTime<Utc>);

impl ClockFn for Stopped {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// What [`Flaky`] was asked, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    Lock(DateTime<Utc>),
    UnlockLost(DateTime<Utc>),
}

/// A store whose first `lock_pending` fails with a lost connection and whose first
/// `unlock_lost` fails too; it records what it was asked.
#[derive(Default)]
struct Flaky {
    asked: std::sync::Mutex<Vec<Asked>>,
}

impl Flaky {
    fn ask(&self, asked: Asked) -> usize {
        let mut all = self.asked.lock().unwrap();
        all.push(asked.clone());
        all.iter()
            .filter(|a| std::mem::discriminant(*a) == std::mem::discriminant(&asked))
            .count()
    }
}

#[async_trait]
impl concepts::DbAwait for Flaky {
    async fn wait_for_finished_result(
        &self,
        _execution_id: &ExecutionId,
        _timeout: Option<Duration>,
    ) -> Result<concepts::FinishedExecutionResult, DbError> {
        Err(DbError::Closed)
    }
}

#[async_trait]
impl DbExecutor for Flaky {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        match self.ask(Asked::Lock(req.lock_expires_at)) {
            1 => Err(DbError::Connection("lost after the commit".to_owned())),
            _ => Ok(Vec::new()),
        }
    }

    async fn unlock_lost(
        &self,
        _executor_id: concepts::ExecutorId,
        lock_expires_at: DateTime<Utc>,
        _now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        match self.ask(Asked::UnlockLost(lock_expires_at)) {
            1 => Err(DbError::Connection("still down".to_owned())),
            _ => Ok(1),
        }
    }

    async fn append_outcome(&self, _write: OutcomeWrite) -> Result<Version, DbError> {
        Err(DbError::Closed)
    }

    async fn wait_for_pending(
        &self,
        _pending_at_or_sooner: DateTime<Utc>,
        _ffqns: Arc<[FunctionFqn]>,
        _max_wait: Duration,
    ) {
    }
}

/// After a `lock_pending` whose reply was lost, the executor gives its lease back before it
/// locks again, and locks nothing while that fails: a new lease of the same end would be taken
/// for the lost one. A lost lease that has ended is left to the watcher.
#[tokio::test]
async fn a_lost_lock_is_given_back_before_the_executor_locks_again() {
    let at = DateTime::from_timestamp(1_000, 0).unwrap();
    let ffqn: FunctionFqn = "test:pkg/ifc.fn".parse().unwrap();
    let db = Arc::new(Flaky::default());
    let config = ExecConfig {
        lock_expiry: Duration::from_secs(1),
        tick_sleep: Duration::from_millis(10),
        batch_size: 1,
        component_id: ComponentId::new("activity", "test").unwrap(),
        task_limiter: None,
    };
    let exec = ExecTask::new(
        Arc::new(Panicking(vec![ffqn])),
        config,
        Stopped(at),
        db.clone(),
    );
    let lease_end = at + chrono::Duration::seconds(1);
    assert!(exec.tick(at).await.is_err(), "the lock's reply is lost");
    assert!(exec.tick(at).await.is_err(), "giving it back fails");
    exec.tick(at).await.expect("given back, then locked");
    exec.tick(at).await.expect("nothing left to give back");
    let later = lease_end + chrono::Duration::seconds(1);
    assert!(exec.tick(later).await.is_ok());
    assert_eq!(
        *db.asked.lock().unwrap(),
        [
            Asked::Lock(lease_end),
            Asked::UnlockLost(lease_end),
            Asked::UnlockLost(lease_end),
            Asked::Lock(lease_end),
            Asked::Lock(lease_end),
            Asked::Lock(later + chrono::Duration::seconds(1)),
        ]
    );

    // A lost lease that has ended by the next tick is the watcher's.
    let db = Arc::new(Flaky::default());
    let exec = ExecTask::new(
        Arc::new(Panicking(vec!["test:pkg/ifc.fn".parse().unwrap()])),
        exec.config.clone(),
        Stopped(at),
        db.clone(),
    );
    assert!(exec.tick(at).await.is_err(), "the lock's reply is lost");
    exec.tick(later).await.expect("locks at once");
    assert_eq!(
        *db.asked.lock().unwrap(),
        [
            Asked::Lock(lease_end),
            Asked::Lock(later + chrono::Duration::seconds(1))
        ]
    );
}
