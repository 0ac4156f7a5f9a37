//! The conformance suite on the memory backend: a fresh, empty store per scenario (the factory
//! is shared with the differential test, in `test-support`).

conformance::conformance_tests!(test_support::factories::MemoryFactory);
