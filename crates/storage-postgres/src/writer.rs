//! Running writes: one write in one transaction ([`Writer::write`]), and the group writer
//! that lets concurrent writes of disjoint executions share one transaction and one commit.
//!
//! A write that touches named executions only (`create`, `append_batch`, `append_outcome`,
//! `append_response`, `complete`) runs at once on its caller's task when one of
//! [`Writer::groups_in_flight`] slots is free, and is otherwise queued for the group writer.
//! The writer task takes the first queued write, waits for a slot, then takes what queued
//! meanwhile, up to [`MAX_GROUP`] writes that name no execution in common, and runs them as a
//! group, taking the next group while earlier ones commit: one `BEGIN` and one load of the union of their keys (every row lock in one
//! statement, in id order), one [`kernel::plan`] per write on that snapshot, one pipeline of
//! multi-row statements with every plan's changes, `COMMIT` and one notification statement.
//! Since no two writes of a group name the same execution, each plan sees exactly the rows its
//! own load would have seen, and the kernel's checks hold as they do alone. The one exception
//! is `append_outcome`: outcomes may name executions in common with each other (the children
//! of one parent, each answering it), and two or more of them in a group are planned as one
//! `append_outcomes` is, each on the snapshot as the outcomes before it left it, so each sees
//! what it would have seen running alone after them. A write the kernel
//! refuses changes nothing and is answered with its error; the others are unaffected. When the
//! database refuses the group (a raced unique key, a deadlock, any failed statement), the
//! transaction is rolled back, nothing of it is stored, and each write runs again alone, with
//! the retries of a single write: every write stays all or nothing. When its `COMMIT` fails
//! (the connection is lost), whether it committed is unknown, and every write of the group is
//! answered with that error, as a single write would be.
//!
//! The other writes (`lock_pending`, `cancel`, `prune`, `create_batch`) read rows found by a
//! query, not named by their keys, and run alone.

use crate::{
    error::{is_transaction_retriable, map_pool_error},
    load, notify,
    persist::{self, Commit, NotCommitted},
    reads,
    trips::Trips,
};
use concepts::{
    DbError, ExecutionId, LockedExecution,
    kernel::{
        self, ExecutionRow, Keys, LockGrant, OutcomeReplies, Snapshot, WaiterHub, WritePlan,
        WriteReply, WriteRequest,
    },
};
use deadpool_postgres::{ClientWrapper, Object, Pool};
use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// At most this many writes share one transaction.
pub(crate) const MAX_GROUP: usize = 512;

/// What runs writes: the pool, the hub to wake, the retry limit, and the round-trip count.
pub(crate) struct Writer {
    pub(crate) pool: Pool,
    pub(crate) hub: Arc<WaiterHub>,
    pub(crate) max_transaction_retries: u32,
    pub(crate) trips: Trips,
}

/// A pooled connection inside a write transaction, from the `BEGIN` that goes out with the
/// first loads to its `COMMIT` or `ROLLBACK`. Dropped in between (a caller that gave up on
/// the write), it takes the connection out of the pool: closing the session ends the
/// transaction, and no open transaction is ever handed to the next caller.
struct WriteTx {
    /// `None` only once `commit` or `rollback` took it.
    client: Option<Object>,
}

impl WriteTx {
    fn client(&self) -> &ClientWrapper {
        self.client
            .as_deref()
            .expect("only `commit` and `rollback` take the connection, and they consume self")
    }

