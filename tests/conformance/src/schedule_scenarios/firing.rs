//! C3..C8: what a pass does: the overlap policies, catching up, triggers and backfills, the
//! daylight-saving transitions, racing passes, the run limit and the end.

use super::{Fixture, definition, settings};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{expect_validation, ffqn},
};
use chrono::{DateTime, Utc};
use concepts::{
    FinishedExecutionError,
    schedule::{
        CreateScheduleRequest, FireSchedulesRequest, Overlap, ScheduleCreated,
        TriggerScheduleRequest, TriggerTicks, Triggered, tick_execution_id,
    },
};
use std::{collections::HashSet, sync::Arc, time::Duration};

/// C3: with the previous run unfinished, a tick of a `skip` schedule is recorded as skipped,
/// of a `buffer-one` schedule buffered (and a second one skipped as the buffer is full) until
/// the run finishes, then fired; an `allow-all` schedule fires every tick; a `cancel-other`
/// pass asks for the previous run's cancellation and leaves the tick unhandled until then, the
/// next pass fires it.
pub async fn c3_each_overlap_policy<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut names = Vec::new();
    for overlap in Overlap::ALL {
        let mut definition = definition(overlap.name(), "every 1m");
        definition.overlap = overlap;
        names.push(f.create(definition).await.name().clone());
    }
    let [skip, buffer, allow, cancel] = names.try_into().unwrap();
    f.move_to(60);
    let first = f.pass().await;
    assert_eq!(
        first.fired.len(),
        4,
        "nothing runs yet: each fires {first:?}"
    );
    let first_run = |name| f.row(name);
    let cancel_first = first_run(&cancel).await.last_run.unwrap();
    let buffer_first = first_run(&buffer).await.last_run.unwrap();

    f.move_to(120);
    let second = f.pass().await;
    assert_eq!(second.fired.len(), 1, "only allow-all fires: {second:?}");
    assert_eq!(second.to_cancel, [(cancel.clone(), cancel_first.clone())]);
    assert_eq!(second.skipped, 1);
    assert_eq!(
        f.history(&skip).await,
        ["fired by tick at 60", "skipped overlap 120..120 x1"]
    );
    assert_eq!(
        f.history(&buffer).await,
        ["fired by tick at 60", "buffered at 120"]
    );
    assert_eq!(
        f.history(&allow).await,
        ["fired by tick at 60", "fired by tick at 120"]
    );
    assert_eq!(
        f.history(&cancel).await,
        ["fired by tick at 60"],
        "the tick waits"
    );
    let again = f.pass().await;
    assert_eq!(
        again.to_cancel, second.to_cancel,
        "it waits until the run is cancelled"
    );

    // What the scheduler does with `to_cancel`; and buffer-one's run finishes, which its
    // schedule looks at again a second later.
    f.finish(&cancel_first).await;
    f.finish(&buffer_first).await;
    f.move_to(121);
    let third = f.pass().await;
    assert_eq!(
        third.fired.len(),
        2,
        "cancel-other's and the buffered tick: {third:?}"
    );
    assert_eq!(
        f.history(&cancel).await,
        ["fired by tick at 60", "fired by tick at 120"]
    );
    let cancelled =
        f.db.wait_for_finished_result(&cancel_first, None)
            .await
            .unwrap();
    assert!(matches!(
        cancelled,
        Err(FinishedExecutionError::Cancelled { .. })
    ));
    assert_eq!(
        f.history(&buffer).await,
        [
            "fired by tick at 60",
            "buffered at 120",
            "fired by buffer at 120"
        ]
    );

    f.move_to(180);
    f.pass().await;
    f.move_to(240);
    f.pass().await;
    assert_eq!(
        f.history(&buffer).await[3..],
        ["buffered at 180", "skipped buffer-full 240..240 x1"]
    );
}

