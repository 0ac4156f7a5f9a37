//! S22, S23 and S25: listings filtered and paged (what an operator's pages and the HTTP API
//! read), the events of a log in pages, and the due backlog of a function (what the node's
//! gauges read).

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    DbConnection, DbErrorKind, DueBacklog, ExecutionId, ExecutionSummary, ListExecutionsFilter,
    Pagination, PendingStateKind, Version,
};
use std::time::Duration;

/// Every page of `filter`, `length` rows at a time, followed by its cursor.
async fn all_pages(
    db: &dyn DbConnection,
    filter: &ListExecutionsFilter,
    length: usize,
) -> Vec<ExecutionSummary> {
    let mut rows: Vec<ExecutionSummary> = Vec::new();
    loop {
        let cursor = rows.last().map(|r| (r.created_at, r.execution_id.clone()));
        let page = db
            .list_executions(filter.clone(), Pagination { cursor, length })
            .await
            .unwrap_or_else(|err| panic!("{filter:?}: {err}"));
        assert!(page.len() <= length, "{filter:?}: a page longer than asked");
        let full = page.len() == length;
        rows.extend(page);
        if !full {
            return rows;
        }
    }
}

/// S22: `list_executions` passes exactly what its filters let through (function, state,
/// top-level, the children of one parent, created after and before, an id prefix, pending from
/// a time on, and several at once), newest first by creation time then id, in pages that continue after their
/// cursor and never repeat or skip a row; a store's answer is checked against the filter's own
/// reference, `ListExecutionsFilter::matches`, over every execution it holds.
pub async fn s22_listings_filter_and_page<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let start = chrono::DateTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let at = |n: u64| plus(start, Duration::from_millis(n));
    let (work, other) = (ffqn("work"), ffqn("other"));
    // 30 top-level executions over 15 instants (two per instant), of two functions.
    for n in 1..=30u128 {
        let ffqn = if n % 3 == 0 { &other } else { &work };
        let created = at(u64::try_from(n / 2).unwrap());
        db.create(create_request(execution_id(n), ffqn.clone(), created))
            .await
            .unwrap();
    }
    // Some of `work` locked, and one parent with 12 children and a grandchild.
    let now = at(100);
    let locked = lock_pending_now(db, &ffqns_of(&work), 5, now, executor_id(1), LEASE).await;
    assert_eq!(locked.len(), 5);
    let parent = &locked[0].execution_id;
    let js = join_set("n:kids");
    let kids: Vec<ExecutionId> = (1..=12).map(|i| parent.next_level(&js, i)).collect();
    let mut events = vec![join_set_create(&js)];
    events.extend(kids.iter().map(|kid| child_execution_request(&js, kid)));
    let children = (1..=12)
        .map(|i| child_request(parent, &js, i, other.clone(), at(100 + i)))
        .collect();
    db.append_batch(batch_creating(parent, Version(2), now, events, children))
        .await
        .unwrap();
    let grand_js = join_set("n:grand");
    let grandchild = kids[0].next_level(&grand_js, 1);
    let grand = child_request(&kids[0], &grand_js, 1, other.clone(), at(200));
    let kid = &kids[0];
    let (_, version) = lock(
        db,
        at(150),
        kid,
        run_id(9),
        Version(1),
        executor_id(2),
        at(900),
    )
    .await
    .unwrap();
    let events = vec![
        join_set_create(&grand_js),
        child_execution_request(&grand_js, &grandchild),
    ];
    db.append_batch(batch_creating(kid, version, at(150), events, vec![grand]))
        .await
        .unwrap();

    let finished = &locked[4].execution_id;
    append(
        db,
        finished,
        Version(2),
        now,
        finished_ok(serde_json::json!(7)),
    )
    .await
    .unwrap();

    // The reference: every execution the store holds, newest first.
    let everything = all_pages(db, &ListExecutionsFilter::default(), 1_000).await;
    assert_eq!(everything.len(), 30 + 12 + 1);
    let mut expected_order = everything.clone();
    expected_order
        .sort_by(|a, b| (b.created_at, &b.execution_id).cmp(&(a.created_at, &a.execution_id)));
    assert_eq!(everything, expected_order, "newest first, ties by id");

    // Due from a time on: the children due after the sixth one's time, and the grandchild.
    let pending_later = ListExecutionsFilter {
        pending_from: Some(at(106)),
        ..ListExecutionsFilter::default()
    };
    let filters = [
        ListExecutionsFilter {
            ffqn: Some(work.clone()),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            state: Some(PendingStateKind::Locked),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            state: Some(PendingStateKind::PendingAt),
            top_level_only: true,
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            state: Some(PendingStateKind::BlockedByJoinSet),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            state: Some(PendingStateKind::Finished),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            top_level_only: true,
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            parent: Some(parent.clone()),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            parent: Some(kids[0].clone()),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            parent: Some(execution_id(29)),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            created_after: Some(at(4)),
            created_before: Some(at(11)),
            ..ListExecutionsFilter::default()
        },
        ListExecutionsFilter {
            id_prefix: Some(kids[1].as_str().to_owned()),
            ..ListExecutionsFilter::default()
        },
        pending_later.clone(),
        ListExecutionsFilter {
            ffqn: Some(work.clone()),
            ..pending_later.clone()
        },
        ListExecutionsFilter {
            id_prefix: Some(parent.as_str().to_owned()),
            state: Some(PendingStateKind::PendingAt),
            ffqn: Some(other.clone()),
            created_after: Some(at(104)),
            ..ListExecutionsFilter::default()
        },
    ];
    for filter in filters {
        let expected: Vec<_> = (everything.iter())
            .filter(|s| filter.matches(&s.execution_id, &s.ffqn, &s.pending_state, s.created_at))
            .cloned()
            .collect();
        for length in [1, 4, 100] {
            assert_eq!(
                all_pages(db, &filter, length).await,
                expected,
                "{filter:?}, pages of {length}"
            );
        }
    }
    // The filters the scenario relies on did let rows through.
    let children = ListExecutionsFilter {
        parent: Some(parent.clone()),
        ..ListExecutionsFilter::default()
    };
    assert_eq!(
        all_pages(db, &children, 5).await.len(),
        12,
        "only the children, not the grandchild"
    );
    let locked_now = ListExecutionsFilter {
        state: Some(PendingStateKind::Locked),
        ..ListExecutionsFilter::default()
    };
    assert_eq!(
        all_pages(db, &locked_now, 2).await.len(),
        4 + 1,
        "four leases and the kid's"
    );
    let due_later = all_pages(db, &pending_later, 3).await;
    let pending = ListExecutionsFilter {
        state: Some(PendingStateKind::PendingAt),
        ..ListExecutionsFilter::default()
    };
    let pending = all_pages(db, &pending, 1_000).await.len();
    assert!(
        !due_later.is_empty() && due_later.len() < pending,
        "due from a time on: {} of {pending} pending",
        due_later.len()
    );
}

