//! The count of round trips a store waited for: what counts, [`crate::PostgresStore::round_trips`]
//! says.

use std::sync::atomic::{AtomicU64, Ordering};

/// Shared, through the store's writer, by every part of a store that talks to the server.
#[derive(Debug, Default)]
pub(crate) struct Trips(AtomicU64);

impl Trips {
    pub(crate) fn one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
