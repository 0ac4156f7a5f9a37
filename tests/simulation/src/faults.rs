//! The faults the simulation injects, the hook of the store wrapper that injects those of the
//! store (`test_utils::forwarding`), and the record of every acknowledged write.

use crate::rng::Rng;
use concepts::{DbError, ExecutionEventInner, ExecutionId, JoinSetResponseEvent, Version};
use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};
use test_utils::forwarding::{Fault, Wait, WaitFault, Write, WriteHook};

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
    /// An executor process killed: its loop and its runs dropped at their current await point.
    ExecutorKilled,
    /// The clock jumping forward by one to three lease lengths.
    ClockJump,
}

impl FaultKind {
    /// Every kind, in the order of the figures.
    pub const ALL: [Self; 9] = [
        Self::WriteRefused,
        Self::AmbiguousCommit,
        Self::LostNotification,
        Self::LateNotification,
        Self::WorkerPanic,
        Self::WorkerHang,
        Self::WorkerLate,
        Self::ExecutorKilled,
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
            Self::ExecutorKilled => "executor-killed",
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

/// What the faults of one run share: whether they are on, their generator, their counts, the
/// acknowledged writes and the step counter that late notifications wait for.
pub struct Chaos {
    state: Mutex<ChaosState>,
    step: Arc<AtomicU64>,
}

struct ChaosState {
    /// One generator per kind, so that a kind turned off leaves the draws of the others as
    /// they were (which is what lets a failing run shrink).
    rngs: [Rng; FaultKind::ALL.len()],
    enabled: FaultSet,
    active: bool,
    injected: [u64; FaultKind::ALL.len()],
    acks: Vec<Ack>,
    /// The faults of the store, described for the schedule, when it is recorded.
    notes: Option<Vec<String>>,
}

/// How likely each fault is, per decision, in per mille.
const WRITE_REFUSED: u64 = 30;
const AMBIGUOUS_COMMIT: u64 = 30;
const LOST_NOTIFICATION: u64 = 100;
const LATE_NOTIFICATION: u64 = 150;

impl Chaos {
    /// The faults of `enabled`, drawn from streams of `seed`; active until [`Chaos::calm`].
    #[must_use]
    pub fn new(seed: u64, enabled: FaultSet, record: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(ChaosState {
                rngs: FaultKind::ALL.map(|kind| Rng::new(seed, 100 + kind as u64)),
                enabled,
                active: true,
                injected: [0; FaultKind::ALL.len()],
                acks: Vec::new(),
                notes: record.then(Vec::new),
            }),
            step: Arc::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ChaosState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops injecting faults.
    pub fn calm(&self) {
        self.lock().active = false;
    }

    /// Draws whether to inject `kind` now (with a probability of `per_mille`), and counts it.
    pub fn inject(&self, kind: FaultKind, per_mille: u64) -> bool {
        let mut state = self.lock();
        if !state.active || !state.enabled.contains(kind) {
            return false;
        }
        let hit = state.rngs[kind as usize].chance(per_mille);
        if hit {
            state.injected[kind as usize] += 1;
        }
        hit
    }

    /// A number in `0..n` from the generator of `kind`.
    pub fn below(&self, kind: FaultKind, n: u64) -> u64 {
        self.lock().rngs[kind as usize].below(n)
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

    /// The writes acknowledged so far.
    #[must_use]
    pub fn acks(&self) -> Vec<Ack> {
        self.lock().acks.clone()
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

    /// The harness moved on to step `step`.
    pub fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }
}

/// The hook of the simulation's `ForwardingDb`.
pub struct SimHook(pub Arc<Chaos>);

impl WriteHook for SimHook {
    fn decide(&self, write: &Write<'_>) -> Fault {
        if self.0.inject(FaultKind::WriteRefused, WRITE_REFUSED) {
            self.0
                .note(|| format!("FAULT {} refused before it committed", describe(write)));
            Fault::Refuse(DbError::Connection(
                "simulated: the write was refused before it committed".into(),
            ))
        } else if self.0.inject(FaultKind::AmbiguousCommit, AMBIGUOUS_COMMIT) {
            self.0
                .note(|| format!("FAULT {} committed, its reply lost", describe(write)));
            Fault::LoseReply(DbError::Connection(
                "simulated: the write committed, its reply was lost".into(),
            ))
        } else {
            Fault::Pass
        }
    }

    fn acknowledged(&self, write: &Write<'_>) {
        let acks = match *write {
            Write::Create(req) => vec![Ack::Created(req.execution_id.clone())],
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

    fn wait(&self, wait: &Wait<'_>) -> WaitFault {
        let what = || match wait {
            Wait::Responses { execution_id } => format!("the responses of {execution_id}"),
            _ => "pending executions".to_string(),
        };
        if self
            .0
            .inject(FaultKind::LostNotification, LOST_NOTIFICATION)
        {
            self.0
                .note(|| format!("FAULT the wake-up of a wait for {} lost", what()));
            WaitFault::Lose
        } else if self
            .0
            .inject(FaultKind::LateNotification, LATE_NOTIFICATION)
        {
            let late = 1 + self.0.below(FaultKind::LateNotification, 20);
            self.0.note(|| {
                format!(
                    "FAULT the wake-up of a wait for {} {late} steps late",
                    what()
                )
            });
            let until = self.0.step.load(Ordering::Relaxed) + late;
            WaitFault::Late(Box::pin(UntilStep {
                step: self.0.step.clone(),
                until,
            }))
        } else {
            WaitFault::Pass
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
        Write::CreateBatch(reqs) => format!("create_batch of {}", reqs.len()),
        Write::AppendBatch(req) => format!("append_batch to {}", req.execution_id),
        Write::Outcome(write) => {
            format!("{} of {}", write.event.variant_name(), write.execution_id)
        }
        Write::Response { execution_id, .. } => format!("response to {execution_id}"),
        Write::LockPending(_) => "lock_pending".to_string(),
        _ => "a write".to_string(),
    }
}
