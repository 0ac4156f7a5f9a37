//! The schedule scenarios C1..C13: every rule of `docs/SEMANTICS.md` §19 on every backend
//! through the same code: a schedule stored, changed and deleted, each overlap policy,
//! catching up inside and outside the window, triggers and backfills, the daylight-saving
//! transitions of Europe/Prague and America/New_York, passes racing each other, the run limit
//! and the end, catching up under each policy, the scheduler's cancellations, jitter, and the
//! passes of long catch-ups and of windows past the calendar, a changed spec, and durations kept
//! to the microsecond. Each scenario's documentation says what it checks.
//!
//! One module per topic: `stored` (C1, C2, C12, C13: the writes of a schedule's row) and `firing` (C3..C9:
//! what a pass does) and `passes` (C10, C11: the limits of a pass). The fixture they share is here, and the scenarios are re-exported here,
//! where the [`schedule_scenario_tests!`](crate::schedule_scenario_tests) macro finds them.
//!
//! Time is a [`SimClock`]: a pass is made at the time the scenario moved the clock to, as the
//! node's scheduler makes one at each tick of its clock.

mod firing;
mod passes;
mod stored;

pub use passes::{
    c10_cancel_other_catching_up_past_a_pass_fires_only_the_newest,
    c11_a_catch_up_window_past_the_calendar_never_stops_the_passes,
};

pub use firing::{
    c3_each_overlap_policy, c4_catch_up_inside_and_outside_the_window,
    c5_trigger_and_backfill_fire_each_tick_once, c6_daylight_saving_transitions,
    c7_racing_passes_fire_each_tick_once, c8_run_limit_and_end,
    c9_catch_up_by_policy_the_scheduler_cancels_and_jitter,
};
pub use stored::{
    c1_create_is_idempotent_and_names_a_conflict, c2_pause_resume_update_delete,
    c12_a_changed_spec_applies_from_the_change_on, c13_durations_are_kept_to_the_microsecond,
};

use crate::{
    StoreFactory, TestStore,
    storage_scenarios::helpers::{component_id, ffqn},
};
use chrono::{DateTime, Utc};
use concepts::{
    CancelRequest, ClockFn, DbConnection, ExecutionId, Json,
    schedule::{
        CreateScheduleRequest, Definition, FireOutcome, FireSchedulesRequest, RunSettings,
        ScheduleCreated, ScheduleName, ScheduleRow, Tick, TickOutcome,
    },
};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;

