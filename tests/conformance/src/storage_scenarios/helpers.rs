//! Fixtures and assertions shared by the storage scenarios and the differential test: ids
//! from fixed parts, requests, events, one-event appends and single locks over `append_batch`,
//! error-kind checks, and the S18 check of the stored pending state against its reference
//! derivation.

use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, ComponentId, CreateRequest, DbClient, DbConnection, DbError, DbErrorKind,
    DbWorkflow, DelayId, ExecutionEventInner, ExecutionId, ExecutionIdTopLevel, ExecutionLog,
    ExecutionMetadata, ExecutorId, FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter, Json, Lease,
    LockPendingRequest, Locked, PendingState, PersistKind, RunId, SupportedFunctionReturnValue,
    ValidationError, Version, derive_pending_state,
};
use std::{fmt::Debug, time::Duration};

/// A real-time safety net for awaiting notifications: far longer than any correct wake-up
/// takes, so that only a lost wake-up (or a hang) hits it.
pub const SAFETY: Duration = Duration::from_secs(10);

/// The ULID timestamp part of the fixed ids of the scenarios.
const ID_MS: u64 = 946_684_800_000;

/// A function of the test interface.
///
/// # Panics
/// When `name` is not a legal function name.
#[must_use]
pub fn ffqn(name: &str) -> FunctionFqn {
    format!("test:pkg/ifc@1.0.0.{name}")
        .parse()
        .expect("legal ffqn")
}

/// The component of the test executors.
///
/// # Panics
/// Never for this fixed id.
#[must_use]
pub fn component_id() -> ComponentId {
    "activity:test".parse().expect("legal component id")
}

/// A top-level execution id; ids order by `n`.
#[must_use]
pub fn execution_id(n: u128) -> ExecutionId {
    ExecutionIdTopLevel::from_parts(ID_MS, n).into()
}

/// An executor id.
#[must_use]
pub fn executor_id(n: u128) -> ExecutorId {
    ExecutorId::from_parts(ID_MS, n)
}

/// A run id.
#[must_use]
pub fn run_id(n: u128) -> RunId {
    RunId::from_parts(ID_MS, n)
}

/// A delay id.
#[must_use]
pub fn delay_id(n: u128) -> DelayId {
    DelayId::from_parts(ID_MS, n)
}

/// A join set id.
///
/// # Panics
/// When `text` is not a legal join set id.
#[must_use]
pub fn join_set(text: &str) -> JoinSetId {
    text.parse().expect("legal join set id")
}

/// `at + d`, saturating.
#[must_use]
pub fn plus(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    concepts::add_saturating(at, d)
}

/// Milliseconds.
#[must_use]
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A top-level request due at `at`: one-second backoff, three retries, some params and a trace
/// context.
#[must_use]
pub fn create_request(
    execution_id: ExecutionId,
    ffqn: FunctionFqn,
    at: DateTime<Utc>,
) -> CreateRequest {
    let mut metadata = ExecutionMetadata::default();
    metadata.0.insert(
        ExecutionMetadata::TRACEPARENT.to_string(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
    );
    CreateRequest {
        created_at: at,
        execution_id,
        ffqn,
        params: Json(serde_json::json!([1, "two"])),
        parent: None,
        scheduled_at: at,
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 3,
        component_id: component_id(),
        metadata,
        scheduled_by: None,
    }
}

/// The request of a child `idx` of `parent` in `join_set_id`, due at `at`.
#[must_use]
pub fn child_request(
    parent: &ExecutionId,
    join_set_id: &JoinSetId,
    idx: u64,
    ffqn: FunctionFqn,
    at: DateTime<Utc>,
) -> CreateRequest {
    let child = parent.next_level(join_set_id, idx);
    CreateRequest {
        parent: Some((parent.clone(), join_set_id.clone())),
        scheduled_by: Some(parent.clone()),
        ..create_request(child, ffqn, at)
    }
}

/// A `Locked` event.
#[must_use]
pub fn locked(
    executor_id: ExecutorId,
    run_id: RunId,
    lock_expires_at: DateTime<Utc>,
) -> ExecutionEventInner {
    ExecutionEventInner::Locked(Locked {
        component_id: component_id(),
        executor_id,
        run_id,
        lock_expires_at,
    })
}

/// A `Persist` history event recording `n`.
#[must_use]
pub fn persist(n: u64) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::Persist {
            value: Json(serde_json::json!(n)),
            kind: PersistKind::Custom("test".to_string()),
        },
    }
}

/// A `JoinSetCreate` history event.
#[must_use]
pub fn join_set_create(join_set_id: &JoinSetId) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetCreate {
            join_set_id: join_set_id.clone(),
            closing_strategy: concepts::ClosingStrategy::Complete,
        },
    }
}

