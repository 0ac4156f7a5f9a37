//! The `stele` command-line program, and the example workers it runs.
//!
//! The binary has three jobs:
//!
//! - `stele demo` opens (or creates) a SQLite file (or a PostgreSQL database given by a
//!   `postgres://` URL), submits a mixed workload in one
//!   `create_batch`, runs it with one executor per example function and a timers watcher,
//!   shows live progress and prints a summary that checks itself: every execution finished
//!   exactly once. Killed half-way (even with `SIGKILL`) and started again on the same file, it
//!   resumes the workload instead of submitting a new one.
//! - `stele executions list` and `stele executions show ID` inspect any Stele database: a table
//!   of executions, and the event log of one execution as a timeline (or as JSON for scripts);
//!   `stele executions wait ID` waits for one to finish and prints its result.
//! - The operator's commands run and steer executions on a database: `stele serve` runs the
//!   demo's functions (a `node::Node`: one executor each, the timers watcher and, with
//!   `--prune-older-than`, the retention task) until Ctrl-C or `SIGTERM`, then drains (it
//!   takes no new work and gives the runs in flight `--drain-timeout`, 10 s by default, to
//!   finish; a second signal stops at once), and waits for a PostgreSQL server that is
//!   not up yet (a note on stderr; `wait_for_server_s=N` in the URL bounds it); `stele submit FFQN --params JSON [--id ID]`
//!   creates a top-level execution, idempotently under a given id; `stele executions cancel`,
//!   `complete` (a durable promise: an execution of a stub function) and `prune` (finished
//!   trees older than a duration) change what is stored.
//!
//! Only `stele demo` and `stele serve` create a database; every other command refuses a
//! missing or empty file, a file that is not a Stele database and a PostgreSQL database
//! without Stele's tables, and creates nothing in it. The commands that only read (`list`,
//! `show`, `wait`) also refuse an older schema rather than migrate it, on either backend.
//!
//! The library part holds what the binary is built from and what users can copy:
//!
//! - [`workers`]: five real [`executor::Worker`]s, each a template for one pattern: an activity
//!   that fails and is retried ([`workers::flaky`]), an activity that outlives its lease and is
//!   timed out by the watcher ([`workers::slow`]), a workflow that fans out to child executions
//!   and awaits them through a join set ([`workers::fanout`]), a workflow that sleeps
//!   durably ([`workers::sleeper`]), and a workflow that awaits a durable promise an operator
//!   completes ([`workers::approval`]).
//! - [`workload`]: the demo's functions, their settings, and the batch of executions it submits.
//! - [`report`]: the summary of a workload, computed from the event logs alone.
//! - [`database`]: how a `--database` argument (a path, `sqlite://PATH` or `postgres://...`) is
//!   understood and opened.
//! - [`prometheus`]: the recorder `stele serve` installs and renders on `/metrics`
//!   ([`prometheus::serve_recorder`], which the benchmark's `--with-recorder` installs too).
//!
//! # Exit codes of `stele`
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | runtime failure: a database error, a workload that failed its exactly-once check, a `wait --timeout` that ran out |
//! | 2 | usage or bad input: unknown flag, a number option (`N`) that is not a whole number in its range (negative, too large, a fraction, a word), malformed execution id, function name, JSON or duration, unknown `--state`, parameters a demo function cannot decode, a `submit --id` repeated with another function or other parameters, a `complete` with another value than the promise has, a `complete` of an execution that is not a stub, `serve --http` on an address other than loopback without `--http-token` |
//! | 3 | not found: no database file at the path, no execution with that id |
//! | 4 | the database cannot be opened: not a Stele database (an empty file or a PostgreSQL database without Stele's tables included), a path that cannot be written, a newer schema, an older schema for `list`, `show` and `wait`, an unreachable server |
//! | 130 | interrupted (Ctrl-C or `SIGTERM`): the way `stele serve` stops, after its drain (its last line says how many runs in flight finished and how many were left to their leases); `stele demo` resumes the workload when run again |
//!
//! Every error is one line on stderr, `error: ` and the reason, command-line parsing errors
//! included (clap's usage text is left out; `--help` shows it).
//!
//! Not errors (exit 0): a `submit --id` repeated identically (it says the execution already
//! existed), a `cancel` of an execution that had already finished (it says how), a `complete`
//! repeated with the same value, a `wait` whose execution failed (it prints the result).
//!
//! Errors are printed as one line on stderr, starting with `error: `.

pub mod database;
pub mod prometheus;
pub mod report;
pub mod workers;
pub mod workload;
