//! The PostgreSQL server itself fails under several executor processes (issue 11 §3): it is
//! down when they start, and it is stopped abruptly (`pg_ctl stop -m immediate`, every session
//! cut, nothing checkpointed) in the middle of the run and started again.
//!
//! Three `durability-node --role executor` processes and one `--role watcher` process share a
//! fresh database on the spare server (`test_support::spare_server`), whose URL asks
//! `PostgresStore::connect` to wait for the server (`wait_for_server_s`). The test:
//!
//! 1. crashes the server, starts the nodes, and waits until each one has logged that it cannot
//!    reach the server and is retrying; then starts the server, and waits until every node has
//!    opened its store (its listener listening);
//! 2. submits the executions itself (no node submits), in batches;
//! 3. once a third of them are finished, crashes the server and starts it again at once (it
//!    recovers from its WAL), while the executors hold leases, run workers and write outcomes;
//! 4. waits until every node has seen every execution finished and exited 0.
//!
//! Then every execution is finished exactly once, its result its own parameter, its stored
//! pending state equal to its derivation (`common::assert_finished_once`); nothing submitted
//! is missing; and every node's notification listener connected again by itself after the
//! crash (`listener_connects` of its summary at least 2).
//!
//! Without `STELE_TEST_POSTGRES_SPARE_PORT` the test prints `SKIPPED: ...` and passes, except
//! under `CI=true`, where it fails.

mod common;

use common::{all_ids, assert_finished_once};
use concepts::{ClockFn, CreateRequest, DbClient, DbConnection, ExecutionEventInner};
use durability::{Line, Workload};
use executor::Now;
use std::time::{Duration, Instant};
use storage_postgres::{PostgresConfig, PostgresStore, admin};
use test_support::{
    process::{Output, Processes},
    spare_server::SpareServer,
};

/// Executions in all.
const EXECUTIONS: usize = 3_000;
/// They are submitted in this many batches.
const BATCHES: usize = 6;
/// Executor processes.
const EXECUTORS: usize = 3;
/// The server is crashed once this many are finished.
const CRASH_AFTER: usize = EXECUTIONS / 3;
/// The longest any phase may take before the test gives up.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);
/// What a node logs while `connect` waits for the server.
const RETRYING: &str = "cannot reach the PostgreSQL server; retrying";

fn batch_requests(batch: usize) -> Vec<CreateRequest> {
    let workload = Workload::new().expect("the node's workload");
    let size = EXECUTIONS / BATCHES;
    let now = Now.now();
    (batch * size..(batch + 1) * size)
        .map(|idx| workload.request(idx, now, Duration::from_millis(10), 100))
        .collect()
}

/// The nodes and what they printed.
struct Fleet {
    processes: Processes,
    finished: usize,
    /// Which nodes printed `awaiting N`: their store is open and its listener listens.
    opened: Vec<bool>,
    summaries: Vec<Option<serde_json::Value>>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn pump(&mut self) {
        let mut next = self.processes.next(Duration::from_millis(20));
        while let Some((idx, output)) = next {
            if let Output::Line(line) = output {
                match Line::parse(&line).unwrap_or_else(|e| panic!("a node printed {e}")) {
                    Line::Progress { finished, .. } => {
                        self.finished = self.finished.max(finished);
                    }
                    Line::Awaiting(_) => self.opened[idx] = true,
                    Line::Summary(summary) => self.summaries[idx] = Some(summary),
                    _ => {}
                }
            }
            next = self.processes.try_next();
        }
    }

    /// Takes lines until `done` holds; fails after `PHASE_TIMEOUT`, or when a node exits
    /// before it printed its summary.
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        while !done(self) {
            if let Some(idx) = (0..self.summaries.len())
                .find(|&idx| self.processes.is_closed(idx) && self.summaries[idx].is_none())
            {
                let label = self.processes.label(idx).to_string();
                self.processes
                    .fail(&format!("{label} exited while waiting for {what}"));
            }
            if Instant::now() >= deadline {
                self.processes.fail(&format!(
                    "gave up after {PHASE_TIMEOUT:?} waiting for {what}"
                ));
            }
            self.pump();
        }
    }
}

