//! The writes of schedules as their callers make them: create, change (update, pause,
//! resume, delete), fire the due ones, trigger or backfill one; and what each is answered.

use super::{Definition, RunSettings, ScheduleName};
use crate::{ExecutionId, FunctionFqn};
use chrono::{DateTime, Utc};

/// `create_schedule`: a new schedule, or the same one again (idempotent: answered
/// [`ScheduleCreated::AlreadyExisted`]); a name that exists with another definition is a
/// conflict naming what differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateScheduleRequest {
    /// What it runs and when.
    pub definition: Definition,
    /// How its executions are created.
    pub settings: RunSettings,
    /// Now: its first tick is the first one after.
    pub now: DateTime<Utc>,
}

/// What `create_schedule` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleCreated {
    /// It is stored.
    Created,
    /// A schedule with this name and definition exists: nothing was written.
    AlreadyExisted,
}

/// A change of a stored schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleChange {
    /// A new definition (of the same name) and settings, for the ticks after the last one
    /// handled.
    Update {
        /// The definition (boxed: it is most of the request's size).
        definition: Box<Definition>,
        /// The settings.
        settings: RunSettings,
    },
    /// No tick fires until it is resumed.
    Pause {
        /// Why (may be empty).
        note: String,
    },
    /// Ticks fire again from now; those that fell while it was paused are recorded as
    /// skipped.
    Resume,
    /// The schedule and its ticks are deleted; its executions are left as they are.
    Delete,
}

/// `change_schedule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeScheduleRequest {
    /// The schedule.
    pub name: ScheduleName,
    /// What changes.
    pub change: ScheduleChange,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What `change_schedule` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleChanged {
    /// The change is stored.
    Changed,
    /// The schedule was as the change would leave it (the same definition, paused already,
    /// not paused): nothing was written.
    Unchanged,
    /// Deleted; its last run, if it had not finished, goes on.
    Deleted {
        /// The last run, when unfinished.
        running: Option<ExecutionId>,
    },
}

/// `fire_schedules`: one pass over the schedules due at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireSchedulesRequest {
    /// Now.
    pub now: DateTime<Utc>,
    /// At most this many schedules, the longest due first.
    pub limit: usize,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireOutcome {
    /// Schedules handled.
    pub schedules: usize,
    /// Executions created.
    pub fired: Vec<ExecutionId>,
    /// The functions of the executions created, each with how many of `fired` run it.
    pub functions: Vec<(FunctionFqn, usize)>,
    /// Ticks recorded as skipped (a range of missed ticks counts as its count).
    pub skipped: u64,
    /// Previous runs that `cancel-other` schedules need cancelled before their due tick fires
    /// (the next pass fires it once they finished), with their schedules.
    pub to_cancel: Vec<(ScheduleName, ExecutionId)>,
    /// True when the limit stopped the pass: more may be due.
    pub more: bool,
}

/// Which ticks `trigger_schedule` fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerTicks {
    /// One execution now, whatever the spec and the previous run.
    Now,
    /// Every tick of the spec from `from` to `to` (both included), due now; a tick whose
    /// execution exists already is not fired again.
    Backfill {
        /// The first time of the range.
        from: DateTime<Utc>,
        /// The last time of the range.
        to: DateTime<Utc>,
    },
}

/// `trigger_schedule`: fires a schedule by hand, now or over a past range. Its executions
/// count as runs, and neither the overlap policy nor a pause stops them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerScheduleRequest {
    /// The schedule.
    pub name: ScheduleName,
    /// Which ticks.
    pub ticks: TriggerTicks,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What `trigger_schedule` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Triggered {
    /// Executions created, in tick order.
    pub fired: Vec<ExecutionId>,
    /// The function of the executions created (the schedule's), with how many of `fired` run
    /// it; empty when none was.
    pub functions: Vec<(FunctionFqn, usize)>,
    /// Executions of the range that existed already: not created again.
    pub already_fired: Vec<ExecutionId>,
}