    /// Persists `plans` (after the `BEGIN` and the check of the rows they were planned on
    /// when `begin`: the write loaded nothing), commits, publishes their wake-ups and reads the
    /// histories of the leases `granted` (outside the transaction,
    /// [`reads::locked_executions`]), in one pipeline; the leases are answered with their
    /// histories, or the error of that read.
    async fn commit<'a>(
        mut self,
        trips: &Trips,
        begin: Option<&[&ExecutionRow]>,
        plans: impl Iterator<Item = &'a WritePlan> + Clone,
        granted: Vec<LockGrant>,
    ) -> Result<Result<Vec<LockedExecution>, DbError>, NotCommitted> {
        let client = self.client.take().expect("taken by nothing else");
        let (changes, deleted) = persist::changes_of(plans.clone());
        let wakeups: Vec<_> = plans
            .flat_map(|plan| plan.wakeups.iter().cloned())
            .collect();
        let payloads = notify::payloads(&wakeups);
        let commit = Commit {
            begin: begin.is_some(),
            checked: begin.unwrap_or_default(),
            changes: &changes,
            deleted: &deleted,
            payloads: &payloads,
        };
        let hand_over = async {
            if granted.is_empty() {
                Ok(Vec::new())
            } else {
                reads::locked_executions(&client, granted).await
            }
        };
        let result = persist::persist_and_commit(&client, trips, commit, hand_over).await;
        if matches!(result, Err(NotCommitted::Unknown(_))) {
            drop(Object::take(client));
        }
        result
    }

    /// Rolls back; a connection that cannot even do that leaves the pool.
    async fn rollback(mut self, trips: &Trips) {
        trips.one();
        let client = self.client.take().expect("taken by nothing else");
        if let Err(e) = client.batch_execute("ROLLBACK").await {
            tracing::debug!(error = %e, "cannot roll back; dropping the connection");
            drop(Object::take(client));
        }
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

impl Writer {
    async fn begin(&self) -> Result<WriteTx, DbError> {
        self.hub.ensure_open()?;
        Ok(WriteTx {
            client: Some(self.pool.get().await.map_err(map_pool_error)?),
        })
    }

    /// How many groups may be in flight at once: half the pool (the rest serves
    /// `lock_pending`, reads and waits), at least one, at most two. Each slot free when writes
    /// arrive takes the few queued so far as a group of its own, so the fewer the slots, the
    /// more a group holds: with eight, 10,000 no-op executions took about 360 outcome
    /// transactions, with two about 110, and ran faster. Eight were needed while the outcomes
    /// of a parent's children could not share a group (each ran one, on the parent's row
    /// lock); they share one now, and a fan-out of 10,000 children is no slower with two.
    pub(crate) fn groups_in_flight(pool_size: usize) -> usize {
        (pool_size / 2).clamp(1, 2)
    }

    /// One write alone, as [`concepts::kernel`] describes it; a deadlock or serialization
    /// failure, or a `create` that lost a race, runs it again from the load.
    pub(crate) async fn write(
        &self,
        keys: &Keys,
        request: WriteRequest,
    ) -> Result<WritePlan, DbError> {
        self.write_and_hand_over(keys, request, None)
            .await
            .map(|(plan, _)| plan)
    }

    /// [`Writer::write`], answering the leases it granted (`lock_pending`) with their
    /// histories, read in the pipeline of its `COMMIT`. A write is planned without a load
    /// first on the snapshot `known` (rows this store wrote itself, checked by
    /// [`persist`] before anything is written), or on the empty one when it
    /// [`load::assumes_nothing_stored`]; when the database finds the assumption wrong (a row
    /// changed, an id is stored), it runs again with the load, without counting a retry.
    pub(crate) async fn write_and_hand_over(
        &self,
        keys: &Keys,
        request: WriteRequest,
        known: Option<Snapshot>,
    ) -> Result<(WritePlan, Vec<LockedExecution>), DbError> {
        let mut attempt: u32 = 0;
        let mut assumed =
            known.or_else(|| load::assumes_nothing_stored(&request, keys).then(Snapshot::default));
        loop {
            match self.write_once(keys, &request, assumed.as_ref()).await {
                Err(e)
                    if assumed.is_some()
                        && (is_raced_create(&request, &e) || persist::is_stale(&e)) =>
                {
                    assumed = None;
                }
                Err(e)
                    if attempt < self.max_transaction_retries
                        && (is_transaction_retriable(&e) || is_raced_create(&request, &e)) =>
                {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "retrying a transaction");
                }
                Err(e) => return Err(e),
                Ok((plan, handed_over)) => return Ok((plan, handed_over?)),
            }
        }
    }

    /// One attempt; the hand-over's own result inside (the write committed either way).
    async fn write_once(
        &self,
        keys: &Keys,
        request: &WriteRequest,
        assumed: Option<&Snapshot>,
    ) -> Result<(WritePlan, Result<Vec<LockedExecution>, DbError>), DbError> {
        // A plan the assumed snapshot refuses is made again on what the load finds.
        let assumed = assumed.and_then(|snapshot| {
            let plan = kernel::plan(snapshot, request.clone()).ok()?;
            Some((snapshot.executions.values().collect::<Vec<_>>(), plan))
        });
        let (checked, assumed) = match assumed {
            Some((rows, plan)) => (Some(rows), Some(plan)),
            None => (None, None),
        };
        let (tx, mut plan) = if let Some(plan) = assumed {
            (self.begin().await?, plan)
        } else {
            let tx = self.begin().await?;
            let planned = async {
                let mut snapshot = load::begin_and_load(tx.client(), &self.trips, keys).await?;
                if let Some(more) = request.follow_up_keys(&snapshot) {
                    load::load_follow_up(tx.client(), &self.trips, &more, &mut snapshot).await?;
                }
                kernel::plan(&snapshot, request.clone())
            }
            .await;
            match planned {
                Ok(plan) => (tx, plan),
                Err(e) => {
                    tx.rollback(&self.trips).await;
                    return Err(e);
                }
            }
        };
        let granted = std::mem::take(&mut plan.locked);
        let committed = tx
            .commit(
                &self.trips,
                checked.as_deref(),
                std::iter::once(&plan),
                granted,
            )
            .await;
        match committed {
            Ok(handed_over) => {
                // Committed: from here on nothing turns the call into an error.
                self.hub.deliver(&plan.wakeups);
                Ok((plan, handed_over))
            }
            Err(NotCommitted::RolledBack(e) | NotCommitted::Unknown(e)) => Err(e),
        }
    }

    /// A group of writes in one transaction; `Err` when the database refused it (then
    /// nothing of it was stored, see the module docs) or its commit failed.
    async fn write_group(
        &self,
        commands: &[Command],
    ) -> Result<Vec<Result<WritePlan, DbError>>, NotCommitted> {
        let tx = self.begin().await.map_err(NotCommitted::RolledBack)?;
        let outcomes = Outcomes::of(commands);
        let keys = union(
            commands
                .iter()
                .filter(|c| !outcomes.holds(&c.request))
                .map(|c| &c.keys)
                .chain(outcomes.keys.as_ref()),
        );
        let snapshot = match load::begin_and_load(tx.client(), &self.trips, &keys).await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                tx.rollback(&self.trips).await;
                return Err(NotCommitted::RolledBack(e));
            }
        };
        let mut plans: Vec<Result<WritePlan, DbError>> = commands
            .iter()
            .map(|c| {
                if outcomes.holds(&c.request) {
                    Ok(WritePlan::default())
                } else {
                    kernel::plan(&snapshot, c.request.clone())
                }
            })
            .collect();
        let merged = outcomes
            .request
            .as_ref()
            .map(|request| kernel::plan(&snapshot, request.clone()))
            .transpose();
        let merged = match merged {
            Ok(merged) => merged,
            Err(e) => {
                // `append_outcomes` answers each write; only an empty batch is refused whole.
                tx.rollback(&self.trips).await;
                return Err(NotCommitted::RolledBack(e));
            }
        };
        tx.commit(
            &self.trips,
            None,
            plans
                .iter()
                .filter_map(|plan| plan.as_ref().ok())
                .chain(merged.as_ref()),
            Vec::new(),
        )
        .await?
        .map_err(NotCommitted::Unknown)?;
        for plan in plans.iter().flatten().chain(merged.as_ref()) {
            self.hub.deliver(&plan.wakeups);
        }
        if let Some(WritePlan {
            reply: WriteReply::Outcomes(OutcomeReplies(replies)),
            ..
        }) = merged
        {
            let answers = plans
                .iter_mut()
                .zip(commands)
                .filter(|(_, c)| outcomes.holds(&c.request));
            for ((plan, _), reply) in answers.zip(replies) {
                *plan = reply.map(|version| WritePlan {
                    reply: WriteReply::Version(version),
                    ..WritePlan::default()
                });
            }
        }
        Ok(plans)
    }
}

