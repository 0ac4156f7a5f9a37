//! Commits of other connections to the store's file, turned into wake-ups
//! (`docs/ARCHITECTURE.md`, section `storage-sqlite`, says how and when it looks).

use crate::{
    codec::{parsed, time},
    error::Result,
};
use concepts::{
    ExecutionId,
    kernel::{WaiterHub, Wakeup},
};
use rusqlite::{Connection, OptionalExtension as _};
use std::{
    path::Path,
    time::{Duration, Instant},
};

/// How often the writer asks whether another connection committed.
pub(crate) const CHANGES_POLL: Duration = Duration::from_millis(10);
/// More rows than this added since the last look (this store's own among them) are not read
/// one by one: every waiter is woken once instead.
const MOST_ROWS_READ: i64 = 10_000;

/// What the writer last saw of the file.
pub(crate) struct Changes {
    data_version: i64,
    /// The newest `t_event` row id looked at.
    event_rowid: i64,
    /// The newest `t_response` id looked at.
    response_id: i64,
    checked_at: Instant,
}

impl Changes {
    /// Starts from the file as it is now on `conn`, the writer's connection.
    pub(crate) fn start(conn: &Connection) -> Result<Self> {
        Ok(Self {
            data_version: data_version(conn)?,
            event_rowid: newest(conn, "SELECT max(rowid) FROM t_event")?,
            response_id: newest(conn, "SELECT max(id) FROM t_response")?,
            checked_at: Instant::now(),
        })
    }

    /// How long until the next look; zero when it is due.
    pub(crate) fn due_in(&self) -> Duration {
        CHANGES_POLL.saturating_sub(self.checked_at.elapsed())
    }

    /// Looks, if one is due: when another connection committed since the last look, wakes the
    /// waiters its events and responses concern. A failed read is logged; the next look tries
    /// again from the same place.
    pub(crate) fn check(&mut self, conn: &Connection, path: &Path, hub: &WaiterHub) {
        if !self.due_in().is_zero() {
            return;
        }
        self.checked_at = Instant::now();
        if let Err(err) = self.look(conn, hub) {
            tracing::warn!(
                path = %path.display(),
                "cannot read what other connections committed to the SQLite file; their \
                 wake-ups wait for the waiters' own timeouts: {err}"
            );
        }
    }

    fn look(&mut self, conn: &Connection, hub: &WaiterHub) -> Result<()> {
        let version = data_version(conn)?;
        if version == self.data_version {
            return Ok(());
        }
        let newest_event = newest(conn, "SELECT max(rowid) FROM t_event")?;
        let newest_response = newest(conn, "SELECT max(id) FROM t_response")?;
        let added = (newest_event - self.event_rowid) + (newest_response - self.response_id);
        if newest_event < self.event_rowid || added > MOST_ROWS_READ {
            // Row ids reused after a prune (which rows are new cannot be told), or too many
            // rows to read in the writer's time.
            hub.wake_everyone();
        } else {
            let mut wakeups = Vec::new();
            let events = (self.event_rowid, newest_event);
            new_rows(conn, NEW_EVENTS, events, &mut wakeups, |id, finished| {
                finished.then_some(Wakeup::Finished(id))
            })?;
            let responses = (self.response_id, newest_response);
            new_rows(conn, NEW_RESPONSES, responses, &mut wakeups, |id, _| {
                Some(Wakeup::Responses(id))
            })?;
            hub.deliver(&wakeups);
        }
        self.data_version = version;
        self.event_rowid = newest_event;
        self.response_id = newest_response.max(self.response_id);
        Ok(())
    }
}

/// The file's `data_version`: it changes when another connection commits. Prepared once per
/// connection, as the writer reads it at each transaction's start.
pub(crate) fn data_version(conn: &Connection) -> Result<i64> {
    let mut statement = conn.prepare_cached("PRAGMA data_version")?;
    Ok(statement.query_row([], |row| row.get(0))?)
}

fn newest(conn: &Connection, sql: &str) -> Result<i64> {
    let newest: Option<Option<i64>> = conn.query_row(sql, [], |row| row.get(0)).optional()?;
    Ok(newest.flatten().unwrap_or(0))
}

/// Events with row ids in `(?1, ?2]`: each execution, whether it finished, and its function and
/// due time if it is pending.
const NEW_EVENTS: &str = "SELECT e.execution_id, e.kind = 'Finished', s.ffqn, s.pending_at \
     FROM t_event e LEFT JOIN t_execution_state s ON s.execution_id = e.execution_id \
     AND s.state = 'PendingAt' WHERE e.rowid > ?1 AND e.rowid <= ?2";
/// Responses with ids in `(?1, ?2]`, in the columns of [`NEW_EVENTS`].
const NEW_RESPONSES: &str = "SELECT r.execution_id, 0, s.ffqn, s.pending_at \
     FROM t_response r LEFT JOIN t_execution_state s ON s.execution_id = r.execution_id \
     AND s.state = 'PendingAt' WHERE r.id > ?1 AND r.id <= ?2";

/// Runs `sql` over the ids in `(after, upto]`: each row's own wake-up (`own` of its execution
/// and its second column) and, for an execution now pending, that of its function.
fn new_rows(
    conn: &Connection,
    sql: &str,
    (after, upto): (i64, i64),
    wakeups: &mut Vec<Wakeup>,
    own: impl Fn(ExecutionId, bool) -> Option<Wakeup>,
) -> Result<()> {
    if upto <= after {
        return Ok(());
    }
    let mut statement = conn.prepare_cached(sql)?;
    let mut rows = statement.query([after, upto])?;
    while let Some(row) = rows.next()? {
        wakeups.extend(own(parsed(row, 0, "execution id")?, row.get(1)?));
        if row.get::<_, Option<i64>>(3)?.is_some() {
            let (ffqn, at) = (parsed(row, 2, "function name")?, time(row, 3)?);
            wakeups.push(Wakeup::Pending { ffqn, at });
        }
    }
    Ok(())
}
