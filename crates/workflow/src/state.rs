//! The state of one workflow run: the recorded history it replays, the events it records, its
//! join sets and the responses that answer them.
//!
//! Every operation first consumes the next recorded event and checks that it is what the code
//! would record; only once the recorded history is exhausted does it record (into `buffer`,
//! written by the driver in one append at the next wait or at the end).

use crate::ctx::Response;
use chrono::{DateTime, Utc};
use concepts::{
    ClosingStrategy, ComponentId, CreateRequest, DelayId, ExecutionId, ExecutionMetadata,
    FunctionFqn, HistoryEvent, JoinSetId, JoinSetKind, JoinSetRequest, JoinSetResponse,
    JoinSetResponseEventOuter, Json, PersistKind, RunId,
};
use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    panic::Location,
    time::Duration,
};

/// How children are created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildDefaults {
    pub component_id: ComponentId,
    pub max_retries: u32,
    pub retry_exp_backoff: Duration,
}

/// Why a run cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The code asked for something other than what the log holds at `history_index` (or the
    /// code returned while the log holds more).
    Nondeterminism {
        history_index: usize,
        log_holds: String,
        code_asked: String,
        /// Where in the workflow's source the operation was made, when it was one.
        code_at: Option<&'static Location<'static>>,
    },
    /// The workflow broke a rule of determinism (awaited a non-workflow future, say).
    Determinism(String),
    /// A mistake a retry with fixed code can get past (parameters that do not encode, say).
    Trap(String),
}

impl Fault {
    /// The reason written for a divergence or a determinism violation; `at` names where the
    /// divergence is (`version V`). A trap's reason is its own.
    pub(crate) fn reason(self, at: &str) -> String {
        match self {
            Self::Nondeterminism {
                log_holds,
                code_asked,
                code_at,
                ..
            } => {
                let source = code_at.map(|at| format!(" (at {at})")).unwrap_or_default();
                format!(
                    "the replay diverged at {at}: the log holds {log_holds}, the code \
                     {code_asked}{source}"
                )
            }
            Self::Determinism(reason) => format!("determinism violation: {reason}"),
            Self::Trap(reason) => reason,
        }
    }
}

/// What the workflow is blocked on: the `index`-th (from 0) response of a join set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wait {
    pub join_set_id: JoinSetId,
    pub index: usize,
}

#[derive(Debug)]
enum Request {
    Child,
    Delay { expires_at: DateTime<Utc> },
}

#[derive(Debug)]
struct JoinSetState {
    id: JoinSetId,
    requests: Vec<(Request, Option<DelayId>)>,
    children: usize,
    awaited: usize,
    consumed_children: usize,
    /// Of `children`, the stubs (durable promises), and of `consumed_children`, theirs.
    stubs: usize,
    consumed_stubs: usize,
}

/// The state of one run, shared by the workflow's context and the driver.
pub(crate) struct RunState {
    execution_id: ExecutionId,
    run_id: RunId,
    metadata: ExecutionMetadata,
    child_defaults: ChildDefaults,
    history: Vec<HistoryEvent>,
    cursor: usize,
    /// New events, not written yet.
    pub buffer: Vec<HistoryEvent>,
    /// The children the buffered events create.
    pub children: Vec<CreateRequest>,
    /// How many of the buffered events are not `JoinNext`s.
    pub buffered_requests: usize,
    responses: Vec<JoinSetResponseEventOuter>,
    by_join_set: HashMap<JoinSetId, Vec<usize>>,
    arrived_children: HashMap<JoinSetId, usize>,
    join_sets: Vec<JoinSetState>,
    join_set_index: HashMap<JoinSetId, usize>,
    join_set_counter: u64,
    random_counter: u64,
    /// The requests (children, promises, delays) of every join set.
    requested: usize,
    /// The children of stub functions (durable promises) this run submitted or replayed.
    stubs: HashSet<ExecutionId>,
    /// The function and parameters of each child the recorded history requested, read back
    /// from the children's `Created` events before the replay: a replayed request must match.
    pub recorded_children: HashMap<ExecutionId, (FunctionFqn, Json)>,
    /// Set by an operation that cannot complete yet, cleared by the driver before each poll.
    pub wait: Option<Wait>,
    /// Set when the run cannot go on; operations then never complete.
    pub fault: Option<Fault>,
    /// A probe ([`crate::WorkflowWorker`]'s `probe`): the code is replayed against the log
    /// and stopped where it would record something new, without running a step's closure.
    probing: bool,
    /// Set by a probe's operation that found the recorded history exhausted.
    pub probe_reached_end: bool,
    /// Where the operation being made was called in the workflow's source (`#[track_caller]`).
    pub caller: Option<&'static Location<'static>>,
}

