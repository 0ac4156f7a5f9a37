//! The fast path writes and reads exactly what chrono does.

use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Fast(#[serde(with = "super")] DateTime<Utc>);

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Chrono(DateTime<Utc>);

fn both(at: DateTime<Utc>) -> (String, String) {
    let fast = serde_json::to_string(&Fast(at)).unwrap();
    let chrono = serde_json::to_string(&Chrono(at)).unwrap();
    (fast, chrono)
}

/// Any timestamp chrono can hold, leap seconds and negative years included, with each of the
/// four fraction lengths equally likely.
pub(crate) fn any_timestamp() -> impl Strategy<Value = DateTime<Utc>> {
    let seconds = DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp();
    let nanos = prop_oneof![
        Just(0_u32),
        (0..1_000_u32).prop_map(|ms| ms * 1_000_000),
        (0..1_000_000_u32).prop_map(|us| us * 1_000),
        0..2_000_000_000_u32,
    ];
    (seconds, nanos).prop_filter_map("in chrono's range", |(seconds, nanos)| {
        DateTime::from_timestamp(seconds, nanos)
    })
}

proptest! {
    #[test]
    fn writes_what_chrono_writes_and_reads_it_back(at in any_timestamp()) {
        let (fast, chrono) = both(at);
        prop_assert_eq!(&fast, &chrono);
        prop_assert_eq!(serde_json::from_str::<Fast>(&chrono).unwrap(), Fast(at));
    }

    #[test]
    fn reads_what_chrono_reads(text in "[0-9+-]{0,6}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|z|[+-][0-9]{2}:[0-9]{2})") {
        let json = serde_json::to_string(&text).unwrap();
        let fast = serde_json::from_str::<Fast>(&json).map(|Fast(at)| at).map_err(|e| e.to_string());
        let chrono = serde_json::from_str::<Chrono>(&json).map(|Chrono(at)| at).map_err(|e| e.to_string());
        prop_assert_eq!(fast, chrono);
    }
}

#[test]
fn the_four_fraction_lengths_and_the_edges() {
    let at = Utc.with_ymd_and_hms(2026, 12, 5, 10, 0, 7).unwrap();
    for nanos in [0, 120_000_000, 123_456_000, 123_456_789, 999_999_999] {
        let at = at.with_nanosecond(nanos).unwrap();
        let (fast, chrono) = both(at);
        assert_eq!(fast, chrono);
    }
    assert_eq!(both(at).0, "\"2026-12-05T10:00:07Z\"");
    for edge in [
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
        DateTime::UNIX_EPOCH,
    ] {
        let (fast, chrono) = both(edge);
        assert_eq!(fast, chrono);
        assert_eq!(serde_json::from_str::<Fast>(&fast).unwrap(), Fast(edge));
    }
    for refused in [
        "\"2026-02-30T00:00:00Z\"",
        "\"2026-12-05T24:00:00Z\"",
        "\"yesterday\"",
        "7",
    ] {
        assert!(serde_json::from_str::<Fast>(refused).is_err(), "{refused}");
    }
}
