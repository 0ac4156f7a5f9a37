//! The operations a client of a node performs from outside, written once for the `stele`
//! command and the HTTP API: [`submit`] an execution through a [`Catalog`], and
//! [`wait_for_result`] of one, bounded.

use crate::catalog::Catalog;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, CreateConflict, CreateOutcome, CreateRequest, DbClient, DbError, DuplicateKind,
    ExecutionId, ExecutionMetadata, FinishedExecutionResult, FunctionFqn, Json, PendingState,
};
use executor::LocalExecutors;
use std::time::Duration;

/// A top-level execution to submit: the function, its parameters as JSON, and optionally the
/// caller's id, which makes a repeated submit idempotent.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The function.
    pub ffqn: FunctionFqn,
    /// Its parameters.
    pub params: serde_json::Value,
    /// The id, `E_<ULID>`: the idempotency key of a submit that may be repeated; a fresh one
    /// when `None`.
    pub execution_id: Option<ExecutionId>,
    /// Strings stored with the execution (who submitted it, say). Without a `traceparent`,
    /// the current span's is added ([`ExecutionMetadata::with_current_trace`]).
    pub metadata: ExecutionMetadata,
}

/// Why a submission was refused; nothing was written.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The id given is a child's: a submitted execution is top-level.
    #[error("{execution_id} is a child's id; a submitted execution is top-level (E_<ULID>)")]
    NotTopLevel {
        /// The id given.
        execution_id: ExecutionId,
    },
    /// The function cannot decode the parameters: its execution would fail at once.
    #[error("{ffqn} expects other parameters: {reason}")]
    ParamsRefused {
        /// The function.
        ffqn: FunctionFqn,
        /// The decoder's reason.
        reason: String,
    },
    /// An execution with this id exists with another function, other parameters or another
    /// parent.
    #[error("{execution_id} already exists with {}", describe(differences))]
    Conflict {
        /// The execution.
        execution_id: ExecutionId,
        /// What differs.
        differences: Vec<CreateConflict>,
    },
    /// The store failed or refused the creation otherwise.
    #[error(transparent)]
    Db(DbError),
}

impl SubmitError {
    /// For a [`SubmitError::Conflict`], what differs in words: `other parameters`, `another
    /// function and other parameters`.
    #[must_use]
    pub fn what_differs(&self) -> Option<String> {
        match self {
            Self::Conflict { differences, .. } => Some(describe(differences)),
            _ => None,
        }
    }
}

/// `another function and other parameters`.
fn describe(differences: &[CreateConflict]) -> String {
    let what: Vec<&str> = differences
        .iter()
        .map(|difference| match difference {
            CreateConflict::Function => "another function",
            CreateConflict::Params => "other parameters",
            CreateConflict::Parent => "another parent",
            _ => "other settings",
        })
        .collect();
    what.join(" and ")
}

/// What a successful submit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// The execution was created.
    Created {
        /// Its id.
        execution_id: ExecutionId,
        /// Where it stands after the write: due at its creation, or locked by an executor of
        /// the node, which runs it at once.
        pending_state: PendingState,
    },
    /// An execution with this id, function and parameters already existed: nothing was
    /// written.
    AlreadyExisted {
        /// Its id.
        execution_id: ExecutionId,
        /// Where it stands.
        pending_state: PendingState,
    },
}

impl Submitted {
    /// The execution's id.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        match self {
            Self::Created { execution_id, .. } | Self::AlreadyExisted { execution_id, .. } => {
                execution_id
            }
        }
    }
}

/// A submission checked against a catalog, ready to be written ([`Prepared::submit`]): what
/// [`submit`] does in two steps, for a caller that checks its input before it opens a store.
#[derive(Debug, Clone)]
pub struct Prepared {
    request: CreateRequest,
    /// The catalog's executors ([`Catalog`]), one of which may run the execution at once.
    local: LocalExecutors,
}

impl Prepared {
    /// Checks `submission` against `catalog` and builds its creation at `now`: a given id
    /// must be top-level, and a function the catalog knows must take the parameters. A
    /// function it does not know is created with its settings for unknown functions.
    ///
    /// # Errors
    /// [`SubmitError::NotTopLevel`], [`SubmitError::ParamsRefused`].
    pub fn new(
        catalog: &Catalog,
        submission: Submission,
        now: DateTime<Utc>,
    ) -> Result<Self, SubmitError> {
        let Submission {
            ffqn,
            params,
            execution_id,
            metadata,
        } = submission;
        let execution_id = match execution_id {
            Some(id) if !id.is_top_level() => {
                return Err(SubmitError::NotTopLevel { execution_id: id });
            }
            Some(id) => id,
            None => ExecutionId::generate_at(now),
        };
        if let Some(function) = catalog.get(&ffqn) {
            function
                .check(&params)
                .map_err(|reason| SubmitError::ParamsRefused {
                    ffqn: ffqn.clone(),
                    reason,
                })?;
        }
        let defaults = catalog.defaults_of(&ffqn).clone();
        Ok(Self {
            request: CreateRequest {
                created_at: now,
                execution_id,
                ffqn,
                params: Json(params),
                parent: None,
                scheduled_at: now,
                retry_exp_backoff: defaults.retry_exp_backoff,
                max_retries: defaults.max_retries,
                component_id: defaults.component_id,
                metadata: metadata.with_current_trace(),
                scheduled_by: None,
            },
            local: catalog.local_executors().clone(),
        })
    }