impl RunState {
    pub(crate) fn new(
        execution_id: ExecutionId,
        run_id: RunId,
        metadata: ExecutionMetadata,
        child_defaults: ChildDefaults,
        history: Vec<HistoryEvent>,
        responses: Vec<JoinSetResponseEventOuter>,
    ) -> Self {
        let mut state = Self {
            execution_id,
            run_id,
            metadata,
            child_defaults,
            history,
            cursor: 0,
            buffer: Vec::new(),
            children: Vec::new(),
            buffered_requests: 0,
            responses: Vec::new(),
            by_join_set: HashMap::new(),
            arrived_children: HashMap::new(),
            join_sets: Vec::new(),
            join_set_index: HashMap::new(),
            join_set_counter: 0,
            random_counter: 0,
            requested: 0,
            stubs: HashSet::new(),
            recorded_children: HashMap::new(),
            wait: None,
            fault: None,
            probing: false,
            probe_reached_end: false,
            caller: None,
        };
        state.add_responses(responses);
        state
    }

    /// The same state for a probe: operations past the recorded history never complete.
    pub(crate) fn probing(mut self) -> Self {
        self.probing = true;
        self
    }

    pub(crate) fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }

    /// True while recorded events are left to replay.
    pub(crate) fn replaying(&self) -> bool {
        self.cursor < self.history.len()
    }

    /// The recorded event the code did not reach, if any.
    pub(crate) fn unreplayed(&self) -> Option<(usize, &HistoryEvent)> {
        self.history
            .get(self.cursor)
            .map(|event| (self.cursor, event))
    }

    /// How many responses are known.
    pub(crate) fn response_count(&self) -> usize {
        self.responses.len()
    }

    pub(crate) fn add_responses(&mut self, responses: Vec<JoinSetResponseEventOuter>) {
        for response in responses {
            let join_set_id = response.event.join_set_id.clone();
            if matches!(
                response.event.event,
                JoinSetResponse::ChildExecutionFinished { .. }
            ) {
                *self
                    .arrived_children
                    .entry(join_set_id.clone())
                    .or_default() += 1;
            }
            self.by_join_set
                .entry(join_set_id)
                .or_default()
                .push(self.responses.len());
            self.responses.push(response);
        }
    }

    /// Starts an operation; false when the run cannot go on, or when a probe has replayed the
    /// whole history (what comes next is new, and a probe records nothing).
    pub(crate) fn begin(&mut self) -> bool {
        if self.probing && !self.replaying() {
            self.probe_reached_end = true;
            return false;
        }
        self.fault.is_none()
    }

    pub(crate) fn fail(&mut self, fault: Fault) {
        if self.fault.is_none() {
            self.fault = Some(fault);
        }
    }

    /// Replays the next recorded event if `matches` accepts it, records `fresh()` if the history
    /// is exhausted, or sets a nondeterminism fault. Returns the replayed or recorded event.
    fn replay_or_record(
        &mut self,
        asked: impl FnOnce() -> String,
        matches: impl FnOnce(&HistoryEvent) -> bool,
        fresh: impl FnOnce(&mut Self) -> HistoryEvent,
    ) -> Option<HistoryEvent> {
        if !self.begin() {
            return None;
        }
        if let Some(recorded) = self.history.get(self.cursor) {
            if matches(recorded) {
                self.cursor += 1;
                return Some(recorded.clone());
            }
            let fault = Fault::Nondeterminism {
                history_index: self.cursor,
                log_holds: describe(recorded),
                code_asked: asked(),
                code_at: self.caller,
            };
            self.fail(fault);
            return None;
        }
        let event = fresh(self);
        if !matches!(event, HistoryEvent::JoinNext { .. }) {
            self.buffered_requests += 1;
        }
        self.buffer.push(event.clone());
        Some(event)
    }

    /// Opens a join set: `n:<name>` when named, else `<kind>:<counter>[-<label>]`.
    pub(crate) fn open_join_set(
        &mut self,
        kind: JoinSetKind,
        name: Option<&str>,
        label: Option<&str>,
    ) -> Option<JoinSetId> {
        if !self.begin() {
            return None;
        }
        self.join_set_counter += 1;
        let text = match (name, label) {
            (Some(name), _) => name.to_string(),
            (None, Some(label)) => format!("{}-{label}", self.join_set_counter),
            (None, None) => self.join_set_counter.to_string(),
        };
        let join_set_id = match JoinSetId::new(kind, text) {
            Ok(id) => id,
            Err(err) => {
                self.fail(Fault::Trap(format!("cannot open a join set: {err}")));
                return None;
            }
        };
        if self.join_set_index.contains_key(&join_set_id) {
            self.fail(Fault::Trap(format!(
                "join set {join_set_id} is opened twice; a name can be used once per execution"
            )));
            return None;
        }
        let wanted = join_set_id.clone();
        self.replay_or_record(
            || format!("opened join set {wanted}"),
            |recorded| matches!(recorded, HistoryEvent::JoinSetCreate { join_set_id, .. } if *join_set_id == wanted),
            |_| HistoryEvent::JoinSetCreate {
                join_set_id: wanted.clone(),
                closing_strategy: ClosingStrategy::Complete,
            },
        )?;
        self.join_set_index
            .insert(join_set_id.clone(), self.join_sets.len());
        self.join_sets.push(JoinSetState {
            id: join_set_id.clone(),
            requests: Vec::new(),
            children: 0,
            awaited: 0,
            consumed_children: 0,
            stubs: 0,
            consumed_stubs: 0,
        });
        Some(join_set_id)
    }

    fn join_set_mut(&mut self, join_set_id: &JoinSetId) -> Option<&mut JoinSetState> {
        let index = *self.join_set_index.get(join_set_id)?;
        self.join_sets.get_mut(index)
    }

    /// Submits a child into a join set; returns its id, `<parent>.<join set>_<k>`. `retries`
    /// overrides the worker's child settings for this child.
    pub(crate) fn submit_child(
        &mut self,
        join_set_id: &JoinSetId,
        ffqn: FunctionFqn,
        params: Json,
        now: DateTime<Utc>,
        retries: Option<(u32, Duration)>,
    ) -> Option<ExecutionId> {
        let ordinal = self.join_set_mut(join_set_id)?.requests.len() + 1;
        let child_id = self
            .execution_id
            .next_level(join_set_id, u64::try_from(ordinal).unwrap_or(u64::MAX));
        if let Some((recorded_ffqn, recorded_params)) = self.recorded_children.get(&child_id)
            && self.replaying()
            && (*recorded_ffqn != ffqn || *recorded_params != params)
        {
            let fault = Fault::Nondeterminism {
                history_index: self.cursor,
                log_holds: format!(
                    "a request for child {child_id} of {recorded_ffqn} with parameters \
                     {recorded_params}"
                ),
                code_asked: format!("called {ffqn} with parameters {params}"),
                code_at: self.caller,
            };
            self.fail(fault);
            return None;
        }
        let stub = ffqn.is_stub();
        let wanted = child_id.clone();
        let wanted_set = join_set_id.clone();
        self.replay_or_record(
            || format!("submitted child {wanted} ({ffqn}) into join set {wanted_set}"),
            |recorded| {
                matches!(recorded, HistoryEvent::JoinSetRequest {
                    join_set_id,
                    request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                } if *join_set_id == wanted_set && *child_execution_id == wanted)
            },
            |state| {
                let (max_retries, retry_exp_backoff) = retries.unwrap_or((
                    state.child_defaults.max_retries,
                    state.child_defaults.retry_exp_backoff,
                ));
                state.children.push(CreateRequest {
                    created_at: now,
                    execution_id: child_id.clone(),
                    ffqn: ffqn.clone(),
                    params,
                    parent: Some((state.execution_id.clone(), join_set_id.clone())),
                    scheduled_at: now,
                    retry_exp_backoff,
                    max_retries,
                    component_id: state.child_defaults.component_id.clone(),
                    // The run's span is the child's parent when the program traces;
                    // otherwise the child carries its parent's context on.
                    metadata: match concepts::trace::current() {
                        Some(run) => state.metadata.clone().with_trace(run),
                        None => state.metadata.clone(),
                    },
                    scheduled_by: None,
                });
                HistoryEvent::JoinSetRequest {
                    join_set_id: join_set_id.clone(),
                    request: JoinSetRequest::ChildExecutionRequest {
                        child_execution_id: child_id.clone(),
                    },
                }
            },
        )?;
        let join_set = self.join_set_mut(join_set_id)?;
        join_set.requests.push((Request::Child, None));
        join_set.children += 1;
        if stub {
            join_set.stubs += 1;
            self.stubs.insert(child_id.clone());
        }
        self.requested += 1;
        Some(child_id)
    }

    /// Submits a delay into a join set; the id is generated when recording, taken from the log
    /// when replaying.
    pub(crate) fn submit_delay(
        &mut self,
        join_set_id: &JoinSetId,
        duration: Duration,
        now: DateTime<Utc>,
    ) -> Option<DelayId> {
        self.join_set_mut(join_set_id)?;
        let wanted_set = join_set_id.clone();
        let event = self.replay_or_record(
            || format!("requested a delay of {duration:?} in join set {wanted_set}"),
            |recorded| {
                matches!(recorded, HistoryEvent::JoinSetRequest {
                    join_set_id,
                    request: JoinSetRequest::DelayRequest { .. },
                } if *join_set_id == wanted_set)
            },
            |state| {
                let timestamp_ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
                HistoryEvent::JoinSetRequest {
                    join_set_id: join_set_id.clone(),
                    request: JoinSetRequest::DelayRequest {
                        delay_id: DelayId::from_parts(timestamp_ms, state.random_u128()),
                        expires_at: concepts::add_saturating(now, duration),
                    },
                }
            },
        )?;
        let HistoryEvent::JoinSetRequest {
            request:
                JoinSetRequest::DelayRequest {
                    delay_id,
                    expires_at,
                },
            ..
        } = event
        else {
            return None;
        };
        let join_set = self.join_set_mut(join_set_id)?;
        join_set
            .requests
            .push((Request::Delay { expires_at }, Some(delay_id)));
        self.requested += 1;
        Some(delay_id)
    }

    /// The children the recorded history requested, in order.
    pub(crate) fn recorded_child_requests(&self) -> Vec<ExecutionId> {
        child_requests(&self.history)
    }

    /// True when the buffer holds `JoinNext`s only (and so creates no child).
    pub(crate) fn awaits_only(&self) -> bool {
        self.children.is_empty() && self.buffered_requests == 0
    }

    /// The requests of this run (children, promises, delays) that no response answered yet:
    /// every response the execution can receive answers one of them.
    pub(crate) fn unanswered_requests(&self) -> usize {
        self.requested.saturating_sub(self.responses.len())
    }

    /// True when every request of the join set has been awaited.
    pub(crate) fn all_awaited(&mut self, join_set_id: &JoinSetId) -> bool {
        self.join_set_mut(join_set_id)
            .is_none_or(|join_set| join_set.awaited >= join_set.requests.len())
    }

    /// Children of the join set, promises aside, whose response the workflow has not consumed:
    /// what its closing awaits.
    pub(crate) fn unconsumed_children(&mut self, join_set_id: &JoinSetId) -> usize {
        self.join_set_mut(join_set_id).map_or(0, |join_set| {
            (join_set.children - join_set.stubs)
                - (join_set.consumed_children - join_set.consumed_stubs)
        })
    }

    /// True for a child of a stub function (a durable promise) of this run.
    pub(crate) fn is_stub(&self, child_execution_id: &ExecutionId) -> bool {
        self.stubs.contains(child_execution_id)
    }

    /// The promises of this run that nobody has completed (no response arrived), in id order:
    /// what the run cancels when the workflow finishes without them.
    pub(crate) fn unanswered_stubs(&self) -> Vec<ExecutionId> {
        let answered: HashSet<&ExecutionId> = self
            .responses
            .iter()
            .filter_map(|response| match &response.event.event {
                JoinSetResponse::ChildExecutionFinished {
                    child_execution_id, ..
                } => Some(child_execution_id),
                JoinSetResponse::DelayFinished { .. } => None,
            })
            .collect();
        let mut unanswered: Vec<ExecutionId> = self
            .stubs
            .iter()
            .filter(|stub| !answered.contains(stub))
            .cloned()
            .collect();
        unanswered.sort();
        unanswered
    }

    /// The join sets in the order they were opened.
    pub(crate) fn join_set_ids(&self) -> Vec<JoinSetId> {
        self.join_sets.iter().map(|js| js.id.clone()).collect()
    }

    /// Records (or replays) a `JoinNext`; returns which response (from 0) answers it.
    pub(crate) fn join_next(&mut self, join_set_id: &JoinSetId, closing: bool) -> Option<usize> {
        self.join_set_mut(join_set_id)?;
        let wanted_set = join_set_id.clone();
        self.replay_or_record(
            || format!("awaited the next response of join set {wanted_set}"),
            |recorded| {
                matches!(recorded, HistoryEvent::JoinNext { join_set_id, closing: c, .. }
                    if *join_set_id == wanted_set && *c == closing)
            },
            |_| HistoryEvent::JoinNext {
                join_set_id: join_set_id.clone(),
                // Set by the driver when it writes the buffer.
                run_expires_at: DateTime::<Utc>::MIN_UTC,
                closing,
            },
        )?;
        let join_set = self.join_set_mut(join_set_id)?;
        let index = join_set.awaited;
        join_set.awaited += 1;
        Some(index)
    }

    /// The `index`-th response of the join set, consumed, or a registered wait for it.
    pub(crate) fn take_response(
        &mut self,
        join_set_id: &JoinSetId,
        index: usize,
    ) -> Option<Response> {
        let position = self
            .by_join_set
            .get(join_set_id)
            .and_then(|positions| positions.get(index).copied());
        let Some(position) = position else {
            if self.replaying() {
                // The log goes on after this `JoinNext`, so its response must have arrived.
                let fault = Fault::Nondeterminism {
                    history_index: self.cursor,
                    log_holds: describe(&self.history[self.cursor]),
                    code_asked: format!(
                        "awaited response {} of join set {join_set_id}, which has not arrived",
                        index + 1
                    ),
                    code_at: self.caller,
                };
                self.fail(fault);
            } else if self.wait.is_some() {
                self.fail(Fault::Determinism(
                    "two workflow operations were awaited at once (`join!`, `select!`?); \
                     await several responses through one join set instead"
                        .to_string(),
                ));
            } else {
                self.wait = Some(Wait {
                    join_set_id: join_set_id.clone(),
                    index,
                });
            }
            return None;
        };
        let response = match &self.responses[position].event.event {
            JoinSetResponse::DelayFinished { delay_id } => Response::DelayFinished(*delay_id),
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            } => Response::Child(crate::ctx::ChildResponse {
                child_execution_id: child_execution_id.clone(),
                result: result.clone(),
            }),
        };
        if let Response::Child(child) = &response {
            let stub = self.stubs.contains(&child.child_execution_id);
            if let Some(join_set) = self.join_set_mut(join_set_id) {
                join_set.consumed_children += 1;
                join_set.consumed_stubs += usize::from(stub);
            }
        }
        Some(response)
    }

    /// True when the join set the run is blocked on cannot be answered before `until`: no
    /// child of it is still running and every open delay expires later.
    pub(crate) fn wait_outlasts(&self, join_set_id: &JoinSetId, until: DateTime<Utc>) -> bool {
        let Some(join_set) = self
            .join_set_index
            .get(join_set_id)
            .and_then(|index| self.join_sets.get(*index))
        else {
            return false;
        };
        let arrived = self.arrived_children.get(join_set_id).copied().unwrap_or(0);
        if join_set.children > arrived {
            return false;
        }
        let fired: Vec<DelayId> = self
            .by_join_set
            .get(join_set_id)
            .into_iter()
            .flatten()
            .filter_map(|position| match &self.responses[*position].event.event {
                JoinSetResponse::DelayFinished { delay_id } => Some(*delay_id),
                JoinSetResponse::ChildExecutionFinished { .. } => None,
            })
            .collect();
        join_set
            .requests
            .iter()
            .all(|(request, delay_id)| match request {
                Request::Child => true,
                Request::Delay { expires_at } => {
                    *expires_at > until || delay_id.is_some_and(|id| fired.contains(&id))
                }
            })
    }

    /// Replays or records a `Persist`; `fresh` makes the value only when recording, first, so
    /// that a value that cannot be encoded records nothing (a trap).
    pub(crate) fn persist(
        &mut self,
        kind: PersistKind,
        fresh: impl FnOnce(&mut Self) -> Result<Json, String>,
    ) -> Option<Json> {
        let recorded_value = if self.replaying() || !self.begin() {
            None
        } else {
            match fresh(self) {
                Ok(value) => Some(value),
                Err(reason) => {
                    self.fail(Fault::Trap(reason));
                    return None;
                }
            }
        };
        let wanted = kind.clone();
        let event = self.replay_or_record(
            || format!("persisted a value of kind {wanted:?}"),
            |recorded| matches!(recorded, HistoryEvent::Persist { kind, .. } if *kind == wanted),
            |_| HistoryEvent::Persist {
                value: recorded_value.unwrap_or(Json(serde_json::Value::Null)),
                kind,
            },
        )?;
        match event {
            HistoryEvent::Persist { value, .. } => Some(value),
            _ => None,
        }
    }

    /// A patch point ([`crate::WorkflowCtx::patched`]): `true` when the log records the
    /// patch's marker here (consumed) or ends here (the marker is recorded now), `false` when
    /// it holds something else here, recorded before the patch existed. `None` when the run
    /// cannot go on.
    pub(crate) fn patched(&mut self, patch: &str) -> Option<bool> {
        if !self.begin() {
            return None;
        }
        let is_marker = |event: &HistoryEvent| matches!(event, HistoryEvent::Persist { kind: PersistKind::Patch(id), .. } if id == patch);
        match self.history.get(self.cursor) {
            Some(recorded) if is_marker(recorded) => {
                self.cursor += 1;
                Some(true)
            }
            Some(_) => Some(false),
            None => {
                self.buffered_requests += 1;
                self.buffer.push(HistoryEvent::Persist {
                    value: Json(serde_json::Value::Bool(true)),
                    kind: PersistKind::Patch(patch.to_owned()),
                });
                Some(true)
            }
        }
    }

    /// A retired patch point ([`crate::WorkflowCtx::deprecate_patch`]): the patch's marker is
    /// consumed when the log holds it here; nothing is recorded.
    pub(crate) fn deprecate_patch(&mut self, patch: &str) {
        if !self.begin() {
            return;
        }
        if let Some(HistoryEvent::Persist {
            kind: PersistKind::Patch(id),
            ..
        }) = self.history.get(self.cursor)
            && id == patch
        {
            self.cursor += 1;
        }
    }

    /// Fresh randomness: a hash of this run's id and a counter. Only recorded values are ever
    /// used, so a replay never needs the same bits again.
    pub(crate) fn random_u128(&mut self) -> u128 {
        self.random_counter += 1;
        let half = |salt: u8| {
            let mut hasher = DefaultHasher::new();
            (self.run_id.ulid().0, self.random_counter, salt).hash(&mut hasher);
            hasher.finish()
        };
        (u128::from(half(1)) << 64) | u128::from(half(2))
    }
}

