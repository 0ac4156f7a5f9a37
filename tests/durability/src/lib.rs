//! What `durability-node` and the tests that run it must agree on, in one place: the lines the
//! node prints ([`Line`], its whole output protocol), the executions it runs ([`Workload`]:
//! their function, ids and requests), and how both read the store ([`list_ids`]) and the
//! clock ([`wall_ms`]).
//!
//! The node prints a [`Line`] with `Display`; a test reads it back with [`Line::parse`], which
//! refuses anything the node does not print, so a changed line cannot slip past a test.

pub mod flows;
mod protocol;
mod workload;

pub use protocol::Line;
pub use workload::{FFQN, ID_MS, Workload, execution_id, list_ids, wall_ms};
