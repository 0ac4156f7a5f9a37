//! `sslmode` against the spare server (`test_support::spare_server`: `ssl = on`, a certificate
//! for `localhost` only, signed by a test CA) and against the main test server (no TLS):
//! which sessions are encrypted is read from `pg_stat_ssl`, by process id.

use rustls::pki_types::{CertificateDer, pem::PemObject};
use std::sync::atomic::{AtomicU32, Ordering};
use storage_postgres::{PostgresConfig, PostgresError, PostgresStore, SslMode, admin};
use test_support::{postgres::TestServer, spare_server::SpareServer};

/// A fresh database name on the spare server.
fn database_name(test: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "stele_{test}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The store config of `host` on the spare server with `params`, database `database`.
fn config(server: &SpareServer, host: &str, database: &str, params: &str) -> PostgresConfig {
    let mut config = PostgresConfig::from_url(&server.url("postgres", host, database, params))
        .expect("the URL parses");
    config.pool_size = 2;
    config
}

/// Whether each session of `database` named `stele` is encrypted, by process id.
async fn ssl_by_pid(server: &SpareServer, database: &str) -> Vec<(i32, bool)> {
    let url = server.url("postgres", "127.0.0.1", "postgres", "sslmode=disable");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("a plain connection to read pg_stat_ssl");
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT a.pid, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = $1 AND a.application_name = 'stele' ORDER BY a.pid",
            &[&database],
        )
        .await
        .expect("pg_stat_ssl");
    drop(client);
    let _ = driver.await;
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// Opens a store on a fresh database of the spare server with `params` (as `host`), and
/// returns the encryption of each of its sessions (the pool's first and the listener's).
async fn sessions_of_a_store(server: &SpareServer, host: &str, params: &str) -> Vec<(i32, bool)> {
    let name = database_name("tls");
    let admin_config = config(server, host, "postgres", params);
    admin::create_database(&admin_config, &name)
        .await
        .expect("the admin connection works in this mode");
    let store = PostgresStore::connect(config(server, host, &name, params))
        .await
        .expect("the store opens");
    let listener = store
        .listener_state()
        .backend_pid
        .expect("the listener listens");
    let sessions = ssl_by_pid(server, &name).await;
    assert!(
        sessions.iter().any(|(pid, _)| *pid == listener),
        "the listener's session {listener} is among {sessions:?}"
    );
    assert!(
        sessions.len() >= 2,
        "a pooled session and the listener: {sessions:?}"
    );
    concepts::DbConnection::close(&store).await;
    admin::drop_database(&admin_config, &name)
        .await
        .expect("the database drops");
    sessions
}

#[tokio::test]
async fn require_and_prefer_encrypt_every_session_and_disable_none() {
    let Some(server) = SpareServer::lock("require_and_prefer_encrypt_every_session") else {
        return;
    };
    for params in ["sslmode=require", "sslmode=prefer", ""] {
        let sessions = sessions_of_a_store(&server, "127.0.0.1", params).await;
        assert!(
            sessions.iter().all(|(_, ssl)| *ssl),
            "{params}: every session is encrypted: {sessions:?}"
        );
    }
    let sessions = sessions_of_a_store(&server, "127.0.0.1", "sslmode=disable").await;
    assert!(
        sessions.iter().all(|(_, ssl)| !*ssl),
        "sslmode=disable: no session is encrypted: {sessions:?}"
    );
}

#[tokio::test]
async fn verify_ca_and_verify_full_succeed_with_the_right_root() {
    let Some(server) = SpareServer::lock("verify_ca_and_verify_full_succeed") else {
        return;
    };
    let root = format!("sslrootcert={}", server.ca_pem().display());
    let cases = [
        ("127.0.0.1", format!("sslmode=verify-ca&{root}")),
        ("localhost", format!("sslmode=verify-ca&{root}")),
        ("localhost", format!("sslmode=verify-full&{root}")),
    ];
    for (host, params) in &cases {
        let sessions = sessions_of_a_store(&server, host, params).await;
        assert!(
            sessions.iter().all(|(_, ssl)| *ssl),
            "{host} {params}: {sessions:?}"
        );
    }
    // The roots handed over in code instead of a file.
    let roots: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(server.ca_pem())
        .expect("the CA file")
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    let config = config(&server, "localhost", "postgres", "sslmode=verify-full")
        .with_root_certificates(roots);
    admin::terminate_backend(&config, 0)
        .await
        .expect("verify-full with the roots given in code connects");
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host_with_a_typed_error() {
    let Some(server) = SpareServer::lock("verify_full_refuses_another_host") else {
        return;
    };
    let root = format!("sslrootcert={}", server.ca_pem().display());
    // The certificate names `localhost`; the URL says 127.0.0.1.
    let config = config(
        &server,
        "127.0.0.1",
        "postgres",
        &format!("sslmode=verify-full&{root}"),
    );
    let err = PostgresStore::connect(config.clone()).await.unwrap_err();
    let PostgresError::Tls {
        ssl_mode, reason, ..
    } = &err
    else {
        panic!("a TLS error, not {err:?}");
    };
    assert_eq!(*ssl_mode, SslMode::VerifyFull);
    assert!(reason.contains("not valid for name"), "{reason}");
    let message = err.to_string();
    assert!(
        message.contains("name the host of the URL") && message.contains("127.0.0.1"),
        "{message}"
    );
    // The admin connections check the same way.
    let err = admin::create_database(&config, "never_created")
        .await
        .unwrap_err();
    assert!(matches!(err, PostgresError::Tls { .. }), "{err:?}");
    // Without the test CA (Mozilla's roots), the certificate is refused as unknown.
    let config = PostgresConfig::from_url(&server.url(
        "postgres",
        "localhost",
        "postgres",
        "sslmode=verify-ca",
    ))
    .unwrap();
    let err = PostgresStore::connect(config).await.unwrap_err();
    assert!(
        matches!(&err, PostgresError::Tls { reason, .. } if reason.contains("UnknownIssuer")),
        "{err:?}"
    );
}

/// The main test server runs without TLS: `require` is refused with a typed error (by the
/// store and by the admin connections), `prefer` falls back to plain.
#[tokio::test]
async fn require_refuses_a_server_without_tls_and_prefer_connects_plain() {
    let Some(server) = TestServer::or_skip("require_refuses_a_server_without_tls") else {
        return;
    };
    let url = server.url.clone();
    let separator = if url.contains('?') { '&' } else { '?' };
    let require = PostgresConfig::from_url(&format!("{url}{separator}sslmode=require")).unwrap();
    let err = PostgresStore::connect(require.clone()).await.unwrap_err();
    assert!(
        matches!(&err, PostgresError::Tls { reason, .. } if reason.contains("does not support TLS")),
        "{err:?}"
    );
    assert!(err.to_string().contains("ssl = on"), "{err}");
    let err = admin::terminate_backend(&require, 0).await.unwrap_err();
    assert!(matches!(err, PostgresError::Tls { .. }), "{err:?}");
    let prefer = PostgresConfig::from_url(&format!("{url}{separator}sslmode=prefer")).unwrap();
    admin::terminate_backend(&prefer, 0)
        .await
        .expect("prefer connects without TLS");
}
