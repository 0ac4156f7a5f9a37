//! The count of round trips a store waited for: each pipeline of statements sent and awaited
//! together counts one (statements prepared for the first time on a connection, once per
//! connection and statement, do not count). Read it with [`crate::PostgresStore::round_trips`].

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Shared by every part of a store that talks to the server.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trips(Arc<AtomicU64>);

impl Trips {
    /// One more round trip.
    pub(crate) fn one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Round trips so far.
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
