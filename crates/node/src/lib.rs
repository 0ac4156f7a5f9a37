//! A Stele node: everything that runs executions on a store, started by one builder and
//! stopped by one handle.
//!
//! Executions only run when something locks them, and durable sleeps and expired leases only
//! move on when something watches the timers. A node is that something: [`Node::builder`]
//! takes the store, the clock, the activities and workflows (by their typed handles) and any
//! other worker, and [`NodeBuilder::start`] runs
//!
//! - one executor per worker (`executor::ExecTask`): the activities registered on the node
//!   share one, its workflows another, and every other worker gets its own;
//! - the timers watcher (`timers_watcher::spawn_new`), unless left out because another process
//!   runs one on the same store;
//! - the retention task (`timers_watcher::Pruner`), when a retention is set;
//! - the background tasks it was given ([`NodeBuilder::background`]).
//!
//! ```
//! use node::{ExecutorSettings, Node};
//! use std::{sync::Arc, time::Duration};
//! use workflow::{ActivityCtx, Client, Function, WorkflowCtx, WorkflowError};
//!
//! const GREET: Function<String, String> = Function::new("demo:hello/api.greet");
//! const GREET_LATER: Function<String, String> = Function::new("demo:hello/flows.greet-later");
//!
//! async fn greet(_ctx: ActivityCtx, name: String) -> Result<String, String> {
//!     Ok(format!("hello, {name}"))
//! }
//!
//! async fn greet_later(ctx: WorkflowCtx, name: String) -> Result<String, WorkflowError<String>> {
//!     ctx.sleep(Duration::from_millis(100)).await; // durable: the node's watcher ends it
//!     Ok(ctx.call(&GREET, &name).await?)
//! }
//!
//! # async fn memory_store() -> Arc<dyn concepts::DbConnection> {
//! #     conformance::StoreFactory::fresh(&test_support::factories::MemoryFactory).await.db
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! // Any backend: `storage_memory::MemoryStore::new()`, `storage_sqlite::SqlitePool::open(..)`,
//! // `storage_postgres::PostgresStore::connect(..)`, as `Arc<dyn concepts::DbConnection>`.
//! let db = memory_store().await;
//! let node = Node::builder(db.clone(), executor::Now)
//!     .activity(&GREET, greet)
//!     .workflow(&GREET_LATER, greet_later)
//!     .activity_settings(ExecutorSettings {
//!         lock_expiry: Duration::from_secs(30),
//!         ..ExecutorSettings::default()
//!     })
//!     .concurrency(32)
//!     .retention(Duration::from_secs(7 * 24 * 3600))
//!     .start()?;
//!
//! // Submitted beside the node's executors: created locked by one with a permit free.
//! let client = Client::new(db.clone(), executor::Now, "demo:hello".parse()?)
//!     .with_local_executors(node.local_executors().clone());
//! let greeting = client.submit(&GREET_LATER, &"ada".to_string()).await?;
//! assert_eq!(greeting.result_within(Duration::from_secs(30)).await?, "hello, ada");
//!
//! let report = node.shutdown(Duration::from_secs(10)).await;
//! assert_eq!(report.left, 0); // nothing was left running at the deadline
//! db.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Settings and their defaults
//!
//! | what | set with | default |
//! |---|---|---|
//! | an executor's lease, batch, poll, component, own bound | [`ExecutorSettings`] ([`NodeBuilder::activity_settings`], [`NodeBuilder::workflow_settings`], [`NodeBuilder::worker`]) | 10 s, 16, 250 ms, `activity:default` / `workflow:default` / `worker:default`, the node's |
//! | the children of the node's workflows | [`NodeBuilder::child_settings`] | `activity:default`, 3 retries, 1 s first backoff |
//! | the runs in flight over all executors | [`NodeBuilder::concurrency`] | each executor two batches of its own |
//! | the timers watcher | [`NodeBuilder::timers_watcher`], [`NodeBuilder::without_timers_watcher`] | every 250 ms, 100 ms leeway ([`DEFAULT_WATCHER`]) |
//! | the retention task | [`NodeBuilder::retention`], [`NodeBuilder::pruner`] | none: nothing is deleted |
//! | schedules declared in code, kept stored as declared | [`NodeBuilder::schedule`] | none |
//!
//! `start` checks everything before it starts anything and refuses what cannot work with a
//! [`NodeError`] that says what to change: a function registered twice (on one worker or on
//! two: each function runs on one worker), a worker without functions, a zero concurrency,
//! lease, batch, poll or watcher tick, a retention task that cannot work, a schedule of a
//! function the node does not run or with parameters it cannot take, a node with nothing to
//! run, a call outside a tokio runtime.
//!
//! # Shutdown
//!
//! [`Node::shutdown`] stops the node gracefully: every executor stops locking at once, the
//! runs in flight finish and write their outcomes until the deadline, the runs still going
//! then are aborted and left to their leases (they stay `Locked` until the lease expires, and
//! a timers watcher on the store, of this node's successor or of another process, times them
//! out so that they are retried), and the watcher and the retention task stop last. The
//! [`DrainReport`] says how many runs finished during the drain and how many were left.
//! Background tasks get a [`ShutdownSignal`] when the drain begins and are aborted at its
//! deadline; that is where a server stops accepting and finishes the requests it holds.
//!
//! This crate names no storage backend and no database driver: it wires the engine through
//! `concepts::DbConnection`, and the program that builds a node chooses the store. It is the
//! one place that spawns executors, the watcher and the retention task; the `stele` binary,
//! the example, the benchmark and the crash tests all ask it.

mod answers;
mod builder;
mod catalog;
mod duration;
mod error;
mod identity;
mod node;
mod parked;
pub mod recent;
pub mod sampler;
pub mod schedules;
mod settings;
mod submit;

pub use answers::{cancel_answer, complete_answer};
pub use builder::NodeBuilder;
pub use catalog::{Catalog, CatalogFunction, ExecutionDefaults};
pub use duration::{DurationError, HumanDuration};
pub use error::NodeError;
pub use node::{BackgroundContext, DrainReport, ExecutorInfo, Node, ShutdownSignal};
pub use settings::{
    DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_INTERVAL, DEFAULT_WATCHER, ExecutorSettings,
};
pub use submit::{
    DEFAULT_WAIT_SLICE, Prepared, Submission, SubmitError, Submitted, submit, wait_for_result,
};

#[cfg(test)]
mod tests;