/// C4: after a downtime, the ticks inside the catch-up window fire in order with the policy
/// (`allow-all`: each; `skip`: the first, the others skipped as it runs), the older ones are
/// recorded as one skipped range, never dropped; a second pass at the same time does nothing.
pub async fn c4_catch_up_inside_and_outside_the_window<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut all = definition("all", "every 1m");
    all.overlap = Overlap::AllowAll;
    let all = f.create(all).await;
    let skip = f.create(definition("skip", "every 1m")).await;
    // Down from 0 to 20m30s; the window is the default five minutes: from 15m30s.
    f.move_to(20 * 60 + 30);
    let outcome = f.pass().await;
    assert_eq!(outcome.fired.len(), 5 + 1, "{outcome:?}");
    assert_eq!(
        outcome.functions,
        [(ffqn("tick"), 5 + 1)],
        "the function of each execution created, counted"
    );
    assert_eq!(outcome.skipped, 2 * 15 + 4);
    let expected_ids: Vec<_> = (16..=20)
        .map(|m| tick_execution_id("all", all.created_at, f.at(m * 60)))
        .collect();
    let fired_all: Vec<_> = outcome
        .fired
        .iter()
        .filter(|id| expected_ids.contains(id))
        .collect();
    assert_eq!(
        fired_all,
        expected_ids.iter().collect::<Vec<_>>(),
        "in tick order"
    );
    assert_eq!(
        f.history(all.name()).await,
        [
            "skipped missed 60..900 x15",
            "fired by tick at 960",
            "fired by tick at 1020",
            "fired by tick at 1080",
            "fired by tick at 1140",
            "fired by tick at 1200",
        ]
    );
    assert_eq!(
        f.history(skip.name()).await,
        [
            "skipped missed 60..900 x15",
            "fired by tick at 960",
            "skipped overlap 1020..1020 x1",
            "skipped overlap 1080..1080 x1",
            "skipped overlap 1140..1140 x1",
            "skipped overlap 1200..1200 x1",
        ]
    );
    let log = f.db.get(&expected_ids[0]).await.unwrap();
    assert_eq!(
        log.pending_state.pending_at(),
        Some(f.at(960)),
        "due at its tick"
    );
    let again = f.pass().await;
    assert_eq!((again.fired.len(), again.skipped), (0, 0), "{again:?}");
    assert_eq!(f.row(all.name()).await.next_due_at, Some(f.at(21 * 60)));
}

/// C5: a trigger fires one execution now whatever runs; a backfill fires every tick of its
/// range, due now, and a tick whose execution exists (fired by the backfill, then found by a
/// pass or a second backfill) is never created again; a range past the limit, or backwards, is
/// refused and writes nothing.
pub async fn c5_trigger_and_backfill_fire_each_tick_once<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut hourly = definition("hourly", "every 1h");
    hourly.catchup_window = Duration::from_secs(24 * 3600);
    let row = f.create(hourly).await;
    let name = row.name().clone();
    f.move_to(3 * 3600 + 1800);
    let trigger = |ticks| TriggerScheduleRequest {
        name: name.clone(),
        ticks,
        now: f.now(),
    };
    let now_id = tick_execution_id(name.as_str(), row.created_at, f.now());
    let triggered =
        f.db.trigger_schedule(trigger(TriggerTicks::Now))
            .await
            .unwrap();
    assert_eq!(triggered.fired, std::slice::from_ref(&now_id));
    assert_eq!(triggered.functions, [(ffqn("tick"), 1)]);
    let again =
        f.db.trigger_schedule(trigger(TriggerTicks::Now))
            .await
            .unwrap();
    assert_eq!(again.already_fired, [now_id], "one trigger per instant");
    assert!(again.functions.is_empty(), "nothing created: {again:?}");

    let range = TriggerTicks::Backfill {
        from: f.at(1800),
        to: f.at(3 * 3600),
    };
    let backfilled = f.db.trigger_schedule(trigger(range.clone())).await.unwrap();
    let ids: Vec<_> = (1..=3)
        .map(|h| tick_execution_id(name.as_str(), row.created_at, f.at(h * 3600)))
        .collect();
    assert_eq!(
        backfilled,
        Triggered {
            fired: ids.clone(),
            functions: vec![(ffqn("tick"), 3)],
            already_fired: Vec::new()
        }
    );
    let log = f.db.get(&ids[0]).await.unwrap();
    assert_eq!(
        log.pending_state.pending_at(),
        Some(f.now()),
        "a backfilled tick is due now"
    );
    let twice = f.db.trigger_schedule(trigger(range)).await.unwrap();
    assert_eq!(
        twice,
        Triggered {
            fired: Vec::new(),
            functions: Vec::new(),
            already_fired: ids.clone()
        }
    );

    let outcome = f.pass().await;
    assert!(
        outcome.fired.is_empty(),
        "the pass finds them fired: {outcome:?}"
    );
    let history = f.history(&name).await;
    assert_eq!(
        history[history.len() - 3..],
        [
            "already fired at 3600",
            "already fired at 7200",
            "already fired at 10800"
        ]
    );
    assert_eq!(
        f.row(&name).await.runs,
        4,
        "a trigger and three backfilled ticks"
    );

    let before = f.ticks(&name).await;
    let long = TriggerTicks::Backfill {
        from: f.at(0),
        to: f.at(2_000 * 3600),
    };
    let err = expect_validation(f.db.trigger_schedule(trigger(long)).await);
    assert!(err.to_string().contains("shorter ranges"), "{err}");
    let backwards = TriggerTicks::Backfill {
        from: f.at(3600),
        to: f.at(0),
    };
    expect_validation(f.db.trigger_schedule(trigger(backwards)).await);
    assert_eq!(
        f.ticks(&name).await,
        before,
        "a refused trigger writes nothing"
    );
}

