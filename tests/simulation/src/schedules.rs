//! The world's schedule: `DOUBLE(1)` every second for the first 25 simulated seconds,
//! `allow-all`, with a catch-up window of 3 s (shorter than a clock jump can be), fired by the
//! watcher loop of each node (killed and restarted with it, racing the other), and its
//! invariants: every tick from the schedule's creation to the last one handled is accounted
//! for exactly once (fired as the execution derived from it, or inside one recorded skipped
//! range), no execution is fired twice, each fired one is in the store (or was pruned), the
//! schedule's run count is the number fired, and a tick recorded as missed had no successful
//! pass within its catch-up window (`Invariant::ScheduleOnce`); once the run is over, the
//! schedule ended and handled every tick up to its end (`Invariant::ScheduleHandled`).

use crate::invariants::{Broken, Invariant};
use chrono::{DateTime, Utc};
use concepts::{
    ComponentId, DbConnection, DbError, ExecutionId, ExecutionLog, Json,
    schedule::{
        CreateScheduleRequest, Definition, Overlap, RunSettings, ScheduleName, ScheduleRow,
        SkipReason, Tick, TickOutcome, tick_execution_id,
    },
};
use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    time::Duration,
};

/// The schedule's name.
const NAME: &str = "sim-every-second";

/// How long the schedule fires after the world starts (a little less than the faulty steps
/// last, on average: the calm steps mostly need not wait for its end).
const FIRES_FOR: Duration = Duration::from_secs(25);

fn name() -> ScheduleName {
    NAME.parse().expect("a legal name")
}

/// Creates the world's schedule at `now` (on the store itself: the world starts with it).
///
/// # Errors
/// What the store returned.
pub async fn create(db: &dyn DbConnection, now: DateTime<Utc>) -> Result<(), DbError> {
    let mut definition = Definition::new(
        name(),
        crate::workers::DOUBLE.ffqn().expect("a legal function"),
        Json(serde_json::json!(1)),
        "every 1s".parse().expect("a legal spec"),
    );
    definition.overlap = Overlap::AllowAll;
    // Shorter than the clock's longest jump and a killed node's absence: ticks are missed
    // too, and must be recorded as such.
    definition.catchup_window = Duration::from_secs(3);
    definition.end = Some(now + chrono::Duration::from_std(FIRES_FOR).unwrap_or_default());
    let req = CreateScheduleRequest {
        definition,
        settings: RunSettings {
            component_id: ComponentId::new("activity", "sim").expect("a legal component"),
            max_retries: 3,
            retry_exp_backoff: Duration::from_millis(100),
        },
        now,
    };
    db.create_schedule(req).await.map(|_| ())
}

fn broken(detail: String) -> Broken {
    Broken {
        invariant: Invariant::ScheduleOnce,
        detail,
    }
}

/// The ticks a record accounts for, given the spec's ticks `spec_ticks` in order.
fn covers(tick: &Tick, at: DateTime<Utc>) -> bool {
    match &tick.outcome {
        TickOutcome::Skipped { last, .. } => tick.at <= at && at <= *last,
        _ => tick.at == at,
    }
}

/// What the schedule's check found.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScheduleState {
    /// The schedule ended: no tick of its spec is left before its end.
    pub ended: bool,
    /// When a scheduler pass next has something to do.
    pub next_due_at: Option<DateTime<Utc>>,
    /// Ticks recorded as missed (each explained: no scheduler pass succeeded within its
    /// catch-up window).
    pub missed: u64,
}

/// The world's schedule and its recorded ticks, oldest first.
///
/// # Errors
/// The store unreadable.
pub async fn read(db: &dyn DbConnection) -> Result<(ScheduleRow, Vec<Tick>), DbError> {
    let row = db.get_schedule(&name()).await?;
    let mut ticks = db.schedule_ticks(&name(), 1_000).await?;
    ticks.reverse();
    Ok((row, ticks))
}

