//! The typed client: submit a function with typed parameters (under an id of the caller's,
//! idempotently), await its typed result, cancel an execution, complete a promise; from any
//! process and against any backend.

use crate::{
    error::{ClientError, decode_finished},
    function::Function,
    store,
};
use concepts::{
    CancelOutcome, CancelRequest, ClockFn, CompleteOutcome, CompleteRequest, ComponentId,
    CreateRequest, DbClient, DbError, DuplicateKind, ExecutionId, ExecutionMetadata, Json,
    SupportedFunctionReturnValue, ValidationError,
};
use executor::LocalExecutors;
use serde::{Serialize, de::DeserializeOwned};
use std::{fmt, marker::PhantomData, sync::Arc, time::Duration};

/// Submits executions and awaits their results.
#[derive(Clone)]
pub struct Client<C: ClockFn> {
    db: Arc<dyn DbClient>,
    clock: C,
    component_id: ComponentId,
    max_retries: u32,
    retry_exp_backoff: Duration,
    /// The executors of this process, which a submission due now is created locked for
    /// ([`Client::with_local_executors`]).
    local: LocalExecutors,
}

impl<C: ClockFn> Client<C> {
    /// A client of `db` that creates executions in `component_id` with 3 retries and a
    /// one-second first backoff (see [`Client::retries`]).
    #[must_use]
    pub fn new(db: Arc<dyn DbClient>, clock: C, component_id: ComponentId) -> Self {
        Self {
            db,
            clock,
            component_id,
            max_retries: 3,
            retry_exp_backoff: Duration::from_secs(1),
            local: LocalExecutors::new(),
        }
    }

    /// Submits through `local`, the executors of this process (a node's:
    /// `Node::local_executors`): an execution due now whose function one of them runs with a
    /// permit free is created already locked by it and run at once
    /// (`LocalExecutors::create`), one commit and one wake-up fewer.
    #[must_use]
    pub fn with_local_executors(mut self, local: LocalExecutors) -> Self {
        self.local = local;
        self
    }

    /// The retries of the executions this client creates.
    #[must_use]
    pub fn retries(mut self, max_retries: u32, retry_exp_backoff: Duration) -> Self {
        self.max_retries = max_retries;
        self.retry_exp_backoff = retry_exp_backoff;
        self
    }

    /// Submits `function(params)` under a generated id, due now.
    ///
    /// # Errors
    /// The name is illegal, the parameters do not encode, or the store refused the creation.
    pub async fn submit<P: Serialize, R>(
        &self,
        function: &Function<P, R>,
        params: &P,
    ) -> Result<ExecutionHandle<R>, ClientError> {
        let execution_id = ExecutionId::generate_at(self.clock.now());
        Ok(self
            .submit_with_id(execution_id, function, params)
            .await?
            .handle)
    }

    /// Submits `function(params)` under `execution_id`, the caller's idempotency key, due now.
    ///
    /// Safe to repeat after an ambiguous failure (a timeout, a lost connection): when an
    /// execution with this id, function and parameters exists, nothing is written and the
    /// answer says so (`created: false`), so the function never runs twice. The same id with
    /// another function or other parameters is a [`ClientError::Conflict`] naming what
    /// differs.
    ///
    /// # Errors
    /// As [`Client::submit`], and [`ClientError::Conflict`].
    pub async fn submit_with_id<P: Serialize, R>(
        &self,
        execution_id: ExecutionId,
        function: &Function<P, R>,
        params: &P,
    ) -> Result<Submitted<R>, ClientError> {
        let ffqn = function.ffqn().map_err(|source| ClientError::InvalidName {
            name: function.name(),
            source,
        })?;
        let params = function
            .encode_params(params)
            .map_err(|err| ClientError::EncodeParams {
                name: function.name(),
                reason: err.to_string(),
            })?;
        let now = self.clock.now();
        let request = CreateRequest {
            created_at: now,
            execution_id: execution_id.clone(),
            ffqn,
            params,
            parent: None,
            scheduled_at: now,
            retry_exp_backoff: self.retry_exp_backoff,
            max_retries: self.max_retries,
            component_id: self.component_id.clone(),
            metadata: ExecutionMetadata::default().with_current_trace(),
            scheduled_by: None,
        };
        let (outcome, _) = (self.local.create(self.db.as_ref(), request).await).map_err(refused)?;
        Ok(Submitted {
            created: outcome.is_created(),
            handle: self.handle(execution_id),
        })
    }

    /// Cancels `execution_id` and every unfinished execution below it (its children, their
    /// children), each finishing with `Err(Cancelled { reason })` and answering its parent.
    /// An execution that already finished is left alone: [`CancelOutcome::AlreadyFinished`]
    /// says how it finished. A worker still running one of them can notice
    /// (`ActivityCtx::cancelled`); whatever it writes afterwards is refused.
    ///
    /// # Errors
    /// [`ClientError::NotFound`], or the store failed.
    pub async fn cancel(
        &self,
        execution_id: &ExecutionId,
        reason: &str,
    ) -> Result<CancelOutcome, ClientError> {
        let request = CancelRequest {
            execution_id: execution_id.clone(),
            now: self.clock.now(),
            reason: reason.to_string(),
        };
        store::cancel(self.db.as_ref(), request)
            .await
            .map_err(refused)
    }

