//! C1, C2, C12, C13: the writes of a schedule's row: create (idempotent, a conflict naming what
//! differs), pause, resume, update and delete, what each leaves of its ticks, a changed spec, and
//! durations kept to the microsecond.

use super::{Fixture, definition, settings};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{expect_kind, expect_validation},
};
use concepts::{
    DbErrorKind, DuplicateKind, Json,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, ScheduleChange, ScheduleChanged,
        ScheduleCreated, ScheduleName, tick_execution_id,
    },
};

/// C1: `create_schedule` stores a schedule whose first tick is the first after now; the same
/// definition again is answered `AlreadyExisted` and writes nothing; another definition under
/// the name is refused, naming what differs, and leaves the stored one as it was. Listing
/// pages through the schedules in name order; an unknown name is `NotFound`.
pub async fn c1_create_is_idempotent_and_names_a_conflict<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    f.move_to(30);
    let row = f.create(definition("nightly", "0 3 * * *")).await;
    assert_eq!(row.created_at, f.now());
    assert_eq!(
        row.next_due_at,
        Some(f.at(3 * 3600)),
        "the first 03:00 after now"
    );
    assert_eq!(row.status(), "active");
    assert_eq!(
        (row.runs, row.ticks_recorded, row.paused.clone()),
        (0, 0, None)
    );
    let name = row.name().clone();

    f.move_to(60);
    let again = CreateScheduleRequest {
        definition: definition("nightly", "0 3 * * *"),
        settings: settings(),
        now: f.now(),
    };
    let answer = f.db.create_schedule(again.clone()).await.expect("repeat");
    assert_eq!(answer, ScheduleCreated::AlreadyExisted);
    assert_eq!(f.row(&name).await, row, "a repeated create writes nothing");

    let mut other = again;
    other.definition = definition("nightly", "0 4 * * *");
    other.definition.params = Json(serde_json::json!(["other"]));
    let err = expect_kind(f.db.create_schedule(other).await, DbErrorKind::Duplicate);
    let concepts::DbError::Duplicate(DuplicateKind::ScheduleConflict { differences, .. }) = &err
    else {
        panic!("a conflict: {err:?}");
    };
    assert_eq!(differences, &["parameters", "spec"]);
    assert!(
        err.to_string().contains("parameters and spec"),
        "the message names what differs: {err}"
    );
    assert_eq!(f.row(&name).await, row, "a refused create writes nothing");

    for n in ["b", "a", "d", "c"] {
        f.create(definition(n, "every 1h")).await;
    }
    let page = f.db.list_schedules(None, 3).await.expect("list");
    let names: Vec<_> = page.iter().map(|row| row.name().to_string()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let rest =
        f.db.list_schedules(Some(page[2].name()), 3)
            .await
            .expect("list");
    let names: Vec<_> = rest.iter().map(|row| row.name().to_string()).collect();
    assert_eq!(names, ["d", "nightly"]);

    let unknown: ScheduleName = "unknown".parse().unwrap();
    expect_kind(f.db.get_schedule(&unknown).await, DbErrorKind::NotFound);
    let change = ChangeScheduleRequest {
        name: unknown,
        change: ScheduleChange::Resume,
        now: f.now(),
    };
    expect_kind(f.db.change_schedule(change).await, DbErrorKind::NotFound);
}