/// A `ChildExecutionRequest` history event.
#[must_use]
pub fn child_execution_request(
    join_set_id: &JoinSetId,
    child_execution_id: &ExecutionId,
) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child_execution_id.clone(),
            },
        },
    }
}

/// A `DelayRequest` history event.
#[must_use]
pub fn delay_request(
    join_set_id: &JoinSetId,
    delay_id: DelayId,
    expires_at: DateTime<Utc>,
) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at,
            },
        },
    }
}

/// A `JoinNext` history event.
#[must_use]
pub fn join_next(join_set_id: &JoinSetId, run_expires_at: DateTime<Utc>) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinNext {
            join_set_id: join_set_id.clone(),
            run_expires_at,
            closing: false,
        },
    }
}

/// A successful `Finished` with a JSON value.
#[must_use]
pub fn finished_ok(value: serde_json::Value) -> ExecutionEventInner {
    ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
            value,
        ))),
    }
}

/// A `DelayFinished` response.
#[must_use]
pub fn delay_finished(join_set_id: &JoinSetId, delay_id: DelayId) -> JoinSetResponseEvent {
    JoinSetResponseEvent {
        join_set_id: join_set_id.clone(),
        event: JoinSetResponse::DelayFinished { delay_id },
    }
}

/// A `ChildExecutionFinished` response as stored, arriving at `created_at`.
#[must_use]
pub fn child_finished(
    created_at: DateTime<Utc>,
    join_set_id: &JoinSetId,
    child_execution_id: &ExecutionId,
    finished_version: Version,
    result: FinishedExecutionResult,
) -> JoinSetResponseEventOuter {
    JoinSetResponseEventOuter {
        created_at,
        event: JoinSetResponseEvent {
            join_set_id: join_set_id.clone(),
            event: JoinSetResponse::ChildExecutionFinished {
                child_execution_id: child_execution_id.clone(),
                finished_version,
                result,
            },
        },
    }
}

/// The `append_batch` request of `events` to `execution_id` at `version`, at `now`, creating
/// nothing.
#[must_use]
pub fn batch(
    execution_id: &ExecutionId,
    version: Version,
    now: DateTime<Utc>,
    events: Vec<ExecutionEventInner>,
) -> AppendBatchRequest {
    batch_creating(execution_id, version, now, events, Vec::new())
}

/// The `append_batch` request of `events` to `execution_id` at `version`, at `now`, that also
/// creates `children`.
#[must_use]
pub fn batch_creating(
    execution_id: &ExecutionId,
    version: Version,
    now: DateTime<Utc>,
    events: Vec<ExecutionEventInner>,
    children: Vec<CreateRequest>,
) -> AppendBatchRequest {
    AppendBatchRequest {
        execution_id: execution_id.clone(),
        version,
        now,
        events,
        children,
        leases: Vec::new(),
        answers: Vec::new(),
    }
}

/// Appends one event at `version`, at `now`: an `append_batch` of that event alone. Returns the
/// next version.
///
/// # Errors
/// Whatever `append_batch` returns.
pub async fn append<D: DbWorkflow + ?Sized>(
    db: &D,
    execution_id: &ExecutionId,
    version: Version,
    now: DateTime<Utc>,
    event: ExecutionEventInner,
) -> Result<Version, DbError> {
    db.append_batch(batch(execution_id, version, now, vec![event]))
        .await
}

/// Locks one execution at `version`, at `now`, for `executor_id` and `run_id` until
/// `lock_expires_at` (or extends the lease of that executor and run): an `append_batch` of one
/// `Locked` event of [`component_id`]. Returns the history events of the log after the lock, as
/// `get` reads them, and the next version.
///
/// # Errors
/// Whatever `append_batch` or `get` returns.
pub async fn lock<D: DbWorkflow + DbClient + ?Sized>(
    db: &D,
    now: DateTime<Utc>,
    execution_id: &ExecutionId,
    run_id: RunId,
    version: Version,
    executor_id: ExecutorId,
    lock_expires_at: DateTime<Utc>,
) -> Result<(Vec<HistoryEvent>, Version), DbError> {
    let locked = locked(executor_id, run_id, lock_expires_at);
    let next_version = append(db, execution_id, version, now, locked).await?;
    let history = db
        .get(execution_id)
        .await?
        .events
        .into_iter()
        .filter_map(|event| match event.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event),
            _ => None,
        })
        .collect();
    Ok((history, next_version))
}

/// The pending state of an execution, as `get` reports it.
///
/// # Errors
/// Whatever `get` returns.
pub async fn pending_state<D: DbClient + ?Sized>(
    db: &D,
    execution_id: &ExecutionId,
) -> Result<PendingState, DbError> {
    Ok(db.get(execution_id).await?.pending_state)
}

