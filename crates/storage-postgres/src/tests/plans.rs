//! The plans of the statements that must not depend on statistics. On tables that were never
//! analyzed, with generic plans (`plan_cache_mode = force_generic_plan`, as a plan cached on a
//! connection while its tables were small), each reaches its tables through an index; after an
//! `ANALYZE` that saw other data than there is now, with custom plans, the lookups of many ids
//! still go through the index. The due executions are read through the index and only up to
//! the limit in both cases (counted by the transaction's table statistics, as the statement is
//! a function whose plan `EXPLAIN` does not show), also past another function's backlog. The
//! histories a lock hands over are read in index order, without a sort. A write transaction
//! plans each statement once.
//! Needs the server of `STELE_TEST_POSTGRES_URL` (skipped without it, except under `CI=true`).

use crate::{PostgresConfig, PostgresStore, load, reads};
use chrono::DateTime;
use concepts::DbConnection;
use test_support::postgres::{TestDatabase, TestServer};

/// The generic or custom (`mode`) plan of `sql` executed with `args` (SQL literals), as JSON.
async fn plan(client: &tokio_postgres::Client, (sql, args): (&str, &str), mode: &str) -> String {
    client
        .batch_execute(&format!(
            "SET plan_cache_mode = force_{mode}_plan; DEALLOCATE ALL; PREPARE s AS {sql}"
        ))
        .await
        .unwrap_or_else(|e| panic!("preparing {sql}: {e}"));
    let rows = client
        .simple_query(&format!("EXPLAIN (FORMAT JSON) EXECUTE s({args})"))
        .await
        .unwrap_or_else(|e| panic!("explaining {sql}: {e}"));
    rows.iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .collect()
}

/// Runs `SELECT_DUE` with `args` (SQL literals) in `mode` (`generic` or `custom`) in a
/// write transaction (`BEGIN_WRITE`, as a lock runs it) that it rolls back, and returns the whole-table scans of `t_execution` and the rows
/// it fetched from `t_execution` by index, as that transaction's statistics count them.
async fn due_reads(client: &tokio_postgres::Client, args: &str, mode: &str) -> (i64, i64) {
    client
        .batch_execute(&format!(
            "SET plan_cache_mode = force_{mode}_plan; DEALLOCATE ALL; PREPARE s AS {}",
            load::SELECT_DUE
        ))
        .await
        .unwrap();
    client.batch_execute(load::BEGIN_WRITE).await.unwrap();
    client
        .batch_execute(&format!("EXECUTE s({args})"))
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables \
             WHERE relname = 't_execution'",
            &[],
        )
        .await
        .unwrap();
    client.batch_execute("ROLLBACK").await.unwrap();
    (row.get(0), row.get(1))
}

/// A database with the store's schema, and a driver connection to it.
async fn database(test: &str) -> Option<TestDatabase> {
    let server = TestServer::or_skip(test)?;
    let database = TestDatabase::create(&server).await;
    let store = PostgresStore::connect(PostgresConfig::from_url(&database.url).unwrap())
        .await
        .unwrap();
    store.close().await;
    Some(database)
}

/// `count` executions of function `f` whose ids follow `prefix`, due at their number when
/// `due`, finished otherwise.
fn insert_executions(prefix: &str, count: u32, due: bool) -> String {
    let (kind, pending, finished) = if due {
        (0, "i", "NULL")
    } else {
        (3, "NULL", "i")
    };
    format!(
        "INSERT INTO t_execution (execution_id, ffqn, created_at, created_at_ns, scheduled_at, \
         scheduled_at_ns, is_top_level, next_version, state_kind, pending_at, lock_expires_at, \
         finished_at, finished_at_ns, state_json, temporary_event_count, response_count, \
         max_retries, retry_exp_backoff_ns) \
         SELECT '{prefix}' || lpad(i::text, 20, '0'), 'f', i, 0, i, 0, true, 1, {kind}, \
         {pending}, NULL, {finished}, CASE WHEN {due} THEN NULL ELSE 0 END, '{{}}', 0, 0, 0, 0 \
         FROM generate_series(1, {count}) AS i;"
    )
}