/// C2: a paused schedule fires nothing and is due for no pass; pausing it again changes
/// nothing; resumed, the ticks that fell while it was paused are recorded as one skipped range
/// and the next tick fires. An update applies to the ticks after the last one handled (the same
/// definition again changes nothing; a new name is refused). Deleting it while its run is in
/// flight leaves the run going and says so; its row and ticks are gone, and the name created
/// again is a new schedule whose ticks are new executions.
pub async fn c2_pause_resume_update_delete<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let row = f.create(definition("minutely", "every 1m")).await;
    let name = row.name().clone();
    let change = |change, now| ChangeScheduleRequest {
        name: name.clone(),
        change,
        now,
    };
    f.move_to(30);
    let pause = ScheduleChange::Pause {
        note: "maintenance".to_owned(),
    };
    let paused =
        f.db.change_schedule(change(pause.clone(), f.now()))
            .await
            .unwrap();
    assert_eq!(paused, ScheduleChanged::Changed);
    let row = f.row(&name).await;
    assert_eq!(row.status(), "paused");
    assert_eq!(
        row.paused.as_ref().map(|p| p.note.as_str()),
        Some("maintenance")
    );
    assert_eq!(
        row.next_due_at, None,
        "a paused schedule is due for no pass"
    );
    let again = f.db.change_schedule(change(pause, f.now())).await.unwrap();
    assert_eq!(again, ScheduleChanged::Unchanged);

    f.move_to(330);
    let outcome = f.pass().await;
    assert!(outcome.fired.is_empty(), "paused: {outcome:?}");
    let resumed =
        f.db.change_schedule(change(ScheduleChange::Resume, f.now()))
            .await
            .unwrap();
    assert_eq!(resumed, ScheduleChanged::Changed);
    assert_eq!(f.history(&name).await, ["skipped paused 60..300 x5"]);
    let row = f.row(&name).await;
    assert_eq!((row.status(), row.next_due_at), ("active", Some(f.at(360))));
    assert!(f.pass().await.fired.is_empty(), "nothing is due before 6m");
    let resume_again =
        f.db.change_schedule(change(ScheduleChange::Resume, f.now()))
            .await;
    assert_eq!(resume_again.unwrap(), ScheduleChanged::Unchanged);

    f.move_to(360);
    let fired = f.pass().await.fired;
    let run = tick_execution_id(name.as_str(), row.created_at, f.at(360));
    assert_eq!(
        fired,
        std::slice::from_ref(&run),
        "the tick's execution id is derived from the tick"
    );

    let update = |spec: &str| ScheduleChange::Update {
        definition: Box::new(definition("minutely", spec)),
        settings: settings(),
    };
    let updated =
        f.db.change_schedule(change(update("every 5m"), f.now()))
            .await
            .unwrap();
    assert_eq!(updated, ScheduleChanged::Changed);
    let row = f.row(&name).await;
    assert_eq!(
        row.next_due_at,
        Some(f.at(600)),
        "the next 5-minute tick after 6m"
    );
    assert_eq!(row.next_fire_times(f.now(), 2), [f.at(600), f.at(900)]);
    let same =
        f.db.change_schedule(change(update("every 5m"), f.now()))
            .await
            .unwrap();
    assert_eq!(same, ScheduleChanged::Unchanged);
    let renamed = ScheduleChange::Update {
        definition: Box::new(definition("other", "every 5m")),
        settings: settings(),
    };
    expect_validation(f.db.change_schedule(change(renamed, f.now())).await);

    assert!(f.is_running(&run).await);
    let deleted =
        f.db.change_schedule(change(ScheduleChange::Delete, f.now()))
            .await
            .unwrap();
    assert_eq!(
        deleted,
        ScheduleChanged::Deleted {
            running: Some(run.clone())
        }
    );
    assert!(f.is_running(&run).await, "its run goes on");
    expect_kind(
        f.db.get_schedule(&name).await,
        concepts::DbErrorKind::NotFound,
    );
    assert!(
        f.ticks(&name).await.is_empty(),
        "its ticks are deleted with it"
    );
    let resume =
        f.db.change_schedule(change(ScheduleChange::Resume, f.now()))
            .await;
    expect_kind(resume, DbErrorKind::NotFound);

    f.move_to(400);
    let again = f.create(definition("minutely", "every 1m")).await;
    f.move_to(420);
    let fired = f.pass().await.fired;
    let new_run = tick_execution_id(name.as_str(), again.created_at, f.at(420));
    assert_eq!(fired, std::slice::from_ref(&new_run));
    assert_ne!(
        new_run,
        tick_execution_id(name.as_str(), row.created_at, f.at(420))
    );
}

/// C12: a new spec applies from the update on. The old spec's ticks that no pass handled are
/// recorded as one skipped range (`updated`); the new spec's ticks before the update never
/// fire (an hourly schedule changed to every minute at half past fired up to five of the
/// minutes before the change, the ones inside its catch-up window, at once).
pub async fn c12_a_changed_spec_applies_from_the_change_on<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let minutely = f.create(definition("changed", "every 1m")).await;
    let name = minutely.name().clone();
    f.move_to(60);
    let fired = f.pass().await.fired;
    assert_eq!(fired.len(), 1, "the tick at 60");
    f.finish(&fired[0]).await;
    // Down from 60 to 1835 s: the minutes from 120 to 1800 were never handled.
    f.move_to(1835);
    let update = ChangeScheduleRequest {
        name: name.clone(),
        change: ScheduleChange::Update {
            definition: Box::new(definition("changed", "every 10s")),
            settings: settings(),
        },
        now: f.now(),
    };
    let changed = f.db.change_schedule(update).await.expect("change_schedule");
    assert_eq!(changed, ScheduleChanged::Changed);
    assert_eq!(
        f.row(&name).await.next_due_at,
        Some(f.at(1840)),
        "the new spec's first tick after the change"
    );
    let outcome = f.pass().await;
    assert!(
        outcome.fired.is_empty(),
        "nothing fires at 1830: {outcome:?}"
    );
    f.move_to(1840);
    f.pass().await;
    assert_eq!(
        f.history(&name).await,
        [
            "fired by tick at 60",
            "skipped updated 120..1800 x29",
            "fired by tick at 1840"
        ]
    );
}

/// C13: a schedule's durations are kept to the microsecond on every backend: a create repeated
/// with a catch-up window and a jitter of finer precision is the same schedule
/// (`AlreadyExisted`; the memory store kept the nanoseconds, so it answered so where SQLite
/// and PostgreSQL, which keep microseconds, refused it as a conflict), and the stored row
/// reads back the microseconds.
pub async fn c13_durations_are_kept_to_the_microsecond<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let mut fine = definition("fine", "every 1m");
    fine.catchup_window = std::time::Duration::new(90, 123_456_789);
    fine.jitter = std::time::Duration::from_nanos(2_500);
    let row = f.create(fine.clone()).await;
    assert_eq!(
        (row.definition.catchup_window, row.definition.jitter),
        (
            std::time::Duration::new(90, 123_456_000),
            std::time::Duration::from_micros(2)
        )
    );
    let again = CreateScheduleRequest {
        definition: fine.clone(),
        settings: settings(),
        now: f.now(),
    };
    let answer = f.db.create_schedule(again).await.expect("create_schedule");
    assert_eq!(answer, ScheduleCreated::AlreadyExisted);
    let update = ChangeScheduleRequest {
        name: fine.name.clone(),
        change: ScheduleChange::Update {
            definition: Box::new(fine),
            settings: settings(),
        },
        now: f.now(),
    };
    let changed = f.db.change_schedule(update).await.expect("change_schedule");
    assert_eq!(changed, ScheduleChanged::Unchanged);
}
