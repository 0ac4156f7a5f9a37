//! The plans of `list_executions`' statements (`EXPLAIN QUERY PLAN`): each filter reads the
//! index it names, newest first, and stops at its page: no statement scans the table whole or
//! sorts in a temporary b-tree, on a fresh file without statistics and after an `ANALYZE` of
//! 20,000 finished executions beside 200 pending children of one parent. The exceptions are an
//! id prefix and a function's executions pending from a time on (the parked ones): each reads
//! its range of the primary key, or of the pending index, and sorts what that range holds,
//! since no index orders them by creation (reading the creation index instead, for a range
//! that holds few executions, would read the whole index).
//!
//! And the indexes the updates of a state row write (`EXPLAIN`): a write that leaves its
//! execution unfinished leaves the index of unfinished executions alone.

use crate::{SqliteConfig, reads, schema};
use chrono::DateTime;
use concepts::{ExecutionId, ListExecutionsFilter, Pagination, PendingStateKind};

/// `count` executions whose ids follow `prefix`, created at their number: finished top-level
/// ones, or pending children of `parent`.
fn insert_executions(prefix: &str, count: u32, parent: Option<&ExecutionId>) -> String {
    let (state, parent) = match parent {
        None => ("Finished", "NULL, NULL, 1".to_string()),
        Some(parent) => ("PendingAt", format!("'{parent}', 'n:j', 0")),
    };
    format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) \
         INSERT INTO t_execution_state (execution_id, ffqn, component_id, next_version, state, \
         pending_at, state_json, temporary_event_count, max_retries, retry_exp_backoff_us, \
         parent_execution_id, parent_join_set_id, is_top_level, created_at, scheduled_at, \
         finished_at) SELECT '{prefix}' || printf('%020d', i), 'ns:pkg/ifc.f', 'c', 2, \
         '{state}', CASE '{state}' WHEN 'PendingAt' THEN i END, '{{}}', 0, 0, 0, {parent}, i, \
         i, CASE '{state}' WHEN 'Finished' THEN i END FROM n;"
    )
}

#[test]
fn listings_read_the_index_of_their_filter_up_to_their_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (conn, _) =
        schema::open_writer(&SqliteConfig::new(dir.path().join("db.sqlite"))).expect("opens");
    let at = |micros| DateTime::from_timestamp_micros(micros).expect("a time");
    let parent = ExecutionId::generate_at(at(0));
    let filter = |change: fn(&mut ListExecutionsFilter, &ExecutionId)| {
        let mut filter = ListExecutionsFilter::default();
        change(&mut filter, &parent);
        filter
    };
    let by_id = "sqlite_autoindex_t_execution_state_1 (execution_id>? AND execution_id<?)";
    let cases = [
        (
            filter(|f, _| f.id_prefix = Some("E_F000000000000000001".into())),
            by_id,
        ),
        (
            filter(|f, _| f.state = Some(PendingStateKind::PendingAt)),
            "ix_state_unfinished",
        ),
        (
            filter(|f, _| f.state = Some(PendingStateKind::Finished)),
            "ix_state_created",
        ),
        (
            filter(|f, _| f.ffqn = Some("ns:pkg/ifc.f".parse().unwrap())),
            "ix_state_created",
        ),
        (filter(|f, p| f.parent = Some(p.clone())), "ix_state_parent"),
        (filter(|f, _| f.top_level_only = true), "ix_state_created"),
        (
            filter(|f, _| {
                f.created_after = DateTime::from_timestamp_micros(100);
                f.created_before = DateTime::from_timestamp_micros(10_000);
            }),
            "ix_state_created",
        ),
        (ListExecutionsFilter::default(), "ix_state_created"),
        (
            filter(|f, _| {
                f.ffqn = Some("ns:pkg/ifc.f".parse().unwrap());
                f.pending_from = Some(concepts::PARKED_UNTIL);
            }),
            "ix_state_pending",
        ),
    ];
    let pages = [
        Pagination {
            cursor: None,
            length: 100,
        },
        Pagination {
            cursor: Some((at(15_000), parent.clone())),
            length: 100,
        },
    ];
    let fill = format!(
        "{} {} ANALYZE;",
        insert_executions("E_F", 20_000, None),
        insert_executions(&format!("{parent}.n:j_"), 200, Some(&parent))
    );
    for analyzed in [false, true] {
        if analyzed {
            conn.execute_batch(&fill).expect("fills and analyzes");
        }
        for (filter, index) in &cases {
            for page in &pages {
                let (sql, values) = reads::listing(filter, page);
                let mut stmt = conn
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .expect("prepares");
                let plan: Vec<String> = stmt
                    .query_map(rusqlite::params_from_iter(values), |row| row.get(3))
                    .expect("explains")
                    .collect::<Result<_, _>>()
                    .expect("reads");
                let plan = plan.join("; ");
                let shown = format!("{filter:?} after {:?} (analyzed: {analyzed})", page.cursor);
                assert!(plan.contains(&format!("INDEX {index}")), "{shown}: {plan}");
                let sorts = plan.contains("TEMP B-TREE");
                // A range of ids, or of pending times (the parked executions, few by their
                // nature), is sorted by creation: no index orders them so.
                let sorted_range = *index == by_id || *index == "ix_state_pending";
                assert!(!sorts || sorted_range, "{shown} sorts: {plan}");
                let scans_whole = plan
                    .split("; ")
                    .any(|step| step.starts_with("SCAN") && !step.contains("INDEX"));
                assert!(!scans_whole, "{shown} scans the table: {plan}");
            }
        }
    }
}

/// The indexes a statement writes: the names of the b-trees its program opens for writing.
fn written_indexes(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let roots: Vec<i64> = conn
        .prepare(&format!("EXPLAIN {sql}"))
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params_from_iter([None::<i64>; 9]), |row| {
                Ok((row.get::<_, String>(1)?, row.get::<_, i64>(3)?))
            })?
            .filter_map(|op| match op {
                Ok((name, root)) if name == "OpenWrite" => Some(Ok(root)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
        })
        .expect("explains");
    roots
        .into_iter()
        .filter_map(|root| {
            conn.query_row(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND rootpage = ?1",
                [root],
                |row| row.get(0),
            )
            .ok()
        })
        .collect()
}

/// A lease, or any write that leaves its execution unfinished, does not touch the index of
/// unfinished executions (it moved in it at every lease before schema version 10, 9% of an
/// execution's instructions); a finish takes the execution out of it.
#[test]
fn only_a_finish_writes_the_index_of_unfinished_executions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (conn, _) =
        schema::open_writer(&SqliteConfig::new(dir.path().join("db.sqlite"))).expect("opens");
    let unfinished = written_indexes(&conn, crate::ops::UPDATE_UNFINISHED);
    assert!(
        unfinished.iter().any(|i| i == "ix_state_lock_expiry"),
        "{unfinished:?}"
    );
    assert!(
        !unfinished.iter().any(|i| i == "ix_state_unfinished"),
        "{unfinished:?}"
    );
    let finished = written_indexes(&conn, crate::ops::UPDATE_FINISHED);
    assert!(
        finished.iter().any(|i| i == "ix_state_unfinished"),
        "{finished:?}"
    );
}