/// The error of `result`, asserting its kind.
///
/// # Panics
/// When `result` is `Ok` or another kind of error.
#[track_caller]
pub fn expect_kind<T: Debug>(result: Result<T, DbError>, kind: DbErrorKind) -> DbError {
    match result {
        Ok(value) => panic!("expected a {kind} error, got Ok({value:?})"),
        Err(err) => {
            assert_eq!(err.kind(), kind, "expected a {kind} error, got {err:?}");
            err
        }
    }
}

/// The validation error of `result`.
///
/// # Panics
/// When `result` is not a validation error.
#[track_caller]
pub fn expect_validation<T: Debug>(result: Result<T, DbError>) -> ValidationError {
    match expect_kind(result, DbErrorKind::Validation) {
        DbError::Validation(v) => v,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

/// Asserts `result` is "not yet pending" with the execution scheduled at `scheduled_at`.
///
/// # Panics
/// When it is not.
#[track_caller]
pub fn expect_not_yet_pending<T: Debug>(result: Result<T, DbError>, scheduled_at: DateTime<Utc>) {
    assert_eq!(
        expect_validation(result),
        ValidationError::NotYetPending { scheduled_at }
    );
}

/// Asserts `result` is "already locked".
///
/// # Panics
/// When it is not.
#[track_caller]
pub fn expect_already_locked<T: Debug>(result: Result<T, DbError>) {
    assert_eq!(expect_validation(result), ValidationError::AlreadyLocked);
}

/// Asserts `result` is "already finished".
///
/// # Panics
/// When it is not.
#[track_caller]
pub fn expect_already_finished<T: Debug>(result: Result<T, DbError>) {
    assert_eq!(expect_validation(result), ValidationError::AlreadyFinished);
}

/// S18: the pending state the store reports in `get` equals the reference derivation from its
/// own log and responses, and the next version is consistent with the log (`len` for a running
/// execution, the `Finished` version for a finished one).
/// Returns the log.
///
/// # Panics
/// When they disagree, or the execution cannot be read.
pub async fn assert_state_matches_derivation(
    db: &dyn DbConnection,
    execution_id: &ExecutionId,
) -> ExecutionLog {
    let log = db
        .get(execution_id)
        .await
        .unwrap_or_else(|err| panic!("get {execution_id}: {err}"));
    let derived = derive_pending_state(&log.events, &log.responses)
        .unwrap_or_else(|| panic!("{execution_id} has an empty log"));
    assert_eq!(
        log.pending_state, derived,
        "stored pending state of {execution_id} differs from its derivation; log: {log:#?}"
    );
    assert_next_version_consistent(&log);
    log
}

/// The next version of a log is its length, or the version of its `Finished` event (the last
/// one) for a finished execution.
///
/// # Panics
/// When it is not.
pub fn assert_next_version_consistent(log: &ExecutionLog) {
    let len = u32::try_from(log.events.len()).expect("short log");
    let expected = match (&log.pending_state, log.events.last()) {
        (PendingState::Finished { version, .. }, Some(last)) => {
            assert!(
                matches!(last.event, ExecutionEventInner::Finished { .. }),
                "a finished log ends with `Finished`: {log:#?}"
            );
            assert_eq!(version.0 + 1, len, "`Finished` is the last event");
            *version
        }
        _ => Version(len),
    };
    assert_eq!(
        log.next_version, expected,
        "next version of {}",
        log.execution_id
    );
}

/// `lock_pending` of up to `batch_size` executions of `ffqns` due at `now`, locked at `now` for
/// `lease`.
///
/// # Panics
/// When the store refuses.
pub async fn lock_pending_now(
    db: &dyn DbConnection,
    ffqns: &std::sync::Arc<[FunctionFqn]>,
    batch_size: usize,
    now: DateTime<Utc>,
    executor_id: ExecutorId,
    lease: Duration,
) -> Vec<concepts::LockedExecution> {
    db.lock_pending(LockPendingRequest {
        batch_size,
        pending_at_or_sooner: now,
        ffqns: ffqns.clone(),
        now,
        component_id: component_id(),
        executor_id,
        lock_expires_at: plus(now, lease),
    })
    .await
    .unwrap_or_else(|err| panic!("lock_pending at {now}: {err}"))
}

/// The ids of locked executions, in the order returned.
#[must_use]
pub fn ids_of(locked: &[concepts::LockedExecution]) -> Vec<ExecutionId> {
    locked.iter().map(|l| l.execution_id.clone()).collect()
}

/// The lease an executor of executor id 7 gives `execution_id` (a child created locked, a
/// submission created locked), until `lock_expires_at`.
#[must_use]
pub fn lease(execution_id: &ExecutionId, lock_expires_at: DateTime<Utc>) -> Lease {
    Lease {
        execution_id: execution_id.clone(),
        locked: Locked {
            component_id: component_id(),
            executor_id: executor_id(7),
            run_id: run_id(7),
            lock_expires_at,
        },
    }
}
