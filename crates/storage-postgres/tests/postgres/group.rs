//! The group writer: concurrent writes of disjoint executions share one transaction, and so
//! do outcomes answering one parent; a write the kernel refuses leaves the rest of its group
//! committed, and a group the database refuses runs each write alone so that only the refused
//! one fails.
//!
//! Each test makes the group deterministic: plain connections hold the row locks of executions
//! that the first writes need, so every slot of the group writer waits on a lock, while the
//! writes under test are queued (each polled once, which enqueues it); releasing the locks
//! then lets the writer take them all at once.

use super::{SAFETY, create_request, execution_id, ffqn, open};
use concepts::{CreateOutcome, DbClient, DbConnection, DbError, ExecutionId, JoinSetResponse};
use std::{future::Future, pin::pin, task::Poll, time::Duration};
use storage_postgres::PostgresStore;
use test_support::postgres::{TestDatabase, TestServer};

/// Runs `write` until it is queued (its first poll), then returns a task that finishes it.
async fn queued<T: Send + 'static>(
    write: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut write = pin!(write);
        let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
        let _ = queued_tx.send(());
        match first {
            Poll::Ready(output) => output,
            Poll::Pending => write.await,
        }
    });
    queued_rx.await.expect("the write task runs");
    task
}

/// How many server processes of `database` wait for a lock.
async fn lock_waiters(database: &TestDatabase) -> i64 {
    let name = database.name().to_string();
    database
        .with_client(async |client| {
            client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = $1 AND wait_event_type = 'Lock'",
                    &[&name],
                )
                .await
                .unwrap()
                .get(0)
        })
        .await
}

