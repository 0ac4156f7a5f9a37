//! Unit tests of the parts that need no server: URL parsing, payloads, error mapping.

use crate::{
    PostgresConfig, PostgresError,
    codec::{micros, sub_micros, timestamp},
    error::duplicate_kind,
    notify::{parse, payloads},
};
use chrono::{TimeZone, Utc};
use concepts::{DuplicateKind, ExecutionId, kernel::Wakeup};
use std::time::Duration;

#[test]
fn url_with_store_params_parses() {
    let config = PostgresConfig::from_url(
        "postgres://user:secret@127.0.0.1:5433/db?pool_size=3&statement_timeout_ms=1500&application_name=x",
    )
    .unwrap();
    assert_eq!(config.pool_size, 3);
    assert_eq!(config.statement_timeout, Some(Duration::from_millis(1500)));
    assert_eq!(config.database_name(), Some("db"));
    assert!(
        !config.redacted_url().contains("secret"),
        "{}",
        config.redacted_url()
    );
    assert!(!format!("{config:?}").contains("secret"));
    let other = config.with_database("other");
    assert_eq!(other.database_name(), Some("other"));
    assert!(
        other.redacted_url().contains("/other?"),
        "{}",
        other.redacted_url()
    );
}

#[test]
fn statement_timeout_zero_means_none() {
    let config = PostgresConfig::from_url("postgres://u@h/db?statement_timeout_ms=0").unwrap();
    assert_eq!(config.statement_timeout, None);
}

#[test]
fn bad_urls_are_typed_errors_that_say_what_is_wrong() {
    let cases = [
        ("mysql://u@h/db", "postgres://"),
        ("postgres://u@h/db?pool_size=0", "pool_size"),
        ("postgres://u@h/db?pool_size=many", "pool_size"),
        (
            "postgres://u@h/db?statement_timeout_ms=-1",
            "statement_timeout_ms",
        ),
        ("postgres://u@h:notaport/db", "invalid"),
        ("postgres://", "host"),
    ];
    for (url, needle) in cases {
        let err = PostgresConfig::from_url(url).unwrap_err();
        assert!(
            matches!(err, PostgresError::InvalidConfig { .. }),
            "{url}: {err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(needle),
            "{url}: `{message}` lacks `{needle}`"
        );
    }
}

#[test]
fn wakeup_payloads_round_trip() {
    let id: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
    let child: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0.n:a_1".parse().unwrap();
    let at = Utc.timestamp_opt(-1, 999_988_000).unwrap();
    let wakeups = [
        Wakeup::Pending {
            ffqn: "ns:pkg/ifc@1.0.0.fn".parse().unwrap(),
            at,
        },
        Wakeup::Responses(child),
        Wakeup::Finished(id),
    ];
    for wakeup in wakeups {
        let sent = payloads(std::slice::from_ref(&wakeup));
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(parse(&sent[0]), Some(vec![wakeup]));
    }
    assert_eq!(parse("*"), None, "wakes everyone");
    assert_eq!(parse("something new"), None, "wakes everyone");
}

#[test]
fn a_write_publishes_one_pending_payload_per_function_at_its_earliest_time() {
    let f = |name: &str| -> concepts::FunctionFqn { format!("ns:pkg/ifc.{name}").parse().unwrap() };
    let at = |secs| Utc.timestamp_opt(secs, 0).unwrap();
    let id: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
    let sent = payloads(&[
        Wakeup::Pending {
            ffqn: f("a"),
            at: at(7),
        },
        Wakeup::Pending {
            ffqn: f("b"),
            at: at(9),
        },
        Wakeup::Pending {
            ffqn: f("a"),
            at: at(5),
        },
        Wakeup::Finished(id.clone()),
        Wakeup::Finished(id.clone()),
    ]);
    assert_eq!(
        sent,
        [format!(
            "p:5000000:ns:pkg/ifc.a p:9000000:ns:pkg/ifc.b f:{id}"
        )],
        "one payload for the transaction"
    );
    let long: concepts::FunctionFqn = format!("ns:pkg/ifc.{}", "x".repeat(5000)).parse().unwrap();
    assert_eq!(
        payloads(&[Wakeup::Pending {
            ffqn: long,
            at: at(1)
        }]),
        ["*"]
    );
}

