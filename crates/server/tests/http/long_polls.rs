//! 1,000 long polls held at once over loopback HTTP: the polls of one execution share one
//! wait of the store, so what the store does (its waits for a result, each a registration
//! with its waiter hub and a read) is counted by executions, not by polls nor by the time
//! they are held; every poll is answered with the finish, and the polls whose timeout comes
//! first with "still running".

use super::{GATED, SAFETY, answer, doubling, serve_over};
use concepts::{DbConnection, DbError};
use conformance::StoreFactory;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use reqwest::StatusCode;
use serde_json::json;
use server::ApiOptions;
use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use test_utils::forwarding::{Fault, ForwardingDb, Read, Write, WriteHook};

/// The executions polled.
const EXECUTIONS: usize = 10;
/// The long polls held until the executions finish.
const HELD: usize = 1_000;
/// The polls, beside them, whose timeout comes first.
const SHORT: usize = 100;

/// Counts the store's waits for a result.
#[derive(Clone, Default)]
struct CountWaits(Arc<AtomicUsize>);

impl WriteHook for CountWaits {
    fn decide(&self, _write: &Write<'_>) -> Fault {
        Fault::Pass
    }

    fn read(&self, read: &Read<'_>) -> Result<(), DbError> {
        if matches!(read, Read::FinishedResult { .. }) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// The process's recorder (one per process: nextest runs each test in its own).
fn recorder() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        concepts::metrics::describe();
        snapshotter
    })
}

/// `stele_http_long_polls`: the polls the server holds. The debugging recorder's snapshot
/// takes each gauge's value and leaves 0 (the gauge is only incremented and decremented), so
/// the values taken are added up here.
fn held(snapshotter: &Snapshotter) -> f64 {
    static TAKEN: std::sync::Mutex<f64> = std::sync::Mutex::new(0.0);
    let taken: f64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| key.key().name() == concepts::metrics::HTTP_LONG_POLLS)
        .map(|(_, _, _, value)| match value {
            DebugValue::Gauge(value) => value.into_inner(),
            other => panic!("not a gauge: {other:?}"),
        })
        .sum();
    let mut total = TAKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *total += taken;
    *total
}

/// Waits until the server holds `polls` polls.
async fn until_held(snapshotter: &Snapshotter, polls: usize) {
    let wanted = polls as f64;
    tokio::time::timeout(SAFETY, async {
        while held(snapshotter) != wanted {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} polls held, not {polls}", held(snapshotter)));
}

/// This process's resident memory in KiB (Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Raises this process's soft limit of open files to what two thousand connections (both
/// ends) need, when it is lower.
fn enough_open_files() {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft: Option<u64> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok());
    if soft.is_some_and(|soft| soft < 4 * HELD as u64) {
        let status = std::process::Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={}:", 4 * HELD))
            .status()
            .expect("prlimit (util-linux) runs");
        assert!(status.success(), "prlimit --nofile");
    }
}

pub(super) async fn a_thousand_long_polls_share_one_wait_per_execution(factory: &dyn StoreFactory) {
    enough_open_files();
    let snapshotter = recorder();
    let store = factory.fresh().await;
    let waits = CountWaits::default();
    let db: Arc<dyn DbConnection> = ForwardingDb::new(store.db.clone(), waits.clone());
    let served = serve_over(store, db, doubling, ApiOptions::default()).await;
    let mut ids = Vec::new();
    for n in 0..EXECUTIONS {
        let (status, body) = served
            .post(
                "/executions",
                &json!({"function": GATED.ffqn().unwrap().to_string(), "params": n}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body["id"].as_str().expect("an id").to_string());
    }
    let rss_before = rss_kib();
    let poll = |id: &str, timeout: &str| {
        let request = served
            .http
            .get(served.url(&format!("/executions/{id}/wait?timeout={timeout}")))
            .send();
        tokio::spawn(async move { answer(request.await).await })
    };
    let held_polls: Vec<_> = (0..HELD)
        .map(|n| (n % EXECUTIONS, poll(&ids[n % EXECUTIONS], "1m")))
        .collect();
    until_held(snapshotter, HELD).await;
    let rss_held = rss_kib();
    // One wait of the store per execution: its first read, then its wait for the wake-up.
    assert_eq!(waits.0.load(Ordering::SeqCst), 2 * EXECUTIONS);

    // More polls of the same executions, with a timeout that comes first: still running.
    let short: Vec<_> = (0..SHORT)
        .map(|n| poll(&ids[n % EXECUTIONS], "1s"))
        .collect();
    for poll in short {
        let (status, body) = tokio::time::timeout(SAFETY, poll)
            .await
            .expect("answered at its timeout")
            .expect("joined");
        assert_eq!(
            (status, &body["finished"]),
            (StatusCode::ACCEPTED, &json!(false)),
            "{body}"
        );
    }
    until_held(snapshotter, HELD).await;
    assert_eq!(
        waits.0.load(Ordering::SeqCst),
        2 * EXECUTIONS,
        "the store waits no more for more polls nor for longer ones"
    );

    // The executions finish: every poll is answered with its execution's result.
    served.gate.add_permits(EXECUTIONS);
    for (n, poll) in held_polls {
        let (status, body) = tokio::time::timeout(SAFETY, poll)
            .await
            .expect("answered at the finish")
            .expect("joined");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"], json!({"kind": "ok", "value": n}), "{body}");
    }
    until_held(snapshotter, 0).await;
    assert_eq!(waits.0.load(Ordering::SeqCst), 2 * EXECUTIONS);
    let rss_after = rss_kib();
    eprintln!(
        "{HELD} polls held on {EXECUTIONS} executions ({SHORT} more answered 202 meanwhile): \
         {} store waits; RSS {rss_before} KiB before, {rss_held} KiB held, {rss_after} KiB after",
        waits.0.load(Ordering::SeqCst)
    );
    served.stop().await;
}