/// One history event, for people.
pub(crate) fn describe(event: &HistoryEvent) -> String {
    match event {
        HistoryEvent::Persist {
            kind: PersistKind::Patch(patch),
            ..
        } => format!("the marker of patch {patch:?}"),
        HistoryEvent::Persist {
            kind: PersistKind::Status,
            ..
        } => "a status".to_string(),
        HistoryEvent::Persist { kind, .. } => format!("a persisted value of kind {kind:?}"),
        HistoryEvent::JoinSetCreate { join_set_id, .. } => {
            format!("the opening of join set {join_set_id}")
        }
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
        } => format!("a request for child {child_execution_id} in join set {join_set_id}"),
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request: JoinSetRequest::DelayRequest { expires_at, .. },
        } => format!("a delay request until {expires_at} in join set {join_set_id}"),
        HistoryEvent::JoinNext {
            join_set_id,
            closing,
            ..
        } => format!(
            "an await of {} response of join set {join_set_id}",
            if *closing { "a closing" } else { "the next" }
        ),
        HistoryEvent::Schedule { execution_id, .. } => format!("the scheduling of {execution_id}"),
    }
}

/// The children `history` requests, in order.
pub(crate) fn child_requests(history: &[HistoryEvent]) -> Vec<ExecutionId> {
    history
        .iter()
        .filter_map(|event| match event {
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                ..
            } => Some(child_execution_id.clone()),
            _ => None,
        })
        .collect()
}
