//! Replay checks in a user's tests: a [`RecordedHistory`] (read from a store, or the JSON that
//! `stele executions export ID` prints) replayed through a workflow's code by a [`Replayer`],
//! without a store, workers or a clock that matters. Code that agrees with the history passes;
//! code that diverges is a [`ReplayError::Nondeterminism`] naming the first differing event,
//! the operation the code made instead and where in its source it made it.
//!
//! ```
//! use workflow::{Function, RecordedHistory, Replayer, WorkflowCtx, WorkflowError};
//! const DOUBLE: Function<u64, u64> = Function::new("demo:math/api.double");
//! const TWICE: Function<u64, u64> = Function::new("demo:math/flows.twice");
//! async fn twice(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
//!     let once = ctx.call(&DOUBLE, &n).await?;
//!     Ok(ctx.call(&DOUBLE, &once).await?)
//! }
//! # fn check(history_json: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let history: RecordedHistory = serde_json::from_str(history_json)?;
//! Replayer::new().register(&TWICE, twice)?.replay(&history)?;
//! # Ok(())
//! # }
//! ```

use crate::{
    ctx::{Clock, Shared, WorkflowCtx},
    driver::{Outcome, Probed, probe},
    error::{RegistrationError, WorkflowError},
    function::Function,
    state::{ChildDefaults, Fault, RunState},
    worker::{StartWorkflow, history_version, register_name, workflow_start},
};
use concepts::{
    ComponentId, DbClient, DbError, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog,
    FunctionFqn, HistoryEvent, JoinSetResponseEventOuter, Json, PendingState, RunId, Version,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

/// What a replay needs of one execution: its log, its responses, and the function and
/// parameters of each child its log requested (from the children's `Created` events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedHistory {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its events; `events[v]` is version `v`.
    pub events: Vec<ExecutionEvent>,
    /// Its responses, in arrival order.
    pub responses: Vec<JoinSetResponseEventOuter>,
    /// The children its log requested.
    pub children: Vec<RecordedChild>,
}

/// A child as its `Created` event recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedChild {
    /// The child.
    pub execution_id: ExecutionId,
    /// Its function.
    pub function: FunctionFqn,
    /// Its parameters.
    pub params: Json,
}

impl RecordedHistory {
    /// The history of `execution_id` as `db` holds it.
    ///
    /// # Errors
    /// The execution or one of its children is not stored; the store failed.
    pub async fn read(db: &dyn DbClient, execution_id: &ExecutionId) -> Result<Self, DbError> {
        let log = db.get(execution_id).await?;
        let requested = crate::state::child_requests(&history_of(&log.events));
        let created = crate::store::children_created(db, requested.clone()).await?;
        let children = requested
            .into_iter()
            .filter_map(|execution_id| {
                let (function, params) = created.get(&execution_id)?.clone();
                Some(RecordedChild {
                    execution_id,
                    function,
                    params,
                })
            })
            .collect();
        let ExecutionLog {
            execution_id,
            events,
            responses,
            ..
        } = log;
        Ok(Self {
            execution_id,
            events,
            responses,
            children,
        })
    }

    /// The function, parameters and history events of the log; `None` without a `Created`
    /// event first.
    fn parts(&self) -> Option<(&FunctionFqn, &Json, Vec<HistoryEvent>)> {
        let concepts::Created { ffqn, params, .. } = self.events.first()?.event.created()?;
        Some((ffqn, params, history_of(&self.events)))
    }
}

