//! Where `lock_pending` reads the histories it hands over: a short lock on the writer's
//! connection right after its commit (no reader round trip), a long one on a reader.

use super::{create_request, delay_finished, ffqn, history, id, join_set_create, open, t0};
use crate::{SqlitePool, reads::WRITER_HANDOVER_ROWS};
use concepts::{
    AppendBatchRequest, DbClient, DbConnection, DbExecutor, DbTimers, DbWorkflow, DelayId,
    ExecutionEventInner, ExecutionId, ExecutorId, HistoryEvent, JoinSetId, JoinSetRequest,
    LockPendingRequest, LockedExecution, Version,
};
use std::sync::Arc;

pub(super) fn lock_request(batch_size: usize) -> LockPendingRequest {
    LockPendingRequest {
        batch_size,
        pending_at_or_sooner: t0(),
        ffqns: Arc::from([ffqn()]),
        now: t0(),
        component_id: create_request(id(1), t0()).component_id,
        executor_id: ExecutorId::from_parts(1, 1),
        lock_expires_at: t0() + chrono::Duration::hours(1),
    }
}

/// Creates execution `n` with a join set of `delays` delays, each answered: a log of
/// `delays + 2` events and `delays` responses.
async fn with_answered_delays(store: &SqlitePool, n: u128, delays: u128) -> ExecutionId {
    let execution_id = id(n);
    store
        .create(create_request(execution_id.clone(), t0()))
        .await
        .expect("creates");
    let join_set: JoinSetId = "n:j".parse().expect("valid");
    let delay_ids: Vec<DelayId> = (1..=delays).map(|k| DelayId::from_parts(1, k)).collect();
    let mut events = vec![join_set_create(&join_set)];
    events.extend(delay_ids.iter().map(|&delay_id| {
        history(HistoryEvent::JoinSetRequest {
            join_set_id: join_set.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at: t0(),
            },
        })
    }));
    store
        .append_batch(AppendBatchRequest::events(
            execution_id.clone(),
            Version(1),
            t0(),
            events,
        ))
        .await
        .expect("requests the delays");
    for delay_id in delay_ids {
        store
            .append_response(t0(), &execution_id, delay_finished(&join_set, delay_id))
            .await
            .expect("answers a delay");
    }
    execution_id
}

/// Locks one execution and returns it with the number of reads the lock sent to the pool.
async fn lock_one(store: &SqlitePool) -> (LockedExecution, u64) {
    let before = store.reads_sent();
    let mut locked = store.lock_pending(lock_request(1)).await.expect("locks");
    let reads = store.reads_sent() - before;
    assert_eq!(locked.len(), 1);
    (locked.remove(0), reads)
}

/// What the worker must be handed, from the stored log: the history events below the
/// `Locked` event and every response.
async fn assert_handed_over_as_stored(store: &SqlitePool, locked: &LockedExecution) {
    let log = store
        .get(&locked.execution_id)
        .await
        .expect("reads the log");
    let history: Vec<HistoryEvent> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(locked.event_history, history);
    assert_eq!(locked.responses, log.responses);
    assert_eq!(locked.next_version, log.next_version);
    assert_eq!(locked.params, create_request(id(1), t0()).params);
}

#[tokio::test]
async fn a_short_lock_is_handed_over_by_the_writer_without_a_reader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    let execution_id = with_answered_delays(&store, 1, 5).await;
    let (locked, reads) = lock_one(&store).await;
    assert_eq!(locked.execution_id, execution_id);
    assert_eq!(
        reads, 0,
        "a lock of 7 events and 5 responses needs no reader"
    );
    assert_eq!(locked.responses.len(), 5);
    assert_handed_over_as_stored(&store, &locked).await;
    store.close().await;
}

#[tokio::test]
async fn a_lock_whose_responses_do_not_fit_is_read_on_a_reader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    // Its events fit (`delays + 2`), its events and responses together do not.
    let delays = u128::try_from(WRITER_HANDOVER_ROWS / 2 + 2).expect("small");
    with_answered_delays(&store, 1, delays).await;
    let (locked, reads) = lock_one(&store).await;
    assert_eq!(reads, 1, "the reader reads the long history");
    assert_eq!(locked.responses.len(), WRITER_HANDOVER_ROWS / 2 + 2);
    assert_handed_over_as_stored(&store, &locked).await;
    store.close().await;
}

/// The ids of more executions than a lock hands over on the writer's connection by reading,
/// and their creations, due at `t0`.
fn more_than_fit() -> (Vec<ExecutionId>, Vec<concepts::CreateRequest>) {
    let many = u128::try_from(WRITER_HANDOVER_ROWS + 1).expect("small");
    let ids: Vec<ExecutionId> = (1..=many).map(id).collect();
    let requests = ids.iter().map(|id| create_request(id.clone(), t0()));
    (ids.clone(), requests.collect())
}

