//! The JSON documents of the API, request bodies, query strings and answers: the stable
//! shapes a client of any language reads, built from the model's types in `views.rs`, never
//! the model's types serialized as they are.
//!
//! Times are RFC 3339 in UTC with microseconds (`2026-01-31T12:00:01.234567Z`); ids are the
//! model's text forms (`E_<ULID>`, `E_<ULID>.n:approval_1`); durations are whole
//! milliseconds, named `_ms`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The body of `POST /executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The function, `<interface>.<function>`.
    pub function: String,
    /// Its parameters, any JSON value the function takes.
    pub params: serde_json::Value,
    /// The execution id, `E_<ULID>`: the idempotency key of a submit that may be repeated; a
    /// fresh id when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// The answer of `POST /executions`: 201 when created, 200 when it already existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitAnswer {
    /// The execution id.
    pub id: String,
    /// True when this request created it; false when an execution with this id, function and
    /// parameters already existed and nothing was written.
    pub created: bool,
    /// Where it stands after the write: pending at its creation, or locked by an executor of
    /// the node that runs it at once.
    pub state: StateView,
}

/// Where an execution stands: a sentence for people and, by `kind`, the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateView {
    /// `Locked until 2026-01-31 12:00:01.234 UTC`, for people.
    pub summary: String,
    /// The state as data.
    #[serde(flatten)]
    pub data: StateData,
}

/// The state of an execution as data, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StateData {
    /// Due at `scheduled_at` (or already due).
    Pending {
        /// When it is due.
        scheduled_at: DateTime<Utc>,
    },
    /// An executor runs it under a lease.
    Locked {
        /// The executor holding the lease.
        executor_id: String,
        /// The run.
        run_id: String,
        /// When the lease expires.
        lock_expires_at: DateTime<Utc>,
    },
    /// Parked: its replay diverged from its log, and it waits for code that agrees with it
    /// (the reason and since when are known on an execution's own page, not in a listing).
    Parked {
        /// Why it was parked: where the replay diverged.
        reason: Option<String>,
        /// When it was parked.
        since: Option<DateTime<Utc>>,
    },
    /// A workflow waiting for the next response of a join set.
    Blocked {
        /// The join set.
        join_set_id: String,
        /// When its run gives up waiting in memory.
        lock_expires_at: DateTime<Utc>,
        /// True when the join set is being closed.
        closing: bool,
    },
    /// Finished: `result_kind` says how (`ok`, `error`, `timeout`, `unhandled_child_error`,
    /// `failed`, `cancelled`).
    Finished {
        /// The version of its `Finished` event.
        version: u32,
        /// When it finished.
        finished_at: DateTime<Utc>,
        /// How it finished; the result itself is in `GET /executions/{id}`.
        result_kind: String,
    },
}

/// A finished execution's result, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultView {
    /// It succeeded; `value` is what it returned (`null` for nothing).
    Ok {
        /// The value.
        value: serde_json::Value,
    },
    /// The function ran to its end and returned its own error value.
    Error {
        /// The error value.
        value: serde_json::Value,
    },
    /// Its runs outlived their leases and no retry was left.
    Timeout,
    /// A child failed and the workflow did not handle it.
    UnhandledChildError {
        /// The child.
        child_id: String,
        /// Where the failure started.
        root_cause_id: String,
    },
    /// A failure retries cannot fix (a trap with no retry left, parameters it could not
    /// decode, nondeterminism).
    Failed {
        /// What kind of failure (`ActivityTrap`, `ParamsParsingError`, ...).
        failure: String,
        /// The message.
        reason: String,
        /// More detail, when the worker gave some.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// It was cancelled (itself or with an ancestor).
    Cancelled {
        /// Why, as the canceller said.
        reason: String,
    },
}

/// The parent of a child execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentView {
    /// The parent's id.
    pub id: String,
    /// The join set of the parent that this child answers.
    pub join_set_id: String,
}

/// One row of `GET /executions` and `GET /executions/{id}/children`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryView {
    /// The execution id.
    pub id: String,
    /// The function.
    pub function: String,
    /// Where it stands.
    pub state: StateView,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was first due.
    pub scheduled_at: DateTime<Utc>,
    /// The version its next event gets.
    pub next_version: u32,
}