    /// The id the execution is (or was) created under.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.request.execution_id
    }

    /// Creates the execution, idempotently; already locked by an executor of the catalog's
    /// node that runs its function with a permit free, which then runs it at once
    /// (`executor::LocalExecutors::create`).
    ///
    /// # Errors
    /// [`SubmitError::Conflict`] naming what differs, or [`SubmitError::Db`].
    pub async fn submit(self, db: &dyn DbClient) -> Result<Submitted, SubmitError> {
        let Self { request, local } = self;
        let execution_id = request.execution_id.clone();
        let scheduled_at = request.scheduled_at;
        let outcome = local.create(db, request).await.map(|(outcome, locked)| {
            let pending_state = match locked {
                Some(locked) => PendingState::Locked {
                    executor_id: locked.executor_id,
                    run_id: locked.run_id,
                    lock_expires_at: locked.lock_expires_at,
                },
                None => PendingState::PendingAt { scheduled_at },
            };
            (outcome, pending_state)
        });
        match outcome {
            Ok((CreateOutcome::Created, pending_state)) => Ok(Submitted::Created {
                execution_id,
                pending_state,
            }),
            Ok((CreateOutcome::AlreadyExisted { pending_state }, _)) => {
                Ok(Submitted::AlreadyExisted {
                    execution_id,
                    pending_state,
                })
            }
            Err(DbError::Duplicate(DuplicateKind::ExecutionConflict {
                execution_id,
                differences,
            })) => Err(SubmitError::Conflict {
                execution_id,
                differences,
            }),
            Err(err) => Err(SubmitError::Db(err)),
        }
    }
}

/// Submits a top-level execution: checks it against `catalog` (a top-level id when one is
/// given, parameters the function takes), then creates it idempotently at `clock`'s present.
/// A repeat with the same id, function and parameters writes nothing and answers
/// [`Submitted::AlreadyExisted`]; one with another function or other parameters is a
/// [`SubmitError::Conflict`]. A function the catalog does not know is created with the
/// catalog's settings for unknown functions: it waits for a worker elsewhere.
///
/// # Errors
/// [`SubmitError`]: nothing was written.
pub async fn submit<C: ClockFn>(
    db: &dyn DbClient,
    catalog: &Catalog,
    clock: &C,
    submission: Submission,
) -> Result<Submitted, SubmitError> {
    Prepared::new(catalog, submission, clock.now())?
        .submit(db)
        .await
}

/// How long one wait of [`wait_for_result`] lasts before it reads the state again, unless the
/// caller says otherwise: a safety net only, since every store's wake-ups reach other
/// processes too (SQLite's change detector, PostgreSQL's notifications), and a wake-up lost
/// with a dropped connection is made good by the next read.
pub const DEFAULT_WAIT_SLICE: Duration = Duration::from_millis(200);

/// Waits for `execution_id` to finish, for at most `timeout` (`None`: until it finishes), in
/// waits of at most `slice` each (woken at once by the store's notifications, whichever process
/// wrote the finish, and reading the state again after each). `Ok(None)` when the
/// timeout passed first. The time is tokio's.
///
/// # Errors
/// `DbError::NotFound` for an unknown execution, or the store failed.
pub async fn wait_for_result(
    db: &dyn DbClient,
    execution_id: &ExecutionId,
    timeout: Option<Duration>,
    slice: Duration,
) -> Result<Option<FinishedExecutionResult>, DbError> {
    let started = tokio::time::Instant::now();
    let slice = slice.max(Duration::from_millis(1));
    loop {
        let wait = match timeout {
            Some(timeout) => slice.min(timeout.saturating_sub(started.elapsed())),
            None => slice,
        };
        match db.wait_for_finished_result(execution_id, Some(wait)).await {
            Ok(result) => return Ok(Some(result)),
            Err(DbError::Timeout) => {
                if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
                    return Ok(None);
                }
            }
            Err(err) => return Err(err),
        }
    }
}
