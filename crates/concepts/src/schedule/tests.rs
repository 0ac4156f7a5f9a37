//! The specs, the daylight-saving rule on the four transitions of Europe/Prague and
//! America/New_York in 2026, the catch-up arithmetic and the tick ids.

use super::{
    Definition, Due, Missed, Overlap, ScheduleName, Spec, SpecError, Zone, due_ticks,
    tick_execution_id,
};
use chrono::{DateTime, Utc};
use std::time::Duration;

fn at(text: &str) -> DateTime<Utc> {
    text.parse().expect("an RFC 3339 time")
}

fn spec(text: &str) -> Spec {
    text.parse().unwrap_or_else(|err| panic!("{text}: {err}"))
}

fn zone(name: &str) -> Zone {
    name.parse().expect("an IANA zone")
}

fn times(spec_text: &str, zone_name: &str, after: &str, count: usize) -> Vec<String> {
    spec(spec_text)
        .fire_times(zone(zone_name), at(after), count)
        .iter()
        .map(|time| time.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect()
}

#[test]
fn prague_spring_forward_fires_a_missing_local_time_once_at_the_jump() {
    // 2026-03-29 02:00 CET (01:00 UTC): the clocks jump to 03:00 CEST.
    assert_eq!(
        times("30 2 * * *", "Europe/Prague", "2026-03-27T12:00:00Z", 3),
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    // Every half hour: 02:00 and 02:30 do not exist, and fire once with 03:00, at the jump.
    assert_eq!(
        times("*/30 * * * *", "Europe/Prague", "2026-03-29T00:00:00Z", 3),
        [
            "2026-03-29T00:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:30:00Z"
        ]
    );
}

#[test]
fn prague_fall_back_fires_a_repeated_local_time_once_at_its_first_occurrence() {
    // 2026-10-25 03:00 CEST (01:00 UTC): the clocks go back to 02:00 CET; 02:30 happens twice.
    assert_eq!(
        times("30 2 * * *", "Europe/Prague", "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
    // From inside the repeated hour, nothing fires again until the local clock passes it.
    assert_eq!(
        times("*/30 * * * *", "Europe/Prague", "2026-10-25T01:10:00Z", 1),
        ["2026-10-25T02:00:00Z"]
    );
}

#[test]
fn new_york_spring_forward_and_fall_back_follow_the_same_rule() {
    // 2026-03-08 02:00 EST (07:00 UTC): the clocks jump to 03:00 EDT.
    assert_eq!(
        times(
            "*/30 * * * *",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            3
        ),
        [
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z"
        ]
    );
    assert_eq!(
        times("15 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:15:00Z"]
    );
    // 2026-11-01 02:00 EDT (06:00 UTC): the clocks go back to 01:00 EST; 01:00-01:59 repeat.
    assert_eq!(
        times(
            "*/30 * * * *",
            "America/New_York",
            "2026-11-01T05:00:00Z",
            2
        ),
        ["2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z"]
    );
    assert_eq!(
        times("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn intervals_count_elapsed_time_from_the_epoch_in_every_zone() {
    for zone_name in ["UTC", "Europe/Prague", "America/New_York"] {
        assert_eq!(
            times("every 15m offset 5m", zone_name, "2026-03-29T00:52:00Z", 3),
            [
                "2026-03-29T01:05:00Z",
                "2026-03-29T01:20:00Z",
                "2026-03-29T01:35:00Z"
            ]
        );
    }
    assert_eq!(
        times("every 15m", "UTC", "2026-03-29T01:15:00Z", 1),
        ["2026-03-29T01:30:00Z"],
        "strictly after"
    );
}

#[test]
fn cron_with_seconds_and_a_spec_that_never_matches() {
    assert_eq!(
        times("*/20 * * * * *", "UTC", "2026-01-01T00:00:05Z", 3),
        [
            "2026-01-01T00:00:20Z",
            "2026-01-01T00:00:40Z",
            "2026-01-01T00:01:00Z"
        ]
    );
    assert_eq!(
        spec("0 0 30 2 *").next_after(Zone::UTC, at("2026-01-01T00:00:00Z")),
        None
    );
}

#[test]
fn bad_specs_and_zones_say_what_is_wrong_and_where() {
    let message = |text: &str| text.parse::<Spec>().unwrap_err().to_string();
    let minute = message("61 * * * *");
    assert!(minute.contains("the minute field `61`"), "{minute}");
    let weekday = message("0 0 * * funday");
    assert!(
        weekday.contains("the day of week field `funday`"),
        "{weekday}"
    );
    assert!(
        message("* * *").contains("3 fields"),
        "{}",
        message("* * *")
    );
    assert!(message("every 0m").contains("the interval is zero"));
    assert!(message("every 15m offset 15m").contains("shorter than the interval"));
    assert!(matches!(
        "every 15x".parse::<Spec>(),
        Err(SpecError::Every { .. })
    ));
    assert!(matches!(
        "every -5m".parse::<Spec>(),
        Err(SpecError::Every { .. })
    ));
    assert_eq!(
        "Mars/Olympus_Mons".parse::<Zone>().unwrap_err().to_string(),
        "`Mars/Olympus_Mons` is not a time zone of the IANA database (as `Europe/Prague`, \
         `America/New_York` or `UTC`)"
    );
}

#[test]
fn specs_print_as_they_parse() {
    for text in [
        "every 90m",
        "every 1h offset 5m",
        "every 2d",
        "0 */5 * * *",
        "30 0 9 * * 1-5",
    ] {
        assert_eq!(spec(text).to_string(), text);
        assert_eq!(spec(&spec(text).to_string()), spec(text));
    }
    assert_eq!(spec("  0   9 * *  *").to_string(), "0 9 * * *");
}

#[test]
fn due_ticks_fire_inside_the_catch_up_window_and_miss_the_older_ones() {
    let every_minute = spec("every 1m");
    let due = due_ticks(
        &every_minute,
        Zone::UTC,
        at("2026-01-01T10:00:00Z"),
        at("2026-01-01T10:10:30Z"),
        Duration::from_secs(180),
        10,
    );
    assert_eq!(
        due,
        Due {
            fire: vec![
                at("2026-01-01T10:08:00Z"),
                at("2026-01-01T10:09:00Z"),
                at("2026-01-01T10:10:00Z")
            ],
            missed: Some(Missed {
                first: at("2026-01-01T10:01:00Z"),
                last: at("2026-01-01T10:07:00Z"),
                count: 7,
                exact: true,
            }),
            handled_through: Some(at("2026-01-01T10:10:00Z")),
            next: Some(at("2026-01-01T10:11:00Z")),
        }
    );
    // A limit stops the pass; the next one starts after what was handled.
    let limited = due_ticks(
        &every_minute,
        Zone::UTC,
        at("2026-01-01T10:00:00Z"),
        at("2026-01-01T10:10:30Z"),
        Duration::from_secs(180),
        2,
    );
    assert_eq!(limited.fire.len(), 2);
    assert_eq!(limited.handled_through, Some(at("2026-01-01T10:09:00Z")));
    assert_eq!(limited.next, Some(at("2026-01-01T10:10:00Z")));
    // Nothing due yet.
    let early = due_ticks(
        &every_minute,
        Zone::UTC,
        at("2026-01-01T10:00:00Z"),
        at("2026-01-01T10:00:59Z"),
        Duration::from_secs(180),
        10,
    );
    assert_eq!(
        (early.fire.len(), early.missed, early.handled_through),
        (0, None, None)
    );
}

#[test]
fn a_long_downtime_is_counted_up_to_the_limit_then_passed_over() {
    let due = due_ticks(
        &spec("every 1s"),
        Zone::UTC,
        at("2026-01-01T00:00:00Z"),
        at("2026-01-03T08:00:00Z"),
        Duration::from_secs(10),
        100,
    );
    let missed = due.missed.expect("missed ticks");
    assert_eq!((missed.count, missed.exact), (Missed::COUNT_LIMIT, false));
    assert_eq!(missed.first, at("2026-01-01T00:00:01Z"));
    assert_eq!(missed.last, at("2026-01-03T07:59:49Z"));
    assert_eq!(
        due.fire.len(),
        11,
        "the window's ticks, its start and now included"
    );
    assert_eq!(due.fire[0], at("2026-01-03T07:59:50Z"));
}

#[test]
fn tick_ids_are_the_same_for_the_same_tick_and_differ_otherwise() {
    let created = at("2026-01-01T00:00:00Z");
    let tick = at("2026-06-01T12:00:00Z");
    let id = tick_execution_id("nightly", created, tick);
    assert_eq!(id, tick_execution_id("nightly", created, tick));
    assert!(id.is_top_level());
    assert_eq!(
        id.to_string(),
        "E_01KT1GW6G0AB25X1G37W0R4CVK",
        "the same in every build: nodes of different versions agree"
    );
    assert_ne!(
        id,
        tick_execution_id("nightly", created, at("2026-06-01T12:00:01Z"))
    );
    assert_ne!(id, tick_execution_id("nightly2", created, tick));
    assert_ne!(
        id,
        tick_execution_id("nightly", at("2026-01-02T00:00:00Z"), tick)
    );
}

#[test]
fn overlap_policies_parse_by_name() {
    for policy in Overlap::ALL {
        assert_eq!(policy.name().parse::<Overlap>(), Ok(policy));
    }
    assert_eq!(Overlap::default(), Overlap::Skip);
    assert!(
        "sometimes"
            .parse::<Overlap>()
            .unwrap_err()
            .to_string()
            .contains("skip, buffer-one")
    );
}

#[test]
fn schedule_names_are_short_plain_and_start_with_a_letter_or_digit() {
    for good in ["nightly", "report.daily-7", "9am_digest"] {
        assert_eq!(good.parse::<ScheduleName>().unwrap().as_str(), good);
    }
    for (bad, reason) in [
        ("", "empty"),
        ("-x", "start with"),
        ("has space", "only ASCII"),
        ("zürich", "only ASCII"),
    ] {
        let err = bad.parse::<ScheduleName>().unwrap_err().to_string();
        assert!(err.contains(reason), "{bad:?}: {err}");
    }
    assert!("a".repeat(101).parse::<ScheduleName>().is_err());
    assert!("a".repeat(100).parse::<ScheduleName>().is_ok());
}

fn nightly() -> Definition {
    Definition::new(
        "nightly".parse().unwrap(),
        "ns:pkg/ifc.report".parse().unwrap(),
        crate::Json(serde_json::json!({"full": true})),
        spec("0 3 * * *"),
    )
}

#[test]
fn a_definition_lists_what_differs_and_round_trips_through_json() {
    let definition = nightly();
    assert_eq!(
        definition.differences(&definition.clone()),
        Vec::<&str>::new()
    );
    let mut other = definition.clone();
    other.spec = spec("every 1h");
    other.zone = zone("Europe/Prague");
    other.end = Some(at("2027-01-01T00:00:00Z"));
    assert_eq!(definition.differences(&other), ["spec", "time zone", "end"]);
    let json = serde_json::to_value(&other).unwrap();
    assert_eq!(json["spec"], "every 1h");
    assert_eq!(json["zone"], "Europe/Prague");
    let back: Definition = serde_json::from_value(json).unwrap();
    assert_eq!(back, other);
    let mut broken = serde_json::to_value(&other).unwrap();
    broken["spec"] = serde_json::json!("61 * * * *");
    assert!(serde_json::from_value::<Definition>(broken).is_err());
}

#[test]
fn jitter_delays_each_tick_alike_on_every_node_and_within_its_bound() {
    let created = at("2026-01-01T00:00:00Z");
    let mut definition = nightly();
    let tick = at("2026-06-01T03:00:00Z");
    assert_eq!(definition.due_at(created, tick), tick, "no jitter");
    definition.jitter = Duration::from_secs(600);
    let due: Vec<_> = (0..50)
        .map(|day| tick + chrono::Duration::days(day))
        .map(|tick| (tick, definition.due_at(created, tick)))
        .collect();
    for (tick, due_at) in &due {
        assert!(*due_at >= *tick && *due_at < *tick + chrono::Duration::seconds(600));
        assert_eq!(
            definition.due_at(created, *tick),
            *due_at,
            "the same every time"
        );
    }
    let offsets: std::collections::BTreeSet<_> =
        due.iter().map(|(tick, due_at)| *due_at - *tick).collect();
    assert!(offsets.len() > 40, "spread, not one offset: {offsets:?}");
}

// Values the parsers accept (`every` and `offset` as the spec parser takes them, a catch-up
// window and a jitter as `HumanDuration` takes them) never make the time arithmetic of a pass
// panic.

#[test]
fn every_with_a_huge_interval_and_an_offset_has_no_next_tick_past_the_calendar() {
    // Accepted by the parser (the offset is shorter than the interval); `(k + 1) * interval +
    // offset` overflows `i64` microseconds.
    let every = spec("every 106751991d offset 1d");
    assert_eq!(
        every.next_after(Zone::UTC, at("2026-01-01T00:00:00Z")),
        None
    );
}

#[test]
fn a_catch_up_window_past_the_calendar_starts_at_its_beginning() {
    // `catchup_window: "200000000d"` is accepted; `now - window` leaves chrono's range.
    let now = at("2026-01-01T00:00:00Z");
    let window = Duration::from_secs(200_000_000 * 86_400);
    let due = due_ticks(
        &spec("every 1m"),
        Zone::UTC,
        now,
        now + chrono::Duration::minutes(1),
        window,
        100,
    );
    assert_eq!(due.fire.len(), 1);
}

#[test]
fn a_jitter_past_the_calendar_is_clamped() {
    // `jitter: "106751991d"` is accepted; `tick + offset` leaves chrono's range.
    let now = at("2026-01-01T00:00:00Z");
    let mut definition = nightly();
    definition.jitter = Duration::from_secs(106_751_991 * 86_400);
    for m in 0..200 {
        assert!(definition.due_at(now, now + chrono::Duration::minutes(m)) >= now);
    }
}