#[test]
fn the_wakeups_of_a_large_group_are_packed_into_few_payloads() {
    let wakeups: Vec<Wakeup> = (0..1_000u128)
        .map(|n| Wakeup::Finished(concepts::ExecutionIdTopLevel::from_parts(1, n).into()))
        .collect();
    let sent = payloads(&wakeups);
    assert!(sent.len() < 10, "{} payloads", sent.len());
    assert!(sent.iter().all(|payload| payload.len() < 8_000));
    let key = |w: &Wakeup| format!("{w:?}");
    let mut received: Vec<Wakeup> = sent.iter().flat_map(|p| parse(p).unwrap()).collect();
    received.sort_by_key(key);
    let mut expected = wakeups;
    expected.sort_by_key(key);
    assert_eq!(received, expected);
    assert_eq!(
        parse("f:E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0 *"),
        None,
        "wakes everyone"
    );
}

#[test]
fn timestamps_keep_nanoseconds_through_two_columns() {
    let at = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
    assert_eq!(timestamp(micros(at), sub_micros(at)).unwrap(), at);
    let before_epoch = Utc.timestamp_opt(-5, 999_999_999).unwrap();
    assert_eq!(
        timestamp(micros(before_epoch), sub_micros(before_epoch)).unwrap(),
        before_epoch
    );
    for extreme in [
        chrono::DateTime::<Utc>::MAX_UTC,
        chrono::DateTime::<Utc>::MIN_UTC,
    ] {
        assert_eq!(
            timestamp(micros(extreme), sub_micros(extreme)).unwrap(),
            extreme
        );
    }
}

#[test]
fn unique_violations_map_to_duplicate_kinds() {
    let id = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";
    assert_eq!(
        duplicate_kind(
            "t_execution_pkey",
            &format!("Key (execution_id)=({id}) already exists.")
        ),
        Some(DuplicateKind::Execution(id.parse().unwrap()))
    );
    let delay = "Delay_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";
    assert_eq!(
        duplicate_kind(
            "t_response_delay_uq",
            &format!("Key (execution_id, delay_id)=({id}, {delay}) already exists.")
        ),
        Some(DuplicateKind::DelayResponse {
            execution_id: id.parse().unwrap(),
            delay_id: delay.parse().unwrap()
        })
    );
    let child = format!("{id}.n:batch_1");
    assert_eq!(
        duplicate_kind(
            "t_response_child_uq",
            &format!("Key (execution_id, child_execution_id)=({id}, {child}) already exists.")
        ),
        Some(DuplicateKind::ChildResponse {
            execution_id: id.parse().unwrap(),
            child_execution_id: child.parse().unwrap()
        })
    );
    assert_eq!(
        duplicate_kind(
            "t_event_pkey",
            &format!("Key (execution_id, version)=({id}, 0) already exists.")
        ),
        Some(DuplicateKind::Execution(id.parse().unwrap()))
    );
    assert_eq!(
        duplicate_kind(
            "t_event_pkey",
            &format!("Key (execution_id, version)=({id}, 3) already exists.")
        ),
        None
    );
    assert_eq!(duplicate_kind("other", "Key (a)=(b) already exists."), None);
    assert_eq!(duplicate_kind("t_execution_pkey", "garbage"), None);
}

#[test]
fn a_due_log_shorter_than_its_row_counts_is_incomplete() {
    use concepts::kernel::{ExecutionRow, LogRows};
    use conformance::storage_scenarios::helpers::{create_request, execution_id, ffqn};
    let request = create_request(execution_id(1), ffqn("f"), Utc.timestamp_opt(0, 0).unwrap());
    let mut row = ExecutionRow::new_execution(&request);
    let log = LogRows {
        events: vec![request.to_created_event()],
        responses: Vec::new(),
    };
    assert!(crate::load::log_is_complete(&row, &log));
    let no_events = LogRows {
        events: Vec::new(),
        responses: Vec::new(),
    };
    assert!(
        !crate::load::log_is_complete(&row, &no_events),
        "an event committed after the statement's snapshot"
    );
    row.response_count = 1;
    assert!(
        !crate::load::log_is_complete(&row, &log),
        "a response committed after the statement's snapshot"
    );
}