/// Checks the schedule's invariant on its row and ticks and the `logs` read at the same step
/// (`pruned`: the executions deleted by the pruner, which a fired tick may name), and that
/// each tick recorded as missed is explained: no scheduler pass in `passes` (the `now` of
/// every pass that succeeded, in order) came within its catch-up window.
///
/// # Errors
/// The invariant broken, or the store unreadable.
pub fn check(
    (row, ticks): &(ScheduleRow, Vec<Tick>),
    logs: &BTreeMap<ExecutionId, ExecutionLog>,
    pruned: &BTreeSet<ExecutionId>,
    passes: &[DateTime<Utc>],
) -> Result<ScheduleState, Broken> {
    let mut fired = HashSet::new();
    for tick in ticks {
        let Some(id) = tick.execution_id() else {
            continue;
        };
        let expected = tick_execution_id(NAME, row.created_at, tick.at);
        if *id != expected {
            return Err(broken(format!(
                "the tick at {} fired {id}, not {expected}",
                tick.at
            )));
        }
        if !fired.insert(id.clone()) {
            return Err(broken(format!("{id} was fired twice: {ticks:?}")));
        }
        if !logs.contains_key(id) && !pruned.contains(id) {
            return Err(broken(format!(
                "the tick at {} fired {id}, which is neither stored nor pruned",
                tick.at
            )));
        }
    }
    let runs = ticks
        .iter()
        .filter(|tick| matches!(tick.outcome, TickOutcome::Fired { .. }))
        .count() as u64;
    if runs != row.runs {
        return Err(broken(format!(
            "{runs} ticks fired, the schedule counts {}",
            row.runs
        )));
    }
    let definition = &row.definition;
    let mut at = row.created_at;
    while let Some(next) = definition.spec.next_after(definition.zone, at) {
        if next > row.handled_through {
            break;
        }
        let records = ticks.iter().filter(|tick| covers(tick, next)).count();
        if records != 1 {
            return Err(broken(format!(
                "the tick at {next} (handled through {}) is accounted for by {records} records: \
                 {ticks:?}",
                row.handled_through
            )));
        }
        at = next;
    }
    if let Some(after) = ticks.iter().find(|tick| tick.at > row.handled_through) {
        return Err(broken(format!(
            "a tick recorded after the last one handled ({}): {after:?}",
            row.handled_through
        )));
    }
    let missed = explained_misses(row, ticks, passes)?;
    Ok(ScheduleState {
        ended: row.has_ended(),
        next_due_at: row.next_due_at,
        missed,
    })
}

/// The ticks recorded as missed, each checked against the passes that succeeded: a pass at
/// `p` with `t <= p < t + catch-up window` fired every tick `t` still unhandled, so a tick
/// missed with such a pass is a tick the scheduler lost.
fn explained_misses(
    row: &ScheduleRow,
    ticks: &[Tick],
    passes: &[DateTime<Utc>],
) -> Result<u64, Broken> {
    let window = chrono::Duration::from_std(row.definition.catchup_window).unwrap_or_default();
    let definition = &row.definition;
    let mut missed = 0;
    for tick in ticks {
        let TickOutcome::Skipped {
            reason: SkipReason::Missed,
            last,
            ..
        } = &tick.outcome
        else {
            continue;
        };
        let mut at = Some(tick.at);
        while let Some(t) = at.filter(|t| t <= last) {
            missed += 1;
            let first_pass = passes.partition_point(|pass| *pass < t);
            if let Some(pass) = passes.get(first_pass).filter(|pass| **pass < t + window) {
                return Err(broken(format!(
                    "the tick at {t} was recorded as missed ({tick:?}), though a scheduler pass \
                     succeeded at {pass}, within its catch-up window"
                )));
            }
            at = definition.spec.next_after(definition.zone, t);
        }
    }
    Ok(missed)
}

/// Checks, once the run is over, that the schedule ended and handled every tick of its spec
/// up to its end: nothing due was left unhandled.
///
/// # Errors
/// A tick left unhandled, or the store unreadable.
pub async fn check_complete(db: &dyn DbConnection) -> Result<(), Broken> {
    let row = db.get_schedule(&name()).await?;
    let definition = &row.definition;
    let end = definition.end.unwrap_or(row.created_at);
    let (mut at, mut last) = (row.created_at, None);
    while let Some(next) = (definition.spec.next_after(definition.zone, at)).filter(|n| *n <= end) {
        last = Some(next);
        at = next;
    }
    let Some(last) = last else {
        return Ok(());
    };
    if !row.has_ended() || row.handled_through < last {
        return Err(Broken {
            invariant: Invariant::ScheduleHandled,
            detail: format!(
                "the run is over, and the schedule handled its ticks through {} (ended: {}), \
                 though its last tick is at {last}",
                row.handled_through,
                row.has_ended()
            ),
        });
    }
    Ok(())
}

/// How many executions the schedule fired.
///
/// # Errors
/// The store unreadable.
pub async fn fires(db: &dyn DbConnection) -> Result<u64, DbError> {
    Ok(db.get_schedule(&name()).await?.runs)
}
