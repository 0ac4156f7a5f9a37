//! The typed client: submit a function with typed parameters, await its typed result, from
//! any process and against any backend.

use crate::{
    error::{ClientError, decode_finished},
    function::Function,
    store,
};
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbClient, DbError, ExecutionId, ExecutionMetadata,
};
use serde::{Serialize, de::DeserializeOwned};
use std::{marker::PhantomData, sync::Arc, time::Duration};

/// Submits executions and awaits their results.
#[derive(Clone)]
pub struct Client<C: ClockFn> {
    db: Arc<dyn DbClient>,
    clock: C,
    component_id: ComponentId,
    max_retries: u32,
    retry_exp_backoff: Duration,
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
        }
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
        self.submit_with_id(execution_id, function, params).await
    }

    /// Submits `function(params)` under `execution_id`, due now. A second submission with the
    /// same id is refused ([`ClientError::Db`] with a duplicate), so a caller that retries
    /// after a crash never runs the function twice.
    ///
    /// # Errors
    /// As [`Client::submit`].
    pub async fn submit_with_id<P: Serialize, R>(
        &self,
        execution_id: ExecutionId,
        function: &Function<P, R>,
        params: &P,
    ) -> Result<ExecutionHandle<R>, ClientError> {
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
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        };
        store::create(self.db.as_ref(), request).await?;
        Ok(self.handle(execution_id))
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
