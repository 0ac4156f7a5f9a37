//! Unit tests of the parts that need no server: URL parsing, payloads, error mapping, the
//! text of a write's one statement.

mod plans;
mod tls;

use crate::{
    PostgresConfig, PostgresError,
    codec::{micros, sub_micros, timestamp},
    error::duplicate_kind,
};
use chrono::{TimeZone, Utc};
use concepts::DuplicateKind;
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

/// Every password the driver would read from a URL is hidden, wherever it stands and whatever
/// it holds; a URL that does not parse names no password in its error either.
#[test]
fn passwords_stay_out_of_redacted_urls_and_parse_errors() {
    const SECRET: &str = "pa55/w?rd#x";
    let urls = [
        format!("postgres://user:{SECRET}@h:5432/db"),
        format!("postgres://user:{SECRET}@h/db?pool_size=2"),
        "postgres://user:pa55%2Fw%3Frd%23x@h/db".to_string(),
        format!("postgres://user@h/db?application_name=a&password={SECRET}"),
        format!("postgresql://user:{SECRET}@h/db?password={SECRET}&sslmode=require"),
    ];
    for url in &urls {
        let config = PostgresConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        for shown in [config.redacted_url().to_string(), format!("{config:?}")] {
            assert!(!shown.contains("pa55"), "{url} shows its password: {shown}");
        }
        assert!(
            config.redacted_url().contains("***"),
            "{}",
            config.redacted_url()
        );
    }
    let bad = [
        format!("postgres://user:{SECRET}@h:notaport/db"),
        format!("postgres://user:{SECRET}@h/db?pool_size=0"),
        format!("postgres://user:{SECRET}@h/db?sslmode=verify"),
        format!("postgres://user:{SECRET}@h/db?no_such_option=1"),
        format!("postgres://user@h/db?password={SECRET}&pool_size=x"),
        format!("user:{SECRET}@h/db"),
        format!("mysql://user:{SECRET}@h/db"),
    ];
    for url in &bad {
        let err = PostgresConfig::from_url(url).unwrap_err();
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(!shown.contains("pa55"), "{url} shows its password: {shown}");
        }
    }
}

#[test]
fn sslmode_and_sslrootcert_parse_into_the_config() {
    use crate::{RootCertificates, SslMode};
    let config = PostgresConfig::from_url(
        "postgres://u@h/db?sslmode=verify-full&sslrootcert=/etc/stele/ca.pem",
    )
    .unwrap();
    assert_eq!(config.ssl_mode, SslMode::VerifyFull);
    assert_eq!(
        config.root_certificates,
        RootCertificates::PemFile("/etc/stele/ca.pem".into())
    );
    let default = PostgresConfig::from_url("postgres://u@h/db").unwrap();
    assert_eq!(default.ssl_mode, SslMode::Prefer);
    assert_eq!(default.root_certificates, RootCertificates::Mozilla);
    assert_eq!(default.wait_for_server, Some(Duration::ZERO));
    let waiting = PostgresConfig::from_url("postgres://u@h/db?wait_for_server_s=30").unwrap();
    assert_eq!(waiting.wait_for_server, Some(Duration::from_secs(30)));
    for (url, needle) in [
        (
            "postgres://u@h/db?sslmode=allow",
            "`sslmode` must be one of disable, prefer, require, verify-ca, verify-full, not `allow`",
        ),
        ("postgres://u@h/db?sslrootcert=", "names no file"),
        (
            "postgres://u@h/db?wait_for_server_s=soon",
            "wait_for_server_s",
        ),
    ] {
        let err = PostgresConfig::from_url(url).unwrap_err();
        assert!(err.to_string().contains(needle), "{url}: {err}");
    }
}

/// Every connection of the store (pooled, listener) notices a half-open connection: TCP
/// keepalives probed after 15 s idle, every 5 s, 3 tries, and a `tcp_user_timeout` of 30 s;
/// and opens within `connect_timeout`. The URL's own values win.
#[test]
fn every_connection_has_keepalives_a_user_timeout_and_a_connect_timeout() {
    let config = PostgresConfig::from_url("postgres://u@h/db").unwrap();
    for pg in [config.pool_pg_config(), config.listener_pg_config()] {
        assert!(pg.get_keepalives());
        assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(15));
        assert_eq!(pg.get_keepalives_interval(), Some(Duration::from_secs(5)));
        assert_eq!(pg.get_keepalives_retries(), Some(3));
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(10)));
        let shown = format!("{pg:?}");
        assert!(shown.contains("tcp_user_timeout: Some(30s)"), "{shown}");
    }
    let given = PostgresConfig::from_url(
        "postgres://u@h/db?keepalives_idle=60&keepalives_retries=9&tcp_user_timeout=5&connect_timeout=2",
    )
    .unwrap();
    let pg = given.pool_pg_config();
    assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(60));
    assert_eq!(pg.get_keepalives_retries(), Some(9));
    assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(2)));
    assert!(format!("{pg:?}").contains("tcp_user_timeout: Some(5s)"));
}

#[test]
fn a_writes_parts_become_one_statement_with_their_parameters_renumbered_in_order() {
    use crate::pipeline::{params, statement};
    let check = statement(
        "SELECT $1::int8 = $2::int8 AS refuted",
        params![1_i64, 2_i64],
    );
    let ten = "SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE $10 > $1";
    let parts = vec![
        statement("INSERT INTO a SELECT $1::text", params!["x"]),
        statement(ten, params![0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ];
    let one = crate::persist::combined(Some(check), parts);
    assert_eq!(
        one.sql,
        "WITH c AS MATERIALIZED (SELECT $1::int8 = $2::int8 AS refuted), \
         w1 AS (INSERT INTO a SELECT $3::text), \
         w2 AS (SELECT $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 WHERE $13 > $4) \
         SELECT refuted FROM c"
    );
    assert_eq!(one.params.len(), 13);
    // A write loaded under row locks has nothing to check.
    let loaded = crate::persist::combined(None, vec![statement("SELECT $1::text", params!["y"])]);
    assert_eq!(
        loaded.sql,
        "WITH c AS MATERIALIZED (SELECT false AS refuted), w1 AS (SELECT $1::text) \
         SELECT refuted FROM c"
    );
}
