//! Several writer processes on one SQLite file under load (issue 11 §2, SEMANTICS §6
//! executor): three `durability-node` processes, each running an executor and a timers
//! watcher, and the test process submitting large `create_batch` calls, all on one file.
//!
//! Every process opens the file with a `busy_timeout` of 20 ms, so that contention shows at
//! once: a writer that gave up on the file's write lock after its `busy_timeout` (as writers
//! did, with "database is locked") would fail here within the first batch. The test submits
//! its batches back to back while the nodes lock and finish what the earlier ones created.
//! Then:
//!
//! - every `create_batch` call of the test succeeded;
//! - every execution is finished exactly once (one `Finished`, the last event, whose result is
//!   its own parameter) and its stored pending state equals `derive_pending_state`;
//! - no run lost its `Finished`: no log holds a `TemporarilyTimedOut` event (a `Finished`
//!   that failed to commit leaves its lease to expire, and the watcher times it out);
//! - no node reported a failed write on its standard error (the executor logs every write
//!   that failed; the store's warnings that it waits for the lock are fine);
//! - `PRAGMA integrity_check` is `ok`.

mod common;

use common::{all_ids, assert_finished_once, assert_integrity, node_command, runtime};
use concepts::{ClockFn, DbClient, DbConnection, ExecutionEventInner, ExecutorId};
use durability::{Line, Workload};
use executor::Now;
use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};
use storage_sqlite::{SqliteConfig, SqlitePool};
use test_support::process::{Output, Processes};

/// Node processes, each an executor and a timers watcher.
const NODES: usize = 3;
/// Batches the test submits, back to back.
const BATCHES: usize = 4;
/// Executions per batch: one `create_batch` holds the write lock far longer than the
/// `busy_timeout`.
const BATCH: usize = 2_500;
/// Every process's `busy_timeout`: small, so that contention shows at once.
const BUSY_TIMEOUT: Duration = Duration::from_millis(20);
/// The longest the test waits for the next line of a node.
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn sqlite_writers_of_several_processes_wait_their_turn() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("stele.sqlite");
    let url = format!("sqlite://{}", path.display());
    let rt = runtime();
    let mut config = SqliteConfig::new(&path);
    config.busy_timeout = BUSY_TIMEOUT;
    // Created (and migrated) before the nodes start, so that they find the schema.
    let store = rt
        .block_on(SqlitePool::open(config))
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let total = BATCHES * BATCH;
    let busy_ms = BUSY_TIMEOUT.as_millis().to_string();
    let mut processes = Processes::new(dir.path());
    for n in 0..NODES {
        let mut command = node_command(&url, total);
        command.args(["--submit", "never", "--busy-timeout-ms", &busy_ms]);
        // Leases of 10 s: a run whose `Finished` was lost is recovered by a watcher within the
        // test, and no run on a loaded machine outlives its lease.
        command.args([
            "--lock-expiry-ms",
            "10000",
            "--poll-ms",
            "250",
            "--timeout-s",
            "120",
        ]);
        processes.start(&format!("node-{n}"), command);
    }
    // Every node has opened the store and runs its executor before the first batch.
    let mut awaiting = HashSet::new();
    while awaiting.len() < NODES {
        match processes.next(LINE_TIMEOUT) {
            Some((idx, Output::Line(line))) => {
                if matches!(Line::parse(&line), Ok(Line::Awaiting(_))) {
                    awaiting.insert(idx);
                }
            }
            Some((idx, Output::Closed)) => {
                let label = processes.label(idx).to_string();
                processes.fail(&format!("{label} exited before awaiting its executions"));
            }
            None => processes.fail("a node did not start within the timeout"),
        }
    }

    let workload = Workload::new().expect("the workload");
    let submitted: Result<(), String> = rt.block_on(async {
        for batch in 0..BATCHES {
            let now = Now.now();
            let requests = (batch * BATCH..(batch + 1) * BATCH)
                .map(|idx| workload.request(idx, now, Duration::from_millis(10), 100))
                .collect();
            store
                .create_batch(requests)
                .await
                .map_err(|err| format!("create_batch {batch} failed: {err}"))?;
        }
        Ok(())
    });
    if let Err(err) = submitted {
        processes.fail(&err);
    }

    // Each node exits 0 once every execution is finished, after its summary line.
    let mut summaries = 0;
    let mut closed = 0;
    while closed < NODES {
        match processes.next(LINE_TIMEOUT) {
            Some((_, Output::Line(line))) => {
                if matches!(Line::parse(&line), Ok(Line::Summary(_))) {
                    summaries += 1;
                }
            }
            Some((_, Output::Closed)) => closed += 1,
            None => processes.fail("the nodes did not finish within the timeout"),
        }
    }
    for idx in 0..NODES {
        let status = processes.wait(idx);
        if !status.success() {
            let label = processes.label(idx).to_string();
            processes.fail(&format!("{label} exited with {status}"));
        }
    }
    assert_eq!(summaries, NODES, "every node printed its summary");
    for n in 0..NODES {
        let stderr_path = dir.path().join(format!("node-{n}.stderr"));
        let stderr = std::fs::read_to_string(&stderr_path).expect("a node's stderr");
        // The store's own warnings about waiting for the lock are fine; a caller that got an
        // error is not (the executor logs each failed write).
        let failed: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains("is busy") || line.contains("executor::"))
            .collect();
        assert!(
            failed.is_empty(),
            "node-{n} reported {} failed writes, the first: {:?}",
            failed.len(),
            failed.first()
        );
    }

    // How the work and the waits were shared, for the report (not asserted: no timing).
    let waits: Vec<usize> = (0..NODES)
        .map(|n| {
            let stderr = std::fs::read_to_string(dir.path().join(format!("node-{n}.stderr")));
            stderr.map_or(0, |text| text.matches("waiting for the write lock").count())
        })
        .collect();
    rt.block_on(async {
        let mut runs_by_executor: HashMap<ExecutorId, usize> = HashMap::new();
        let ids = all_ids(&store, None).await;
        assert_eq!(ids.len(), total, "every submitted execution is stored once");
        for id in &ids {
            let log = store.get(id).await.expect("reads a log");
            assert_finished_once(id, &log);
            let timed_out = log
                .events
                .iter()
                .filter(|e| matches!(e.event, ExecutionEventInner::TemporarilyTimedOut { .. }))
                .count();
            assert_eq!(timed_out, 0, "{id} lost a Finished to its lease: {log:#?}");
            for event in &log.events {
                if let ExecutionEventInner::Locked(locked) = &event.event {
                    *runs_by_executor.entry(locked.executor_id).or_default() += 1;
                }
            }
        }
        let mut runs: Vec<usize> = runs_by_executor.into_values().collect();
        runs.sort_unstable();
        println!(
            "{total} executions in {BATCHES} create_batch calls of {BATCH}; runs per executor \
             {runs:?}; waits of a busy timeout ({} ms) logged per node {waits:?}",
            BUSY_TIMEOUT.as_millis()
        );
        store.close().await;
    });
    assert_integrity(&path);
}
