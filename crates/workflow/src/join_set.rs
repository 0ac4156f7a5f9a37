//! Join sets: [`JoinSet`] (children, promises and delays whose responses come back in
//! arrival order), [`TypedJoinSet`] (the children of one function, answered with its result
//! type), [`Promise`], and the per-call [`ChildOptions`].

use crate::{
    ctx::{Response, WorkflowCtx, stuck},
    error::ChildError,
    function::Function,
    state::Fault,
};
use concepts::{DelayId, ExecutionId, FunctionFqn, IdParseError, JoinSetId, JoinSetKind, Json};
use serde::{Serialize, de::DeserializeOwned};
use std::{
    future::{Future, poll_fn},
    marker::PhantomData,
    panic::Location,
    task::Poll,
    time::Duration,
};

/// How one child is created, instead of the worker's child settings
/// (`WorkflowWorker::child_settings`): [`WorkflowCtx::call_with`],
/// [`JoinSet::submit_with`], [`TypedJoinSet::submit_with`].
///
/// A child's lease is its executor's (the lease of the executor that runs its function), not
/// the caller's to choose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildOptions {
    retries: Option<(u32, Duration)>,
}

impl ChildOptions {
    /// The worker's child settings.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `max_retries` retries of the child's failures and timeouts, the first after
    /// `retry_exp_backoff`, each next one after twice the one before.
    #[must_use]
    pub fn retries(mut self, max_retries: u32, retry_exp_backoff: Duration) -> Self {
        self.retries = Some((max_retries, retry_exp_backoff));
        self
    }

    pub(crate) fn retry_settings(self) -> Option<(u32, Duration)> {
        self.retries
    }
}

/// A set of children and delays whose responses come back in arrival order.
///
/// Submitting records a request (and creates the child in the same transaction as the
/// request's event); [`JoinSet::next`] awaits the next response. A timeout is a join set
/// with a child and a delay: whichever answers first is the first response.
///
/// When the workflow returns, every child it submitted and did not consume is awaited; a
/// failed one makes the workflow fail with `UnhandledChildExecutionError`.
pub struct JoinSet {
    pub(crate) ctx: WorkflowCtx,
    pub(crate) id: JoinSetId,
}

impl JoinSet {
    /// The join set's id.
    #[must_use]
    pub fn id(&self) -> &JoinSetId {
        &self.id
    }

    /// Submits `function` as a child, `<parent>.<join set>_<k>`, and returns its id.
    #[track_caller]
    pub fn submit<P: Serialize, R>(&self, function: &Function<P, R>, params: &P) -> ExecutionId {
        self.ctx.locate(Location::caller());
        self.submit_child(function, params, None)
    }

    /// Submits `function` as a child with `options` instead of the worker's child settings.
    #[track_caller]
    pub fn submit_with<P: Serialize, R>(
        &self,
        function: &Function<P, R>,
        params: &P,
        options: ChildOptions,
    ) -> ExecutionId {
        self.ctx.locate(Location::caller());
        self.submit_child(function, params, options.retry_settings())
    }

    pub(crate) fn submit_child<P: Serialize, R>(
        &self,
        function: &Function<P, R>,
        params: &P,
        retries: Option<(u32, Duration)>,
    ) -> ExecutionId {
        let encoded = function
            .ffqn()
            .map_err(|err| err.to_string())
            .and_then(|ffqn| {
                function
                    .encode_params(params)
                    .map(|params| (ffqn, params))
                    .map_err(|err| format!("cannot encode the parameters of {function}: {err}"))
            });
        self.submit_encoded(encoded, retries)
    }

    /// Submits a durable promise named `name` into this join set and returns its id,
    /// `<parent>.<join set>_<k>`: a child of the stub function `stele:stub.<name>`, which no
    /// executor runs and `Client::complete` finishes (see [`WorkflowCtx::promise`]). Its
    /// response is a [`Response::Child`] like any child's, so a promise with a deadline is a
    /// join set of a promise and a delay.
    #[track_caller]
    pub fn submit_promise(&self, name: &str) -> ExecutionId {
        self.ctx.locate(Location::caller());
        self.stub(name)
    }

    pub(crate) fn stub(&self, name: &str) -> ExecutionId {
        let stub = FunctionFqn::stub(name)
            .map(|ffqn| (ffqn, Json(serde_json::Value::Null)))
            .map_err(|err| format!("cannot create a promise named {name:?}: {err}"));
        self.submit_encoded(stub, None)
    }

    fn submit_encoded(
        &self,
        encoded: Result<(FunctionFqn, Json), String>,
        retries: Option<(u32, Duration)>,
    ) -> ExecutionId {
        let now = self.ctx.now_unrecorded();
        let child = self.ctx.with(|state| match encoded {
            Ok((ffqn, params)) => state.submit_child(&self.id, ffqn, params, now, retries),
            Err(reason) => {
                state.fail(Fault::Trap(reason));
                None
            }
        });
        child.unwrap_or_else(|| self.ctx.execution_id())
    }

    /// Submits a durable delay of `duration` and returns its id.
    #[track_caller]
    pub fn submit_delay(&self, duration: Duration) -> DelayId {
        self.ctx.locate(Location::caller());
        self.delay(duration)
    }

    pub(crate) fn delay(&self, duration: Duration) -> DelayId {
        let now = self.ctx.now_unrecorded();
        self.ctx
            .with(|state| state.submit_delay(&self.id, duration, now))
            .unwrap_or_else(|| DelayId::from_parts(0, 0))
    }

    /// The next response, in arrival order; `None` once every request has been awaited.
    #[track_caller]
    pub fn next(&self) -> impl Future<Output = Option<Response>> {
        let at = Location::caller();
        async move {
            self.ctx.locate(at);
            self.await_next(false).await
        }
    }

