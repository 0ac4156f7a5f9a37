//! The faults the simulation injects, drawn from the seed or read from a tape, the hook of the
//! store wrapper that injects those of the store (`test_utils::forwarding`), and the record of
//! every acknowledged write.

use crate::{
    rng::Rng,
    tape::{Behaviour, Decision, WaitFault, WriteFault},
};
use chrono::{DateTime, Utc};
use concepts::{DbError, ExecutionEventInner, ExecutionId, JoinSetResponseEvent, Version};
use std::{
    collections::BTreeSet,
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};
use test_utils::forwarding::{Fault, Wait, WaitFault as WaitOutcome, Write, WriteHook};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A write refused before it reached the store (nothing committed; `Connection` error).
    WriteRefused,
    /// A write that committed and then reported `Connection` to its caller.
    AmbiguousCommit,
    /// A wait whose wake-up is lost: it returns only at its own timeout.
    LostNotification,
    /// A wait whose wake-up comes some steps late.
    LateNotification,
    /// A worker that panics.
    WorkerPanic,
    /// A worker that hangs well past its lease (one to three lease lengths), then returns.
    WorkerHang,
    /// A worker that returns just after its lease expired.
    WorkerLate,
    /// A node killed: its executors, their runs, its watcher and its pruner dropped at their
    /// current await point.
    NodeKilled,
    /// A node's timers watcher (with its scheduler pass) killed alone.
    WatcherKilled,
    /// A node's pruner killed alone, possibly between two batches of a pass.
    PrunerKilled,
    /// The clock jumping forward by one to three lease lengths.
    ClockJump,
}

impl FaultKind {
    /// Every kind, in the order of the figures.
    pub const ALL: [Self; 11] = [
        Self::WriteRefused,
        Self::AmbiguousCommit,
        Self::LostNotification,
        Self::LateNotification,
        Self::WorkerPanic,
        Self::WorkerHang,
        Self::WorkerLate,
        Self::NodeKilled,
        Self::WatcherKilled,
        Self::PrunerKilled,
        Self::ClockJump,
    ];

    /// Its name on the command line and in the figures.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::WriteRefused => "write-refused",
            Self::AmbiguousCommit => "ambiguous-commit",
            Self::LostNotification => "lost-notification",
            Self::LateNotification => "late-notification",
            Self::WorkerPanic => "worker-panic",
            Self::WorkerHang => "worker-hang",
            Self::WorkerLate => "worker-late",
            Self::NodeKilled => "node-killed",
            Self::WatcherKilled => "watcher-killed",
            Self::PrunerKilled => "pruner-killed",
            Self::ClockJump => "clock-jump",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of fault kinds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FaultSet(u16);

impl FaultSet {
    /// Every kind.
    pub const ALL: Self = Self((1 << FaultKind::ALL.len()) - 1);
    /// No fault.
    pub const NONE: Self = Self(0);