/// The ticks fired between `from` and `to`, passing every `step`: `(schedule, tick)` pairs.
async fn fire_through(
    f: &Fixture,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: chrono::Duration,
) -> Vec<(String, DateTime<Utc>)> {
    let mut at = from;
    while at <= to {
        f.clock.move_time_to(at);
        f.pass().await;
        at += step;
    }
    let mut fired = Vec::new();
    for row in f.db.list_schedules(None, 100).await.unwrap() {
        for tick in f.ticks(row.name()).await {
            assert!(tick.execution_id().is_some(), "every tick fires: {tick:?}");
            fired.push((row.name().to_string(), tick.at));
        }
    }
    fired
}

/// C6: a cron schedule on the wall clock of Europe/Prague and of America/New_York across the
/// two daylight-saving transitions of 2026, passed every 20 minutes of the simulated clock: a
/// local time the clocks jump over fires once at the jump, a local time they repeat fires once
/// at its first occurrence, every other day at its local time.
pub async fn c6_daylight_saving_transitions<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let utc = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    let step = chrono::Duration::minutes(20);
    // (name, zone, spec, first day, the expected ticks of three days from it), in time order:
    // the clock only moves on.
    let transitions = [
        (
            "new-york-spring",
            "America/New_York",
            "30 2 * * *",
            "2026-03-07T00:00:00Z",
            [
                "2026-03-07T07:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:30:00Z",
            ],
        ),
        (
            "prague-spring",
            "Europe/Prague",
            "30 2 * * *",
            "2026-03-28T00:00:00Z",
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z",
            ],
        ),
        (
            "prague-autumn",
            "Europe/Prague",
            "30 2 * * *",
            "2026-10-24T00:00:00Z",
            [
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z",
            ],
        ),
        (
            "new-york-autumn",
            "America/New_York",
            "30 1 * * *",
            "2026-10-31T00:00:00Z",
            [
                "2026-10-31T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-02T06:30:00Z",
            ],
        ),
    ];
    for (name, zone, spec, start, expected) in transitions {
        let start = utc(start);
        f.clock.move_time_to(start);
        let mut definition = definition(name, spec);
        definition.zone = zone.parse().unwrap();
        definition.overlap = Overlap::AllowAll;
        // Passes every 20 minutes: a tick fires at the first after it.
        definition.catchup_window = Duration::from_secs(3600);
        f.create(definition).await;
        let end = start + chrono::Duration::hours(72);
        let fired = fire_through(&f, start, end, step).await;
        let fired: Vec<_> = fired
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, at)| at)
            .collect();
        let expected: Vec<_> = expected.into_iter().map(utc).collect();
        assert_eq!(fired, expected, "{name} in {zone}");
        let row = f.db.get_schedule(&name.parse().unwrap()).await.unwrap();
        let change = concepts::schedule::ChangeScheduleRequest {
            name: row.name().clone(),
            change: concepts::schedule::ScheduleChange::Pause {
                note: String::new(),
            },
            now: f.now(),
        };
        f.db.change_schedule(change).await.unwrap();
    }
}

