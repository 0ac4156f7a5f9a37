//! The kinds of write, one module each: its request, the keys it names, how it is planned and
//! what it answers. A backend runs every kind the same way (see [`Write`](super::Write)).

mod append_batch;
mod cancel;
mod complete;
mod create;
mod lock;
mod outcome;
mod prune;
mod response;
mod schedule;

pub use append_batch::validate_append_batch;
pub use create::{CreateBatch, CreateLocked, validate_create};
pub use lock::{
    CreatedEvents, LockGrant, hand_over, hand_over_cloned, hand_over_cloned_into,
    hand_over_created, validate_lock_pending,
};
pub use outcome::AppendOutcomes;
pub use response::AppendResponse;
pub use schedule::{BUFFER_RECHECK, MAX_BACKFILL_TICKS, TICKS_KEPT, TICKS_PER_PASS};
