//! An online backup of a running store: SQLite's backup API copies one read snapshot of the
//! database into a new file, while writers go on.

use crate::error::{Result, SqliteError};
use concepts::DbError;
use rusqlite::{
    Connection, ErrorCode, OpenFlags,
    backup::{Backup, StepResult},
};
use std::path::Path;

/// How often a step that found the source busy or locked is tried again before giving up
/// (in WAL mode a reader is practically never refused).
const STEP_ATTEMPTS: usize = 100;

/// Copies the database of `source` (a reader connection) into the new file `dest`, all pages
/// in one step, so from one snapshot; on failure `dest` is removed again.
pub(crate) fn backup_to(source: &Connection, source_path: &Path, dest: &Path) -> Result<()> {
    let (source_name, dest_name) = (source_path.display(), dest.display());
    if dest.exists() {
        let message = format!(
            "refusing to back up SQLite database {source_name} to {dest_name}: the file exists (a backup goes to a new file)"
        );
        return Err(DbError::backend(message, false, None).into());
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let dest_error = |err: rusqlite::Error| SqliteError::from(err).into_db_error(dest);
    let mut target = Connection::open_with_flags(dest, flags).map_err(dest_error)?;
    let copied = copy(source, &mut target).map_err(|err| match err {
        // The backup API reports errors of both sides on the backup handle; an I/O error or a
        // full disk is most likely the new file's.
        Some(err) if is_source_error(&err) => SqliteError::from(err).into_db_error(source_path),
        Some(err) => dest_error(err),
        None => DbError::backend(
            format!(
                "backing up SQLite database {source_name} to {dest_name}: the source stayed locked"
            ),
            true,
            None,
        ),
    });
    let outcome = copied.and(target.close().map_err(|(_, err)| dest_error(err)));
    if outcome.is_err() {
        // Nothing half-written stays behind under the name of a backup.
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = dest.as_os_str().to_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
    outcome.map_err(SqliteError::Db)
}

/// Copies all pages in one step; `None` when the source stayed busy or locked.
fn copy(source: &Connection, target: &mut Connection) -> Result<(), Option<rusqlite::Error>> {
    let backup = Backup::new(source, target)?;
    for _ in 0..STEP_ATTEMPTS {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            StepResult::More | StepResult::Busy | StepResult::Locked => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => break,
        }
    }
    Err(None)
}

fn is_source_error(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase | ErrorCode::SchemaChanged)
    )
}