    /// True when `kind` is in the set.
    #[must_use]
    pub fn contains(self, kind: FaultKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The set without `kind`.
    #[must_use]
    pub fn without(self, kind: FaultKind) -> Self {
        Self(self.0 & !kind.bit())
    }

    /// The kinds in the set.
    pub fn kinds(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(move |kind| self.contains(*kind))
    }

    /// Parses a comma-separated list of kind names (`all` and `none` too).
    ///
    /// # Errors
    /// A name that is no fault kind.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "all" => return Ok(Self::ALL),
            "none" | "" => return Ok(Self::NONE),
            _ => {}
        }
        text.split(',').try_fold(Self::NONE, |set, name| {
            FaultKind::ALL
                .into_iter()
                .find(|kind| kind.name() == name.trim())
                .map(|kind| Self(set.0 | kind.bit()))
                .ok_or_else(|| {
                    let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                    format!(
                        "unknown fault `{name}`; the faults are {}",
                        names.join(", ")
                    )
                })
        })
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::ALL {
            return f.write_str("all");
        }
        let names: Vec<_> = self.kinds().map(FaultKind::name).collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

impl fmt::Debug for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A write whose caller got a successful reply; it must be in the store from then on.
#[derive(Debug, Clone)]
pub enum Ack {
    /// An execution was created (alone, in a batch, or as a child of an append).
    Created(ExecutionId),
    /// Events appended from `version` on.
    Appended {
        /// The execution.
        execution_id: ExecutionId,
        /// The version of the first event.
        version: Version,
        /// The events.
        events: Vec<ExecutionEventInner>,
    },
    /// A response stored for `execution_id`.
    Response {
        /// The receiver.
        execution_id: ExecutionId,
        /// The response.
        response: JoinSetResponseEvent,
    },
}

impl Ack {
    /// The execution the write went to.
    #[must_use]
    pub fn execution_id(&self) -> &ExecutionId {
        match self {
            Self::Created(execution_id)
            | Self::Appended { execution_id, .. }
            | Self::Response { execution_id, .. } => execution_id,
        }
    }
}

/// What the faults of one run share: whether they are on, where their choices come from (drawn
/// from the seed, or read from a tape), their counts, the acknowledged writes and the step
/// counter that late notifications wait for.
pub struct Chaos {
    state: Mutex<ChaosState>,
    step: Arc<AtomicU64>,
}

/// The classes of decisions, each numbered within a step.
#[derive(Clone, Copy)]
enum Class {
    Write = 0,
    Wait = 1,
    Worker = 2,
}

struct ChaosState {
    /// One generator per kind, so that a kind turned off leaves the draws of the others as
    /// they were.
    rngs: [Rng; FaultKind::ALL.len()],
    /// The ordinary behaviours of activity runs during the faulty steps.
    plain: Rng,
    /// The behaviours of activity runs once faults stop (the same whether the faulty steps
    /// were drawn or replayed).
    calm: Rng,
    enabled: FaultSet,
    active: bool,
    injected: [u64; FaultKind::ALL.len()],
    acks: Vec<Ack>,
    /// The `now` of every `fire_schedules` write acknowledged, in order.
    passes: Vec<DateTime<Utc>>,
    /// The faults of the store, described for the schedule, when it is recorded.
    notes: Option<Vec<String>>,
    /// Replaying a tape: the decisions of the current step; drawing: `None`.
    script: Option<Vec<Decision>>,
    /// The decisions of the current step taken so far (drawn, or read and used).
    taken: Vec<Decision>,
    /// How many decisions of each class the current step took.
    ordinals: [u32; 3],
}

/// How likely each fault is, per decision, in per mille.
const WRITE_REFUSED: u64 = 30;
const AMBIGUOUS_COMMIT: u64 = 30;
const LOST_NOTIFICATION: u64 = 100;
const LATE_NOTIFICATION: u64 = 150;
const WORKER_PANIC: u64 = 40;
const WORKER_HANG: u64 = 40;
const WORKER_LATE: u64 = 40;
/// How likely an ordinary activity run fails, in per mille.
const WORKER_FAILS: u64 = 50;

impl ChaosState {
    /// Draws whether to inject `kind` now (with a probability of `per_mille`), and counts it.
    fn draw(&mut self, kind: FaultKind, per_mille: u64) -> bool {
        if !self.enabled.contains(kind) {
            return false;
        }
        let hit = self.rngs[kind as usize].chance(per_mille);
        if hit {
            self.injected[kind as usize] += 1;
        }
        hit
    }

    /// The next decision of `class` in this step: its ordinal, and what the tape says of it
    /// when replaying (`Some(None)`: nothing).
    fn next(&mut self, class: Class) -> (u32, Option<Option<Decision>>) {
        let ordinal = self.ordinals[class as usize];
        self.ordinals[class as usize] += 1;
        let scripted = self.script.as_ref().map(|script| {
            script.iter().copied().find(|decision| {
                matches!(
                    (class, decision),
                    (Class::Write, Decision::Write { ordinal: o, .. })
                        | (Class::Wait, Decision::Wait { ordinal: o, .. })
                        | (Class::Worker, Decision::Worker { ordinal: o, .. })
                    if *o == ordinal
                )
            })
        });
        (ordinal, scripted)
    }

    /// Takes `decision`: counts its fault and keeps it for the step's record.
    fn take(&mut self, decision: Decision) {
        if self.script.is_some()
            && let Some(kind) = decision.fault()
        {
            self.injected[kind as usize] += 1;
        }
        self.taken.push(decision);
    }
}

impl Chaos {
    /// The faults of `enabled`, drawn from streams of `seed`; active until [`Chaos::calm`].
    #[must_use]
    pub fn new(seed: u64, enabled: FaultSet, record: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ChaosState {
                rngs: FaultKind::ALL.map(|kind| Rng::new(seed, 100 + kind as u64)),
                plain: Rng::new(seed, 3),
                calm: Rng::new(seed, 4),
                enabled,
                active: true,
                injected: [0; FaultKind::ALL.len()],
                acks: Vec::new(),
                passes: Vec::new(),
                notes: record.then(Vec::new),
                script: None,
                taken: Vec::new(),
                ordinals: [0; 3],
            }),
            step: Arc::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ChaosState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops injecting faults.
    pub fn calm(&self) {
        let mut state = self.lock();
        state.active = false;
        state.script = None;
    }