    /// Completes the promise `promise_id` (`WorkflowCtx::promise`, `JoinSet::submit_promise`)
    /// with `value`, which its workflow decodes as the promise's `T`; the workflow is answered
    /// in the same transaction. Completing it again with the same value is accepted
    /// ([`CompleteOutcome::AlreadyCompleted`]).
    ///
    /// # Errors
    /// [`ClientError::NoSuchPromise`]; [`ClientError::NotAPromise`] for an execution that
    /// runs; [`ClientError::DifferentResult`] when it has another value (or was cancelled);
    /// [`ClientError::EncodeValue`]; or the store failed.
    pub async fn complete<T: Serialize>(
        &self,
        promise_id: &ExecutionId,
        value: &T,
    ) -> Result<CompleteOutcome, ClientError> {
        let value = serde_json::to_value(value).map_err(|err| ClientError::EncodeValue {
            execution_id: promise_id.clone(),
            reason: err.to_string(),
        })?;
        let request = CompleteRequest {
            execution_id: promise_id.clone(),
            now: self.clock.now(),
            value: SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value)),
        };
        store::complete(self.db.as_ref(), request)
            .await
            .map_err(|err| match err {
                DbError::Validation(ValidationError::InvalidRequest(reason)) => {
                    ClientError::NotAPromise {
                        execution_id: promise_id.clone(),
                        reason,
                    }
                }
                DbError::NotFound(_) => ClientError::NoSuchPromise(promise_id.clone()),
                other => refused(other),
            })
    }

    /// A handle to an execution submitted earlier (by any process).
    #[must_use]
    pub fn handle<R>(&self, execution_id: ExecutionId) -> ExecutionHandle<R> {
        ExecutionHandle {
            db: self.db.clone(),
            execution_id,
            result: PhantomData,
        }
    }
}

/// The store's refusals a client can act on, typed; the rest as [`ClientError::Db`].
fn refused(err: DbError) -> ClientError {
    match err {
        DbError::Duplicate(DuplicateKind::ExecutionConflict {
            execution_id,
            differences,
        }) => ClientError::Conflict {
            execution_id,
            differences,
        },
        DbError::Duplicate(DuplicateKind::Completion {
            execution_id,
            existing,
        }) => ClientError::DifferentResult {
            execution_id,
            existing,
        },
        DbError::NotFound(what) => match what
            .strip_prefix("execution ")
            .and_then(|id| id.parse::<ExecutionId>().ok())
        {
            Some(execution_id) => ClientError::NotFound(execution_id),
            None => ClientError::Db(DbError::NotFound(what)),
        },
        other => ClientError::Db(other),
    }
}

/// What [`Client::submit_with_id`] did.
pub struct Submitted<R> {
    /// The execution, created now or earlier.
    pub handle: ExecutionHandle<R>,
    /// True when this call created it; false when it already existed with the same function
    /// and parameters (a repeated submission, which wrote nothing).
    pub created: bool,
}

impl<R> fmt::Debug for Submitted<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Submitted")
            .field("execution_id", &self.handle.execution_id)
            .field("created", &self.created)
            .finish()
    }
}

/// A submitted execution whose result is an `R`.
pub struct ExecutionHandle<R> {
    db: Arc<dyn DbClient>,
    execution_id: ExecutionId,
    result: PhantomData<fn() -> R>,
}

impl<R> Clone for ExecutionHandle<R> {
    fn clone(&self) -> Self {
        Self {
            db: self.db.clone(),
            execution_id: self.execution_id.clone(),
            result: PhantomData,
        }
    }
}

impl<R: DeserializeOwned> ExecutionHandle<R> {
    /// The execution's id.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }

    /// Awaits the result, however long it takes (woken by the store's notification).
    ///
    /// # Errors
    /// The execution failed or returned its error, or the store failed.
    pub async fn result(&self) -> Result<R, ClientError> {
        self.wait(None).await
    }

    /// Awaits the result for at most `timeout`.
    ///
    /// # Errors
    /// As [`ExecutionHandle::result`], and [`ClientError::Timeout`] when it did not finish in
    /// time.
    pub async fn result_within(&self, timeout: Duration) -> Result<R, ClientError> {
        self.wait(Some(timeout)).await
    }

    async fn wait(&self, timeout: Option<Duration>) -> Result<R, ClientError> {
        let result = match store::wait_for_result(self.db.as_ref(), &self.execution_id, timeout)
            .await
        {
            Ok(result) => result,
            Err(DbError::Timeout) => return Err(ClientError::Timeout(self.execution_id.clone())),
            Err(err) => return Err(err.into()),
        };
        decode_finished(&result).map_err(|failure| ClientError::Failed {
            execution_id: self.execution_id.clone(),
            failure,
        })
    }
}