/// The answer of `GET /executions` and `GET /executions/{id}/children`: a page, newest
/// first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListAnswer {
    /// The page.
    pub executions: Vec<SummaryView>,
    /// The `cursor` of the next page; `null` when this page is the last (it holds fewer rows
    /// than `limit`).
    pub next_cursor: Option<String>,
}

/// The answer of `GET /executions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionView {
    /// The execution id.
    pub id: String,
    /// The function.
    pub function: String,
    /// Its parameters.
    pub params: serde_json::Value,
    /// The component that runs it.
    pub component: String,
    /// How many temporary failures or timeouts are retried.
    pub max_retries: u32,
    /// The first retry's backoff; each further one doubles it.
    pub retry_exp_backoff_ms: u64,
    /// The parent, for a child execution.
    pub parent: Option<ParentView>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was first due.
    pub scheduled_at: DateTime<Utc>,
    /// Where it stands.
    pub state: StateView,
    /// Its result, once finished.
    pub result: Option<ResultView>,
    /// The version its next append must carry (a `Finished` event is stored at it without
    /// advancing it).
    pub next_version: u32,
    /// How many events its log holds: `next_version`, one more once finished.
    pub events: u32,
    /// The strings stored with it (`submitted_by`, a trace context).
    pub metadata: BTreeMap<String, String>,
    /// The status a workflow set last (`WorkflowCtx::set_status`), if it set one.
    pub status: Option<serde_json::Value>,
    /// The responses its join sets received, in arrival order.
    pub responses: Vec<ResponseView>,
}

/// A response a workflow's join set received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseView {
    /// When it arrived.
    pub created_at: DateTime<Utc>,
    /// The join set.
    pub join_set_id: String,
    /// What answered.
    #[serde(flatten)]
    pub response: ResponseData,
}

/// What answered a join set, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResponseData {
    /// A durable sleep ended.
    DelayFinished {
        /// The delay.
        delay_id: String,
    },
    /// A child finished.
    ChildFinished {
        /// The child.
        child_id: String,
        /// Its result.
        result: ResultView,
    },
}

/// The answer of `GET /executions/{id}/events`: a page of the log in version order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventsAnswer {
    /// The events.
    pub events: Vec<EventView>,
    /// The `from` of the next page; `null` when this page is the last.
    pub next: Option<u32>,
}

/// One event of an execution's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    /// Its version: its position in the log.
    pub version: u32,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// The event.
    #[serde(flatten)]
    pub event: EventData,
}

/// An event, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventData {
    /// Version 0: the execution was created.
    Created {
        /// The function.
        function: String,
        /// Its parameters.
        params: serde_json::Value,
        /// The parent, for a child.
        parent: Option<ParentView>,
        /// When it was due.
        scheduled_at: DateTime<Utc>,
        /// The component that runs it.
        component: String,
        /// Its retries.
        max_retries: u32,
        /// Its first backoff.
        retry_exp_backoff_ms: u64,
    },
    /// An executor took a lease.
    Locked {
        /// The executor's component.
        component: String,
        /// The executor.
        executor_id: String,
        /// The run.
        run_id: String,
        /// When the lease expires.
        lock_expires_at: DateTime<Utc>,
    },
    /// The worker hit a limit; due again at `backoff_expires_at` without using up a retry.
    Unlocked {
        /// When it is due again.
        backoff_expires_at: DateTime<Utc>,
        /// Which limit.
        reason: String,
    },
    /// The run failed; retried at `backoff_expires_at`.
    TemporarilyFailed {
        /// When it is due again.
        backoff_expires_at: DateTime<Utc>,
        /// The failure.
        reason: String,
        /// More detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// The run outlived its lease; retried at `backoff_expires_at`.
    TemporarilyTimedOut {
        /// When it is due again.
        backoff_expires_at: DateTime<Utc>,
    },
    /// The execution finished.
    Finished {
        /// Its result.
        result: ResultView,
    },
    /// A step a workflow recorded.
    History {
        /// The step.
        step: HistoryView,
    },
}