    /// The harness moved on to step `step`; `script` holds its decisions when a tape is
    /// replayed (`None`: they are drawn).
    pub fn begin_step(&self, step: u64, script: Option<Vec<Decision>>) {
        self.step.store(step, Ordering::Relaxed);
        let mut state = self.lock();
        state.script = script;
        state.taken.clear();
        state.ordinals = [0; 3];
    }

    /// The decisions the current step took.
    pub fn end_step(&self) -> Vec<Decision> {
        std::mem::take(&mut self.lock().taken)
    }

    /// The fault of the write that is on its way now, if any.
    fn write_fault(&self) -> Option<WriteFault> {
        let mut state = self.lock();
        if !state.active {
            return None;
        }
        let (ordinal, scripted) = state.next(Class::Write);
        let fault = match scripted {
            Some(Some(Decision::Write { fault, .. })) => Some(fault),
            Some(_) => None,
            None if state.draw(FaultKind::WriteRefused, WRITE_REFUSED) => Some(WriteFault::Refused),
            None if state.draw(FaultKind::AmbiguousCommit, AMBIGUOUS_COMMIT) => {
                Some(WriteFault::Ambiguous)
            }
            None => None,
        };
        if let Some(fault) = fault {
            state.take(Decision::Write { ordinal, fault });
        }
        fault
    }

    /// The fault of the wake-up of the wait that starts now, if any.
    fn wait_fault(&self) -> Option<WaitFault> {
        let mut state = self.lock();
        if !state.active {
            return None;
        }
        let (ordinal, scripted) = state.next(Class::Wait);
        let fault = match scripted {
            Some(Some(Decision::Wait { fault, .. })) => Some(fault),
            Some(_) => None,
            None if state.draw(FaultKind::LostNotification, LOST_NOTIFICATION) => {
                Some(WaitFault::Lost)
            }
            None if state.draw(FaultKind::LateNotification, LATE_NOTIFICATION) => {
                let late = 1 + state.rngs[FaultKind::LateNotification as usize].below(20);
                Some(WaitFault::Late(late))
            }
            None => None,
        };
        if let Some(fault) = fault {
            state.take(Decision::Wait { ordinal, fault });
        }
        fault
    }

    /// What the activity run that starts now does, its lease being `lease`.
    pub fn behaviour(&self, lease: Duration) -> Behaviour {
        let mut state = self.lock();
        if !state.active {
            let calm = &mut state.calm;
            return if calm.chance(WORKER_FAILS) {
                Behaviour::Fail
            } else {
                Behaviour::Return(u32::try_from(calm.below(4)).unwrap_or(0))
            };
        }
        let (ordinal, scripted) = state.next(Class::Worker);
        let behaviour = match scripted {
            Some(Some(Decision::Worker { behaviour, .. })) => behaviour,
            Some(_) => return Behaviour::PLAIN,
            None if state.draw(FaultKind::WorkerPanic, WORKER_PANIC) => Behaviour::Panic,
            None if state.draw(FaultKind::WorkerHang, WORKER_HANG) => {
                let leases = 1 + state.rngs[FaultKind::WorkerHang as usize].below(3);
                Behaviour::Hang(lease * u32::try_from(leases).unwrap_or(1))
            }
            None if state.draw(FaultKind::WorkerLate, WORKER_LATE) => {
                let millis = 1 + state.rngs[FaultKind::WorkerLate as usize].below(200);
                Behaviour::Late(Duration::from_millis(millis))
            }
            None if state.plain.chance(WORKER_FAILS) => Behaviour::Fail,
            None => Behaviour::Return(u32::try_from(state.plain.below(4)).unwrap_or(0)),
        };
        state.take(Decision::Worker { ordinal, behaviour });
        behaviour
    }

    /// How many faults of each kind were injected.
    #[must_use]
    pub fn injected(&self) -> [u64; FaultKind::ALL.len()] {
        self.lock().injected
    }

    /// Counts a fault the harness injected itself.
    pub fn count(&self, kind: FaultKind) {
        self.lock().injected[kind as usize] += 1;
    }

    /// Runs `check` on the writes acknowledged so far.
    pub fn with_acks<T>(&self, check: impl FnOnce(&[Ack]) -> T) -> T {
        check(&self.lock().acks)
    }

    /// Runs `check` on the `now` of every scheduler write acknowledged so far, in order: each
    /// handled every tick due at its `now`.
    pub fn with_passes<T>(&self, check: impl FnOnce(&[DateTime<Utc>]) -> T) -> T {
        check(&self.lock().passes)
    }

    /// Retires the acknowledged writes to executions that were pruned (their trees deleted
    /// as a whole, which the prune invariant checks): they are no longer expected in the
    /// store. Returns how many.
    pub fn retire_acks(&self, pruned: &BTreeSet<ExecutionId>) -> usize {
        let mut state = self.lock();
        let before = state.acks.len();
        state
            .acks
            .retain(|ack| !pruned.contains(ack.execution_id()));
        before - state.acks.len()
    }

