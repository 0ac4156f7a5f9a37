//! In-process notifications: waiters subscribe before they check, the writer thread wakes
//! them after a commit, and a subscription is removed when its waiter leaves.

use chrono::{DateTime, Utc};
use concepts::{ExecutionId, FunctionFqn};
use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex, PoisonError},
};
use tokio::sync::Notify;

/// What a committed write may have changed, for the waiters.
#[derive(Debug, Clone)]
pub(crate) enum Note {
    /// An execution of `ffqn` became pending at `at`.
    Pending {
        ffqn: FunctionFqn,
        at: DateTime<Utc>,
    },
    /// An execution received a response.
    Response(ExecutionId),
    /// An execution finished.
    Finished(ExecutionId),
}

struct Entry<F> {
    id: u64,
    filter: F,
    notify: Arc<Notify>,
}

struct Registry<K, F> {
    next_id: u64,
    map: HashMap<K, Vec<Entry<F>>>,
}

/// Waiters keyed by `K`, each with a filter value `F` the notifier may test.
pub(crate) struct Subscribers<K, F> {
    registry: Mutex<Registry<K, F>>,
}

impl<K: Eq + Hash + Clone, F> Subscribers<K, F> {
    fn new() -> Self {
        Self {
            registry: Mutex::new(Registry {
                next_id: 0,
                map: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry<K, F>> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `notify` under `key`; the entry lives as long as the returned guard.
    pub(crate) fn subscribe(
        &self,
        key: K,
        filter: F,
        notify: Arc<Notify>,
    ) -> Subscription<'_, K, F> {
        let mut registry = self.lock();
        let id = registry.next_id;
        registry.next_id = registry.next_id.wrapping_add(1);
        registry
            .map
            .entry(key.clone())
            .or_default()
            .push(Entry { id, filter, notify });
        Subscription {
            subscribers: self,
            key,
            id,
        }
    }

    /// Wakes every waiter under `key` whose filter passes.
    fn notify(&self, key: &K, pass: impl Fn(&F) -> bool) {
        let registry = self.lock();
        if let Some(entries) = registry.map.get(key) {
            for entry in entries.iter().filter(|e| pass(&e.filter)) {
                // `notify_one` keeps a permit when the waiter is not polling yet: no lost wake-up.
                entry.notify.notify_one();
            }
        }
    }

    fn unsubscribe(&self, key: &K, id: u64) {
        let mut registry = self.lock();
        if let Some(entries) = registry.map.get_mut(key) {
            entries.retain(|e| e.id != id);
            if entries.is_empty() {
                registry.map.remove(key);
            }
        }
    }

    /// The number of registered waiters (for tests: the map must not only grow).
    pub(crate) fn len(&self) -> usize {
        self.lock().map.values().map(Vec::len).sum()
    }
}

/// A registered waiter; dropping it removes the entry.
pub(crate) struct Subscription<'a, K: Eq + Hash + Clone, F> {
    subscribers: &'a Subscribers<K, F>,
    key: K,
    id: u64,
}

impl<K: Eq + Hash + Clone, F> Drop for Subscription<'_, K, F> {
    fn drop(&mut self) {
        self.subscribers.unsubscribe(&self.key, self.id);
    }
}

/// What a `wait_for_pending` caller waits for: executions due at or before its
/// `pending_at_or_sooner`, a time that moves on with the time it has waited. The caller passes
/// its present; an execution another writer makes due at that writer's later present is due
/// for the waiter too, and must wake it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Horizon {
    pending_at_or_sooner: DateTime<Utc>,
    since: tokio::time::Instant,
}

impl Horizon {
    /// A horizon starting now at `pending_at_or_sooner`.
    pub(crate) fn starting_at(pending_at_or_sooner: DateTime<Utc>) -> Self {
        Self {
            pending_at_or_sooner,
            since: tokio::time::Instant::now(),
        }
    }

    /// True when an execution due at `at` is due for this waiter by now.
    fn covers(&self, at: DateTime<Utc>) -> bool {
        at <= concepts::add_saturating(self.pending_at_or_sooner, self.since.elapsed())
    }
}

/// Every kind of waiter of one store.
pub(crate) struct Notifier {
    /// `wait_for_pending` callers, by function, with their horizon.
    pub(crate) pending: Subscribers<FunctionFqn, Horizon>,
    /// `subscribe_to_next_responses` callers, by execution.
    pub(crate) responses: Subscribers<ExecutionId, ()>,
    /// `wait_for_finished_result` callers, by execution.
    pub(crate) finished: Subscribers<ExecutionId, ()>,
}

impl Notifier {
    pub(crate) fn new() -> Self {
        Self {
            pending: Subscribers::new(),
            responses: Subscribers::new(),
            finished: Subscribers::new(),
        }
    }

    /// Wakes the waiters a committed batch concerns.
    pub(crate) fn dispatch(&self, notes: Vec<Note>) {
        // Many notes of one batch concern the same function: wake its waiters once, with the
        // earliest time.
        let mut pending: HashMap<FunctionFqn, DateTime<Utc>> = HashMap::new();
        for note in notes {
            match note {
                Note::Pending { ffqn, at } => {
                    pending
                        .entry(ffqn)
                        .and_modify(|t| *t = (*t).min(at))
                        .or_insert(at);
                }
                Note::Response(id) => self.responses.notify(&id, |()| true),
                Note::Finished(id) => self.finished.notify(&id, |()| true),
            }
        }
        for (ffqn, at) in pending {
            self.pending.notify(&ffqn, |horizon| horizon.covers(at));
        }
    }

    /// The number of registered waiters of every kind.
    pub(crate) fn waiter_count(&self) -> usize {
        self.pending.len() + self.responses.len() + self.finished.len()
    }
}