#[test]
fn executors_watcher_and_listeners_survive_a_server_down_at_start_and_a_crash_mid_run() {
    let Some(server) = SpareServer::lock("executors_survive_a_server_crash") else {
        return;
    };
    let runtime = common::runtime();
    let name = format!("stele_restart_{}", std::process::id());
    let admin_config =
        PostgresConfig::from_url(&server.url("postgres", "127.0.0.1", "postgres", ""))
            .expect("the spare server's URL");
    runtime.block_on(async {
        admin::drop_database(&admin_config, &name).await.unwrap();
        admin::create_database(&admin_config, &name).await.unwrap();
    });
    let url = server.url(
        "postgres",
        "127.0.0.1",
        &name,
        "pool_size=8&wait_for_server_s=120&connect_timeout=5",
    );

    // 1. The server is down when the nodes start.
    server.crash();
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut fleet = Fleet {
        processes: Processes::new(dir.path()),
        finished: 0,
        opened: vec![false; EXECUTORS + 1],
        summaries: vec![None; EXECUTORS + 1],
        _dir: dir,
    };
    for idx in 0..=EXECUTORS {
        let role = if idx < EXECUTORS {
            "executor"
        } else {
            "watcher"
        };
        let mut command = common::node_command(&url, EXECUTIONS);
        command.args([
            "--role",
            role,
            "--submit",
            "never",
            "--poll-ms",
            "200",
            "--timeout-s",
            "240",
        ]);
        fleet.processes.start(&format!("{role}-{idx}"), command);
    }
    fleet.until("every node retrying to connect", |fleet| {
        (0..=EXECUTORS).all(|idx| fleet.processes.stderr(idx).contains(RETRYING))
    });
    server.start();
    // Each node opens its store once it next retries (its backoff may have grown to seconds).
    fleet.until("every node connected", |fleet| {
        fleet.opened.iter().all(|o| *o)
    });

    // 2. The test submits everything, in batches.
    let store = runtime
        .block_on(PostgresStore::connect(
            PostgresConfig::from_url(&url).expect("the URL"),
        ))
        .expect("the test's store opens once the server runs");
    for batch in 0..BATCHES {
        runtime
            .block_on(store.create_batch(batch_requests(batch)))
            .expect("create_batch");
    }

    // 3. A crash in the middle of the run.
    fleet.until("a third finished", |fleet| fleet.finished >= CRASH_AFTER);
    server.crash();
    server.start();

    // 4. Everything finishes; every node exits 0.
    fleet.until("every node's summary", |fleet| {
        fleet.summaries.iter().all(Option::is_some)
    });
    for idx in 0..=EXECUTORS {
        let status = fleet.processes.wait(idx);
        assert!(status.success(), "{}: {status}", fleet.processes.label(idx));
    }

    let (ids, timed_out) = runtime.block_on(async {
        let ids = all_ids(&store, None).await;
        let mut timed_out = 0;
        for id in &ids {
            let log = store.get(id).await.expect("get");
            assert_finished_once(id, &log);
            timed_out += log
                .events
                .iter()
                .filter(|e| matches!(e.event, ExecutionEventInner::TemporarilyTimedOut { .. }))
                .count();
        }
        (ids, timed_out)
    });
    assert_eq!(ids.len(), EXECUTIONS, "every submitted execution is there");
    let finished_ids =
        runtime.block_on(all_ids(&store, Some(concepts::PendingStateKind::Finished)));
    assert_eq!(finished_ids.len(), EXECUTIONS, "every execution finished");
    let mut worker_runs = 0;
    for (idx, summary) in fleet.summaries.iter().enumerate() {
        let summary = summary.as_ref().expect("a summary");
        let connects = summary["listener_connects"].as_u64().unwrap_or_default();
        assert!(
            connects >= 2,
            "{}: its listener connected {connects} time(s), not again after the crash: {summary}",
            fleet.processes.label(idx)
        );
        worker_runs += summary["worker_runs"].as_u64().unwrap_or_default();
    }
    println!(
        "pg_restart: {EXECUTIONS} executions, {EXECUTORS} executors + 1 watcher, server down at \
         start and crashed at {CRASH_AFTER} finished: worker runs {worker_runs}, leases timed \
         out {timed_out}, finished once {}",
        ids.len()
    );
    runtime.block_on(async {
        store.close().await;
        admin::drop_database(&admin_config, &name).await.unwrap();
    });
}