    pub(crate) fn await_next(&self, closing: bool) -> impl Future<Output = Option<Response>> + '_ {
        let index = self.ctx.with(|state| {
            if !state.begin() {
                return Err(());
            }
            if state.all_awaited(&self.id) {
                return Ok(None);
            }
            state.join_next(&self.id, closing).map(Some).ok_or(())
        });
        async move {
            let index = match index {
                Ok(Some(index)) => index,
                Ok(None) => return None,
                Err(()) => return stuck().await,
            };
            poll_fn(|_| {
                self.ctx
                    .with(|state| match state.take_response(&self.id, index) {
                        Some(response) => Poll::Ready(Some(response)),
                        None => Poll::Pending,
                    })
            })
            .await
        }
    }
}

/// A durable promise of a value `T` ([`WorkflowCtx::promise`]): its id can be handed to the
/// outside world, which completes it once (`Client::complete`); the workflow awaits it like a
/// child.
pub struct Promise<T> {
    pub(crate) join_set: JoinSet,
    pub(crate) id: ExecutionId,
    pub(crate) value: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Promise<T> {
    /// The promise's id, `<this execution>.n:<name>_1`: what a completer needs.
    #[must_use]
    pub fn id(&self) -> &ExecutionId {
        &self.id
    }

    /// Awaits the value: one `JoinNext`, answered when the promise is completed.
    ///
    /// # Errors
    /// The promise was cancelled ([`crate::FunctionFailure::Cancelled`]), or completed with a
    /// value that is not a `T`.
    #[track_caller]
    pub fn wait(self) -> impl Future<Output = Result<T, ChildError>> {
        let at = Location::caller();
        async move {
            self.join_set.ctx.locate(at);
            self.wait_unlocated().await
        }
    }

    async fn wait_unlocated(self) -> Result<T, ChildError> {
        match self.join_set.await_next(false).await {
            Some(Response::Child(child)) => child.into_result(),
            _ => self.answered_by_something_else().await,
        }
    }

    /// Awaits the value for at most `timeout`: a delay in the promise's join set, then one
    /// `JoinNext`, answered by whichever comes first. `None` when the delay came first; the
    /// promise is then cancelled when the workflow finishes.
    ///
    /// # Errors
    /// As [`Promise::wait`].
    #[track_caller]
    pub fn wait_within(
        self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>, ChildError>> {
        let at = Location::caller();
        async move {
            self.join_set.ctx.locate(at);
            self.wait_within_unlocated(timeout).await
        }
    }

    async fn wait_within_unlocated(self, timeout: Duration) -> Result<Option<T>, ChildError> {
        self.join_set.delay(timeout);
        match self.join_set.await_next(false).await {
            Some(Response::Child(child)) => child.into_result().map(Some),
            Some(Response::DelayFinished(_)) => Ok(None),
            None => self.answered_by_something_else().await,
        }
    }

    async fn answered_by_something_else<V>(&self) -> V {
        self.join_set.ctx.with(|state| {
            state.fail(Fault::Determinism(format!(
                "join set {} of promise {} was answered by something other than its promise",
                self.join_set.id, self.id
            )));
        });
        stuck().await
    }
}

/// The id of the promise `name` of the workflow execution `workflow`
/// ([`WorkflowCtx::promise`]): `<workflow>.n:<name>_1`. What a completer computes when the
/// workflow's id is all it knows.
///
/// # Errors
/// `name` is not a legal promise name (ASCII letters, digits, `_ - /`, not empty).
pub fn promise_id(workflow: &ExecutionId, name: &str) -> Result<ExecutionId, IdParseError> {
    FunctionFqn::stub(name)?;
    let join_set_id = JoinSetId::new(JoinSetKind::Named, name)?;
    Ok(workflow.next_level(&join_set_id, 1))
}

/// A join set of the children of one function ([`WorkflowCtx::join_set_of`]), whose responses
/// come back in arrival order as that function's result type.
pub struct TypedJoinSet<P, R> {
    pub(crate) join_set: JoinSet,
    pub(crate) function: Function<P, R>,
}

impl<P: Serialize, R: DeserializeOwned> TypedJoinSet<P, R> {
    /// The join set's id.
    #[must_use]
    pub fn id(&self) -> &JoinSetId {
        self.join_set.id()
    }

    /// Submits the function with `params` as a child and returns its id.
    #[track_caller]
    pub fn submit(&self, params: &P) -> ExecutionId {
        self.join_set.ctx.locate(Location::caller());
        self.join_set.submit_child(&self.function, params, None)
    }

    /// Submits the function with `params` as a child with `options` instead of the worker's
    /// child settings.
    #[track_caller]
    pub fn submit_with(&self, params: &P, options: ChildOptions) -> ExecutionId {
        self.join_set.ctx.locate(Location::caller());
        self.join_set
            .submit_child(&self.function, params, options.retry_settings())
    }

    /// The next child's result, in arrival order, as the function's result type; `None` once
    /// every child has been awaited.
    ///
    /// # Errors
    /// The child that answered returned its error variant, failed, or returned a value that
    /// is not an `R` (each `Some(Err(..))`; the next call goes on with the next child).
    #[track_caller]
    pub fn next(&self) -> impl Future<Output = Option<Result<R, ChildError>>> {
        let at = Location::caller();
        async move {
            self.join_set.ctx.locate(at);
            match self.join_set.await_next(false).await? {
                Response::Child(child) => Some(child.into_result()),
                Response::DelayFinished(_) => {
                    self.join_set.ctx.with(|state| {
                        state.fail(Fault::Determinism(format!(
                            "join set {} of {} children was answered by a delay",
                            self.join_set.id, self.function
                        )));
                    });
                    stuck().await
                }
            }
        }
    }
}