/// True when a `create` or `create_batch` lost a race: another transaction inserted one of its
/// ids after this one found it absent, which the unique index reported. Run again, the write
/// finds the row and the kernel answers it as the repeat (or the conflict) it is; the kernel
/// itself never reports `Execution` duplicates for these requests.
fn is_raced_create(request: &WriteRequest, err: &DbError) -> bool {
    matches!(
        request,
        WriteRequest::Create(_) | WriteRequest::CreateBatch(_)
    ) && matches!(
        err,
        DbError::Duplicate(concepts::DuplicateKind::Execution(_))
    )
}

/// True when `request` (with `keys`) may share a transaction: it reads only rows its keys
/// name, and needs no follow-up load.
pub(crate) fn groupable(request: &WriteRequest, keys: &Keys) -> bool {
    matches!(
        request,
        WriteRequest::Create(_)
            | WriteRequest::AppendBatch(_)
            | WriteRequest::Outcome(_)
            | WriteRequest::Response { .. }
            | WriteRequest::Complete(_)
    ) && keys.subtrees.is_empty()
        && keys.prune.is_none()
        && keys.due.is_none()
}

/// Every execution `keys` name, in any role.
fn named(keys: &Keys) -> impl Iterator<Item = &ExecutionId> {
    keys.executions
        .iter()
        .chain(&keys.new_executions)
        .chain(&keys.finished_results)
        .chain(&keys.open_delays)
        .chain(keys.join_sets.iter().map(|k| &k.execution_id))
        .chain(keys.delays.iter().map(|(id, _)| id))
        .chain(
            keys.child_responses
                .iter()
                .flat_map(|(id, child)| [id, child]),
        )
}

