//! The conformance suite on the SQLite backend: a fresh temp-file database per scenario, which P1
//! reopens (the factory is shared with the differential test, in `test-support`).

conformance::conformance_tests!(test_support::factories::SqliteFactory);
