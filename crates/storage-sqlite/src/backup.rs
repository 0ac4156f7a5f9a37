//! An online backup of a running store: SQLite's backup API copies one read snapshot of the
//! database into a new file, while writers go on.

use crate::error::{SqliteError, backend_error};
use concepts::DbError;
use rusqlite::{
    Connection, OpenFlags,
    backup::{Backup, StepResult},
};
use std::path::Path;

/// How often a step that found the source busy or locked is tried again before giving up
/// (in WAL mode a reader is practically never refused).
const STEP_ATTEMPTS: usize = 100;

/// Copies the database of `source` (a reader connection) into the new file `dest`, all pages
/// in one step, so from one snapshot: every write committed before the copy began is in it,
/// none committed after. `dest` must not exist; on failure it is removed again.
pub(crate) fn backup_to(
    source: &Connection,
    source_path: &Path,
    dest: &Path,
) -> Result<(), DbError> {
    if dest.exists() {
        let message = format!(
            "refusing to back up SQLite database {} to {}: the file exists (a backup goes to a new file)",
            source_path.display(),
            dest.display()
        );
        return Err(backend_error(message, false));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let dest_error = |err: rusqlite::Error| SqliteError::from(err).into_db_error(dest);
    let mut target = Connection::open_with_flags(dest, flags).map_err(dest_error)?;
    let copied = copy(source, &mut target).map_err(|err| match err {
        Copy::Source(err) => SqliteError::from(err).into_db_error(source_path),
        Copy::Target(err) => dest_error(err),
        Copy::Busy => backend_error(
            format!(
                "backing up SQLite database {} to {}: the source stayed locked",
                source_path.display(),
                dest.display()
            ),
            true,
        ),
    });
    let closed = target.close().map_err(|(_, err)| dest_error(err));
    let outcome = copied.and(closed);
    if outcome.is_err() {
        // Nothing half-written stays behind under the name of a backup.
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = dest.as_os_str().to_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
    outcome
}

/// Why a copy failed: which side's error it was.
enum Copy {
    Source(rusqlite::Error),
    Target(rusqlite::Error),
    Busy,
}

fn copy(source: &Connection, target: &mut Connection) -> Result<(), Copy> {
    let backup = Backup::new(source, target).map_err(Copy::Target)?;
    for _ in 0..STEP_ATTEMPTS {
        match backup.step(-1) {
            Ok(StepResult::Done) => return Ok(()),
            Ok(StepResult::More | StepResult::Busy | StepResult::Locked) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(_) => return Err(Copy::Busy),
            // The backup API reports errors of both sides on the backup handle; an I/O error
            // or a full disk is most likely the new file's.
            Err(err) => return Err(side_of(err)),
        }
    }
    Err(Copy::Busy)
}

fn side_of(err: rusqlite::Error) -> Copy {
    match err.sqlite_error_code() {
        Some(
            rusqlite::ErrorCode::DatabaseCorrupt
            | rusqlite::ErrorCode::NotADatabase
            | rusqlite::ErrorCode::SchemaChanged,
        ) => Copy::Source(err),
        _ => Copy::Target(err),
    }
}