/// C7: passes racing each other (four at each second, as four nodes make them) over schedules
/// due every second: every tick has exactly one execution, none is created twice and none is
/// missing.
pub async fn c7_racing_passes_fire_each_tick_once<F: StoreFactory>(factory: &F) {
    let f = Arc::new(Fixture::new(factory).await);
    let mut rows = Vec::new();
    for n in 0..12 {
        let mut definition = definition(&format!("every-second-{n}"), "every 1s");
        definition.overlap = Overlap::AllowAll;
        rows.push(f.create(definition).await);
    }
    let mut fired = Vec::new();
    for second in 1..=20 {
        f.move_to(second);
        let passes: Vec<_> = (0..4)
            .map(|_| {
                let db = f.db.clone();
                let now = f.now();
                tokio::spawn(async move {
                    db.fire_schedules(FireSchedulesRequest { now, limit: 5 })
                        .await
                })
            })
            .collect();
        for pass in passes {
            fired.extend(pass.await.unwrap().expect("a pass").fired);
        }
        // What the racing passes left for lack of a limit, as the next pass of a node takes.
        fired.extend(f.pass().await.fired);
    }
    let unique: HashSet<_> = fired.iter().collect();
    assert_eq!(unique.len(), fired.len(), "no execution fired twice");
    let mut expected = HashSet::new();
    for row in &rows {
        for second in 1..=20 {
            expected.insert(tick_execution_id(
                row.name().as_str(),
                row.created_at,
                f.at(second),
            ));
        }
    }
    assert_eq!(unique.len(), expected.len());
    assert!(
        fired.iter().all(|id| expected.contains(id)),
        "every fire is a tick's"
    );
    for row in &rows {
        let ticks = f.ticks(row.name()).await;
        let times: Vec<_> = ticks.iter().map(|t| t.at).collect();
        let seconds: Vec<_> = (1..=20).map(|s| f.at(s)).collect();
        assert_eq!(
            times,
            seconds,
            "{}: each tick recorded once, in order",
            row.name()
        );
        let seqs: Vec<_> = ticks.iter().map(|t| t.seq).collect();
        assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    }
}

/// C8: a schedule with a run limit fires that many ticks and ends (no longer due, `ended`); one
/// with an end fires no tick after it. A create whose end comes before its first tick would
/// never fire and is refused, writing nothing (it was stored, ended from the start); the ended
/// schedule created again as it is is answered as existing.
pub async fn c8_run_limit_and_end<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut limited = definition("limited", "every 1m");
    limited.overlap = Overlap::AllowAll;
    limited.max_runs = Some(2);
    let limited = f.create(limited).await;
    let mut ending = definition("ending", "every 1m");
    ending.overlap = Overlap::AllowAll;
    ending.end = Some(f.at(150));
    let ending = f.create(ending).await;
    for minute in 1..=4 {
        f.move_to(minute * 60);
        f.pass().await;
    }
    assert_eq!(
        f.history(limited.name()).await,
        ["fired by tick at 60", "fired by tick at 120"]
    );
    assert_eq!(
        f.history(ending.name()).await,
        ["fired by tick at 60", "fired by tick at 120"]
    );
    for name in [limited.name(), ending.name()] {
        let row = f.row(name).await;
        assert_eq!((row.status(), row.next_due_at), ("ended", None), "{name}");
        assert!(row.next_fire_times(f.now(), 3).is_empty(), "{name}");
    }
    let again = CreateScheduleRequest {
        definition: ending.definition.clone(),
        settings: settings(),
        now: f.now(),
    };
    let answer = f.db.create_schedule(again).await.expect("create_schedule");
    assert_eq!(answer, ScheduleCreated::AlreadyExisted);
    let mut ended = definition("ended", "every 1m");
    ended.end = Some(f.at(250));
    let never = CreateScheduleRequest {
        definition: ended.clone(),
        settings: settings(),
        now: f.now(),
    };
    let refused = expect_validation(f.db.create_schedule(never).await);
    assert!(refused.to_string().contains("never fire"), "{refused}");
    let missing = f.db.get_schedule(&ended.name).await;
    assert!(missing.is_err(), "nothing stored: {missing:?}");
}