/// S23: `list_events` reads a log in pages, from a version on and at most a limit at a time,
/// in version order; past the end it answers nothing, and for an unknown execution
/// `NotFound`. `created_events` answers the `Created` events of several executions in the
/// order asked (a repeated id repeated), and `NotFound` when one of them is not stored.
pub async fn s23_events_in_pages<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let start = chrono::DateTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let id = execution_id(1);
    db.create(create_request(id.clone(), ffqn("work"), start))
        .await
        .unwrap();
    let (_, mut version) = lock(
        db,
        start,
        &id,
        run_id(1),
        Version(1),
        executor_id(1),
        plus(start, LEASE),
    )
    .await
    .unwrap();
    for n in 0..6 {
        version = append(db, &id, version, start, persist(n)).await.unwrap();
    }
    let log = db.get(&id).await.unwrap().events;
    assert_eq!(log.len(), 8);
    let mut paged = Vec::new();
    while paged.len() < log.len() {
        let from = Version(u32::try_from(paged.len()).unwrap());
        let page = db.list_events(&id, from, 3).await.unwrap();
        assert!(!page.is_empty() && page.len() <= 3, "{page:?}");
        paged.extend(page);
    }
    assert_eq!(paged, log);
    assert!(db.list_events(&id, Version(8), 3).await.unwrap().is_empty());
    assert_eq!(db.list_events(&id, Version(2), 0).await.unwrap(), []);
    expect_kind(
        db.list_events(&execution_id(99), Version(0), 3).await,
        DbErrorKind::NotFound,
    );
    let others: Vec<_> = (2..=4).map(execution_id).collect();
    for (n, other) in others.iter().enumerate() {
        let at = plus(start, Duration::from_secs(u64::try_from(n).unwrap()));
        db.create(create_request(other.clone(), ffqn("other"), at))
            .await
            .unwrap();
    }
    let asked = [
        others[2].clone(),
        id.clone(),
        others[0].clone(),
        others[2].clone(),
    ];
    let created = db.created_events(&asked).await.unwrap();
    let mut expected = Vec::new();
    for asked in &asked {
        expected.push(db.get_execution_event(asked, Version(0)).await.unwrap());
    }
    assert_eq!(created, expected);
    assert!(db.created_events(&[]).await.unwrap().is_empty());
    expect_kind(
        db.created_events(&[id.clone(), execution_id(99)]).await,
        DbErrorKind::NotFound,
    );
}