    /// Notes a fault for the schedule, when it is recorded.
    fn note(&self, what: impl FnOnce() -> String) {
        if let Some(notes) = &mut self.lock().notes {
            notes.push(what());
        }
    }

    /// The notes since the last call.
    pub fn take_notes(&self) -> Vec<String> {
        self.lock()
            .notes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// The hook of the simulation's `ForwardingDb`.
pub struct SimHook(pub Arc<Chaos>);

impl WriteHook for SimHook {
    fn decide(&self, write: &Write<'_>) -> Fault {
        match self.0.write_fault() {
            Some(WriteFault::Refused) => {
                self.0
                    .note(|| format!("FAULT {} refused before it committed", describe(write)));
                Fault::Refuse(DbError::Connection(
                    "simulated: the write was refused before it committed".into(),
                ))
            }
            Some(WriteFault::Ambiguous) => {
                self.0
                    .note(|| format!("FAULT {} committed, its reply lost", describe(write)));
                Fault::LoseReply(DbError::Connection(
                    "simulated: the write committed, its reply was lost".into(),
                ))
            }
            None => Fault::Pass,
        }
    }

    fn acknowledged(&self, write: &Write<'_>) {
        let acks = match *write {
            Write::FireSchedules(req) => {
                self.0.lock().passes.push(req.now);
                return;
            }
            Write::Create(req) | Write::CreateLocked(req, _) => {
                vec![Ack::Created(req.execution_id.clone())]
            }
            Write::CreateBatch(reqs) => reqs
                .iter()
                .map(|req| Ack::Created(req.execution_id.clone()))
                .collect(),
            Write::AppendBatch(req) => std::iter::once(Ack::Appended {
                execution_id: req.execution_id.clone(),
                version: req.version,
                events: req.events.clone(),
            })
            .chain(
                req.children
                    .iter()
                    .map(|child| Ack::Created(child.execution_id.clone())),
            )
            .collect(),
            Write::Outcome(write) => vec![Ack::Appended {
                execution_id: write.execution_id.clone(),
                version: write.version,
                events: vec![write.event.clone()],
            }],
            Write::Response {
                execution_id,
                response,
                ..
            } => vec![Ack::Response {
                execution_id: execution_id.clone(),
                response: response.clone(),
            }],
            // Locks, cancels, completions and prunes: their effects are checked by the other
            // invariants (a lost lock is a lease that expires).
            _ => Vec::new(),
        };
        self.0.lock().acks.extend(acks);
    }

    fn wait(&self, wait: &Wait<'_>) -> WaitOutcome {
        let what = || match wait {
            Wait::Responses { execution_id } => format!("the responses of {execution_id}"),
            _ => "pending executions".to_string(),
        };
        match self.0.wait_fault() {
            Some(WaitFault::Lost) => {
                self.0
                    .note(|| format!("FAULT the wake-up of a wait for {} lost", what()));
                WaitOutcome::Lose
            }
            Some(WaitFault::Late(late)) => {
                self.0.note(|| {
                    format!(
                        "FAULT the wake-up of a wait for {} {late} steps late",
                        what()
                    )
                });
                let until = self.0.step.load(Ordering::Relaxed) + late;
                WaitOutcome::Late(Box::pin(UntilStep {
                    step: self.0.step.clone(),
                    until,
                }))
            }
            None => WaitOutcome::Pass,
        }
    }
}

/// Pending until the harness reaches a step (the harness polls every task itself).
struct UntilStep {
    step: Arc<AtomicU64>,
    until: u64,
}

impl Future for UntilStep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.step.load(Ordering::Relaxed) >= self.until {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// A write, in a few words, for the schedule.
fn describe(write: &Write<'_>) -> String {
    match write {
        Write::Create(req) => format!("create of {}", req.execution_id),
        Write::CreateLocked(req, _) => format!("create_locked of {}", req.execution_id),
        Write::CreateBatch(reqs) => format!("create_batch of {}", reqs.len()),
        Write::AppendBatch(req) => format!("append_batch to {}", req.execution_id),
        Write::Outcome(write) => {
            format!("{} of {}", write.event.variant_name(), write.execution_id)
        }
        Write::Response { execution_id, .. } => format!("response to {execution_id}"),
        Write::LockPending(_) => "lock_pending".to_string(),
        Write::Cancel(req) => format!("cancel of {}", req.execution_id),
        Write::Complete(req) => format!("complete of {}", req.execution_id),
        Write::Prune(_) => "prune".to_string(),
        Write::FireSchedules(_) => "fire_schedules".to_string(),
        _ => "a write".to_string(),
    }
}
