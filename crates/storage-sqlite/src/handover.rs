//! The hand-over of `lock_pending`: the histories of the executions a lock granted (the events
//! below each locked version and the responses), read after the lock committed, outside its
//! write transaction, and assembled by [`kernel::hand_over`].
//!
//! A lock whose histories are short (at most [`WRITER_HANDOVER_ROWS`] rows in all, the usual
//! lock of an idle executor or of a workflow's next child) is read on the writer's own
//! connection right after its `COMMIT`, before its reply: no other writer waits on that read,
//! and the caller is spared a round trip to a reader. The rest (a long log, many responses,
//! a large batch) is read on a reader, so that a long history never holds up the writer
//! thread either.

use crate::{
    error::Result,
    reads::{events_since, responses_from, responses_up_to},
};
use concepts::{
    LockedExecution, Version,
    kernel::{self, LockGrant, LogRows},
};
use rusqlite::Connection;
use std::path::Path;

/// At most this many rows (events and responses of every execution of one lock together) are
/// read on the writer's connection after a lock's commit; longer histories are read on a reader.
pub(crate) const WRITER_HANDOVER_ROWS: usize = 32;

/// What a lock hands over: the executions handed over already, then the grants whose
/// histories are still to be read, in the order the kernel granted them.
#[derive(Debug)]
pub(crate) struct Handover {
    pub(crate) ready: Vec<LockedExecution>,
    pub(crate) unread: Vec<LockGrant>,
}

impl Handover {
    /// Nothing read yet.
    pub(crate) fn unread(grants: Vec<LockGrant>) -> Self {
        Self {
            ready: Vec::new(),
            unread: grants,
        }
    }
}

/// Runs on the writer thread after the lock's commit: reads the histories of `handover`'s
/// grants there if they fit in [`WRITER_HANDOVER_ROWS`], in one read transaction (no write
/// lock). Grants that do not fit, and all of them if a read fails, are left to a reader.
pub(crate) fn on_writer(conn: &Connection, path: &Path, mut handover: Handover) -> Handover {
    let events = handover.unread.iter().try_fold(0_usize, |sum, grant| {
        sum.checked_add(grant.events_handed_over())
    });
    if handover.unread.is_empty() || events.is_none_or(|events| events > WRITER_HANDOVER_ROWS) {
        return handover;
    }
    match read_within_budget(conn, &handover.unread) {
        Ok(ready) => {
            handover.unread.drain(..ready.len());
            handover.ready.extend(ready);
        }
        Err(err) => {
            // The reader reads them again, and reports what is still wrong.
            tracing::debug!(path = %path.display(), "handing a lock over on the writer: {err}");
        }
    }
    handover
}

/// The hand-overs of the first of `grants` whose histories fit in [`WRITER_HANDOVER_ROWS`]
/// rows, from one snapshot.
fn read_within_budget(conn: &Connection, grants: &[LockGrant]) -> Result<Vec<LockedExecution>> {
    let tx = conn.unchecked_transaction()?;
    let mut rows_left = WRITER_HANDOVER_ROWS;
    let mut ready = Vec::new();
    for grant in grants {
        let execution_id = &grant.row.execution_id;
        let events = grant.events_handed_over();
        let Some(room) = rows_left.checked_sub(events) else {
            break;
        };
        // One more than fits tells that they do not.
        let responses = responses_up_to(&tx, execution_id, 0, room + 1)?;
        if responses.len() > room {
            break;
        }
        rows_left = room - responses.len();
        let log = LogRows {
            events: events_since(&tx, execution_id, Version(0), events)?,
            responses,
        };
        ready.push(kernel::hand_over(grant.clone(), log)?);
    }
    tx.finish()?;
    Ok(ready)
}

/// The executions `lock_pending` locked, handed over with their histories, read on a reader
/// after the commit from one snapshot: the log below a lease is append-only, so this reads
/// what the write saw, without holding the writer.
pub(crate) fn locked_executions(
    conn: &mut Connection,
    grants: Vec<LockGrant>,
) -> Result<Vec<LockedExecution>> {
    let tx = conn.transaction()?;
    let mut locked = Vec::with_capacity(grants.len());
    for grant in grants {
        let execution_id = &grant.row.execution_id;
        let log = LogRows {
            events: events_since(&tx, execution_id, Version(0), grant.events_handed_over())?,
            responses: responses_from(&tx, execution_id, 0)?,
        };
        locked.push(kernel::hand_over(grant, log)?);
    }
    tx.finish()?;
    Ok(locked)
}
