//! The pruner against a fake store that prunes by the storage contract's rules, on a
//! simulated clock: the configuration checks, the batches of one pass and their cursor, the
//! retention of the spawned task, closing.

use super::*;
use async_trait::async_trait;
use concepts::{
    CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, CreateOutcome, CreateRequest,
    DbAwait, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, FinishedExecutionResult,
    ListExecutionsFilter, Pagination, Version,
};
use std::sync::Mutex;
use test_utils::SimClock;
use tokio::sync::mpsc;

/// A top-level execution of the fake store: when it finished, and whether its whole tree did.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tree {
    finished_at: DateTime<Utc>,
    id: ExecutionId,
    all_finished: bool,
    members: usize,
}

/// Prunes as `DbClient::prune` promises; everything else is refused. Each request is sent on
/// `requests` once answered.
struct FakeStore {
    trees: Mutex<Vec<Tree>>,
    requests: mpsc::UnboundedSender<PruneRequest>,
}

impl FakeStore {
    fn new(trees: Vec<Tree>) -> (Arc<Self>, mpsc::UnboundedReceiver<PruneRequest>) {
        let (requests, received) = mpsc::unbounded_channel();
        let store = Self {
            trees: Mutex::new(trees),
            requests,
        };
        (Arc::new(store), received)
    }

    fn left(&self) -> Vec<ExecutionId> {
        let trees = self.trees.lock().unwrap();
        trees.iter().map(|tree| tree.id.clone()).collect()
    }
}

fn refused() -> DbError {
    DbError::Closed
}

#[async_trait]
impl DbAwait for FakeStore {
    async fn wait_for_finished_result(
        &self,
        _execution_id: &ExecutionId,
        _timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        Err(refused())
    }
}

#[async_trait]
impl DbClient for FakeStore {
    async fn create(&self, _req: CreateRequest) -> Result<CreateOutcome, DbError> {
        Err(refused())
    }

    async fn create_locked(
        &self,
        _req: CreateRequest,
        _locked: concepts::Locked,
    ) -> Result<CreateOutcome, DbError> {
        Err(refused())
    }

    async fn create_batch(&self, _reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        Err(refused())
    }

    async fn cancel(&self, _req: CancelRequest) -> Result<CancelOutcome, DbError> {
        Err(refused())
    }

    async fn complete(&self, _req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        Err(refused())
    }

    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError> {
        if req.limit == 0 {
            return Err(DbError::Validation(
                concepts::ValidationError::InvalidRequest("limit 0".to_string()),
            ));
        }
        let mut trees = self.trees.lock().unwrap();
        trees.sort_by(|a, b| (a.finished_at, &a.id).cmp(&(b.finished_at, &b.id)));
        let candidates: Vec<Tree> = trees
            .iter()
            .filter(|tree| tree.finished_at < req.finished_before)
            .filter(|tree| {
                req.after
                    .as_ref()
                    .is_none_or(|(at, id)| (tree.finished_at, &tree.id) > (*at, id))
            })
            .take(req.limit)
            .cloned()
            .collect();
        let mut outcome = PruneOutcome::default();
        for candidate in &candidates {
            if candidate.all_finished {
                outcome.trees += 1;
                outcome.executions += candidate.members;
                trees.retain(|tree| tree.id != candidate.id);
            } else {
                outcome.kept += 1;
            }
        }
        if candidates.len() == req.limit {
            outcome.next = candidates
                .last()
                .map(|last| (last.finished_at, last.id.clone()));
        }
        drop(trees);
        let _ = self.requests.send(req);
        Ok(outcome)
    }

    async fn get(&self, _execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        Err(refused())
    }

    async fn get_execution_event(
        &self,
        _execution_id: &ExecutionId,
        _version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        Err(refused())
    }

    async fn list_events(
        &self,
        _execution_id: &ExecutionId,
        _from: Version,
        _limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        Err(refused())
    }

    async fn list_executions(
        &self,
        _filter: ListExecutionsFilter,
        _pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        Err(refused())
    }

