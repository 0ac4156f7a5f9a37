//! D1 across backends: a test-only crate, with no library code of its own.
//!
//! `tests/cross_backend.rs` feeds the same seeded random request sequence (the conformance
//! crate's `differential::run_differential`) to the memory backend, to a fresh SQLite file
//! and, when `STELE_TEST_POSTGRES_URL` names a server, to a fresh PostgreSQL database, and
//! asserts that the canonical dumps are identical line by line; a failure names the seed and
//! the first line that differs.
//!
//! Run it with `cargo test -p differential`; replay a failure with `STELE_SEED=<seed>`.
