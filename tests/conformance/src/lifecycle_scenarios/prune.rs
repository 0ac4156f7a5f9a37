//! L15..L17: retention (`docs/SEMANTICS.md` §13): `prune` deletes top-level executions that
//! finished before a time with their whole trees, only trees whose every member finished, each
//! all or nothing, at most `limit` candidates a call, continuing from its cursor.

use super::{Fixture, ok};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{
        batch_creating, child_execution_request, child_request, delay_finished, delay_id,
        expect_kind, expect_validation, ffqn, join_next, join_set, join_set_create, ms, plus,
    },
};
use chrono::{DateTime, Utc};
use concepts::{
    CancelRequest, DbClientExt, DbErrorKind, ExecutionId, ListExecutionsFilter, PendingState,
    PruneOutcome, PruneRequest, ValidationError, Version,
};
use std::time::Duration;

impl Fixture {
    /// `prune` of up to `limit` trees finished before `finished_before`, after `after`.
    async fn prune(
        &self,
        finished_before: DateTime<Utc>,
        limit: usize,
        after: Option<(DateTime<Utc>, ExecutionId)>,
    ) -> PruneOutcome {
        self.db
            .prune(PruneRequest {
                finished_before,
                limit,
                after,
            })
            .await
            .expect("prune")
    }

    /// A finished tree of four: `root` (id `n`) awaited `mid` and `leaf`, `mid` awaited
    /// `grandkid` and a delay that fired; all finished now. Returns every member.
    async fn finished_tree(&self, n: u128) -> Vec<ExecutionId> {
        let root = self.top(n, "root").await;
        let kids = self
            .await_children(
                &root,
                &join_set("n:kids"),
                &[ffqn("mid"), ffqn("leaf")],
                None,
            )
            .await;
        let js = join_set("n:grandkids");
        let delay = (delay_id(n), self.now());
        let grandkid = self
            .await_children(&kids[0], &js, &[ffqn("leaf")], Some(delay))
            .await
            .remove(0);
        self.db
            .append_response(self.now(), &kids[0], delay_finished(&js, delay_id(n)))
            .await
            .expect("the delay fires");
        for id in [&grandkid, &kids[0], &kids[1], &root] {
            self.finish(id, ok(serde_json::json!(id.to_string()))).await;
        }
        vec![root, kids[0].clone(), kids[1].clone(), grandkid]
    }

    /// A top-level execution (id `n`) that finished now, leaving its child unfinished;
    /// returns both.
    async fn finished_root_with_unfinished_child(&self, n: u128) -> (ExecutionId, ExecutionId) {
        let root = self.top(n, "root").await;
        let child = self
            .await_children(&root, &join_set("n:kids"), &[ffqn("leaf")], None)
            .await
            .remove(0);
        self.finish(&root, ok(serde_json::json!("gave up waiting")))
            .await;
        (root, child)
    }

    /// The ids `list_executions` lists (all of them), sorted.
    async fn listed(&self) -> Vec<ExecutionId> {
        let mut ids: Vec<ExecutionId> = self
            .db
            .list_all_executions(ListExecutionsFilter::default())
            .await
            .expect("list")
            .into_iter()
            .map(|summary| summary.execution_id)
            .collect();
        ids.sort();
        ids
    }
}

/// L15: `prune` deletes the trees of top-level executions that finished strictly before the
/// given time, whole (descendants, logs, responses, delays), and only when every member
/// finished: a finished root with an unfinished child is kept (and counted), an unfinished
/// root and a root that finished at the limit are not candidates. Once the last member
/// finishes, the kept tree goes too.
pub async fn l15_prune_deletes_finished_trees_only<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let tree = f.finished_tree(1).await;
    let (kept_root, kept_child) = f.finished_root_with_unfinished_child(2).await;
    let unfinished = f.top(3, "root").await;
    f.clock.move_time_forward(ms(100)).await;
    let finished_before = f.now();
    let at_the_limit = f.top(4, "root").await;
    f.finish(&at_the_limit, ok(serde_json::json!("late"))).await;
    let survivors = [
        kept_root.clone(),
        kept_child.clone(),
        unfinished.clone(),
        at_the_limit.clone(),
    ];
    let before = f.logs(&survivors).await;

    assert_eq!(
        f.prune(finished_before, 10, None).await,
        PruneOutcome {
            trees: 1,
            executions: 4,
            kept: 1,
            next: None
        }
    );
    for id in &tree {
        expect_kind(f.db.get(id).await, DbErrorKind::NotFound);
    }
    assert_eq!(f.logs(&survivors).await, before, "the others are untouched");
    let mut expected = survivors.to_vec();
    expected.sort();
    assert_eq!(f.listed().await, expected);

    f.finish(&kept_child, ok(serde_json::json!("at last")))
        .await;
    assert_eq!(
        f.prune(finished_before, 10, None).await,
        PruneOutcome {
            trees: 1,
            executions: 2,
            kept: 0,
            next: None
        }
    );
    expect_kind(f.db.get(&kept_root).await, DbErrorKind::NotFound);
    expect_kind(f.db.get(&kept_child).await, DbErrorKind::NotFound);
    assert_eq!(
        f.prune(finished_before, 10, None).await,
        PruneOutcome::default(),
        "nothing is left to prune"
    );
    let mut expected = vec![unfinished, at_the_limit];
    expected.sort();
    assert_eq!(f.listed().await, expected);
}

