//! C10 and C11: `cancel-other` catching up more ticks than a pass fires, and a catch-up window
//! the create accepts that reaches back past the calendar.

use super::{Fixture, definition};
use crate::StoreFactory;
use concepts::schedule::{FireSchedulesRequest, Overlap};
use std::time::Duration;

/// C10: catching up, `cancel-other` fires only the newest tick of the window and records the
/// others as superseded (SEMANTICS §19), also when the window holds more ticks than one pass
/// fires of another policy (`TICKS_PER_PASS`, 100): no older tick's execution is created only
/// to be cancelled by the next pass.
pub async fn c10_cancel_other_catching_up_past_a_pass_fires_only_the_newest<F: StoreFactory>(
    factory: &F,
) {
    let f = Fixture::new(factory).await;
    let mut every_second = definition("cancel", "every 1s");
    every_second.overlap = Overlap::CancelOther;
    every_second.catchup_window = Duration::from_secs(600);
    let row = f.create(every_second).await;
    // Down from 0 to 300 s: the 300 ticks are all inside the 10-minute window.
    f.move_to(300);
    // Two passes of the scheduler (one each second, say, with the clock not moved).
    let first = timers_watcher::fire_schedules(f.db.as_ref(), f.now())
        .await
        .expect("a pass");
    let second = timers_watcher::fire_schedules(f.db.as_ref(), f.now())
        .await
        .expect("a pass");
    let history = f.history(row.name()).await;
    let fired: Vec<_> = history
        .iter()
        .filter(|line| line.starts_with("fired"))
        .collect();
    assert_eq!(
        fired,
        ["fired by tick at 300"],
        "only the newest tick fires: {first:?} {second:?} {history:?}"
    );
    assert_eq!(
        (first.cancelled, second.cancelled),
        (0, 0),
        "no run is fired only to be cancelled: {history:?}"
    );
}

/// C11: a schedule whose catch-up window the create accepted reaches back past the calendar
/// (`200000000d`, which `HumanDuration` takes) is passed like any other, and never keeps the
/// other schedules of the pass from firing (the pass's arithmetic panicked, which stopped the
/// watcher's loop on memory and PostgreSQL and failed every pass on SQLite).
pub async fn c11_a_catch_up_window_past_the_calendar_never_stops_the_passes<F: StoreFactory>(
    factory: &F,
) {
    let f = Fixture::new(factory).await;
    let healthy = f.create(definition("healthy", "every 1m")).await;
    let mut wide = definition("wide", "every 1m");
    wide.catchup_window = Duration::from_secs(200_000_000 * 86_400);
    f.create(wide).await;
    f.move_to(60);
    let req = FireSchedulesRequest {
        now: f.now(),
        limit: 10,
    };
    let outcome = f.db.fire_schedules(req).await;
    assert!(outcome.is_ok(), "the pass: {outcome:?}");
    assert_eq!(f.history(healthy.name()).await, ["fired by tick at 60"]);
}