#[tokio::test]
async fn a_lock_of_more_executions_than_fit_is_read_on_a_reader_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    let (ids, requests) = more_than_fit();
    let many = ids.len();
    // Created by another connection: this store's writer kept none of their `Created` events.
    let other = open(&dir.path().join("db.sqlite")).await;
    other.create_batch(requests).await.expect("creates");
    other.close().await;
    let before = store.reads_sent();
    let locked = store.lock_pending(lock_request(many)).await.expect("locks");
    assert_eq!(store.reads_sent() - before, 1);
    let locked_ids: Vec<ExecutionId> = locked.iter().map(|l| l.execution_id.clone()).collect();
    assert_eq!(locked_ids, ids);
    // A few short ones fit.
    let other = open(&dir.path().join("db.sqlite")).await;
    other
        .create_batch((100..103).map(|n| create_request(id(n), t0())).collect())
        .await
        .expect("creates");
    other.close().await;
    let before = store.reads_sent();
    let locked = store.lock_pending(lock_request(3)).await.expect("locks");
    assert_eq!(store.reads_sent() - before, 0);
    assert_eq!(locked.len(), 3);
    for one in &locked {
        assert_handed_over_as_stored(&store, one).await;
    }
    store.close().await;
}

#[tokio::test]
async fn a_first_lease_of_executions_the_store_created_is_handed_over_without_a_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    let (ids, requests) = more_than_fit();
    let many = ids.len();
    store.create_batch(requests).await.expect("creates");
    let before = store.reads_sent();
    let locked = store.lock_pending(lock_request(many)).await.expect("locks");
    assert_eq!(
        store.reads_sent() - before,
        0,
        "the writer kept every `Created`"
    );
    let locked_ids: Vec<ExecutionId> = locked.iter().map(|l| l.execution_id.clone()).collect();
    assert_eq!(locked_ids, ids);
    for one in &locked {
        assert_handed_over_as_stored(&store, one).await;
    }
    store.close().await;
}

#[tokio::test]
async fn a_created_event_kept_by_the_writer_is_not_handed_over_once_another_connection_wrote() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    // Another process cancels it, prunes it and creates it again with other parameters.
    let other = open(&path).await;
    let cancel = concepts::CancelRequest {
        execution_id: id(1),
        now: t0(),
        reason: "test".to_owned(),
    };
    other.cancel(cancel).await.expect("cancels");
    let prune = concepts::PruneRequest {
        finished_before: t0() + chrono::Duration::seconds(1),
        limit: 10,
        after: None,
    };
    assert_eq!(other.prune(prune).await.expect("prunes").executions, 1);
    let again = concepts::CreateRequest {
        params: concepts::Json(serde_json::json!(["again"])),
        ..create_request(id(1), t0())
    };
    other.create(again.clone()).await.expect("creates again");
    other.close().await;
    let (locked, _) = lock_one(&store).await;
    assert_eq!(
        locked.params, again.params,
        "the stored `Created`, not the kept one"
    );
    store.close().await;
}

/// A `Created` kept from an earlier transaction, of an execution that one transaction prunes,
/// creates again and leases: the lease hands over the new `Created`.
#[test]
fn a_created_event_kept_by_the_writer_is_forgotten_as_its_prune_commits() {
    use crate::{SqliteConfig, ops::Written, reads, schema, writer};
    use concepts::{
        CancelRequest, CreateRequest, Json, PruneRequest,
        kernel::{CreateBatch, WaiterHub, Write},
    };
    /// A kernel write as the writer's command, its reply dropped.
    fn command<W: Write + Send + 'static>(write: W) -> Box<dyn writer::Command>
    where
        W::Reply: Send,
    {
        let keys = write.keys().expect("valid");
        writer::FnCommand::boxed(Written { write, keys }, |_, _| ()).0
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let mut config = SqliteConfig::new(&path);
    config.max_commands_per_transaction = 3;
    let (conn, _) = schema::open_writer(&config).expect("opens");
    let later = t0() + chrono::Duration::hours(1);
    let again = CreateRequest {
        params: Json(serde_json::json!(["again"])),
        ..create_request(id(1), t0())
    };
    let lock = lock_request(1);
    let keys = lock.keys().expect("valid");
    let (lock, locked) = writer::FnCommand::boxed(Written { write: lock, keys }, |at, grants| {
        reads::handover_on_writer(at, grants)
    });
    // The first transaction creates and cancels it, which leaves its `Created` kept (a create
    // due later fills the transaction); the second prunes it, creates it again and leases it.
    let commands = [
        command(CreateBatch(vec![create_request(id(1), t0())])),
        command(CancelRequest {
            execution_id: id(1),
            now: t0(),
            reason: "test".to_owned(),
        }),
        command(CreateBatch(vec![create_request(id(2), later)])),
        command(PruneRequest {
            finished_before: t0() + chrono::Duration::seconds(1),
            limit: 10,
            after: None,
        }),
        command(CreateBatch(vec![again.clone()])),
        lock,
    ];
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    for command in commands {
        assert!(tx.try_send(writer::Message::Command(command)).is_ok());
    }
    assert!(tx.try_send(writer::Message::Shutdown).is_ok());
    drop(tx);
    writer::run(conn, &config, rx, &WaiterHub::new());
    let (ready, unread) = locked.blocking_recv().expect("replied").expect("locks");
    assert!(unread.is_empty(), "a short history is read on the writer");
    assert_eq!(ready.len(), 1);
    assert_eq!(
        ready[0].params, again.params,
        "the new `Created`, not the kept one"
    );
}