/// L16: nothing of a pruned tree is readable or answers afterwards: `get`, `get_execution_event`,
/// `cancel` and `complete` are `NotFound`, `list_executions` lists none of it, no timer of it
/// expires; the same ids created again start from nothing (no event, response or join-set
/// counter of the old tree is left).
pub async fn l16_pruned_trees_are_gone<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let tree = f.finished_tree(1).await;
    f.clock.move_time_forward(ms(10)).await;
    let pruned = f.prune(f.now(), 10, None).await;
    assert_eq!((pruned.trees, pruned.executions), (1, 4));

    for id in &tree {
        expect_kind(f.db.get(id).await, DbErrorKind::NotFound);
        expect_kind(
            f.db.get_execution_event(id, Version(0)).await,
            DbErrorKind::NotFound,
        );
        let cancel = CancelRequest {
            execution_id: id.clone(),
            now: f.now(),
            reason: "gone".to_owned(),
        };
        expect_kind(f.db.cancel(cancel).await, DbErrorKind::NotFound);
        let complete = concepts::CompleteRequest {
            execution_id: id.clone(),
            now: f.now(),
            value: concepts::SupportedFunctionReturnValue::None,
        };
        expect_kind(f.db.complete(complete).await, DbErrorKind::NotFound);
    }
    assert!(f.listed().await.is_empty());
    let far = plus(f.now(), Duration::from_secs(3_600));
    assert!(
        f.db.get_expired_timers(far)
            .await
            .expect("timers")
            .is_empty()
    );

    // The root and its first child again, under the same ids: a fresh log, a fresh join set.
    let root = f.top(1, "root").await;
    assert_eq!(root, tree[0]);
    let log = f.log(&root).await;
    assert_eq!((log.events.len(), log.responses.len()), (1, 0));
    let j = join_set("n:kids");
    let now = f.now();
    let mid = child_request(&root, &j, 1, ffqn("mid"), now);
    assert_eq!(mid.execution_id, tree[1]);
    let events = vec![
        join_set_create(&j),
        child_execution_request(&j, &mid.execution_id),
        join_next(&j, now),
    ];
    f.db.append_batch(batch_creating(&root, Version(1), now, events, vec![mid]))
        .await
        .expect("the same child id again");
    assert!(
        matches!(
            f.log(&root).await.pending_state,
            PendingState::BlockedByJoinSet { .. }
        ),
        "no response of the pruned tree is counted"
    );
    let mid_log = f.log(&tree[1]).await;
    assert_eq!((mid_log.events.len(), mid_log.responses.len()), (1, 0));
}

/// L17: `prune` examines at most `limit` candidates in `(finished_at, id)` order; `next` is
/// the cursor past the last one examined while `limit` were found (`None` once fewer were),
/// so calls that follow it get past kept trees; without the cursor a kept tree is examined
/// again. A `limit` of 0 is refused.
pub async fn l17_prune_limit_and_cursor<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut roots = Vec::new();
    let mut finished_at = Vec::new();
    let mut unfinished_children = Vec::new();
    for n in 1..=5u128 {
        f.clock.move_time_forward(ms(1)).await;
        if n % 2 == 0 {
            let (root, child) = f.finished_root_with_unfinished_child(n).await;
            roots.push(root);
            unfinished_children.push(child);
        } else {
            let root = f.top(n, "root").await;
            f.finish(&root, ok(serde_json::json!(n))).await;
            roots.push(root);
        }
        finished_at.push(f.now());
    }
    f.clock.move_time_forward(ms(1)).await;
    let before = f.now();

    let refused = expect_validation(
        f.db.prune(PruneRequest {
            finished_before: before,
            limit: 0,
            after: None,
        })
        .await,
    );
    assert!(matches!(refused, ValidationError::InvalidRequest(_)));

    let cursor = |i: usize| Some((finished_at[i], roots[i].clone()));
    let first = f.prune(before, 2, None).await;
    assert_eq!(
        first,
        PruneOutcome {
            trees: 1,
            executions: 1,
            kept: 1,
            next: cursor(1)
        }
    );
    let second = f.prune(before, 2, first.next).await;
    assert_eq!(
        second,
        PruneOutcome {
            trees: 1,
            executions: 1,
            kept: 1,
            next: cursor(3)
        }
    );
    let third = f.prune(before, 2, second.next).await;
    assert_eq!(
        third,
        PruneOutcome {
            trees: 1,
            executions: 1,
            kept: 0,
            next: None
        }
    );

    // From the start again, one at a time: only the kept trees are left to examine.
    let again = f.prune(before, 1, None).await;
    assert_eq!(
        again,
        PruneOutcome {
            trees: 0,
            executions: 0,
            kept: 1,
            next: cursor(1)
        }
    );
    assert_eq!(
        f.prune(before, 1, None).await,
        again,
        "without the cursor the same kept tree is examined again"
    );
    let past = f.prune(before, 1, again.next).await;
    assert_eq!((past.kept, &past.next), (1, &cursor(3)));
    assert_eq!(f.prune(before, 1, past.next).await, PruneOutcome::default());

    let mut expected: Vec<ExecutionId> = [1, 3]
        .iter()
        .flat_map(|&i| [roots[i].clone(), unfinished_children[i / 2].clone()])
        .collect();
    expected.sort();
    assert_eq!(f.listed().await, expected);
    for child in &unfinished_children {
        f.finish(child, ok(serde_json::json!("done"))).await;
    }
    assert_eq!(
        f.prune(before, 10, None).await,
        PruneOutcome {
            trees: 2,
            executions: 4,
            kept: 0,
            next: None
        }
    );
    assert!(f.listed().await.is_empty());
}
