//! What a workflow can do: [`WorkflowCtx`] and its [`JoinSet`]s. Every operation here is
//! recorded in the execution's log and replayed from it; nothing else may be awaited inside a
//! workflow.

use crate::{
    error::{ChildError, decode_finished},
    function::Function,
    state::{Fault, RunState},
};
use chrono::{DateTime, Utc};
use concepts::{
    DelayId, ExecutionId, FinishedExecutionResult, FunctionFqn, IdParseError, JoinSetId,
    JoinSetKind, Json, PersistKind,
};
use serde::{Serialize, de::DeserializeOwned};
use std::{
    future::{Future, poll_fn},
    marker::PhantomData,
    ops::RangeInclusive,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::Poll,
    time::Duration,
};

/// The clock of a run, as a shareable function.
pub(crate) type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The state and clock of one run, shared by its context and its driver.
pub(crate) struct Shared {
    pub state: Mutex<RunState>,
    pub clock: Clock,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A response of a join set, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// A child finished.
    Child(ChildResponse),
    /// A delay fired.
    DelayFinished(DelayId),
}

/// A child's final result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildResponse {
    /// The child.
    pub child_execution_id: ExecutionId,
    /// What it finished with.
    pub result: FinishedExecutionResult,
}

impl ChildResponse {
    /// The child's value as `R`, or why it has none.
    ///
    /// # Errors
    /// The child returned its error variant, failed, or returned something that is not an `R`.
    pub fn into_result<R: DeserializeOwned>(self) -> Result<R, ChildError> {
        decode_finished(&self.result).map_err(|failure| ChildError {
            child_execution_id: self.child_execution_id,
            failure,
        })
    }

    /// True when the child finished with its value.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(
            self.result,
            Ok(
                concepts::SupportedFunctionReturnValue::InfallibleOrResultOk(_)
                    | concepts::SupportedFunctionReturnValue::None
            )
        )
    }
}

/// The handle a workflow gets to the engine. Cheap to clone.
///
/// Each method is a durable operation (`docs/SEMANTICS.md` §15): it is recorded in the
/// execution's log the first time and replayed from the log after a crash, a cold wait or on
/// another machine.
/// Code between operations must be deterministic: the same log must lead to the same
/// operations in the same order, or the replay reports nondeterminism.
#[derive(Clone)]
pub struct WorkflowCtx {
    shared: Arc<Shared>,
}

/// Never completes: the run cannot go on and the driver reports why.
async fn stuck<T>() -> T {
    std::future::pending().await
}

impl WorkflowCtx {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn with<T>(&self, f: impl FnOnce(&mut RunState) -> T) -> T {
        f(&mut self.shared.lock())
    }

    fn now_unrecorded(&self) -> DateTime<Utc> {
        (self.shared.clock)()
    }

    /// This execution's id.
    #[must_use]
    pub fn execution_id(&self) -> ExecutionId {
        self.with(|state| state.execution_id().clone())
    }

