//! What a workflow can do: [`WorkflowCtx`] and its [`JoinSet`]s. Every operation here is
//! recorded in the execution's log and replayed from it; nothing else may be awaited inside a
//! workflow.

use crate::{
    error::{ChildError, decode_finished},
    function::Function,
    join_set::{ChildOptions, JoinSet, Promise, TypedJoinSet},
    state::{Fault, RunState},
};
use chrono::{DateTime, Utc};
use concepts::{
    DelayId, ExecutionId, FinishedExecutionResult, JoinSetId, JoinSetKind, Json, PersistKind,
};
use serde::{Serialize, de::DeserializeOwned};
use std::{
    future::Future,
    marker::PhantomData,
    ops::RangeInclusive,
    panic::Location,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
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
pub(crate) async fn stuck<T>() -> T {
    std::future::pending().await
}

impl WorkflowCtx {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut RunState) -> T) -> T {
        f(&mut self.shared.lock())
    }

    pub(crate) fn now_unrecorded(&self) -> DateTime<Utc> {
        (self.shared.clock)()
    }

    /// Notes where in the workflow's source the operation being made was called, so that a
    /// divergence names it.
    pub(crate) fn locate(&self, at: &'static Location<'static>) {
        self.with(|state| state.caller = Some(at));
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
    #[track_caller]
    pub fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        function: &Function<P, R>,
        params: &P,
    ) -> impl Future<Output = Result<R, ChildError>> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.call_with_retries(function, params, None).await
        }
    }

    /// Runs `function` as a child with `options` instead of the worker's child settings, and
    /// awaits its result, as [`WorkflowCtx::call`] does.
    ///
    /// # Errors
    /// As [`WorkflowCtx::call`].
    #[track_caller]
    pub fn call_with<P: Serialize, R: DeserializeOwned>(
        &self,
        function: &Function<P, R>,
        params: &P,
        options: ChildOptions,
    ) -> impl Future<Output = Result<R, ChildError>> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.call_with_retries(function, params, options.retry_settings())
                .await
        }
    }

    async fn call_with_retries<P: Serialize, R: DeserializeOwned>(
        &self,
        function: &Function<P, R>,
        params: &P,
        retries: Option<(u32, Duration)>,
    ) -> Result<R, ChildError> {
        let label = join_set_label(function.name());
        let join_set = self.open(JoinSetKind::OneOff, None, Some(&label));
        join_set.submit_child(function, params, retries);
        match join_set.await_next(false).await {
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
    #[track_caller]
    pub fn sleep(&self, duration: Duration) -> impl Future<Output = ()> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.sleep_unlocated(duration).await;
        }
    }

    async fn sleep_unlocated(&self, duration: Duration) {
        let join_set = self.open(JoinSetKind::OneOff, None, None);
        join_set.delay(duration);
        match join_set.await_next(false).await {
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
    /// [`promise_id`](crate::promise_id) from this execution's id and the name) completes it with
    /// `Client::complete`, which answers this workflow in the same transaction; awaiting it
    /// ([`Promise::wait`], [`Promise::wait_within`]) records the `JoinNext`.
    ///
    /// `name` is a join set name (ASCII letters, digits, `_ - /`), used once per execution;
    /// many promises of one kind go into one join set with [`JoinSet::submit_promise`]. A
    /// promise the workflow never awaits does not hold it open: when the workflow finishes,
    /// every promise of the run still unanswered is cancelled.
    #[must_use]
    #[track_caller]
    pub fn promise<T: DeserializeOwned>(&self, name: &str) -> Promise<T> {
        self.locate(Location::caller());
        let join_set = self.open(JoinSetKind::Named, Some(name), None);
        let id = join_set.stub(name);
        Promise {
            join_set,
            id,
            value: PhantomData,
        }
    }

    /// Opens a join set with a generated id (`g:<n>`).
    #[must_use]
    #[track_caller]
    pub fn join_set(&self) -> JoinSet {
        self.locate(Location::caller());
        self.open(JoinSetKind::Generated, None, None)
    }

    /// Opens a join set (`g:<n>`) of children of `function` alone, whose
    /// [`TypedJoinSet::next`] answers that function's result type.
    #[must_use]
    #[track_caller]
    pub fn join_set_of<P: Serialize, R: DeserializeOwned>(
        &self,
        function: Function<P, R>,
    ) -> TypedJoinSet<P, R> {
        self.locate(Location::caller());
        TypedJoinSet {
            join_set: self.open(JoinSetKind::Generated, None, None),
            function,
        }
    }

    /// Opens a join set named by the author (`n:<name>`): letters, digits, `_ - /`, once per
    /// execution.
    #[must_use]
    #[track_caller]
    pub fn join_set_named(&self, name: &str) -> JoinSet {
        self.locate(Location::caller());
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
    #[track_caller]
    pub fn now(&self) -> impl Future<Output = DateTime<Utc>> {
        let at = Location::caller();
        async move {
            self.locate(at);
            let now = self.now_unrecorded();
            self.persisted(PersistKind::Custom("stele:now".to_string()), |_| Ok(now))
                .await
        }
    }

    /// A random integer in `range`, recorded.
    #[track_caller]
    pub fn random_u64(&self, range: RangeInclusive<u64>) -> impl Future<Output = u64> {
        let at = Location::caller();
        async move {
            self.locate(at);
            let (min, max_inclusive) = (*range.start(), *range.end().max(range.start()));
            let kind = PersistKind::RandomU64 { min, max_inclusive };
            self.persisted(kind, |state| {
                let span = u128::from(max_inclusive - min) + 1;
                let offset = state.random_u128() % span;
                Ok(min + u64::try_from(offset).unwrap_or(0))
            })
            .await
        }
    }

    /// A random alphanumeric string whose length is in `length` (end exclusive), recorded.
    #[track_caller]
    pub fn random_string(&self, length: std::ops::Range<u64>) -> impl Future<Output = String> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.random_string_unlocated(length).await
        }
    }

    async fn random_string_unlocated(&self, length: std::ops::Range<u64>) -> String {
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
    #[track_caller]
    pub fn uuid(&self) -> impl Future<Output = String> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.uuid_unlocated().await
        }
    }

    async fn uuid_unlocated(&self) -> String {
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

    /// Whether this execution takes the new branch of the change named `patch`: how the code
    /// of a workflow changes while executions of the old code are in flight.
    ///
    /// A run that reaches this point past its recorded history (every new execution, and an
    /// old one whose log ends before it) records the patch's marker and gets `true`; a replay
    /// of a log that holds the marker here gets `true` again; a replay of a log recorded
    /// before the patch existed, which holds something else here, gets `false` and records
    /// nothing, so that the old branch replays the old log.
    ///
    /// The life of one change, step by step, is in the crate's documentation ("Changing a
    /// workflow's code").
    ///
    /// Removing a patch whose marker is in the log of an unfinished execution is
    /// nondeterminism, handled by the worker's [`crate::NondeterminismPolicy`]. A patch name is
    /// used once per run.
    #[track_caller]
    pub fn patched(&self, patch: &str) -> impl Future<Output = bool> {
        let at = Location::caller();
        async move {
            self.locate(at);
            match self.with(|state| state.patched(patch)) {
                Some(new) => new,
                None => stuck().await,
            }
        }
    }

    /// A retired patch ([`WorkflowCtx::patched`]; step 4 of the crate's "Changing a workflow's
    /// code"): the marker of `patch`, when the log
    /// holds it here, is replayed; nothing is recorded.
    #[track_caller]
    pub fn deprecate_patch(&self, patch: &str) -> impl Future<Output = ()> {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.with(|state| state.deprecate_patch(patch));
        }
    }

    /// Sets the workflow's status: any serializable value that `stele executions show`, the
    /// HTTP API and the web UI show until the next one (what step it is at, say). Recorded
    /// like any operation, and replayed.
    #[track_caller]
    pub fn set_status<S: Serialize>(&self, status: &S) -> impl Future<Output = ()> {
        let at = Location::caller();
        async move {
            self.locate(at);
            let value = serde_json::to_value(status)
                .map(Json)
                .map_err(|err| format!("cannot record a status: {err}"));
            let _: Json = self.persisted(PersistKind::Status, |_| value).await;
        }
    }

    /// Runs a local side effect once and keeps its output: the first run calls `f` and
    /// records what it returned (`Persist { kind: Custom(name) }`); a replay returns the
    /// recorded output without calling `f`. `f` must not await anything; a name starting with
    /// `stele:` is reserved.
    #[track_caller]
    pub fn step<T, F>(&self, name: &str, f: F) -> impl Future<Output = T>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> T,
    {
        let at = Location::caller();
        async move {
            self.locate(at);
            self.step_unlocated(name, f).await
        }
    }

    async fn step_unlocated<T, F>(&self, name: &str, f: F) -> T
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
