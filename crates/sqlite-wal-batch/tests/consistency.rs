//! What other connections read from a database written through the VFS: every commit, as soon
//! as it returns; nothing of a transaction rolled back after the cache spilled it into the WAL;
//! transactions larger than a buffer; and the file, reopened without the VFS.

use rusqlite::{Connection, OpenFlags};
use std::path::Path;

fn writer(path: &Path) -> Connection {
    let name = sqlite_wal_batch::register().unwrap();
    let conn = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), name).unwrap();
    // A cache of 10 pages: a transaction of more pages spills some into the WAL before its
    // commit, and reads them back from there.
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA cache_size=10;
         PRAGMA wal_autocheckpoint=0;
         CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL);
         CREATE INDEX t_v ON t (v);",
    )
    .unwrap();
    conn
}

fn insert(conn: &Connection, rows: u32, bytes: u32) {
    let tx = conn.unchecked_transaction().unwrap();
    for _ in 0..rows {
        tx.execute("INSERT INTO t (v) VALUES (randomblob(?1))", [bytes])
            .unwrap();
    }
    tx.commit().unwrap();
}

fn summary(conn: &Connection) -> (u32, i64) {
    conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(length(v)), 0) FROM t",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

#[test]
fn other_connections_read_every_commit_and_nothing_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let conn = writer(&path);
    let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();

    let mut expected = (0, 0);
    for round in 0..20 {
        insert(&conn, 3, 1000);
        expected = (expected.0 + 3, expected.1 + 3000);
        assert_eq!(summary(&reader), expected, "after commit {round}");
    }

    // About 2 MB: spilled through the small cache and written in many buffers, then undone.
    let tx = conn.unchecked_transaction().unwrap();
    for _ in 0..500 {
        tx.execute("INSERT INTO t (v) VALUES (randomblob(4000))", [])
            .unwrap();
    }
    tx.rollback().unwrap();
    assert_eq!(summary(&reader), expected, "after the rollback");
    assert_eq!(summary(&conn), expected, "the writer after the rollback");

    // The same size committed: frames written over the rolled-back ones.
    insert(&conn, 500, 4000);
    expected = (expected.0 + 500, expected.1 + 2_000_000);
    assert_eq!(summary(&reader), expected, "after the large commit");
    let check: String = reader
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");

    drop(reader);
    drop(conn);
    let reopened = Connection::open(&path).unwrap();
    assert_eq!(summary(&reopened), expected, "reopened without the VFS");
}