/// C9: catching up under `buffer-one` fires the window's first tick and buffers the second,
/// the rest skipped as the buffer is full; under `cancel-other` only the window's newest tick
/// fires, the older ones skipped as superseded. The scheduler's own pass
/// (`timers_watcher::fire_schedules`) cancels a `cancel-other` schedule's previous run with a
/// reason naming the schedule and fires the tick in the same pass. A jittered schedule's
/// executions are due after their ticks and before the jitter is over, at the time every node
/// derives for the tick.
pub async fn c9_catch_up_by_policy_the_scheduler_cancels_and_jitter<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut buffer = definition("buffer", "every 1m");
    buffer.overlap = Overlap::BufferOne;
    let buffer = f.create(buffer).await;
    let mut cancel = definition("cancel", "every 1m");
    cancel.overlap = Overlap::CancelOther;
    let cancel = f.create(cancel).await;
    // Down from 0 to 20m30s; the window is the default five minutes: the ticks from 16m on.
    f.move_to(20 * 60 + 30);
    f.pass().await;
    let history = f.history(buffer.name()).await;
    assert_eq!(
        history[..3],
        [
            "skipped missed 60..900 x15",
            "fired by tick at 960",
            "buffered at 1020",
        ]
    );
    let full: Vec<_> = history[3..].iter().map(String::as_str).collect();
    assert_eq!(
        full.iter()
            .filter(|line| line.starts_with("skipped buffer-full"))
            .count(),
        full.len(),
        "the window's other ticks, as the buffer is full: {history:?}"
    );
    assert!(
        full.join(" ").contains("1200"),
        "up to the last tick: {history:?}"
    );
    let history = f.history(cancel.name()).await;
    assert_eq!(
        history.first().map(String::as_str),
        Some("skipped missed 60..900 x15")
    );
    assert_eq!(
        history.last().map(String::as_str),
        Some("fired by tick at 1200"),
        "{history:?}"
    );
    assert!(
        history[1..history.len() - 1]
            .iter()
            .all(|line| line.starts_with("skipped superseded")),
        "the window's older ticks: {history:?}"
    );
    assert_eq!(f.row(cancel.name()).await.runs, 1, "only the newest fired");

    // The scheduler's pass: the next tick cancels the run and fires in the same pass.
    let previous = f.row(cancel.name()).await.last_run.expect("a run");
    f.move_to(21 * 60);
    let pass = timers_watcher::fire_schedules(f.db.as_ref(), f.now())
        .await
        .expect("a pass");
    assert_eq!(pass.cancelled, 1, "{pass:?}");
    let result =
        f.db.wait_for_finished_result(&previous, None)
            .await
            .unwrap();
    let Err(FinishedExecutionError::Cancelled { reason }) = result else {
        panic!("cancelled: {result:?}");
    };
    assert!(
        reason.contains("schedule cancel fired its next tick"),
        "{reason}"
    );
    assert_eq!(
        f.history(cancel.name()).await.last().map(String::as_str),
        Some("fired by tick at 1260")
    );
    let next = f.row(cancel.name()).await.last_run.expect("a run");
    assert!(f.is_running(&next).await);

    // Jitter: each tick's execution due within the jitter after it, where every node puts it.
    let mut jittered = definition("jittered", "every 1m");
    jittered.jitter = Duration::from_secs(30);
    jittered.overlap = Overlap::AllowAll;
    let row = f.create(jittered.clone()).await;
    let mut offsets = Vec::new();
    for minute in 22..=25 {
        f.move_to(minute * 60);
        f.pass().await;
        let tick = f.at(minute * 60);
        let id = tick_execution_id("jittered", row.created_at, tick);
        let due = f.db.get(&id).await.unwrap().pending_state.pending_at();
        let due = due.expect("pending at its due time");
        assert_eq!(
            due,
            jittered.due_at(row.created_at, tick),
            "where every node puts it"
        );
        assert!(
            tick <= due && due < tick + chrono::Duration::seconds(30),
            "{due} for {tick}"
        );
        offsets.push(due - tick);
    }
    assert!(
        offsets.iter().any(|offset| !offset.is_zero()),
        "{offsets:?}"
    );
}
