//! Unit tests of the TLS modes and roots that need no server.

use crate::{PostgresConfig, PostgresError, tls::*};

#[test]
fn modes_parse_and_print_as_libpq_names_them() {
    for mode in [
        SslMode::Disable,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ] {
        assert_eq!(mode.as_str().parse::<SslMode>(), Ok(mode));
    }
    let err = "allow".parse::<SslMode>().unwrap_err();
    assert!(
        err.contains("not `allow`") && err.contains("verify-full"),
        "{err}"
    );
}

#[test]
fn an_unreadable_root_file_is_a_config_error_naming_it() {
    let config = PostgresConfig::from_url(
        "postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    )
    .unwrap();
    let Err(PostgresError::InvalidConfig { problem, .. }) = Tls::new(&config) else {
        panic!("a missing root file must be refused");
    };
    assert!(problem.contains("/nonexistent/ca.pem"), "{problem}");
}

#[test]
fn the_default_roots_and_the_modes_without_roots_build() {
    for mode in [SslMode::Prefer, SslMode::Require, SslMode::VerifyFull] {
        let config = PostgresConfig::from_url(&format!("postgres://h/db?sslmode={mode}")).unwrap();
        assert_eq!(config.root_certificates, RootCertificates::Mozilla);
        assert!(Tls::new(&config).is_ok());
    }
}

#[test]
fn roots_given_in_code_must_hold_a_usable_certificate() {
    let config = PostgresConfig::from_url("postgres://h/db?sslmode=verify-ca")
        .unwrap()
        .with_root_certificates(vec![b"not a certificate".to_vec().into()]);
    let Err(PostgresError::InvalidConfig { problem, .. }) = Tls::new(&config) else {
        panic!("roots without a usable certificate must be refused");
    };
    assert!(
        problem.contains("none of the root certificates given"),
        "{problem}"
    );
}
