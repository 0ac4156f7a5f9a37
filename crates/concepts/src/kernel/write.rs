//! What a kind of write is: the [`Write`] trait that every write kind of `writes/` implements
//! (its keys, how it is planned, what it answers).

use super::{keys::Keys, plan::Planner, snapshot::Snapshot, writes::LockGrant};
use crate::DbError;
use std::fmt::Debug;

/// One kind of write. Each kind is one module of the kernel's `writes/`, and its rules live
/// there: a backend runs every kind the same way, knowing only these methods.
///
/// 1. [`Write::keys`] names the rows it touches, and checks what depends on the request
///    alone;
/// 2. the backend loads them into a [`Snapshot`] (and, when [`Write::follow_up_keys`] names
///    more, those into the same snapshot);
/// 3. [`plan`](super::plan) (or a [`GroupPlanner`](super::GroupPlanner) for several writes in
///    one transaction) stages its changes with [`Write::plan`] and returns the
///    [`WritePlan`](super::WritePlan) to persist and the typed [`Write::Reply`];
/// 4. the backend persists the plan atomically, delivers its wake-ups after the commit, and
///    answers the reply.
pub trait Write: Clone + Debug + Send + Sync + sealed::Sealed + 'static {
    /// What the caller is answered once the write committed.
    type Reply: Send + 'static;

    /// The rows this write touches. Rules that depend on the request alone are checked here,
    /// before anything is read.
    fn keys(&self) -> Result<Keys, DbError>;

    /// The rows this write touches that depend on what was loaded for [`Write::keys`]: called
    /// once, with the snapshot loaded for those keys; the backend loads what it names into the
    /// same snapshot. `None` when the first keys were all (every write but `cancel` and
    /// `prune`).
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        let _ = snapshot;
        None
    }

    /// Validates the write on the planner's snapshot and stages its changes; its reply, or the
    /// error that refuses the whole write.
    fn plan(self, planner: &mut Planner<'_>) -> Result<Self::Reply, DbError>;

    /// Whether a backend whose writes take a lock as wide as its store (SQLite's file-wide
    /// write lock, shared by every process on the file) asks [`Write::answer_from_read`]
    /// before the write: true for `create` alone.
    const ANSWERED_FROM_READ: bool = false;

    /// The reply on `snapshot`, loaded for [`Write::keys`] outside any write transaction, when
    /// that read settles it and the write would persist nothing (a repeated `create`: answered
    /// `AlreadyExisted`, or refused as a conflict); `None` when only the write can answer.
    fn answer_from_read(&self, snapshot: &Snapshot) -> Option<Result<Self::Reply, DbError>> {
        let _ = snapshot;
        None
    }

    /// The leases the write granted, taken out of its reply, for the backend to hand over
    /// with their histories after the commit ([`hand_over`](super::hand_over)); none but for
    /// `lock_pending`.
    fn granted(reply: &mut Self::Reply) -> Vec<LockGrant> {
        let _ = reply;
        Vec::new()
    }
}

pub(crate) mod sealed {
    /// Write kinds are the kernel's: see `writes/`.
    pub trait Sealed {}
}
