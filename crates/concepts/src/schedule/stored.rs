//! What is stored of a schedule: its [`ScheduleRow`] (the definition, how its executions are
//! created, whether it is paused, how far its ticks are handled, its runs) and its [`Tick`]s,
//! each with what became of it: fired as an execution, buffered, or skipped and why.

use super::{Definition, ScheduleName};
use crate::{ComponentId, ExecutionId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a schedule's executions are created: what the function's submits get elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSettings {
    /// The component that runs the function.
    pub component_id: ComponentId,
    /// How many failures of a run are retried.
    pub max_retries: u32,
    /// The first retry's backoff.
    #[serde(with = "crate::event::duration_micros")]
    pub retry_exp_backoff: Duration,
}

/// A paused schedule's pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Why, as the operator wrote it (may be empty).
    pub note: String,
    /// Since when.
    pub since: DateTime<Utc>,
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRow {
    /// What it runs and when.
    pub definition: Definition,
    /// How its executions are created.
    pub settings: RunSettings,
    /// When it was created: part of every tick's execution id, so that a schedule deleted and
    /// created again under its name fires new executions.
    pub created_at: DateTime<Utc>,
    /// When it was last created, updated, paused or resumed.
    pub updated_at: DateTime<Utc>,
    /// Set while it is paused.
    pub paused: Option<Pause>,
    /// Every tick at or before this time is handled (fired, buffered or skipped); the next
    /// pass starts after it.
    pub handled_through: DateTime<Utc>,
    /// A tick waiting for the previous run to finish (`buffer-one`).
    pub buffered: Option<DateTime<Utc>>,
    /// Executions fired so far (ticks, buffered ticks, triggers and backfills).
    pub runs: u64,
    /// The execution fired last: the previous run that the overlap policy looks at.
    pub last_run: Option<ExecutionId>,
    /// Ticks recorded so far: the sequence number of the next one.
    pub ticks_recorded: u64,
    /// When a pass next has something to do: the next tick (or, with a buffered tick, the
    /// next look at the previous run); `None` while paused or once it ended. Backends index
    /// it to find the due schedules.
    pub next_due_at: Option<DateTime<Utc>>,
}

impl ScheduleRow {
    /// Its name.
    #[must_use]
    pub fn name(&self) -> &ScheduleName {
        &self.definition.name
    }

    /// Whether it fires no more: its run limit is reached, or no tick of its spec is left
    /// before its end.
    #[must_use]
    pub fn has_ended(&self) -> bool {
        self.paused.is_none() && self.next_due_at.is_none()
    }

    /// The state in one word: `active`, `paused` or `ended`.
    #[must_use]
    pub fn status(&self) -> &'static str {
        if self.paused.is_some() {
            "paused"
        } else if self.has_ended() {
            "ended"
        } else {
            "active"
        }
    }

    /// The next `count` fire times after `after` (no sooner than the ticks not handled yet),
    /// within the end and the run limit; none while paused.
    #[must_use]
    pub fn next_fire_times(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        if self.paused.is_some() || self.has_ended() {
            return Vec::new();
        }
        let definition = &self.definition;
        let left = definition
            .max_runs
            .map_or(u64::MAX, |max| max.saturating_sub(self.runs));
        let count = count.min(usize::try_from(left).unwrap_or(usize::MAX));
        let from = after.max(self.handled_through);
        let mut times = definition.spec.fire_times(definition.zone, from, count);
        if let Some(end) = definition.end {
            times.retain(|at| *at <= end);
        }
        times
    }
}

/// Why a tick did not fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum SkipReason {
    /// The previous run was unfinished (`skip`).
    Overlap {
        /// The previous run.
        running: ExecutionId,
    },
    /// A tick was already buffered while the previous run was unfinished (`buffer-one`).
    BufferFull {
        /// The previous run.
        running: ExecutionId,
    },
    /// A later tick of the same pass fired instead (`cancel-other` catching up).
    Superseded,
    /// The tick fell while the schedule was paused.
    Paused,
    /// The tick fell before the catch-up window when a pass came: the engine was down or
    /// behind for longer than the window.
    Missed,
    /// The tick fell before the schedule's spec or zone changed, and no pass had handled it.
    Updated,
}

impl SkipReason {
    /// Its name: `overlap`, `buffer-full`, `superseded`, `paused`, `missed` or `updated`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Overlap { .. } => "overlap",
            Self::BufferFull { .. } => "buffer-full",
            Self::Superseded => "superseded",
            Self::Paused => "paused",
            Self::Missed => "missed",
            Self::Updated => "updated",
        }
    }
}

/// How an execution came to be fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FiredBy {
    /// Its tick fell due.
    Tick,
    /// Its tick was buffered and the previous run finished.
    Buffer,
    /// Triggered by hand, now.
    Trigger,
    /// A backfill of a past range.
    Backfill,
}

impl FiredBy {
    /// Its name: `tick`, `buffer`, `trigger` or `backfill`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Tick => "tick",
            Self::Buffer => "buffer",
            Self::Trigger => "trigger",
            Self::Backfill => "backfill",
        }
    }
}

/// What became of a tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TickOutcome {
    /// It fired this execution.
    Fired {
        /// The execution.
        execution_id: ExecutionId,
        /// What fired it.
        by: FiredBy,
    },
    /// A backfill found its execution fired already: nothing was created.
    AlreadyFired {
        /// The execution.
        execution_id: ExecutionId,
    },
    /// It waits for the previous run to finish (`buffer-one`).
    Buffered {
        /// The previous run.
        running: ExecutionId,
    },
    /// It did not fire, nor did the `count - 1` ticks after it up to `last`.
    Skipped {
        /// Why.
        #[serde(flatten)]
        reason: SkipReason,
        /// The last tick skipped with it (itself for a single tick).
        last: DateTime<Utc>,
        /// How many ticks (a lower bound unless `exact`).
        count: u64,
        /// Whether `count` is every tick between the first and `last`.
        exact: bool,
    },
}

/// `fired (tick)`, `fired already`, `buffered behind E_...`, `skipped (overlap)`, `skipped
/// (missed), 15 ticks to 2026-01-31T12:00:00Z`.
impl std::fmt::Display for TickOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fired { by, .. } => write!(f, "fired ({})", by.name()),
            Self::AlreadyFired { .. } => f.write_str("fired already"),
            Self::Buffered { running } => write!(f, "buffered behind {running}"),
            Self::Skipped {
                reason,
                last,
                count,
                exact,
            } => {
                write!(f, "skipped ({})", reason.name())?;
                if *count > 1 {
                    let more = if *exact { "" } else { "+" };
                    let last = last.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
                    write!(f, ", {count}{more} ticks to {last}")?;
                }
                Ok(())
            }
        }
    }
}

/// One recorded tick of a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// Its place among the schedule's recorded ticks, from 0.
    pub seq: u64,
    /// The tick's time (for a range of skipped ticks, the first).
    pub at: DateTime<Utc>,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
    /// What became of it.
    pub outcome: TickOutcome,
}

impl Tick {
    /// The execution it fired (or found fired), if any.
    #[must_use]
    pub fn execution_id(&self) -> Option<&ExecutionId> {
        match &self.outcome {
            TickOutcome::Fired { execution_id, .. }
            | TickOutcome::AlreadyFired { execution_id } => Some(execution_id),
            TickOutcome::Buffered { .. } | TickOutcome::Skipped { .. } => None,
        }
    }
}