/// A fresh store and a simulated clock.
struct Fixture {
    _store: TestStore,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl Fixture {
    async fn new<F: StoreFactory>(factory: &F) -> Self {
        let store = factory.fresh().await;
        Self {
            db: store.db.clone(),
            _store: store,
            clock: SimClock::epoch(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The time `secs` seconds after the clock's start.
    fn at(&self, secs: i64) -> DateTime<Utc> {
        SimClock::epoch().now() + chrono::Duration::seconds(secs)
    }

    /// Moves the clock to `secs` seconds after its start.
    fn move_to(&self, secs: i64) {
        self.clock.move_time_to(self.at(secs));
    }

    /// Creates `definition` now, asserting it is new.
    async fn create(&self, definition: Definition) -> ScheduleRow {
        let name = definition.name.clone();
        let req = CreateScheduleRequest {
            definition,
            settings: settings(),
            now: self.now(),
        };
        let created = self.db.create_schedule(req).await.expect("create_schedule");
        assert_eq!(created, ScheduleCreated::Created, "{name} is new");
        self.row(&name).await
    }

    async fn row(&self, name: &ScheduleName) -> ScheduleRow {
        self.db.get_schedule(name).await.expect("get_schedule")
    }

    /// Passes at the clock's time until none is left due, as a scheduler does: their
    /// outcomes merged.
    async fn pass(&self) -> FireOutcome {
        let mut all = FireOutcome::default();
        loop {
            let req = FireSchedulesRequest {
                now: self.now(),
                limit: 7,
            };
            let outcome = self.db.fire_schedules(req).await.expect("fire_schedules");
            all.schedules += outcome.schedules;
            all.fired.extend(outcome.fired);
            for (function, count) in outcome.functions {
                match all
                    .functions
                    .iter_mut()
                    .find(|(known, _)| *known == function)
                {
                    Some((_, total)) => *total += count,
                    None => all.functions.push((function, count)),
                }
            }
            all.skipped += outcome.skipped;
            all.to_cancel.extend(outcome.to_cancel);
            if !outcome.more {
                return all;
            }
        }
    }

    /// Every recorded tick of `name`, oldest first.
    async fn ticks(&self, name: &ScheduleName) -> Vec<Tick> {
        let mut ticks = self.db.schedule_ticks(name, 1_000).await.expect("ticks");
        ticks.reverse();
        ticks
    }

    /// The ticks of `name` as lines: `<what> <seconds after the start>`, so that a scenario
    /// states the whole history it expects.
    async fn history(&self, name: &ScheduleName) -> Vec<String> {
        let start = self.at(0);
        let secs = |at: DateTime<Utc>| (at - start).num_seconds();
        let ticks = self.ticks(name).await;
        ticks
            .into_iter()
            .map(|tick| {
                let at = secs(tick.at);
                match tick.outcome {
                    TickOutcome::Fired { by, .. } => format!("fired by {} at {at}", by.name()),
                    TickOutcome::AlreadyFired { .. } => format!("already fired at {at}"),
                    TickOutcome::Buffered { .. } => format!("buffered at {at}"),
                    TickOutcome::Skipped {
                        reason,
                        last,
                        count,
                        exact,
                    } => {
                        let more = if exact { "" } else { "+" };
                        let (name, last) = (reason.name(), secs(last));
                        format!("skipped {name} {at}..{last} x{count}{more}")
                    }
                }
            })
            .collect()
    }

    /// Finishes `execution_id` (a cancellation: an outcome like any other for a schedule).
    async fn finish(&self, execution_id: &ExecutionId) {
        let req = CancelRequest {
            execution_id: execution_id.clone(),
            now: self.now(),
            reason: "finished by the scenario".to_owned(),
        };
        self.db.cancel(req).await.expect("cancel");
    }

    /// Whether `execution_id` is stored and unfinished.
    async fn is_running(&self, execution_id: &ExecutionId) -> bool {
        let log = self.db.get(execution_id).await.expect("get");
        !log.pending_state.is_finished()
    }
}

/// A schedule of `test:pkg/ifc@1.0.0.tick` named `name` at `spec`, in UTC, with the default
/// policies.
fn definition(name: &str, spec: &str) -> Definition {
    Definition::new(
        name.parse().expect("schedule name"),
        ffqn("tick"),
        Json(serde_json::json!([name])),
        spec.parse().expect("spec"),
    )
}

/// The execution settings of the scenarios' schedules.
fn settings() -> RunSettings {
    RunSettings {
        component_id: component_id(),
        max_retries: 2,
        retry_exp_backoff: Duration::from_secs(1),
    }
}

/// Expands to one `#[tokio::test]` per schedule scenario for the given factory.
#[macro_export]
macro_rules! schedule_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; schedule_scenarios;
            c1_create_is_idempotent_and_names_a_conflict,
            c2_pause_resume_update_delete,
            c3_each_overlap_policy,
            c4_catch_up_inside_and_outside_the_window,
            c5_trigger_and_backfill_fire_each_tick_once,
            c6_daylight_saving_transitions,
            c7_racing_passes_fire_each_tick_once,
            c8_run_limit_and_end,
            c9_catch_up_by_policy_the_scheduler_cancels_and_jitter,
            c10_cancel_other_catching_up_past_a_pass_fires_only_the_newest,
            c11_a_catch_up_window_past_the_calendar_never_stops_the_passes,
            c12_a_changed_spec_applies_from_the_change_on,
            c13_durations_are_kept_to_the_microsecond,
        );
    };
}
