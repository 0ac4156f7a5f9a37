//! The storage contract scenarios S1..S32 (`docs/SEMANTICS.md` §1-§5 and §9): every backend runs
//! them through the same code and must agree on results and on error kinds. Each scenario's
//! documentation says what it checks.
//!
//! One module per operation: `lifecycle` (S1, S18), `timers` (S2, S3), `lock` (S4, S5, S6,
//! S13, S30), `append` (S7, S8, S21), `lease` (S26, S27), `answers` (S28, S29), `responses` (S9, S10, S11), `create` (S12, S19, S31, S32), `listing` (S22, S23, S25), `waits`
//! (S14, S15, S16, S20, S24) and `close` (S17); the scenarios are re-exported here, where the
//! [`storage_scenario_tests!`](crate::storage_scenario_tests) macro finds them.
//!
//! Every scenario checks, after each step that changes an execution, that the stored pending
//! state equals its reference derivation ([`helpers::assert_state_matches_derivation`], S18).
//! Timestamps come from a [`SimClock`](test_utils::SimClock); real time is used only as a
//! safety net when awaiting a notification ([`helpers::SAFETY`]) and for `max_wait`/timeouts of
//! the waits themselves.

pub mod helpers;

mod answers;
mod append;
mod close;
mod create;
mod lease;
mod lifecycle;
mod listing;
mod lock;
mod responses;
mod timers;
mod waits;

pub use answers::{s28_batch_records_child_answers, s29_answer_place_counts_every_response};
pub use append::{
    s7_versions_not_found_finished, s8_failing_batch_writes_nothing,
    s21_unexplained_creations_and_repeated_delays_refused,
};
pub use close::s17_close;
pub use create::{
    s12_json_key_order, s19_create_batch, s31_children_only_under_a_parent_that_exists,
    s32_backoff_kept_to_the_microsecond,
};
pub use lease::{s26_children_created_locked, s27_submit_created_locked};
pub use lifecycle::{s1_lifecycle, s18_state_matches_derivation};
pub use listing::{s22_listings_filter_and_page, s23_events_in_pages, s25_due_backlog};
pub use lock::{
    s4_lock_pending_order_and_batch_size, s5_expired_lease_never_relocked,
    s6_lock_after_history_event, s13_concurrent_lock_pending, s30_function_named_twice_locks_once,
};
pub use responses::{
    s9_duplicate_responses_refused, s10_join_sets, s11_response_to_finished_execution,
};
pub use timers::{s2_expired_lease_reported, s3_expired_delay_reported_once};
pub use waits::{
    s14_wait_for_pending, s15_subscribe_to_next_responses, s16_wait_for_finished_result,
    s20_wait_for_pending_horizon_moves_on, s24_waits_hear_another_process,
};

use concepts::FunctionFqn;
use helpers::{SAFETY, ms};
use std::{sync::Arc, time::Duration};

/// The lease of the scenarios' locks.
const LEASE: Duration = Duration::from_secs(1);

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! storage_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; storage_scenarios;
            s1_lifecycle,
            s2_expired_lease_reported,
            s3_expired_delay_reported_once,
            s4_lock_pending_order_and_batch_size,
            s5_expired_lease_never_relocked,
            s6_lock_after_history_event,
            s7_versions_not_found_finished,
            s8_failing_batch_writes_nothing,
            s9_duplicate_responses_refused,
            s10_join_sets,
            s11_response_to_finished_execution,
            s12_json_key_order,
            s13_concurrent_lock_pending,
            s14_wait_for_pending,
            s15_subscribe_to_next_responses,
            s16_wait_for_finished_result,
            s17_close,
            s18_state_matches_derivation,
            s19_create_batch,
            s20_wait_for_pending_horizon_moves_on,
            s21_unexplained_creations_and_repeated_delays_refused,
            s22_listings_filter_and_page,
            s23_events_in_pages,
            s24_waits_hear_another_process,
            s25_due_backlog,
            s26_children_created_locked,
            s27_submit_created_locked,
            s28_batch_records_child_answers,
            s29_answer_place_counts_every_response,
            s30_function_named_twice_locks_once,
            s31_children_only_under_a_parent_that_exists,
            s32_backoff_kept_to_the_microsecond,
        );
    };
}

fn ffqns_of(ffqn: &FunctionFqn) -> Arc<[FunctionFqn]> {
    Arc::from([ffqn.clone()])
}

/// Asserts that `handle` is still running after a short real-time wait (it has nothing to
/// return yet), which also gives it time to subscribe.
pub(crate) async fn assert_still_waiting<T: std::fmt::Debug>(
    handle: &mut tokio::task::JoinHandle<T>,
    what: &str,
) {
    if let Ok(done) = tokio::time::timeout(ms(50), handle).await {
        panic!("{what} returned early: {done:?}");
    }
}

/// Awaits `handle` with the real-time safety net.
pub(crate) async fn join_within_safety<T>(handle: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(SAFETY, handle)
        .await
        .unwrap_or_else(|_| panic!("{what}: no wake-up within {SAFETY:?}"))
        .unwrap_or_else(|err| panic!("{what}: task failed: {err}"))
}