/// Events of executions `E_1`..`E_5000`, 10 each, and a response each.
const INSERT_LOGS: &str = "INSERT INTO t_event SELECT 'E_' || i, v, false, '{}' \
    FROM generate_series(1, 5000) AS i, generate_series(0, 9) AS v; \
    INSERT INTO t_response SELECT 'E_' || i, 0, 'n:a', 0, 'd', NULL, '{}' \
    FROM generate_series(1, 5000) AS i;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_logs_and_due_executions_use_indexes_without_statistics() {
    let Some(database) =
        database("reads_of_logs_and_due_executions_use_indexes_without_statistics").await
    else {
        return;
    };
    database
        .with_client(async |client| {
            // Logs of some pages and no executions (as when a store starts), never analyzed.
            client.batch_execute(INSERT_LOGS).await.unwrap();
            let locked = "'{E_1,E_2}', '{5,5}', '{1,1}'";
            let cases = [
                (reads::SELECT_LOCKED, locked, "t_event"),
                (reads::SELECT_LOCKED, locked, "t_response"),
                (reads::SELECT_LOG, "'E_1', 0, true", "t_event"),
                (reads::SELECT_LOG, "'E_1', 0, true", "t_response"),
                (reads::DUE_TIMES, "'{f}', 1, 1", "t_execution"),
                (load::SELECT_CREATED, "'{E_1,E_2}'", "t_event"),
            ];
            let mut scanned = Vec::new();
            for (sql, args, table) in cases {
                let plan = plan(client, (sql, args), "generic").await;
                assert!(plan.contains(table), "{table} is not read: {plan}");
                if plan.contains("Seq Scan") {
                    scanned.push(format!("{sql}: {plan}"));
                }
            }
            assert!(scanned.is_empty(), "scanned whole: {scanned:#?}");
            // The histories of a lock come in the order of the events' key, unsorted.
            let locked_plan = plan(client, (reads::SELECT_LOCKED, locked), "generic").await;
            assert!(!locked_plan.contains("Sort"), "sorted: {locked_plan}");
            // The due executions: read through the index, as many as asked for.
            client
                .batch_execute(&insert_executions("E_P", 100, true))
                .await
                .unwrap();
            assert_eq!(
                due_reads(client, "1000, '{f}', 10", "generic").await,
                (0, 10)
            );
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_many_ids_and_due_executions_stay_bounded_with_statistics() {
    let Some(database) =
        database("reads_of_many_ids_and_due_executions_stay_bounded_with_statistics").await
    else {
        return;
    };
    database
        .with_client(async |client| {
            // Analyzed while nothing was due; then 2,000 executions become due.
            let fill = format!(
                "{INSERT_LOGS} {} ANALYZE; {}",
                insert_executions("E_F", 20_000, false),
                insert_executions("E_P", 2000, true)
            );
            client.batch_execute(&fill).await.unwrap();
            let ids: Vec<String> = (1..=5000).map(|i| format!("E_{i}")).collect();
            let ids = format!("'{{{}}}'", ids.join(","));
            let created = plan(client, (load::SELECT_CREATED, &ids), "custom").await;
            assert!(
                !created.contains("Seq Scan"),
                "5,000 ids scan the log whole: {created}"
            );
            assert_eq!(
                due_reads(client, "1000000, '{f}', 10", "custom").await,
                (0, 10),
                "a batch of 10 reads as many due rows"
            );
        })
        .await;
}

/// What an id prefix reads: its range of the primary key, whose rows it sorts by creation (no
/// index orders the ids of a prefix by creation; the creation index read instead would be read
/// whole for a prefix that matches few executions).
const BY_ID: &str = "t_execution_pkey";

/// What a listing of every state reads: the unfinished and the finished executions, each by
/// creation, merged.
const BY_CREATION: &[&str] = &[
    "t_execution_unfinished_idx",
    "t_execution_finished_created_idx",
    "Merge Append",
];

/// The index of the parked executions, whose condition names `concepts::PARKED_UNTIL` as a
/// literal: a listing of them reads it only while the two agree.
const PARKED: &str = "t_execution_parked_idx";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_read_the_index_of_their_filter_up_to_their_page() {
    let Some(database) = database("listings_read_the_index_of_their_filter_up_to_their_page").await
    else {
        return;
    };
    database
        .with_client(async |client| {
            // 20,000 finished executions and 200 pending ones, analyzed: the listings of an
            // operator's page read their index, newest first, and stop at the page.
            let fill = format!(
                "{INSERT_LOGS} {} {} ANALYZE;",
                insert_executions("E_F", 20_000, false),
                insert_executions("E_P", 200, true)
            );
            client.batch_execute(&fill).await.unwrap();
            let page = concepts::Pagination {
                cursor: None,
                length: 100,
            };
            let parent = concepts::ExecutionId::generate_at(chrono::DateTime::UNIX_EPOCH);
            let parent_args = format!("'{parent}', 100");
            let cases: [(_, &str, &[&str]); 10] = [
                (
                    concepts::ListExecutionsFilter {
                        state: Some(concepts::PendingStateKind::PendingAt),
                        ..Default::default()
                    },
                    "100",
                    &["t_execution_unfinished_idx"],
                ),
                (
                    concepts::ListExecutionsFilter {
                        state: Some(concepts::PendingStateKind::Finished),
                        ..Default::default()
                    },
                    "100",
                    &["t_execution_finished_created_idx"],
                ),
                (
                    concepts::ListExecutionsFilter {
                        parent: Some(parent.clone()),
                        ..Default::default()
                    },
                    parent_args.as_str(),
                    &["t_execution_parent_idx"],
                ),
                (
                    concepts::ListExecutionsFilter {
                        ffqn: Some("ns:pkg/ifc.f".parse().unwrap()),
                        ..Default::default()
                    },
                    "'f', 100",
                    BY_CREATION,
                ),
                (
                    concepts::ListExecutionsFilter {
                        top_level_only: true,
                        ..Default::default()
                    },
                    "100",
                    BY_CREATION,
                ),
                (
                    concepts::ListExecutionsFilter {
                        created_after: DateTime::from_timestamp_micros(100),
                        created_before: DateTime::from_timestamp_micros(10_000),
                        ..Default::default()
                    },
                    "100, 0, 10000, 0, 100",
                    BY_CREATION,
                ),
                (
                    concepts::ListExecutionsFilter {
                        id_prefix: Some("E_F000000000000000001".into()),
                        ..Default::default()
                    },
                    "'E_F000000000000000001', 'E_F000000000000000002', 100",
                    &[BY_ID],
                ),
                (
                    concepts::ListExecutionsFilter::default(),
                    "100",
                    BY_CREATION,
                ),
                (
                    concepts::ListExecutionsFilter {
                        ffqn: Some("ns:pkg/ifc.f".parse().unwrap()),
                        pending_from: Some(concepts::PARKED_UNTIL),
                        ..Default::default()
                    },
                    "'f', 100",
                    &[PARKED],
                ),
                (
                    concepts::ListExecutionsFilter {
                        pending_from: Some(concepts::PARKED_UNTIL),
                        ..Default::default()
                    },
                    "100",
                    &[PARKED],
                ),
            ];
            for (filter, args, indexes) in cases {
                let (sql, _) = reads::listing(&filter, &page);
                for mode in ["generic", "custom"] {
                    let plan = plan(client, (&sql, args), mode).await;
                    for index in indexes {
                        assert!(
                            plan.contains(index),
                            "{filter:?} ({mode}) reads no {index}: {plan}"
                        );
                    }
                    assert!(
                        !plan.contains("Seq Scan"),
                        "{filter:?} ({mode}) scans: {plan}"
                    );
                    // A range of ids, or of pending times (the parked executions, few by their
                    // nature), is sorted by creation: no index orders them so.
                    let sorted_range = indexes == [BY_ID] || indexes == [PARKED];
                    assert!(
                        !plan.contains("\"Sort\"") || sorted_range,
                        "{filter:?} ({mode}) sorts: {plan}"
                    );
                }
            }
            let events = plan(client, (reads::LIST_EVENTS, "'E_1', 0, 100"), "generic").await;
            assert!(
                !events.contains("Seq Scan"),
                "the events of one execution scan: {events}"
            );
        })
        .await;
}

/// A write transaction plans each statement once: after executions were created, locked,
/// finished and listed on a store of one pooled connection, no statement of a write
/// transaction prepared on it was ever planned for the values of a run (PostgreSQL plans the
/// first five runs of a statement that way, and went on for every `UNNEST` of arrays, whose
/// real lengths made the custom plan look cheaper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_transactions_plan_each_statement_once() {
    use concepts::{DbClient, DbExecutor, LockPendingRequest, OutcomeWrite};
    use conformance::storage_scenarios::helpers::{
        component_id, create_request, execution_id, executor_id, ffqn, finished_ok, plus,
    };
    let Some(database) = database("write_transactions_plan_each_statement_once").await else {
        return;
    };
    let mut config = PostgresConfig::from_url(&database.url).unwrap();
    config.pool_size = 1;
    let store = PostgresStore::connect(config).await.unwrap();
    let at = DateTime::UNIX_EPOCH;
    for n in 1..=8 {
        let created = store.create(create_request(execution_id(n), ffqn("f"), at));
        created.await.unwrap();
        let request = LockPendingRequest {
            batch_size: 1,
            pending_at_or_sooner: at,
            ffqns: std::sync::Arc::from([ffqn("f")]),
            now: at,
            component_id: component_id(),
            executor_id: executor_id(1),
            lock_expires_at: plus(at, std::time::Duration::from_secs(60)),
        };
        let locked = store.lock_pending(request).await.unwrap().remove(0);
        let finished = OutcomeWrite {
            execution_id: locked.execution_id.clone(),
            version: locked.next_version,
            now: at,
            event: finished_ok(serde_json::json!(n.to_string())),
            parent: None,
        };
        store.append_outcome(finished).await.unwrap();
        let listed = store.list_executions(Default::default(), Default::default());
        assert!(!listed.await.unwrap().is_empty());
    }
    let client = store.reader().await.unwrap();
    let rows = client
        .query(
            "SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements",
            &[],
        )
        .await
        .unwrap();
    let planned: Vec<(String, i64, i64)> = (rows.iter())
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert!(
        planned.iter().any(|(_, _, generic)| *generic >= 8),
        "{planned:#?}"
    );
    // The statements of write transactions: the writes (each with its check of an assumption,
    // a `WITH`), the loads under row locks and the lock's read of due executions.
    let writes = |sql: &str| {
        ["INSERT", "UPDATE", "DELETE", "WITH"]
            .iter()
            .any(|verb| sql.starts_with(verb))
            || ["FOR UPDATE", "f_due_executions"]
                .iter()
                .any(|part| sql.contains(part))
    };
    assert!(
        planned.iter().filter(|(sql, ..)| writes(sql)).count() >= 4,
        "{planned:#?}"
    );
    let custom: Vec<_> = (planned.iter())
        .filter(|(sql, custom, _)| writes(sql) && *custom > 0)
        .collect();
    assert!(custom.is_empty(), "planned per run: {custom:#?}");
    drop(client);
    store.close().await;
}

/// The due executions of one function are found past another function's backlog, by the
/// index of `(ffqn, pending_at)`, before and after an `ANALYZE`, as generic plans: the due
/// times read one row, a lock as many as it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_executions_of_a_function_skip_another_functions_backlog() {
    let Some(database) =
        database("due_executions_of_a_function_skip_another_functions_backlog").await
    else {
        return;
    };
    let backlog = insert_executions("E_G", 20_000, true).replace("'f'", "'g'");
    // Due after the whole backlog: an index in `pending_at` order reads it all first.
    let due = insert_executions("E_P", 10, true)
        .replace("generate_series(1, 10)", "generate_series(30001, 30010)");
    let fill = format!("{backlog} {due}");
    database
        .with_client(async |client| client.batch_execute(&fill).await.unwrap())
        .await;
    for analyzed in [false, true] {
        if analyzed {
            let analyze = async |client: &tokio_postgres::Client| {
                client.batch_execute("ANALYZE").await.unwrap();
            };
            database.with_client(analyze).await;
        }
        // A session of its own: the statistics `due_reads` counts are the session's.
        database
            .with_client(async |client| {
                let times = plan(client, (reads::DUE_TIMES, "'{f}', 1000000, 1"), "generic").await;
                assert!(
                    times.contains("t_execution_pending_ffqn_idx"),
                    "analyzed: {analyzed}: {times}"
                );
                let reads = due_reads(client, "1000000, '{f}', 10", "generic").await;
                assert_eq!(reads, (0, 10), "analyzed: {analyzed}");
            })
            .await;
    }
}
