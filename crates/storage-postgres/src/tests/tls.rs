//! Unit tests of the TLS modes and roots that need no server.

use crate::{PostgresError, tls::*};

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
    let roots = RootCertificates::PemFile("/nonexistent/ca.pem".into());
    let Err(PostgresError::InvalidConfig { problem, .. }) =
        Tls::new(SslMode::VerifyFull, &roots, "postgres://h/db")
    else {
        panic!("a missing root file must be refused");
    };
    assert!(problem.contains("/nonexistent/ca.pem"), "{problem}");
}

#[test]
fn the_default_roots_and_the_modes_without_roots_build() {
    for mode in [SslMode::Prefer, SslMode::Require, SslMode::VerifyFull] {
        assert!(Tls::new(mode, &RootCertificates::Mozilla, "postgres://h/db").is_ok());
    }
}
