//! The writes of schedules: `create_schedule` (idempotent; another definition under the name
//! is a conflict), `change_schedule` (update, pause, resume, delete), `fire_schedules` (one
//! pass over the due schedules: their due ticks fired in order through the idempotent create,
//! with the overlap policy, ticks before the catch-up window recorded as skipped) and
//! `trigger_schedule` (now, or a backfill of a past range). Each stages one
//! [`ScheduleWrite`] per schedule it touches, beside the executions it creates, in the same
//! transaction: a tick is handled and its execution created together, or neither.

use crate::{
    CreateRequest, DbError, DuplicateKind, ExecutionId, ExecutionMetadata, FunctionFqn,
    ValidationError,
    kernel::{
        Keys, Planner, ScheduleDueQuery, ScheduleWrite, Snapshot, Write, write::sealed::Sealed,
    },
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, Definition, FireOutcome,
        FireSchedulesRequest, FiredBy, Missed, Overlap, Pause, ScheduleChange, ScheduleChanged,
        ScheduleCreated, ScheduleName, ScheduleRow, SkipReason, Tick, TickOutcome,
        TriggerScheduleRequest, TriggerTicks, Triggered, due_ticks, tick_execution_id,
    },
};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The most ticks of one schedule a pass fires; the rest wait for the next pass (which comes
/// at once: the schedule stays due).
pub const TICKS_PER_PASS: usize = 100;

/// The most ticks one backfill fires.
pub const MAX_BACKFILL_TICKS: usize = 1_000;

/// The recorded ticks kept per schedule: older ones are deleted, a hundred at a time.
pub const TICKS_KEPT: u64 = 1_000;

/// How soon a schedule with a buffered tick looks again whether its previous run finished.
pub const BUFFER_RECHECK: Duration = Duration::from_secs(1);

impl Sealed for CreateScheduleRequest {}

impl Write for CreateScheduleRequest {
    type Reply = ScheduleCreated;

    /// The schedule's row.
    fn keys(&self) -> Result<Keys, DbError> {
        Ok(schedule_keys(&self.definition.name))
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<ScheduleCreated, DbError> {
        let definition = self.definition.at_stored_precision();
        let name = definition.name.clone();
        if let Some(existing) = planner.snapshot.schedules.get(&name) {
            let mut differences = existing.definition.differences(&definition);
            if existing.settings != self.settings {
                differences.push("execution settings");
            }
            if differences.is_empty() {
                return Ok(ScheduleCreated::AlreadyExisted);
            }
            return Err(DuplicateKind::ScheduleConflict { name, differences }.into());
        }
        // A repeat is answered above even once the schedule has ended; a new one must fire.
        fires_after(&definition, self.now)?;
        let mut row = ScheduleRow {
            definition,
            settings: self.settings,
            created_at: self.now,
            updated_at: self.now,
            paused: None,
            handled_through: self.now,
            buffered: None,
            runs: 0,
            last_run: None,
            ticks_recorded: 0,
            next_due_at: None,
        };
        row.next_due_at = next_due(&row, None, self.now);
        planner.schedules.push(ScheduleWrite::new(row, true));
        Ok(ScheduleCreated::Created)
    }
}

impl Sealed for ChangeScheduleRequest {}

impl Write for ChangeScheduleRequest {
    type Reply = ScheduleChanged;

    /// The schedule's row, and for a delete its last run's (to tell whether it runs on).
    fn keys(&self) -> Result<Keys, DbError> {
        if let ScheduleChange::Update { definition, .. } = &self.change
            && definition.name != self.name
        {
            return Err(ValidationError::InvalidRequest(format!(
                "schedule {} cannot be renamed to {}: create the new one and delete the old",
                self.name, definition.name
            ))
            .into());
        }
        Ok(schedule_keys(&self.name))
    }

    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        let last_run = snapshot.schedules.get(&self.name)?.last_run.clone()?;
        matches!(self.change, ScheduleChange::Delete).then(|| Keys {
            executions: [last_run].into_iter().collect(),
            ..Keys::default()
        })
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<ScheduleChanged, DbError> {
        let now = self.now;
        let mut row = stored(planner.snapshot, &self.name)?.clone();
        let mut write = ScheduleWrite::new(row.clone(), false);
        match self.change {
            ScheduleChange::Delete => {
                let running = row.last_run.filter(|id| is_unfinished(planner, id));
                write.row = None;
                planner.schedules.push(write);
                return Ok(ScheduleChanged::Deleted { running });
            }
            ScheduleChange::Update {
                definition,
                settings,
            } => {
                let definition = definition.at_stored_precision();
                if row.definition == definition && row.settings == settings {
                    return Ok(ScheduleChanged::Unchanged);
                }
                fires_after(&definition, now)?;
                let old = &row.definition;
                if old.spec != definition.spec || old.zone != definition.zone {
                    // The new spec applies from now on: its ticks before now never were, and
                    // the old spec's that no pass handled yet are recorded as skipped.
                    let due = due_ticks(
                        &old.spec,
                        old.zone,
                        row.handled_through,
                        now,
                        Duration::ZERO,
                        0,
                    );
                    if let Some(missed) = &due.missed {
                        skip(&mut row, &mut write, missed, now, SkipReason::Updated);
                    }
                    let just_before = now - chrono::Duration::microseconds(1);
                    row.handled_through = row.handled_through.max(just_before);
                }
                row.definition = definition;
                row.settings = settings;
            }
            ScheduleChange::Pause { note } => {
                if row.paused.is_some() {
                    return Ok(ScheduleChanged::Unchanged);
                }
                row.paused = Some(Pause { note, since: now });
            }
            ScheduleChange::Resume => {
                if row.paused.is_none() {
                    return Ok(ScheduleChanged::Unchanged);
                }
                row.paused = None;
                // The ticks that fell while it was paused are skipped, not caught up.
                let definition = &row.definition;
                let spec = &definition.spec;
                let due = due_ticks(
                    spec,
                    definition.zone,
                    row.handled_through,
                    now,
                    Duration::ZERO,
                    0,
                );
                if let Some(missed) = &due.missed {
                    skip(&mut row, &mut write, missed, now, SkipReason::Paused);
                }
            }
        }
        row.updated_at = now;
        row.next_due_at = next_due(&row, None, now);
        write.row = Some(row);
        planner.schedules.push(write);
        Ok(ScheduleChanged::Changed)
    }
}

impl Sealed for FireSchedulesRequest {}

impl Write for FireSchedulesRequest {
    type Reply = FireOutcome;

    fn keys(&self) -> Result<Keys, DbError> {
        if self.limit == 0 {
            return Err(ValidationError::EmptyBatch("fire_schedules").into());
        }
        Ok(Keys {
            due_schedules: Some(ScheduleDueQuery {
                at: self.now,
                limit: self.limit,
            }),
            ..Keys::default()
        })
    }

    /// Per due schedule: its last run (the overlap policy reads whether it finished) and the
    /// executions its buffered and due ticks would create.
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        let mut keys = Keys::default();
        for name in &snapshot.due_schedules {
            let row = snapshot.schedules.get(name)?;
            keys.executions.extend(row.last_run.clone());
            let created = row.created_at;
            let id = |at| tick_execution_id(name.as_str(), created, at);
            keys.new_executions.extend(row.buffered.map(id));
            let fire = pass_ticks(row, self.now).fire;
            // `cancel-other` creates at most the newest of them.
            let fire = match row.definition.overlap {
                Overlap::CancelOther => fire.last().copied().into_iter().collect(),
                _ => fire,
            };
            keys.new_executions.extend(fire.into_iter().map(id));
        }
        keys.dedup();
        Some(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<FireOutcome, DbError> {
        let snapshot = planner.snapshot;
        let mut outcome = FireOutcome {
            more: snapshot.due_schedules.len() >= self.limit,
            ..FireOutcome::default()
        };
        for name in &snapshot.due_schedules {
            let row = stored(snapshot, name)?.clone();
            if row.next_due_at.is_none_or(|at| at > self.now) {
                continue;
            }
            fire_due(planner, row, self.now, &mut outcome)?;
            outcome.schedules += 1;
        }
        Ok(outcome)
    }
}

impl Sealed for TriggerScheduleRequest {}

impl Write for TriggerScheduleRequest {
    type Reply = Triggered;

    fn keys(&self) -> Result<Keys, DbError> {
        if let TriggerTicks::Backfill { from, to } = self.ticks
            && from > to
        {
            return Err(ValidationError::InvalidRequest(format!(
                "the backfill of schedule {} starts at {from}, after its end {to}",
                self.name
            ))
            .into());
        }
        Ok(schedule_keys(&self.name))
    }

    /// The executions its ticks would create.
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        let row = snapshot.schedules.get(&self.name)?;
        let ticks = trigger_ticks(row, &self.ticks, self.now).ok()?;
        let new_executions = ticks
            .into_iter()
            .map(|at| tick_execution_id(self.name.as_str(), row.created_at, at))
            .collect();
        Some(Keys {
            new_executions,
            ..Keys::default()
        })
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<Triggered, DbError> {
        let now = self.now;
        let mut row = stored(planner.snapshot, &self.name)?.clone();
        let ticks = trigger_ticks(&row, &self.ticks, now)?;
        let by = match self.ticks {
            TriggerTicks::Now => FiredBy::Trigger,
            TriggerTicks::Backfill { .. } => FiredBy::Backfill,
        };
        let mut write = ScheduleWrite::new(row.clone(), false);
        let mut triggered = Triggered::default();
        let last_run = row.last_run.clone();
        for at in ticks {
            match fire(planner, &mut row, &mut write, at, now, by)? {
                Fired::Created(id) => {
                    count_function(&mut triggered.functions, &row.definition.ffqn);
                    triggered.fired.push(id);
                }
                Fired::Existed(id) => triggered.already_fired.push(id),
            }
        }
        if by == FiredBy::Backfill {
            // A backfill runs beside the schedule's own ticks: their previous run stays theirs.
            row.last_run = last_run;
        }
        row.next_due_at = next_due(&row, None, now);
        write.row = Some(row);
        planner.schedules.push(write);
        Ok(triggered)
    }
}

/// The ticks a trigger fires: now, or the spec's ticks of the range (at most
/// [`MAX_BACKFILL_TICKS`]).
fn trigger_ticks(
    row: &ScheduleRow,
    ticks: &TriggerTicks,
    now: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>, DbError> {
    let TriggerTicks::Backfill { from, to } = *ticks else {
        return Ok(vec![now]);
    };
    let definition = &row.definition;
    let Some(before) = from.checked_sub_signed(chrono::Duration::microseconds(1)) else {
        return Err(ValidationError::InvalidRequest(format!(
            "the backfill of schedule {} starts at {from}, the first instant of the calendar: \
             start it later",
            row.name()
        ))
        .into());
    };
    let mut ticks = definition
        .spec
        .fire_times(definition.zone, before, MAX_BACKFILL_TICKS + 1);
    ticks.retain(|at| *at <= to);
    if ticks.len() > MAX_BACKFILL_TICKS {
        return Err(ValidationError::InvalidRequest(format!(
            "the backfill of schedule {} from {from} to {to} holds more than {MAX_BACKFILL_TICKS} \
             ticks: backfill it in shorter ranges",
            row.name()
        ))
        .into());
    }
    Ok(ticks)
}

/// The keys of a write of one schedule.
fn schedule_keys(name: &ScheduleName) -> Keys {
    Keys {
        schedules: std::iter::once(name.clone()).collect(),
        ..Keys::default()
    }
}

/// Refuses a definition that would never fire: its spec has no time after `now`, or its end
/// comes before that time.
fn fires_after(definition: &Definition, now: DateTime<Utc>) -> Result<(), DbError> {
    let name = &definition.name;
    let reason = match definition.spec.next_after(definition.zone, now) {
        None => format!("the spec of schedule {name} has no fire time after now"),
        Some(next) => match definition.end {
            Some(end) if end < next => {
                format!("schedule {name} ends at {end}, before its next fire time ({next})")
            }
            _ => return Ok(()),
        },
    };
    Err(ValidationError::InvalidRequest(format!("{reason}: it would never fire")).into())
}

/// The stored row of `name`, or the error of a schedule that does not exist.
fn stored<'s>(snapshot: &'s Snapshot, name: &ScheduleName) -> Result<&'s ScheduleRow, DbError> {
    snapshot
        .schedules
        .get(name)
        .ok_or_else(|| DbError::NotFound(format!("schedule {name}")))
}

/// True when the execution exists and has not finished (as the write left it so far).
fn is_unfinished(planner: &Planner<'_>, execution_id: &ExecutionId) -> bool {
    let row = match planner.find(execution_id) {
        Some(idx) => &planner.changes[idx].row,
        None => match planner.snapshot.executions.get(execution_id) {
            Some(row) => row,
            // Pruned, or never stored: nothing runs.
            None => return false,
        },
    };
    !row.state.pending_state.is_finished()
}

/// The ticks a pass over `row` at `now` handles.
fn pass_ticks(row: &ScheduleRow, now: DateTime<Utc>) -> crate::schedule::Due {
    let definition = &row.definition;
    let spec = &definition.spec;
    let window = definition.catchup_window;
    // `cancel-other` fires only the newest tick of the window, so its pass sees the whole window
    // (up to the count a missed range is counted to), not the first `TICKS_PER_PASS` of it.
    let limit = if definition.overlap == Overlap::CancelOther {
        usize::try_from(crate::schedule::Missed::COUNT_LIMIT).unwrap_or(usize::MAX)
    } else {
        TICKS_PER_PASS
    };
    due_ticks(
        spec,
        definition.zone,
        row.handled_through,
        now,
        window,
        limit,
    )
}

/// One pass over a due schedule: its buffered tick, its missed ticks, its due ticks with the
/// overlap policy.
fn fire_due(
    planner: &mut Planner<'_>,
    mut row: ScheduleRow,
    now: DateTime<Utc>,
    outcome: &mut FireOutcome,
) -> Result<(), DbError> {
    let mut write = ScheduleWrite::new(row.clone(), false);
    let running = |planner: &Planner<'_>, row: &ScheduleRow| {
        row.last_run.clone().filter(|id| is_unfinished(planner, id))
    };
    if let Some(at) = row.buffered
        && running(planner, &row).is_none()
        && !reached_limit(&row)
    {
        row.buffered = None;
        if let Fired::Created(id) = fire(planner, &mut row, &mut write, at, now, FiredBy::Buffer)? {
            count_function(&mut outcome.functions, &row.definition.ffqn);
            outcome.fired.push(id);
        }
    }
    let due = pass_ticks(&row, now);
    if let Some(missed) = &due.missed {
        outcome.skipped += missed.count;
        skip(&mut row, &mut write, missed, now, SkipReason::Missed);
    }
    let mut fire_list = due.fire;
    if row.definition.overlap == Overlap::CancelOther && fire_list.len() > 1 {
        // Catching up, only the newest tick fires: each would cancel the one before.
        let newest = fire_list.split_off(fire_list.len() - 1);
        let count = fire_list.len() as u64;
        outcome.skipped += count;
        let superseded = TickOutcome::Skipped {
            reason: SkipReason::Superseded,
            last: fire_list[fire_list.len() - 1],
            count,
            exact: true,
        };
        record(&mut row, &mut write, fire_list[0], now, superseded);
        row.handled_through = fire_list[fire_list.len() - 1];
        fire_list = newest;
    }
    let mut waiting = None;
    for at in fire_list {
        if row.definition.end.is_some_and(|end| at > end) || reached_limit(&row) {
            break;
        }
        let id = tick_execution_id(row.name().as_str(), row.created_at, at);
        if planner.find(&id).is_some() || planner.snapshot.executions.contains_key(&id) {
            // Fired already (backfilled): the policy has nothing to decide.
            let outcome = TickOutcome::AlreadyFired { execution_id: id };
            record(&mut row, &mut write, at, now, outcome);
            row.handled_through = at;
            continue;
        }
        let skipped = match (row.definition.overlap, running(planner, &row)) {
            (Overlap::AllowAll, _) | (_, None) => {
                if let Fired::Created(id) =
                    fire(planner, &mut row, &mut write, at, now, FiredBy::Tick)?
                {
                    count_function(&mut outcome.functions, &row.definition.ffqn);
                    outcome.fired.push(id);
                }
                None
            }
            (Overlap::Skip, Some(running)) => Some(SkipReason::Overlap { running }),
            (Overlap::BufferOne, Some(running)) if row.buffered.is_none() => {
                row.buffered = Some(at);
                record(
                    &mut row,
                    &mut write,
                    at,
                    now,
                    TickOutcome::Buffered { running },
                );
                None
            }
            (Overlap::BufferOne, Some(running)) => Some(SkipReason::BufferFull { running }),
            (Overlap::CancelOther, Some(running)) => {
                // The tick waits, unhandled, until the previous run is cancelled.
                outcome.to_cancel.push((row.name().clone(), running));
                waiting = Some(at);
                break;
            }
        };
        if let Some(reason) = skipped {
            outcome.skipped += 1;
            let outcome = TickOutcome::Skipped {
                reason,
                last: at,
                count: 1,
                exact: true,
            };
            record(&mut row, &mut write, at, now, outcome);
        }
        row.handled_through = at;
    }
    row.next_due_at = next_due(&row, waiting, now);
    write.row = Some(row);
    planner.schedules.push(write);
    Ok(())
}

/// Counts one execution created of `ffqn` (the replies' `functions`: a few, one per
/// function).
fn count_function(functions: &mut Vec<(FunctionFqn, usize)>, ffqn: &FunctionFqn) {
    match functions.iter_mut().find(|(function, _)| function == ffqn) {
        Some((_, count)) => *count += 1,
        None => functions.push((ffqn.clone(), 1)),
    }
}

/// True when the run limit is reached.
fn reached_limit(row: &ScheduleRow) -> bool {
    row.definition.max_runs.is_some_and(|max| row.runs >= max)
}

/// When a pass next has something to do for `row`: the tick that waits (`waiting`), else the
/// next tick after the last handled one within the end and the run limit, sooner while a tick
/// is buffered; never while paused.
fn next_due(
    row: &ScheduleRow,
    waiting: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if row.paused.is_some() || reached_limit(row) {
        return None;
    }
    if waiting.is_some() {
        return waiting;
    }
    let definition = &row.definition;
    let next = (definition.spec)
        .next_after(definition.zone, row.handled_through)
        .filter(|at| definition.end.is_none_or(|end| *at <= end));
    let recheck = row.buffered.map(|_| now + BUFFER_RECHECK);
    match (next, recheck) {
        (Some(next), Some(recheck)) => Some(next.min(recheck)),
        (next, recheck) => next.or(recheck),
    }
}

/// How `fire` went.
enum Fired {
    /// The tick's execution is created.
    Created(ExecutionId),
    /// It existed already (a backfill over fired ticks).
    Existed(ExecutionId),
}

/// Fires the tick at `at`: creates its execution (due at the tick plus its jitter, or now for
/// a buffered, triggered or backfilled one) and records it.
fn fire(
    planner: &mut Planner<'_>,
    row: &mut ScheduleRow,
    write: &mut ScheduleWrite,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
    by: FiredBy,
) -> Result<Fired, DbError> {
    let definition = &row.definition;
    let execution_id = tick_execution_id(definition.name.as_str(), row.created_at, at);
    let exists = planner.find(&execution_id).is_some()
        || planner.snapshot.executions.contains_key(&execution_id);
    if exists {
        let outcome = TickOutcome::AlreadyFired {
            execution_id: execution_id.clone(),
        };
        record(row, write, at, now, outcome);
        return Ok(Fired::Existed(execution_id));
    }
    let scheduled_at = match by {
        FiredBy::Tick => definition.due_at(row.created_at, at),
        FiredBy::Buffer | FiredBy::Trigger | FiredBy::Backfill => now,
    };
    let settings = &row.settings;
    let req = CreateRequest {
        created_at: now,
        execution_id: execution_id.clone(),
        ffqn: definition.ffqn.clone(),
        params: definition.params.clone(),
        parent: None,
        scheduled_at,
        retry_exp_backoff: settings.retry_exp_backoff,
        max_retries: settings.max_retries,
        component_id: settings.component_id.clone(),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    };
    planner.create(req, false)?;
    row.runs += 1;
    row.last_run = Some(execution_id.clone());
    let outcome = TickOutcome::Fired {
        execution_id: execution_id.clone(),
        by,
    };
    record(row, write, at, now, outcome);
    Ok(Fired::Created(execution_id))
}

/// Records a tick of `row` in `write`, and the oldest ticks past the [`TICKS_KEPT`] to forget
/// (each time a hundred more were recorded).
/// Records the range `missed` as skipped for `reason`, handled through its last tick.
fn skip(
    row: &mut ScheduleRow,
    write: &mut ScheduleWrite,
    missed: &Missed,
    now: DateTime<Utc>,
    reason: SkipReason,
) {
    let outcome = TickOutcome::Skipped {
        reason,
        last: missed.last,
        count: missed.count,
        exact: missed.exact,
    };
    record(row, write, missed.first, now, outcome);
    row.handled_through = missed.last;
}

fn record(
    row: &mut ScheduleRow,
    write: &mut ScheduleWrite,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
    outcome: TickOutcome,
) {
    let seq = row.ticks_recorded;
    row.ticks_recorded += 1;
    write.ticks.push(Tick {
        seq,
        at,
        recorded_at: now,
        outcome,
    });
    if row.ticks_recorded > TICKS_KEPT && row.ticks_recorded.is_multiple_of(100) {
        write.forget_ticks_before = Some(row.ticks_recorded - TICKS_KEPT);
    }
}
