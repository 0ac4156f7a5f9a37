//! The conformance suite on the PostgreSQL backend: every scenario gets a database of its own,
//! created on the server that `STELE_TEST_POSTGRES_URL` names and dropped afterwards (the
//! factory is shared with the differential test, in `test-support`).
//!
//! Without `STELE_TEST_POSTGRES_URL` every scenario is skipped (with a printed reason), except
//! under `CI=true`, where every scenario fails: CI must run them.
//! Locally: `source .ci/postgres.sh && pg_start && cargo test -p storage-postgres`.

conformance::conformance_tests!(test_support::factories::PostgresFactory);
