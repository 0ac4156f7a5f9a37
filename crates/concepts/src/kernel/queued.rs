//! Writes waiting in a backend's queue, their kinds erased: a backend that lets concurrent
//! writes share a transaction keeps them as [`Queued`] jobs, plans each alone or as a member of
//! a [`GroupPlanner`] group, and answers each caller with its typed reply once the
//! transaction committed (or with the error that kept it from committing).

use super::{
    group::{GroupPlanner, plan},
    keys::Keys,
    plan::WritePlan,
    snapshot::Snapshot,
    write::Write,
};
use crate::DbError;
use tokio::sync::oneshot;

/// A write in a queue, whatever its kind. Planning it again (after a refused group, a
/// refuted assumption, a retried transaction) plans the same request again.
pub trait Queued: Send {
    /// The rows it touches.
    fn keys(&self) -> &Keys;

    /// Its follow-up keys ([`Write::follow_up_keys`]).
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys>;

    /// Plans it alone on `snapshot`; its reply is kept for [`Queued::answer`].
    fn plan(&mut self, snapshot: &Snapshot) -> Result<WritePlan, DbError>;

    /// The leases its plan granted, to hand over after the commit ([`Write::granted`]).
    fn granted(&mut self) -> Vec<super::writes::LockGrant>;

    /// Plans it as the next write of `group`; false when the kernel refused it (the refusal
    /// is its answer).
    fn plan_in(&mut self, group: &mut GroupPlanner<'_>) -> bool;

    /// The transaction that holds its plan committed (or it was refused by the kernel): its
    /// caller gets its reply.
    fn answer(self: Box<Self>);

    /// It did not commit, or whether it did is unknown: its caller gets `err`.
    fn fail(self: Box<Self>, err: DbError);
}

/// Where the caller of a queued write awaits its answer.
#[derive(Debug)]
pub struct Answer<T>(oneshot::Receiver<Result<T, DbError>>);

impl<T> Answer<T> {
    /// The answer; [`DbError::Closed`] when the store dropped the write unanswered (it is
    /// closing).
    pub async fn get(self) -> Result<T, DbError> {
        self.0.await.unwrap_or(Err(DbError::Closed))
    }
}

/// `write` as a queued job (`keys` are its keys), and where its answer arrives.
#[must_use]
pub fn queue<W: Write>(write: W, keys: Keys) -> (Box<dyn Queued>, Answer<W::Reply>) {
    let (tx, rx) = oneshot::channel();
    let job = Job {
        write,
        keys,
        reply: None,
        tx,
    };
    (Box::new(job), Answer(rx))
}

struct Job<W: Write> {
    write: W,
    keys: Keys,
    reply: Option<Result<W::Reply, DbError>>,
    tx: oneshot::Sender<Result<W::Reply, DbError>>,
}

impl<W: Write> Queued for Job<W> {
    fn keys(&self) -> &Keys {
        &self.keys
    }

    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        self.write.follow_up_keys(snapshot)
    }

    fn plan(&mut self, snapshot: &Snapshot) -> Result<WritePlan, DbError> {
        let (plan, reply) = plan(snapshot, self.write.clone())?;
        self.reply = Some(Ok(reply));
        Ok(plan)
    }

    fn granted(&mut self) -> Vec<super::writes::LockGrant> {
        match &mut self.reply {
            Some(Ok(reply)) => W::granted(reply),
            _ => Vec::new(),
        }
    }

    fn plan_in(&mut self, group: &mut GroupPlanner<'_>) -> bool {
        let reply = group.plan(self.write.clone());
        let accepted = reply.is_ok();
        self.reply = Some(reply);
        accepted
    }

    fn answer(self: Box<Self>) {
        let reply = self.reply.unwrap_or_else(|| {
            Err(super::snapshot::inconsistent(format!(
                "a write was answered before it was planned: {:?}",
                self.write
            )))
        });
        // The caller may have gone away; the write stands.
        let _ = self.tx.send(reply);
    }

    fn fail(self: Box<Self>, err: DbError) {
        let _ = self.tx.send(Err(err));
    }
}
