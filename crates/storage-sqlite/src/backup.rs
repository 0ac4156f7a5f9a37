//! An online backup of a running store: `VACUUM INTO` writes one read snapshot of the database
//! into a new file (compacted, its pages in order), while writers go on.

use crate::error::{Result, SqliteError};
use concepts::DbError;
use rusqlite::{Connection, OpenFlags};
use std::{path::Path, time::Duration};

/// Copies the database at `source` into the new file `dest` from one snapshot, on a read-only
/// connection of its own (the pool's readers are `query_only`, which `VACUUM INTO` refuses);
/// on failure `dest` is removed again.
pub(crate) fn backup_to(source: &Path, busy_timeout: Duration, dest: &Path) -> Result<()> {
    let (source_name, dest_name) = (source.display(), dest.display());
    if dest.exists() {
        let message = format!(
            "refusing to back up SQLite database {source_name} to {dest_name}: the file exists (a backup goes to a new file)"
        );
        return Err(DbError::backend(message, false, None).into());
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(source, flags)?;
    conn.busy_timeout(busy_timeout)?;
    let dest_text = dest.to_str().ok_or_else(|| {
        let message = format!("cannot back up to {dest_name}: the path is not UTF-8");
        DbError::backend(message, false, None)
    })?;
    // Errors of the source surface when the snapshot is read, before the new file is written.
    let copied = conn.execute("VACUUM INTO ?1", [dest_text]).map_err(|err| {
        let err = SqliteError::from(err);
        SqliteError::Db(err.into_db_error(if dest.exists() { dest } else { source }))
    });
    if copied.is_err() {
        // Nothing half-written stays behind under the name of a backup.
        for suffix in ["", "-journal"] {
            let mut name = dest.as_os_str().to_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
    copied.map(drop)
}