    async fn due_backlog(
        &self,
        _ffqn: &concepts::FunctionFqn,
        _at: DateTime<Utc>,
        _limit: usize,
    ) -> Result<concepts::DueBacklog, DbError> {
        Err(refused())
    }
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_000_000 + secs, 0).unwrap()
}

fn tree(finished_secs: i64, all_finished: bool) -> Tree {
    let finished_at = at(finished_secs);
    Tree {
        finished_at,
        id: ExecutionId::generate_at(finished_at),
        all_finished,
        members: 3,
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn a_zero_batch_or_interval_is_refused() {
    let config = PrunerConfig {
        retention: Duration::ZERO,
        interval: Duration::from_secs(60),
        batch: 100,
    };
    assert_eq!(
        config.validate(),
        Ok(()),
        "a zero retention prunes all that finished"
    );
    let zero_batch = PrunerConfig { batch: 0, ..config };
    assert_eq!(zero_batch.validate(), Err(PrunerConfigError::ZeroBatch));
    assert!(
        zero_batch
            .validate()
            .unwrap_err()
            .to_string()
            .contains("batch is 0")
    );
    let zero_interval = PrunerConfig {
        interval: Duration::ZERO,
        ..config
    };
    assert_eq!(
        zero_interval.validate(),
        Err(PrunerConfigError::ZeroInterval)
    );
    let (db, _requests) = FakeStore::new(Vec::new());
    let spawned = Pruner::spawn_new(db, zero_batch, SimClock::epoch());
    assert_eq!(spawned.err(), Some(PrunerConfigError::ZeroBatch));
}

#[tokio::test]
async fn one_pass_deletes_in_batches_following_the_cursor_and_keeps_unfinished_trees() {
    let old: Vec<Tree> = (0..5).map(|k| tree(k, true)).collect();
    let unfinished = tree(5, false);
    let recent = tree(100, true);
    let mut trees = old.clone();
    trees.extend([unfinished.clone(), recent.clone()]);
    let (db, mut requests) = FakeStore::new(trees);
    let totals = prune_finished(db.as_ref(), at(50), 2).await.expect("prune");
    assert_eq!(
        totals,
        PruneTotals {
            trees: 5,
            executions: 15,
            kept: 1,
            batches: 4,
        }
    );
    assert_eq!(db.left(), [unfinished.id.clone(), recent.id]);
    let mut cursors = Vec::new();
    while let Ok(request) = requests.try_recv() {
        assert_eq!((request.finished_before, request.limit), (at(50), 2));
        cursors.push(request.after.map(|(_, id)| id));
    }
    assert_eq!(
        cursors,
        [
            None,
            Some(old[1].id.clone()),
            Some(old[3].id.clone()),
            Some(unfinished.id.clone())
        ],
        "each call continues after the last candidate of the one before, until one finds \
         fewer than its limit"
    );
    let refused = prune_finished(db.as_ref(), at(50), 0).await;
    assert!(refused.is_err(), "the store refuses a batch of 0");
}

#[tokio::test(start_paused = true)]
async fn the_pruner_deletes_what_is_older_than_the_retention_every_interval() {
    let clock = SimClock::new(at(0));
    let early = tree(-2 * 3600, true);
    let late = tree(-1800, true);
    let (db, mut requests) = FakeStore::new(vec![early, late.clone()]);
    let config = PrunerConfig {
        retention: HOUR,
        interval: Duration::from_secs(60),
        batch: 10,
    };
    let mut pruner = Pruner::spawn_new(db.clone(), config, clock.clone()).expect("valid");
    let first = requests.recv().await.expect("a first pass at once");
    assert_eq!(first.finished_before, at(-3600));
    assert_eq!(db.left(), [late.id], "only what finished over an hour ago");
    clock.move_time_forward(HOUR).await;
    // Passes go on every interval; the first one at the moved clock deletes the rest.
    loop {
        let request = requests.recv().await.expect("passes go on");
        if request.finished_before == at(0) {
            break;
        }
    }
    assert!(db.left().is_empty());
    pruner.close().await;
    pruner.close().await;
    assert_eq!(
        Arc::strong_count(&db),
        1,
        "closed: the task dropped its store"
    );
}
