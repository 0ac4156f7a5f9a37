//! Schedules (`t_schedule`) and their ticks (`t_schedule_tick`): the statements that load them
//! for a write, locked (`docs/ARCHITECTURE.md` says how), that persist a plan's, and the reads.

use crate::{
    codec::{json, micros},
    pipeline::{Statement, params, statement, unnest},
};
use concepts::{
    DbError,
    kernel::{
        Keys, Snapshot, WritePlan,
        stored::{to_i64, to_json},
    },
    schedule::ScheduleName,
};
use tokio_postgres::Row;

const LOCK_SCHEDULES: &str =
    "SELECT row_json FROM t_schedule WHERE name = ANY($1) ORDER BY name FOR UPDATE";

const LOCK_DUE_SCHEDULES: &str = "SELECT row_json FROM t_schedule WHERE next_due_at <= $1 \
    ORDER BY next_due_at, name LIMIT $2 FOR UPDATE SKIP LOCKED";

const INSERT_SCHEDULES: &str = "INSERT INTO t_schedule (name, next_due_at, row_json) \
    SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[])";

const UPDATE_SCHEDULES: &str = "UPDATE t_schedule AS t SET next_due_at = u.due, row_json = u.json \
    FROM UNNEST($1::text[], $2::int8[], $3::text[]) AS u(name, due, json) WHERE t.name = u.name";

const DELETE_SCHEDULES: &str = "WITH ticks AS (DELETE FROM t_schedule_tick WHERE name = ANY($1)) \
    DELETE FROM t_schedule WHERE name = ANY($1)";

const INSERT_TICKS: &str = "INSERT INTO t_schedule_tick (name, seq, tick_json) \
    SELECT * FROM UNNEST($1::text[], $2::int8[], $3::text[])";

const FORGET_TICKS: &str = "DELETE FROM t_schedule_tick AS t \
    USING UNNEST($1::text[], $2::int8[]) AS u(name, before) \
    WHERE t.name = u.name AND t.seq < u.before";

/// The statements that load the schedules `keys` name and the due ones.
pub(crate) fn load_statements(keys: &Keys) -> [Option<Statement<'_>>; 2] {
    let names: Vec<&str> = keys.schedules.iter().map(ScheduleName::as_str).collect();
    [
        (!names.is_empty()).then(|| statement(LOCK_SCHEDULES, params![names])),
        keys.due_schedules.as_ref().map(|due| {
            let limit = to_i64(due.limit);
            statement(LOCK_DUE_SCHEDULES, params![micros(due.at), limit])
        }),
    ]
}

/// Adds the rows the statements of [`load_statements`] returned.
pub(crate) fn add_rows(named: &[Row], due: &[Row], snapshot: &mut Snapshot) -> Result<(), DbError> {
    for row in named {
        snapshot.add_schedule(json(row, 0, "schedule")?);
    }
    for row in due {
        snapshot.add_due_schedule(json(row, 0, "schedule")?);
    }
    Ok(())
}

/// The statements that persist what `plan` changes about schedules.
pub(crate) fn statements(plan: &WritePlan) -> Result<Vec<Statement<'_>>, DbError> {
    let kept = |new: bool| {
        (plan.schedules.iter()).filter_map(move |w| w.row.as_ref().filter(|_| w.is_new == new))
    };
    let deleted: Vec<&str> = (plan.schedules.iter())
        .filter(|w| w.row.is_none())
        .map(|w| w.name.as_str())
        .collect();
    let ticks = plan
        .schedules
        .iter()
        .flat_map(|w| w.ticks.iter().map(move |t| (w, t)));
    let forget = plan
        .schedules
        .iter()
        .filter_map(|w| Some((w, w.forget_ticks_before?)));
    let statements = [
        unnest!(INSERT_SCHEDULES, kept(true), |row| {
            names: &str = row.name().as_str(),
            due: Option<i64> = row.next_due_at.map(micros),
            rows: String = to_json(row)?,
        }),
        unnest!(UPDATE_SCHEDULES, kept(false), |row| {
            names: &str = row.name().as_str(),
            due: Option<i64> = row.next_due_at.map(micros),
            rows: String = to_json(row)?,
        }),
        (!deleted.is_empty()).then(|| statement(DELETE_SCHEDULES, params![deleted])),
        unnest!(INSERT_TICKS, ticks, |(write, tick)| {
            names: &str = write.name.as_str(),
            seqs: i64 = to_i64(tick.seq),
            jsons: String = to_json(tick)?,
        }),
        unnest!(FORGET_TICKS, forget, |(write, seq)| {
            names: &str = write.name.as_str(),
            befores: i64 = to_i64(seq),
        }),
    ];
    Ok(statements.into_iter().flatten().collect())
}

/// The schedules from `$1` on in name order, at most `$2`.
pub(crate) const LIST: &str =
    "SELECT row_json FROM t_schedule WHERE name >= $1 ORDER BY name LIMIT $2";

/// The last `$2` ticks of schedule `$1`, newest first.
pub(crate) const TICKS: &str =
    "SELECT tick_json FROM t_schedule_tick WHERE name = $1 ORDER BY seq DESC LIMIT $2";
