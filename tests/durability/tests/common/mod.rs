//! What the crash test and the multi-process test share: how a `durability-node` is started,
//! a runtime for the test's own store, and the checks every finished log must pass.

#![allow(dead_code, reason = "each test binary uses part of it")]

use concepts::{
    DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog, Json, PendingStateKind,
    SupportedFunctionReturnValue, derive_pending_state,
};
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// `durability-node run --database <database> --executions <executions>`; the caller adds
/// the rest of the arguments.
pub fn node_command(database: &str, executions: usize) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_durability-node"));
    command
        .args(["run", "--database", database])
        .args(["--executions", &executions.to_string()]);
    command
}

/// A runtime for the test's own store handle, beside the node processes.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Every execution id in `state` (every one for `None`).
pub async fn all_ids(db: &dyn DbConnection, state: Option<PendingStateKind>) -> Vec<ExecutionId> {
    durability::list_ids(db, state)
        .await
        .expect("list_executions")
}

/// The checks of every log once all is done: exactly one `Finished` event, the last one, whose
/// result is the execution's own parameter (no result went to the wrong execution), and a
/// stored pending state equal to `concepts::derive_pending_state` of the log.
pub fn assert_finished_once(id: &ExecutionId, log: &ExecutionLog) {
    let finished = log
        .events
        .iter()
        .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
        .count();
    assert_eq!(finished, 1, "{id}: Finished events in {log:#?}");
    let Some(ExecutionEventInner::Finished { result }) = log.events.last().map(|e| &e.event) else {
        panic!("{id}: the last event is not Finished: {log:#?}");
    };
    let Some(concepts::Created { params, .. }) = log.events.first().and_then(|e| e.event.created())
    else {
        panic!("{id}: the first event is not Created: {log:#?}");
    };
    let expected = params.0.get(0).cloned().unwrap_or_default();
    assert_eq!(
        result,
        &Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
            expected
        ))),
        "{id}: the result is not the execution's own parameter"
    );
    assert_eq!(
        Some(&log.pending_state),
        derive_pending_state(&log.events, &log.responses).as_ref(),
        "{id}: the stored pending state differs from its derivation"
    );
}

/// `path` with `suffix` appended to its file name (`x.sqlite` -> `x.sqlite-wal`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// `PRAGMA integrity_check` must say `ok`; run with rusqlite directly, with no store open.
pub fn assert_integrity(path: &Path) {
    let conn = rusqlite::Connection::open(path)
        .unwrap_or_else(|e| panic!("opening {} with rusqlite: {e}", path.display()));
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .expect("preparing integrity_check");
    let rows: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .expect("running integrity_check")
        .collect::<Result<_, _>>()
        .expect("reading integrity_check");
    assert_eq!(
        rows,
        vec!["ok".to_string()],
        "integrity_check of {}",
        path.display()
    );
}