    /// Runs `function` as a child and awaits its result: a one-off join set `o:<n>-<name>`
    /// with one child request and its `JoinNext`.
    ///
    /// # Errors
    /// The child's failure; propagated with `?` it makes this workflow fail with
    /// `UnhandledChildExecutionError`.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        function: &Function<P, R>,
        params: &P,
    ) -> Result<R, ChildError> {
        let label = join_set_label(function.name());
        let join_set = self.open(JoinSetKind::OneOff, None, Some(&label));
        join_set.submit(function, params);
        match join_set.next().await {
            Some(Response::Child(child)) => child.into_result(),
            _ => {
                self.with(|state| {
                    state.fail(Fault::Determinism(format!(
                        "join set {} of a call was answered by something other than its child",
                        join_set.id
                    )));
                });
                stuck().await
            }
        }
    }

    /// Sleeps durably for `duration`: a one-off join set with one delay request and its
    /// `JoinNext`. The sleep survives restarts; a long one gives up the run (a cold wait).
    pub async fn sleep(&self, duration: Duration) {
        let join_set = self.open(JoinSetKind::OneOff, None, None);
        join_set.submit_delay(duration);
        match join_set.next().await {
            Some(Response::DelayFinished(_)) => {}
            _ => {
                self.with(|state| {
                    state.fail(Fault::Determinism(format!(
                        "join set {} of a sleep was answered by something other than its delay",
                        join_set.id
                    )));
                });
                stuck().await
            }
        }
    }

    /// A durable promise named `name`: a value the outside world supplies once, awaited like
    /// a child (`docs/SEMANTICS.md` §12 and §15).
    ///
    /// Records `JoinSetCreate(n:<name>)` and a `JoinSetRequest` for the child
    /// `<this execution>.n:<name>_1` of the stub function `stele:stub.<name>`, created in the
    /// same transaction; no executor runs it. Whoever knows its id ([`Promise::id`], or
    /// [`promise_id`] from this execution's id and the name) completes it with
    /// `Client::complete`, which answers this workflow in the same transaction; awaiting it
    /// ([`Promise::wait`], [`Promise::wait_within`]) records the `JoinNext`.
    ///
    /// `name` is a join set name (ASCII letters, digits, `_ - /`), used once per execution;
    /// many promises of one kind go into one join set with [`JoinSet::submit_promise`]. A
    /// promise the workflow never awaits does not hold it open: when the workflow finishes,
    /// every promise of the run still unanswered is cancelled.
    #[must_use]
    pub fn promise<T: DeserializeOwned>(&self, name: &str) -> Promise<T> {
        let join_set = self.open(JoinSetKind::Named, Some(name), None);
        let id = join_set.submit_promise(name);
        Promise {
            join_set,
            id,
            value: PhantomData,
        }
    }

    /// Opens a join set with a generated id (`g:<n>`).
    #[must_use]
    pub fn join_set(&self) -> JoinSet {
        self.open(JoinSetKind::Generated, None, None)
    }

    /// Opens a join set named by the author (`n:<name>`): letters, digits, `_ - /`, once per
    /// execution.
    #[must_use]
    pub fn join_set_named(&self, name: &str) -> JoinSet {
        self.open(JoinSetKind::Named, Some(name), None)
    }

    fn open(&self, kind: JoinSetKind, name: Option<&str>, label: Option<&str>) -> JoinSet {
        let id = self.with(|state| state.open_join_set(kind, name, label));
        JoinSet {
            ctx: self.clone(),
            // After a fault nothing completes, so the placeholder is never used.
            id: id.unwrap_or_else(|| {
                JoinSetId::new(JoinSetKind::Generated, "").expect("`g:` is a legal join set id")
            }),
        }
    }

    async fn persisted<T: Serialize + DeserializeOwned>(
        &self,
        kind: PersistKind,
        fresh: impl FnOnce(&mut RunState) -> Result<T, String>,
    ) -> T {
        let outcome = self.with(|state| {
            let value = state.persist(kind.clone(), |state| {
                serde_json::to_value(fresh(state)?)
                    .map(Json)
                    .map_err(|err| format!("cannot record a value of kind {kind:?}: {err}"))
            })?;
            match T::deserialize(&value.0) {
                Ok(value) => Some(value),
                Err(err) => {
                    state.fail(Fault::Determinism(format!(
                        "the log holds a persisted value {value} of kind {kind:?} that the code \
                         cannot decode: {err}"
                    )));
                    None
                }
            }
        });
        match outcome {
            Some(value) => value,
            None => stuck().await,
        }
    }

    /// The current time, recorded: a replay returns the time of the first run.
    pub async fn now(&self) -> DateTime<Utc> {
        let now = self.now_unrecorded();
        self.persisted(PersistKind::Custom("stele:now".to_string()), |_| Ok(now))
            .await
    }

    /// A random integer in `range`, recorded.
    pub async fn random_u64(&self, range: RangeInclusive<u64>) -> u64 {
        let (min, max_inclusive) = (*range.start(), *range.end().max(range.start()));
        let kind = PersistKind::RandomU64 { min, max_inclusive };
        self.persisted(kind, |state| {
            let span = u128::from(max_inclusive - min) + 1;
            let offset = state.random_u128() % span;
            Ok(min + u64::try_from(offset).unwrap_or(0))
        })
        .await
    }

    /// A random alphanumeric string whose length is in `length` (end exclusive), recorded.
    pub async fn random_string(&self, length: std::ops::Range<u64>) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let end = length.end.max(length.start.saturating_add(1));
        let kind = PersistKind::RandomString {
            min_length: length.start,
            max_length_exclusive: end,
        };
        self.persisted(kind, |state| {
            let span = u128::from(end - length.start).max(1);
            let len = length.start + u64::try_from(state.random_u128() % span).unwrap_or(0);
            Ok((0..len)
                .map(|_| {
                    let index = usize::try_from(state.random_u128() % 62).unwrap_or(0);
                    char::from(ALPHABET[index])
                })
                .collect::<String>())
        })
        .await
    }

    /// A random (version 4) UUID in its text form, recorded.
    pub async fn uuid(&self) -> String {
        self.persisted(PersistKind::Custom("stele:uuid".to_string()), |state| {
            let bits =
                (state.random_u128() & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
            let hex = format!("{bits:032x}");
            Ok(format!(
                "{}-{}-{}-{}-{}",
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32]
            ))
        })
        .await
    }

    /// Runs a local side effect once and keeps its output: the first run calls `f` and
    /// records what it returned (`Persist { kind: Custom(name) }`); a replay returns the
    /// recorded output without calling `f`. `f` must not await anything; a name starting with
    /// `stele:` is reserved.
    pub async fn step<T, F>(&self, name: &str, f: F) -> T
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> T,
    {
        if name.starts_with("stele:") {
            self.with(|state| {
                state.fail(Fault::Trap(format!(
                    "step name {name:?}: names starting with `stele:` are reserved"
                )));
            });
            return stuck().await;
        }
        // `f` runs outside the run's lock (it may call `ctx` itself), and only when recording.
        let recording = self.with(|state| state.begin() && !state.replaying());
        let mut output = recording.then(f);
        self.persisted(PersistKind::Custom(name.to_string()), move |_| {
            output
                .take()
                .ok_or_else(|| format!("step {name:?} was asked to record twice"))
        })
        .await
    }

    /// Awaits every child of every join set that the workflow has not consumed; the first
    /// failed one among them is returned. Delays and promises nobody awaits are dropped (the
    /// driver cancels the unanswered promises once the workflow finished).
    pub(crate) async fn close_join_sets(&self) -> Option<ChildError> {
        let mut unhandled = None;
        for id in self.with(|state| state.join_set_ids()) {
            while self.with(|state| state.unconsumed_children(&id)) > 0 {
                let join_set = JoinSet {
                    ctx: self.clone(),
                    id: id.clone(),
                };
                if let Some(Response::Child(child)) = join_set.await_next(true).await
                    && !self.with(|state| state.is_stub(&child.child_execution_id))
                    && let Err(failure) = decode_finished::<serde_json::Value>(&child.result)
                    && unhandled.is_none()
                {
                    unhandled = Some(ChildError {
                        child_execution_id: child.child_execution_id,
                        failure,
                    });
                }
            }
        }
        unhandled
    }
}

