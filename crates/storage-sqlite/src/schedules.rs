//! Schedules (`t_schedule`) and their ticks (`t_schedule_tick`): loaded for a write, persisted
//! from its plan, and read.

use crate::{codec::json, error::Result, ops::WriteCtx, reads::rows};
use concepts::{
    kernel::{
        Keys, ScheduleWrite, Snapshot,
        stored::{micros, to_i64, to_json},
    },
    schedule::{ScheduleName, ScheduleRow},
};
use rusqlite::{Connection, params};

impl WriteCtx<'_> {
    /// Adds the schedules `keys` name, and the due ones, to `snapshot`.
    pub(crate) fn load_schedules(&self, keys: &Keys, snapshot: &mut Snapshot) -> Result<()> {
        for name in &keys.schedules {
            if let Some(row) = schedule(self.conn, name)? {
                snapshot.add_schedule(row);
            }
        }
        if let Some(query) = &keys.due_schedules {
            let sql = "SELECT row_json FROM t_schedule WHERE next_due_at <= ?1 \
                       ORDER BY next_due_at, name LIMIT ?2";
            let params = (micros(query.at), to_i64(query.limit));
            for row in rows(self.conn, sql, params, |row| json(row, 0))? {
                snapshot.add_due_schedule(row);
            }
        }
        Ok(())
    }

    /// Stores what a plan changes about schedules.
    pub(crate) fn persist_schedules(&self, writes: &[ScheduleWrite]) -> Result<()> {
        for write in writes {
            let name = write.name.as_str();
            let Some(row) = &write.row else {
                self.execute("DELETE FROM t_schedule WHERE name = ?1", [name])?;
                self.execute("DELETE FROM t_schedule_tick WHERE name = ?1", [name])?;
                continue;
            };
            let sql = "INSERT INTO t_schedule (name, next_due_at, row_json) VALUES (?1, ?2, ?3) \
                 ON CONFLICT DO UPDATE SET next_due_at = excluded.next_due_at, \
                 row_json = excluded.row_json";
            let due = row.next_due_at.map(micros);
            self.execute(sql, params![name, due, to_json(row)?])?;
            for tick in &write.ticks {
                let sql = "INSERT INTO t_schedule_tick (name, seq, tick_json) VALUES (?1, ?2, ?3)";
                let json = to_json(tick)?;
                self.execute(sql, params![name, to_i64(tick.seq), json])?;
            }
            if let Some(before) = write.forget_ticks_before {
                let sql = "DELETE FROM t_schedule_tick WHERE name = ?1 AND seq < ?2";
                self.execute(sql, params![name, to_i64(before)])?;
            }
        }
        Ok(())
    }
}

/// The schedule `name`, if stored.
pub(crate) fn schedule(conn: &Connection, name: &ScheduleName) -> Result<Option<ScheduleRow>> {
    let sql = "SELECT row_json FROM t_schedule WHERE name = ?1";
    Ok(rows(conn, sql, [name.as_str()], |row| json(row, 0))?.pop())
}