/// The keys of a group: each list the concatenation of its members' (which name disjoint
/// executions, so nothing repeats).
fn union<'a>(all: impl Iterator<Item = &'a Keys>) -> Keys {
    let mut keys = Keys::default();
    for k in all {
        keys.executions.extend(k.executions.iter().cloned());
        keys.new_executions.extend(k.new_executions.iter().cloned());
        keys.finished_results
            .extend(k.finished_results.iter().cloned());
        keys.open_delays.extend(k.open_delays.iter().cloned());
        keys.join_sets.extend(k.join_sets.iter().cloned());
        keys.delays.extend(k.delays.iter().cloned());
        keys.child_responses
            .extend(k.child_responses.iter().cloned());
    }
    keys
}

/// The outcomes of a group, when two of them name an execution in common: planned together as
/// one `append_outcomes` (see the module docs). Otherwise each write is planned alone (which
/// spares the copy of the snapshot that planning them together takes).
struct Outcomes {
    /// `WriteRequest::Outcomes` of them, in the group's order.
    request: Option<WriteRequest>,
    /// Its keys.
    keys: Option<Keys>,
}

impl Outcomes {
    fn of(commands: &[Command]) -> Self {
        let outcomes = || {
            commands
                .iter()
                .filter(|c| matches!(c.request, WriteRequest::Outcome(_)))
        };
        let mut seen = HashSet::new();
        let overlap = outcomes()
            .flat_map(|c| named(&c.keys).collect::<HashSet<_>>())
            .any(|id| !seen.insert(id));
        if !overlap {
            return Self {
                request: None,
                keys: None,
            };
        }
        let writes: Vec<_> = outcomes()
            .filter_map(|c| match &c.request {
                WriteRequest::Outcome(write) => Some(write.clone()),
                _ => None,
            })
            .collect();
        let request = WriteRequest::Outcomes(writes);
        // The keys of outcomes that were accepted alone: only an empty batch has none.
        let keys = request.keys().ok();
        Self {
            request: keys.is_some().then_some(request),
            keys,
        }
    }

    /// True when `request` is planned as one of these outcomes.
    fn holds(&self, request: &WriteRequest) -> bool {
        self.request.is_some() && matches!(request, WriteRequest::Outcome(_))
    }
}

/// A queued write and where its answer goes.
struct Command {
    request: WriteRequest,
    keys: Keys,
    reply: oneshot::Sender<Result<WritePlan, DbError>>,
}

/// The group writer's side of a store: its queue and its slots.
pub(crate) struct Groups {
    queue: mpsc::UnboundedSender<Command>,
    slots: Arc<Semaphore>,
    /// How many slots there are.
    all_slots: usize,
}

impl Groups {
    /// Starts the group writer; it stops once this is dropped and its groups are done.
    pub(crate) fn spawn(writer: Arc<Writer>, slots: usize) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let all_slots = slots.max(1);
        let slots = Arc::new(Semaphore::new(all_slots));
        tokio::spawn(run(writer, rx, Arc::clone(&slots)));
        Self {
            queue,
            slots,
            all_slots,
        }
    }

    /// True when no write of the group writer is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.slots.available_permits() == self.all_slots
    }

    /// Runs `request` at once on the caller's task when a slot is free (an idle store: no
    /// hop to another task), otherwise queues it for the next group. It is planned on the
    /// snapshot `known` ([`Writer::write_and_hand_over`]) only when no other write is in
    /// flight: under load a write that ends a round trip sooner would only make the next
    /// groups smaller.
    pub(crate) async fn write(
        &self,
        writer: &Writer,
        keys: Keys,
        request: WriteRequest,
        known: Option<Snapshot>,
    ) -> Result<WritePlan, DbError> {
        if let Ok(_slot) = self.slots.try_acquire() {
            let known = known.filter(|_| self.slots.available_permits() + 1 == self.all_slots);
            return writer
                .write_and_hand_over(&keys, request, known)
                .await
                .map(|(plan, _)| plan);
        }
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Command {
                request,
                keys,
                reply,
            })
            .map_err(|_| DbError::Closed)?;
        answer.await.map_err(|_| DbError::Closed)?
    }
}