/// S25: `due_backlog` counts the executions of one function due and not locked, up to its
/// limit (saying when more are due), and names when the oldest was due: executions due later,
/// locked or of another function are not counted.
pub async fn s25_due_backlog<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let start = concepts::ClockFn::now(&test_utils::SimClock::epoch());
    let second = |n: u64| plus(start, Duration::from_secs(n));
    let (backlog, other) = (ffqn("backlog"), ffqn("other"));
    // Due at 3s, 1s, 2s (created in that order) and at 100s; one of another function at 0s.
    for (n, due_at) in [(1, 3), (2, 1), (3, 2), (4, 100)] {
        let mut req = create_request(execution_id(n), backlog.clone(), start);
        req.scheduled_at = second(due_at);
        db.create(req).await.expect("create");
    }
    db.create(create_request(execution_id(5), other.clone(), start))
        .await
        .expect("create");
    let at = second(10);
    let backlog_at = async |at, limit| db.due_backlog(&backlog, at, limit).await.expect("read");
    let expected = |due, more, oldest: Option<u64>| DueBacklog {
        due,
        more,
        oldest_due_at: oldest.map(second),
    };
    assert_eq!(backlog_at(at, 10).await, expected(3, false, Some(1)));
    assert_eq!(
        backlog_at(at, 3).await,
        expected(3, false, Some(1)),
        "exactly the limit"
    );
    assert_eq!(
        backlog_at(at, 2).await,
        expected(2, true, Some(1)),
        "more than the limit"
    );
    assert_eq!(
        backlog_at(second(1), 10).await,
        expected(1, false, Some(1)),
        "due at is inclusive"
    );
    assert_eq!(backlog_at(at, 0).await, expected(0, true, Some(1)));
    // The oldest is locked: it is not due any more.
    let locked = lock_pending_now(db, &ffqns_of(&backlog), 1, at, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked), [execution_id(2)]);
    assert_eq!(backlog_at(at, 10).await, expected(2, false, Some(2)));
    assert_eq!(
        db.due_backlog(&other, at, 10).await.expect("read"),
        DueBacklog {
            due: 1,
            more: false,
            oldest_due_at: Some(start)
        }
    );
    let none = db.due_backlog(&ffqn("none"), at, 10).await.expect("read");
    assert_eq!(none, DueBacklog::default(), "a function without executions");
    assert_eq!(
        backlog_at(second(1), 10).await,
        expected(0, false, None),
        "before the next"
    );
}
