//! The conformance suite on the memory backend.

use async_trait::async_trait;
use conformance::{Capabilities, StoreFactory, TestStore};
use std::sync::Arc;
use storage_memory::MemoryStore;

/// Fresh, empty memory stores; nothing persists.
struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: false }
    }

    async fn fresh(&self) -> TestStore {
        TestStore {
            db: Arc::new(MemoryStore::new()),
            guard: None,
        }
    }
}

conformance::conformance_tests!(MemoryFactory);