async fn run(
    writer: Arc<Writer>,
    mut queue: mpsc::UnboundedReceiver<Command>,
    slots: Arc<Semaphore>,
) {
    let mut deferred: VecDeque<Command> = VecDeque::new();
    loop {
        // A command first, then a slot: what queues meanwhile joins the group.
        let first = match deferred.pop_front() {
            Some(command) => command,
            None => match queue.recv().await {
                Some(command) => command,
                None => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut group = Group::new(first);
        // What waited behind a conflict goes first, in its order.
        for _ in 0..deferred.len() {
            let Some(command) = deferred.pop_front() else {
                break;
            };
            if let Some(command) = group.try_add(command) {
                deferred.push_back(command);
            }
        }
        while group.commands.len() < MAX_GROUP {
            let Ok(command) = queue.try_recv() else {
                break;
            };
            if let Some(command) = group.try_add(command) {
                deferred.push_back(command);
            }
        }
        let writer = Arc::clone(&writer);
        tokio::spawn(async move {
            run_group(&writer, group.commands).await;
            drop(slot);
        });
    }
}

/// Writes that name no execution in common, but for outcomes among themselves.
struct Group {
    commands: Vec<Command>,
    /// What the writes other than outcomes name.
    named: HashSet<ExecutionId>,
    /// What the outcomes name.
    named_by_outcomes: HashSet<ExecutionId>,
}

impl Group {
    fn new(first: Command) -> Self {
        let mut group = Self {
            commands: Vec::new(),
            named: HashSet::new(),
            named_by_outcomes: HashSet::new(),
        };
        group.add(first);
        group
    }

    /// Adds `command` unless the group is full or `command` names one of its executions (an
    /// outcome: one that a write other than an outcome names); then it is handed back.
    fn try_add(&mut self, command: Command) -> Option<Command> {
        let outcome = matches!(command.request, WriteRequest::Outcome(_));
        if self.commands.len() >= MAX_GROUP
            || named(&command.keys).any(|id| {
                self.named.contains(id) || (!outcome && self.named_by_outcomes.contains(id))
            })
        {
            return Some(command);
        }
        self.add(command);
        None
    }

    fn add(&mut self, command: Command) {
        let names = if matches!(command.request, WriteRequest::Outcome(_)) {
            &mut self.named_by_outcomes
        } else {
            &mut self.named
        };
        names.extend(named(&command.keys).cloned());
        self.commands.push(command);
    }
}

/// Runs a group and answers each of its writes.
async fn run_group(writer: &Arc<Writer>, mut commands: Vec<Command>) {
    if commands.len() == 1 {
        let Command {
            request,
            keys,
            reply,
        } = commands.remove(0);
        let _ = reply.send(writer.write(&keys, request).await);
        return;
    }
    match writer.write_group(&commands).await {
        Ok(plans) => {
            for (command, plan) in commands.into_iter().zip(plans) {
                let _ = command.reply.send(plan);
            }
        }
        Err(NotCommitted::Unknown(e)) => {
            for command in commands {
                let _ = command.reply.send(Err(e.clone()));
            }
        }
        Err(NotCommitted::RolledBack(e)) => {
            tracing::debug!(error = %e, writes = commands.len(), "a group was refused; each write runs alone");
            let alone: Vec<_> = commands
                .into_iter()
                .map(|command| {
                    let writer = Arc::clone(writer);
                    tokio::spawn(async move {
                        let Command {
                            request,
                            keys,
                            reply,
                        } = command;
                        let _ = reply.send(writer.write(&keys, request).await);
                    })
                })
                .collect();
            for task in alone {
                let _ = task.await;
            }
        }
    }
}