/// Occupies every group slot of `store` with a `create` of an existing execution whose row
/// `blocker` holds; returns those writes.
async fn occupy_every_slot(
    database: &TestDatabase,
    store: &PostgresStore,
    blocker: &tokio_postgres::Client,
) -> Vec<tokio::task::JoinHandle<Result<CreateOutcome, DbError>>> {
    let slots = store.group_slots();
    let ids: Vec<ExecutionId> = (0..slots)
        .map(|i| execution_id(1_000 + u128::try_from(i).unwrap()))
        .collect();
    store
        .create_batch(
            ids.iter()
                .map(|id| create_request(id.clone(), ffqn("f")))
                .collect(),
        )
        .await
        .unwrap();
    let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .query(
            "SELECT 1 FROM t_execution WHERE execution_id = ANY($1) FOR UPDATE",
            &[&texts],
        )
        .await
        .unwrap();
    // One at a time, each waiting before the next is sent, so that each is a group of its
    // own and holds a slot.
    let mut blocked = Vec::new();
    for (waiting, id) in (1..).zip(ids) {
        let store = store.clone();
        blocked.push(tokio::spawn(async move {
            store.create(create_request(id, ffqn("f"))).await
        }));
        tokio::time::timeout(SAFETY, async {
            while lock_waiters(database).await < waiting {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the write waits for the held row");
    }
    blocked
}

/// The distinct transactions that wrote the rows of `ids`.
async fn writers_of(database: &TestDatabase, ids: &[ExecutionId]) -> i64 {
    let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    database
        .with_client(async |client| {
            client
                .query_one(
                    "SELECT count(DISTINCT xmin::text) FROM t_execution \
                     WHERE execution_id = ANY($1)",
                    &[&texts],
                )
                .await
                .unwrap()
                .get(0)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_writes_share_one_transaction_and_a_refused_one_changes_nothing_else() {
    let Some(server) = TestServer::or_skip(
        "queued_writes_share_one_transaction_and_a_refused_one_changes_nothing_else",
    ) else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    // An execution that a later create conflicts with (same id, another function).
    let taken = execution_id(1);
    store
        .create(create_request(taken.clone(), ffqn("f")))
        .await
        .unwrap();
    let fresh: Vec<ExecutionId> = (0..50u128).map(|i| execution_id(100 + i)).collect();
    database
        .with_client(async |blocker| {
            let blocked = occupy_every_slot(&database, &store, blocker).await;
            let mut writes = Vec::new();
            for id in &fresh {
                let store = store.clone();
                let request = create_request(id.clone(), ffqn("f"));
                writes.push(queued(async move { store.create(request).await }).await);
            }
            let conflicting = {
                let store = store.clone();
                let request = create_request(taken.clone(), ffqn("other"));
                queued(async move { store.create(request).await }).await
            };
            blocker.batch_execute("COMMIT").await.unwrap();
            for write in blocked {
                assert!(matches!(
                    write.await.unwrap(),
                    Ok(CreateOutcome::AlreadyExisted { .. })
                ));
            }
            for write in writes {
                assert_eq!(write.await.unwrap().unwrap(), CreateOutcome::Created);
            }
            let refused = conflicting.await.unwrap();
            assert!(
                refused.is_err(),
                "the kernel refuses the conflicting create: {refused:?}"
            );
        })
        .await;
    assert_eq!(
        writers_of(&database, &fresh).await,
        1,
        "the queued creates committed in one transaction"
    );
    let log = store.get(&taken).await.unwrap();
    assert_eq!(log.events.len(), 1, "the refused create wrote nothing");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_the_database_refuses_runs_each_write_alone() {
    let Some(server) = TestServer::or_skip("a_group_the_database_refuses_runs_each_write_alone")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    // A forged event without its execution row: the kernel sees no execution, the event's
    // primary key refuses the create's insert, and with it the whole group.
    let forged = execution_id(1);
    let forged_text = forged.to_string();
    database
        .with_client(async |client| {
            client
                .execute(
                    "INSERT INTO t_event (execution_id, version, is_history, event_json) \
                     VALUES ($1, 0, false, '{}')",
                    &[&forged_text],
                )
                .await
                .unwrap();
        })
        .await;
    let fresh: Vec<ExecutionId> = (0..20u128).map(|i| execution_id(100 + i)).collect();
    database
        .with_client(async |blocker| {
            let blocked = occupy_every_slot(&database, &store, blocker).await;
            let mut writes = Vec::new();
            for id in &fresh {
                let store = store.clone();
                let request = create_request(id.clone(), ffqn("f"));
                writes.push(queued(async move { store.create(request).await }).await);
            }
            let refused = {
                let store = store.clone();
                let request = create_request(forged.clone(), ffqn("f"));
                queued(async move { store.create(request).await }).await
            };
            blocker.batch_execute("COMMIT").await.unwrap();
            for write in blocked {
                write.await.unwrap().unwrap();
            }
            for write in writes {
                assert_eq!(write.await.unwrap().unwrap(), CreateOutcome::Created);
            }
            assert!(
                refused.await.unwrap().is_err(),
                "the create the database refuses fails"
            );
        })
        .await;
    assert_eq!(
        writers_of(&database, &fresh).await,
        i64::try_from(fresh.len()).unwrap(),
        "each write of the refused group committed alone"
    );
    assert!(matches!(
        store.get(&forged).await,
        Err(DbError::NotFound(_))
    ));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_outcomes_answering_one_parent_share_one_transaction() {
    use concepts::{
        DbExecutor, DbWorkflow, ExecutionEventInner, OutcomeWrite, SupportedFunctionReturnValue,
        Version,
    };
    use conformance::storage_scenarios::helpers as h;
    use std::sync::Arc;

    let Some(server) =
        TestServer::or_skip("queued_outcomes_answering_one_parent_share_one_transaction")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    let now = super::now();
    let lease = Duration::from_secs(60);
    // A locked parent with 20 children in one join set, each child locked, plus one child whose
    // outcome names a wrong version.
    let parent = execution_id(1);
    store
        .create(create_request(parent.clone(), ffqn("parent")))
        .await
        .unwrap();
    let parents: Arc<[_]> = vec![ffqn("parent")].into();
    let locked = h::lock_pending_now(&store, &parents, 1, now, h::executor_id(1), lease).await;
    assert_eq!(h::ids_of(&locked), vec![parent.clone()]);
    let j = h::join_set("n:kids");
    let children: Vec<_> = (1..=21)
        .map(|i| h::child_request(&parent, &j, i, ffqn("child"), now))
        .collect();
    let mut events = vec![h::join_set_create(&j)];
    events.extend(
        children
            .iter()
            .map(|c| h::child_execution_request(&j, &c.execution_id)),
    );
    store
        .append_batch(h::batch_creating(
            &parent,
            Version(2),
            now,
            events,
            children.clone(),
        ))
        .await
        .unwrap();
    let kids: Arc<[_]> = vec![ffqn("child")].into();
    let locked = h::lock_pending_now(&store, &kids, 100, now, h::executor_id(1), lease).await;
    assert_eq!(locked.len(), children.len());
    let ids: Vec<ExecutionId> = children.iter().map(|c| c.execution_id.clone()).collect();
    let (answering, stale) = ids.split_at(20);
    let finished = ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    };
    let outcome = |id: &ExecutionId, version| {
        OutcomeWrite::new(
            id.clone(),
            Version(version),
            now,
            finished.clone(),
            Some(&(parent.clone(), j.clone())),
        )
    };
    database
        .with_client(async |blocker| {
            let blocked = occupy_every_slot(&database, &store, blocker).await;
            let mut writes = Vec::new();
            for id in answering {
                let store = store.clone();
                let write = outcome(id, 2);
                writes.push(queued(async move { store.append_outcome(write).await }).await);
            }
            let refused = {
                let store = store.clone();
                let write = outcome(&stale[0], 7);
                queued(async move { store.append_outcome(write).await }).await
            };
            blocker.batch_execute("COMMIT").await.unwrap();
            for write in blocked {
                write.await.unwrap().unwrap();
            }
            for write in writes {
                write.await.unwrap().unwrap();
            }
            assert!(
                matches!(refused.await.unwrap(), Err(DbError::VersionMismatch { .. })),
                "the outcome at a wrong version is refused alone"
            );
        })
        .await;
    assert_eq!(
        writers_of(&database, answering).await,
        1,
        "the queued outcomes naming one parent committed in one transaction"
    );
    let log = store.get(&parent).await.unwrap();
    let answered: Vec<_> = log
        .responses
        .iter()
        .map(|r| match &r.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => child_execution_id.clone(),
            other => panic!("unexpected response {other:?}"),
        })
        .collect();
    assert_eq!(
        answered, answering,
        "each child answered the parent once, in queue order"
    );
    for id in answering {
        let events = store.get(id).await.unwrap().events;
        assert_eq!(events.len(), 3, "created, locked, finished");
        assert!(matches!(
            events[2].event,
            ExecutionEventInner::Finished { .. }
        ));
    }
    let stale_log = store.get(&stale[0]).await.unwrap();
    assert_eq!(
        stale_log.events.len(),
        2,
        "the refused outcome wrote nothing"
    );
    store.close().await;
}

/// A create and a response to what it creates, queued into one group, are one new execution's
/// change: the stored row counts the response (the plan's count, not zero), so a later
/// response takes the place after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_that_creates_and_answers_an_execution_counts_the_response() {
    use concepts::{DbTimers, DelayId, JoinSetResponseEvent};
    let Some(server) = TestServer::or_skip("a_group_that_creates_and_answers") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    let id = execution_id(7);
    let join_set: concepts::JoinSetId = "n:timers".parse().expect("valid");
    let delay = |n: u128| JoinSetResponseEvent {
        join_set_id: join_set.clone(),
        event: JoinSetResponse::DelayFinished {
            delay_id: DelayId::from_parts(1, n),
        },
    };
    database
        .with_client(async |blocker| {
            let blocked = occupy_every_slot(&database, &store, blocker).await;
            let create = {
                let (store, request) = (store.clone(), create_request(id.clone(), ffqn("f")));
                queued(async move { store.create(request).await }).await
            };
            let respond = {
                let (store, id, response) = (store.clone(), id.clone(), delay(1));
                queued(async move { store.append_response(super::now(), &id, response).await })
                    .await
            };
            blocker.batch_execute("COMMIT").await.expect("commits");
            for write in blocked {
                write.await.expect("joins").expect("writes");
            }
            let created = create.await.expect("joins").expect("creates");
            assert_eq!(created, CreateOutcome::Created);
            respond.await.expect("joins").expect("stores the response");
        })
        .await;
    assert_eq!(
        writers_of(&database, std::slice::from_ref(&id)).await,
        1,
        "one group"
    );
    let text = id.to_string();
    let stored: i64 = database
        .with_client(async |client| {
            let sql = "SELECT response_count FROM t_execution WHERE execution_id = $1";
            client.query_one(sql, &[&text]).await.expect("reads").get(0)
        })
        .await;
    assert_eq!(stored, 1, "the row counts the response stored in the group");
    store
        .append_response(super::now(), &id, delay(2))
        .await
        .expect("a later response takes the next place");
    assert_eq!(store.get(&id).await.expect("reads").responses.len(), 2);
    store.close().await;
}
