//! The `stele` command-line program, and the example workers it runs.
//!
//! The binary has two jobs:
//!
//! - `stele demo` opens (or creates) a SQLite file (or a PostgreSQL database given by a
//!   `postgres://` URL), submits a mixed workload in one
//!   `create_batch`, runs it with one executor per example function and a timers watcher,
//!   shows live progress and prints a summary that checks itself: every execution finished
//!   exactly once. Killed half-way (even with `SIGKILL`) and started again on the same file, it
//!   resumes the workload instead of submitting a new one.
//! - `stele executions list` and `stele executions show ID` inspect any Stele database: a table
//!   of executions, and the event log of one execution as a timeline (or as JSON for scripts).
//!
//! The library part holds what the binary is built from and what users can copy:
//!
//! - [`workers`]: four real [`executor::Worker`]s, each a template for one pattern: an activity
//!   that fails and is retried ([`workers::flaky`]), an activity that outlives its lease and is
//!   timed out by the watcher ([`workers::slow`]), a workflow that fans out to child executions
//!   and awaits them through a join set ([`workers::fanout`]), and a workflow that sleeps
//!   durably ([`workers::sleeper`]).
//! - [`workload`]: the demo's functions, their settings, and the batch of executions it submits.
//! - [`report`]: the summary of a workload, computed from the event logs alone.
//! - [`database`]: how a `--database` argument (a path, `sqlite://PATH` or `postgres://...`) is
//!   understood and opened.
//!
//! # Exit codes of `stele`
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | runtime failure: a database error, or a workload that failed its exactly-once check |
//! | 2 | usage or bad input: unknown flag, malformed execution id or function name, unknown `--state` |
//! | 3 | not found: no database file at the path, no execution with that id |
//! | 4 | the database cannot be opened: not a Stele database, a path that cannot be written, a newer schema, an unreachable server |
//! | 130 | interrupted (Ctrl-C or `SIGTERM`); `stele demo` resumes the workload when run again |
//!
//! Errors are printed as one line on stderr, starting with `error: `.

pub mod database;
pub mod duration;
pub mod report;
pub mod workers;
pub mod workload;