/// A label for a one-off join set from a function's name: its function part, reduced to the
/// characters a join set name may hold.
fn join_set_label(ffqn: &str) -> String {
    let function = ffqn.rsplit('.').next().unwrap_or(ffqn);
    function
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect()
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
    ctx: WorkflowCtx,
    id: JoinSetId,
}

impl JoinSet {
    /// The join set's id.
    #[must_use]
    pub fn id(&self) -> &JoinSetId {
        &self.id
    }

    /// Submits `function` as a child, `<parent>.<join set>_<k>`, and returns its id.
    pub fn submit<P: Serialize, R>(&self, function: &Function<P, R>, params: &P) -> ExecutionId {
        let encoded = function
            .ffqn()
            .map_err(|err| err.to_string())
            .and_then(|ffqn| {
                function
                    .encode_params(params)
                    .map(|params| (ffqn, params))
                    .map_err(|err| format!("cannot encode the parameters of {function}: {err}"))
            });
        self.submit_encoded(encoded)
    }

    /// Submits a durable promise named `name` into this join set and returns its id,
    /// `<parent>.<join set>_<k>`: a child of the stub function `stele:stub.<name>`, which no
    /// executor runs and `Client::complete` finishes (see [`WorkflowCtx::promise`]). Its
    /// response is a [`Response::Child`] like any child's, so a promise with a deadline is a
    /// join set of a promise and a delay.
    pub fn submit_promise(&self, name: &str) -> ExecutionId {
        let stub = FunctionFqn::stub(name)
            .map(|ffqn| (ffqn, Json(serde_json::Value::Null)))
            .map_err(|err| format!("cannot create a promise named {name:?}: {err}"));
        self.submit_encoded(stub)
    }

    fn submit_encoded(&self, encoded: Result<(FunctionFqn, Json), String>) -> ExecutionId {
        let now = self.ctx.now_unrecorded();
        let child = self.ctx.with(|state| match encoded {
            Ok((ffqn, params)) => state.submit_child(&self.id, ffqn, params, now),
            Err(reason) => {
                state.fail(Fault::Trap(reason));
                None
            }
        });
        child.unwrap_or_else(|| self.ctx.execution_id())
    }

    /// Submits a durable delay of `duration` and returns its id.
    pub fn submit_delay(&self, duration: Duration) -> DelayId {
        let now = self.ctx.now_unrecorded();
        self.ctx
            .with(|state| state.submit_delay(&self.id, duration, now))
            .unwrap_or_else(|| DelayId::from_parts(0, 0))
    }

    /// The next response, in arrival order; `None` once every request has been awaited.
    pub async fn next(&self) -> Option<Response> {
        self.await_next(false).await
    }

    fn await_next(&self, closing: bool) -> impl Future<Output = Option<Response>> + '_ {
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
    join_set: JoinSet,
    id: ExecutionId,
    value: PhantomData<fn() -> T>,
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
    pub async fn wait(self) -> Result<T, ChildError> {
        match self.join_set.next().await {
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
    pub async fn wait_within(self, timeout: Duration) -> Result<Option<T>, ChildError> {
        self.join_set.submit_delay(timeout);
        match self.join_set.next().await {
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
