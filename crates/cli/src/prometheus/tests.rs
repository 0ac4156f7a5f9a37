//! The recorder's buckets and its text.

use super::{Bounds, EVENTS, FixedHistogram, PrometheusRecorder, SECONDS};
use metrics::{HistogramFn as _, Key, Label, Level, Metadata, Recorder as _, SharedString, Unit};

fn metadata() -> Metadata<'static> {
    Metadata::new("test", Level::INFO, None)
}

#[test]
fn a_sample_counts_in_the_first_bucket_at_or_above_it_and_in_every_later_one() {
    static BOUNDS: &[f64] = &[1.0, 2.0, 5.0];
    let histogram = FixedHistogram::new(Bounds::new(BOUNDS));
    for value in [0.5, 1.0, 1.5, 2.0, 7.0, f64::NAN] {
        histogram.record(value);
    }
    histogram.record_many(3.0, 2);
    let (counts, sum) = histogram.read();
    assert_eq!(counts, [2, 4, 6, 8], "le=1, le=2, le=5, +Inf, cumulative");
    assert!(
        sum.is_nan(),
        "a NaN sample makes the sum NaN, as Prometheus' own clients do"
    );
    let plain = FixedHistogram::new(Bounds::new(SECONDS));
    plain.record(0.000_5);
    plain.record(400.0);
    let (counts, sum) = plain.read();
    assert_eq!((counts[0], counts[SECONDS.len()]), (1, 2));
    assert!((sum - 400.000_5).abs() < 1e-9);
}

#[test]
fn the_bucket_found_by_exponent_is_the_first_bound_at_or_above_the_value() {
    static ODD: &[f64] = &[-3.0, 0.0, 1e-300, 0.7, 0.75, 0.8, 1.0, 1e300];
    for bounds in [SECONDS, EVENTS, super::DEFAULT, ODD] {
        let found = Bounds::new(bounds);
        let mut values = vec![
            0.0,
            -0.0,
            -1.0,
            -5.0,
            1e-310,
            f64::MIN_POSITIVE,
            1e-9,
            7e-4,
            1.0,
            3.0,
            1e9,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for bound in bounds {
            values.extend([*bound, bound.next_down(), bound.next_up()]);
        }
        for value in values {
            let expected = bounds.partition_point(|bound| *bound < value);
            assert_eq!(found.bucket(value), expected, "{value} in {bounds:?}");
        }
        assert_eq!(
            found.bucket(f64::NAN),
            bounds.len(),
            "a NaN above every bound"
        );
    }
}

#[test]
fn the_text_has_help_type_and_each_series_with_escaped_labels_and_histogram_lines() {
    let recorder = PrometheusRecorder::new(Vec::new(), vec![("_seconds".to_string(), SECONDS)]);
    recorder.describe_counter(
        "demo_total".into(),
        None,
        SharedString::const_str("things\ncounted \\ here"),
    );
    recorder.describe_histogram(
        "demo_seconds".into(),
        Some(Unit::Seconds),
        SharedString::const_str("how long"),
    );
    let labels = |value: &'static str| vec![Label::new("function", value)];
    recorder
        .register_counter(
            &Key::from_parts("demo_total", labels("a\"b\\c\nd")),
            &metadata(),
        )
        .increment(3);
    recorder
        .register_gauge(&Key::from_name("demo-gauge"), &metadata())
        .set(-1.5);
    let seconds =
        recorder.register_histogram(&Key::from_parts("demo_seconds", labels("f")), &metadata());
    seconds.record(0.003);
    seconds.record(1_000.0);
    let text = recorder.handle().render();
    let expected_counter = "# HELP demo_total things\\ncounted \\\\ here\n# TYPE demo_total counter\n\
                            demo_total{function=\"a\\\"b\\\\c\\nd\"} 3\n";
    assert!(text.contains(expected_counter), "{text}");
    assert!(
        text.contains("# TYPE demo_gauge gauge\ndemo_gauge -1.5\n"),
        "{text}"
    );
    assert!(
        text.contains("# HELP demo_seconds how long (seconds)\n# TYPE demo_seconds histogram\n"),
        "{text}"
    );
    for line in [
        "demo_seconds_bucket{function=\"f\",le=\"0.0025\"} 0",
        "demo_seconds_bucket{function=\"f\",le=\"0.005\"} 1",
        "demo_seconds_bucket{function=\"f\",le=\"300\"} 1",
        "demo_seconds_bucket{function=\"f\",le=\"+Inf\"} 2",
        "demo_seconds_sum{function=\"f\"} 1000.003",
        "demo_seconds_count{function=\"f\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let buckets = text
        .lines()
        .filter(|l| l.starts_with("demo_seconds_bucket"))
        .count();
    assert_eq!(buckets, SECONDS.len() + 1);
}

#[test]
fn the_histograms_of_serve_get_their_buckets_by_name_then_suffix() {
    let serve = super::serve_recorder();
    let replayed = concepts::metrics::EVENTS_REPLAYED;
    serve
        .recorder
        .register_histogram(&Key::from_name(replayed), &metadata())
        .record(3.0);
    serve
        .recorder
        .register_histogram(
            &Key::from_name(concepts::metrics::ATTEMPT_DURATION),
            &metadata(),
        )
        .record(0.2);
    let text = serve.handle.render();
    assert!(
        text.contains(&format!("{replayed}_bucket{{le=\"5\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{replayed}_bucket{{le=\"20000\"}} 1")),
        "{text}"
    );
    let duration = concepts::metrics::ATTEMPT_DURATION;
    assert!(
        text.contains(&format!("{duration}_bucket{{le=\"0.25\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{duration}_bucket{{le=\"0.1\"}} 0")),
        "{text}"
    );
}
