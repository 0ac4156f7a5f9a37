//! What the tests of several Stele crates share and `test-utils` cannot hold, because it needs
//! a backend or a database driver: the PostgreSQL test server and its throw-away databases
//! (`postgres`, feature `postgres`), a second server that tests may crash and that speaks TLS
//! (`spare_server`, feature `postgres`), one conformance [`StoreFactory`](conformance::StoreFactory)
//! per backend (`factories`, features `memory`, `sqlite`, `postgres`), and child processes
//! whose output a test reads line by line ([`process`]).
//!
//! A test-only crate: only `[dev-dependencies]` reach it (`cargo xtask deps` checks that no
//! crate depends on it through a normal edge). What needs neither a backend nor a driver (the
//! clocks, seeds, and the skip rule) lives in `test-utils`, below every crate.

#[cfg(any(feature = "memory", feature = "sqlite", feature = "postgres"))]
pub mod factories;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod process;
#[cfg(feature = "postgres")]
pub mod spare_server;
