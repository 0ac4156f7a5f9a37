//! A commit's frames reach the WAL file in one write (alone in its test binary: the counters
//! are the process's).

use rusqlite::{Connection, OpenFlags};

#[test]
fn a_commit_of_several_pages_is_one_write_to_the_file() {
    let name = sqlite_wal_batch::register().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conn =
        Connection::open_with_flags_and_vfs(dir.path().join("db"), OpenFlags::default(), name)
            .unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL);
         CREATE INDEX t_v ON t (v);",
    )
    .unwrap();

    let before = sqlite_wal_batch::counters();
    // Rows of 3,000 bytes, each on a page of its own in the table and in the index.
    let tx = conn.unchecked_transaction().unwrap();
    for _ in 0..8 {
        tx.execute("INSERT INTO t (v) VALUES (randomblob(3000))", [])
            .unwrap();
    }
    tx.commit().unwrap();
    let after = sqlite_wal_batch::counters();

    let frames = (after.gathered - before.gathered) / 2;
    assert!(
        frames >= 16,
        "a commit of 8 wide rows and their index wrote {frames} frames"
    );
    assert_eq!(
        after.written - before.written,
        1,
        "{before:?} then {after:?}"
    );
}
