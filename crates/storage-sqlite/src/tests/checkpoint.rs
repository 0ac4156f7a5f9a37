//! Unit tests of the checkpointer on a WAL database of its own.

use crate::checkpoint::Checkpointer;
use rusqlite::Connection;
use std::{path::Path, time::Duration};

/// A WAL database at `path` with one table `t`, as the writer's connection to it.
fn wal_database(path: &Path) -> Connection {
    let writer = Connection::open(path).expect("opens");
    let mode: String = writer
        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
        .expect("WAL");
    assert_eq!(mode, "wal");
    writer
        .execute_batch("PRAGMA synchronous=FULL; CREATE TABLE t (body BLOB NOT NULL);")
        .expect("a table");
    writer
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("the file exists").len()
}

/// A commit that fills the log past [`super::CHECKPOINT_FRAMES`] copies nothing into the
/// database file itself (SQLite's automatic checkpoint would, inside the `COMMIT`); the
/// checkpointer copies it once asked.
#[test]
fn the_writers_commit_leaves_the_checkpoint_to_the_checkpointer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let writer = wal_database(&path);
    let mut checkpointer =
        Checkpointer::start(&writer, &path, Duration::from_secs(5)).expect("starts");
    let small = file_len(&path);
    // About 1,200 pages of 4 KiB in one commit.
    writer
        .execute_batch(
            "BEGIN; \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1200) \
             INSERT INTO t SELECT zeroblob(4000) FROM n; \
             COMMIT;",
        )
        .expect("writes");
    assert_eq!(file_len(&path), small, "the commit did not checkpoint");
    checkpointer.after_commit(&writer, &path);
    // Waits for the requested checkpoint to finish.
    checkpointer.stop();
    assert_eq!(checkpointer.checkpoints_done(), 1);
    assert!(
        file_len(&path) > 1200 * 4000,
        "the checkpointer copied the log"
    );
}

/// A log that the checkpointer did not copy (here: it stopped) is checkpointed by the
/// writer between two transactions once it holds [`crate::checkpoint::INLINE_CHECKPOINT_FRAMES`].
#[test]
fn a_long_log_is_checkpointed_by_the_writer_between_transactions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let writer = wal_database(&path);
    let mut checkpointer =
        Checkpointer::start(&writer, &path, Duration::from_secs(5)).expect("starts");
    checkpointer.stop();
    let small = file_len(&path);
    let write_pages = |pages: u32| {
        writer
            .execute_batch(&format!(
                "BEGIN; \
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {pages}) \
                 INSERT INTO t SELECT zeroblob(4000) FROM n; \
                 COMMIT;"
            ))
            .expect("writes");
    };
    write_pages(crate::checkpoint::INLINE_CHECKPOINT_FRAMES / 2);
    checkpointer.after_commit(&writer, &path);
    assert_eq!(
        file_len(&path),
        small,
        "a short log waits for the checkpointer"
    );
    write_pages(crate::checkpoint::INLINE_CHECKPOINT_FRAMES / 2 + 100);
    checkpointer.after_commit(&writer, &path);
    let copied = u64::from(crate::checkpoint::INLINE_CHECKPOINT_FRAMES) * 4000;
    assert!(file_len(&path) > copied, "the writer copied the log");
    assert_eq!(checkpointer.checkpoints_done(), 0);
}