/// A workflow's recorded step, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HistoryView {
    /// A value recorded so that a replay sees it again (a random number, a step's result).
    Persist {
        /// The value.
        value: serde_json::Value,
    },
    /// A join set was opened.
    JoinSetCreate {
        /// The join set.
        join_set_id: String,
    },
    /// A child execution was submitted into a join set.
    ChildRequest {
        /// The join set.
        join_set_id: String,
        /// The child.
        child_id: String,
    },
    /// A durable sleep was started in a join set.
    DelayRequest {
        /// The join set.
        join_set_id: String,
        /// The delay.
        delay_id: String,
        /// When it ends.
        expires_at: DateTime<Utc>,
    },
    /// The workflow awaits the next response of a join set.
    JoinNext {
        /// The join set.
        join_set_id: String,
        /// Until when its run waits in memory.
        run_expires_at: DateTime<Utc>,
        /// True when the join set is being closed.
        closing: bool,
    },
    /// Another execution was scheduled.
    Schedule {
        /// It.
        id: String,
        /// When it is due.
        scheduled_at: DateTime<Utc>,
    },
}

/// The body of `POST /executions/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why, recorded in the result of every execution cancelled (`cancelled through the HTTP
    /// API` when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer of `POST /executions/{id}/cancel`, tagged by `outcome`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CancelAnswer {
    /// It was cancelled, with `executions - 1` unfinished descendants.
    Cancelled {
        /// The execution.
        id: String,
        /// How many executions this request finished (at least 1).
        executions: usize,
    },
    /// It had finished already: nothing was written.
    AlreadyFinished {
        /// The execution.
        id: String,
        /// How it finished.
        result: ResultView,
    },
}

/// The body of `POST /executions/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The value the promise resolves to.
    pub value: serde_json::Value,
}

/// The answer of `POST /executions/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteAnswer {
    /// The promise.
    pub id: String,
    /// `completed`, or `already_completed` (with this same value: nothing was written).
    pub outcome: String,
}

/// The answer of `GET /executions/{id}/wait`: 200 with `finished: true` and the result, or
/// 202 with `finished: false` when the timeout passed first (or the server is stopping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitAnswer {
    /// The execution.
    pub id: String,
    /// Whether it finished.
    pub finished: bool,
    /// Its result, when finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultView>,
}

/// The answer of `GET /functions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionsAnswer {
    /// What the node runs, by name.
    pub functions: Vec<FunctionView>,
}

/// A function the node runs, and how a submitted execution of it is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionView {
    /// The function.
    pub function: String,
    /// The component of its executions.
    pub component: String,
    /// Their retries.
    pub max_retries: u32,
    /// Their first backoff.
    pub retry_exp_backoff_ms: u64,
    /// Whether a submit's parameters are checked against the function's parameter type (a
    /// refusal is 422).
    pub checks_params: bool,
}

/// The answer of `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthAnswer {
    /// `ok` (the process serves) or `ready` (the store answered a read).
    pub status: String,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind, one of the crate docs' table (`malformed_body`, `not_found`, `conflict`,
    /// ...), stable for programs to branch on.
    pub error: String,
    /// What went wrong and what to do, for people.
    pub message: String,
    /// For a conflicting submit, what differs (`function`, `parameters`, `parent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differences: Option<Vec<String>>,
}

/// The query of `GET /executions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `pending`, `locked`, `blocked` or `finished`.
    pub state: Option<String>,
    /// Only this function.
    pub function: Option<String>,
    /// `true`: only top-level executions.
    pub top_level: Option<bool>,
    /// Only the children of this execution.
    pub parent: Option<String>,
    /// Only those created after this time (RFC 3339; not at it).
    pub created_after: Option<String>,
    /// Only those created before this time (RFC 3339; not at it).
    pub created_before: Option<String>,
    /// Only ids that start with this text.
    pub id_prefix: Option<String>,
    /// `true`: only parked executions (their replay diverged from their log; they wait for
    /// code that agrees with it).
    pub parked: Option<bool>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 1,000 (100).
    pub limit: Option<usize>,
}

/// The query of `GET /executions/{id}/children`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 1,000 (100).
    pub limit: Option<usize>,
}

/// The query of `GET /executions/{id}/events`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// The first version (0).
    pub from: Option<u32>,
    /// Events per page, 1 to 1,000 (100).
    pub limit: Option<usize>,
}

/// The query of `GET /executions/{id}/wait`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// How long to wait, as the `stele` command writes durations (`500ms`, `30s`, `1m`): 30 s
    /// when left out, at most the server's maximum (60 s).
    pub timeout: Option<String>,
}