/// The history events of a log, in order.
pub(crate) fn history_of(events: &[ExecutionEvent]) -> Vec<HistoryEvent> {
    (events.iter())
        .filter_map(|event| match &event.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// Why a history did not replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The history is not a workflow's this replayer knows.
    #[error("execution {execution_id} runs {function}, which is not registered on this replayer")]
    NotRegistered {
        /// The execution.
        execution_id: ExecutionId,
        /// Its function.
        function: FunctionFqn,
    },
    /// The history has no `Created` event first.
    #[error("execution {0}: the history has no `Created` event first")]
    Malformed(ExecutionId),
    /// The code's parameters type does not decode the recorded parameters.
    #[error("execution {execution_id}: the code cannot decode the recorded parameters: {reason}")]
    Params {
        /// The execution.
        execution_id: ExecutionId,
        /// Why.
        reason: String,
    },
    /// The code diverges from the history.
    #[error("execution {execution_id}: {reason}")]
    Nondeterminism {
        /// The execution.
        execution_id: ExecutionId,
        /// The version of the first differing event, when the code made an operation where the
        /// log holds another event (not for a broken rule of determinism).
        version: Option<Version>,
        /// The whole reason, as a run's would read: `the replay diverged at version V: the log
        /// holds X, the code Y (at file:line:column)`.
        reason: String,
        /// Where in the workflow's source the differing operation was called, when it was one.
        at: Option<String>,
    },
}

/// Replays recorded histories through the code of the workflows registered on it.
#[derive(Default)]
pub struct Replayer {
    ffqns: Vec<FunctionFqn>,
    workflows: HashMap<FunctionFqn, Arc<StartWorkflow>>,
}

impl Replayer {
    /// A replayer of no workflow yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the workflow `function` runs, as a `WorkflowWorker` does.
    ///
    /// # Errors
    /// The handle's name is illegal, or already registered.
    pub fn register<P, R, E, F, Fut>(
        mut self,
        function: &Function<P, R>,
        workflow: F,
    ) -> Result<Self, RegistrationError>
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        E: Serialize + Send + 'static,
        F: Fn(WorkflowCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, WorkflowError<E>>> + Send + 'static,
    {
        let ffqn = register_name(&self.ffqns, function)?;
        self.ffqns.push(ffqn.clone());
        self.workflows
            .insert(ffqn, Arc::new(workflow_start(workflow)));
        Ok(self)
    }

    /// Replays `history` through its workflow's code, as far as the history goes: `Ok` when
    /// the code agrees with every recorded event (it ends, waits for a response, or would
    /// record something new there), no step's closure run and nothing written.
    ///
    /// # Errors
    /// The code diverges ([`ReplayError::Nondeterminism`]), or the history is not one of this
    /// replayer's workflows.
    pub fn replay(&self, history: &RecordedHistory) -> Result<(), ReplayError> {
        let execution_id = &history.execution_id;
        let Some((ffqn, params, events)) = history.parts() else {
            return Err(ReplayError::Malformed(execution_id.clone()));
        };
        let Some(start) = self.workflows.get(ffqn) else {
            return Err(ReplayError::NotRegistered {
                execution_id: execution_id.clone(),
                function: ffqn.clone(),
            });
        };
        let children = (history.children.iter())
            .map(|child| {
                let recorded = (child.function.clone(), child.params.clone());
                (child.execution_id.clone(), recorded)
            })
            .collect();
        let log = ExecutionLog {
            execution_id: execution_id.clone(),
            events: history.events.clone(),
            responses: history.responses.clone(),
            next_version: Version(u32::try_from(history.events.len()).unwrap_or(u32::MAX)),
            pending_state: PendingState::PendingAt {
                scheduled_at: chrono::DateTime::UNIX_EPOCH,
            },
        };
        let probed = probe_log(
            start.as_ref(),
            &log,
            events,
            params.clone(),
            children,
            replay_defaults(),
        )
        .map_err(|reason| ReplayError::Params {
            execution_id: execution_id.clone(),
            reason,
        })?;
        match probed {
            Probed::Agrees => Ok(()),
            Probed::Diverges(fault) => Err(nondeterminism(&log, fault)),
        }
    }
}

/// A replay records nothing, so its children's settings are never used.
fn replay_defaults() -> ChildDefaults {
    ChildDefaults {
        component_id: ComponentId::new("replay", "replay").expect("a legal component id"),
        max_retries: 0,
        retry_exp_backoff: Duration::ZERO,
    }
}

/// The divergence `fault` of `log`'s replay, with its version and call site.
pub(crate) fn nondeterminism(log: &ExecutionLog, fault: Fault) -> ReplayError {
    let (version, at) = match &fault {
        Fault::Nondeterminism {
            history_index,
            code_at,
            ..
        } => (
            history_version(log, *history_index),
            code_at.map(ToString::to_string),
        ),
        Fault::Determinism(_) | Fault::Trap(_) => (None, None),
    };
    let place = match (&fault, version) {
        (Fault::Nondeterminism { history_index, .. }, None) => {
            format!("history event {history_index}")
        }
        (_, Some(version)) => format!("version {version}"),
        (_, None) => String::new(),
    };
    ReplayError::Nondeterminism {
        execution_id: log.execution_id.clone(),
        version,
        reason: fault.reason(&place),
        at,
    }
}

/// Replays `history` (the log's history events) through `start`'s code, stopped where the
/// code would record something new: what a probe of a parked execution and a replayer do.
/// `Err` when the code cannot decode `params` (a run finishes such an execution with that
/// error).
pub(crate) fn probe_log(
    start: &StartWorkflow,
    log: &ExecutionLog,
    history: Vec<HistoryEvent>,
    params: Json,
    children: HashMap<ExecutionId, (FunctionFqn, Json)>,
    child_defaults: ChildDefaults,
) -> Result<Probed, String> {
    let created = log.events.first().and_then(|event| event.event.created());
    let metadata = created.map(|created| created.metadata.clone());
    let metadata = metadata.unwrap_or_default();
    // The time of the log's last event: a probe records nothing, so no time it reads is kept.
    let at = log
        .events
        .last()
        .map_or(chrono::DateTime::UNIX_EPOCH, |event| event.created_at);
    let clock: Clock = Arc::new(move || at);
    let mut state = RunState::new(
        log.execution_id.clone(),
        RunId::generate_at(at),
        metadata,
        child_defaults,
        history,
        log.responses.clone(),
    )
    .probing();
    state.recorded_children = children;
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        clock,
    });
    let mut future: futures_util::future::BoxFuture<'static, Outcome> =
        start(WorkflowCtx::new(shared.clone()), params)?;
    Ok(probe(&shared, &mut future))
}
