//! A second, throw-away PostgreSQL server that tests may crash, restart, and that speaks TLS:
//! the server `STELE_TEST_POSTGRES_SPARE_PORT` names, started on demand by
//! [`SpareServer::lock`] with `.ci/postgres.sh` (`.ci/run` stops it at the end).
//!
//! It runs with `ssl = on` and a server certificate for the host name `localhost` only,
//! signed by a test CA made here with `rcgen` ([`SpareServer::ca_pem`]), so
//! `postgres://...@localhost:PORT/...?sslmode=verify-full` verifies and the same URL with
//! `127.0.0.1` is a certificate for the wrong host. Its `pg_hba.conf` asks the role
//! [`PASSWORD_ROLE`] for a password (SCRAM) and trusts every other one on loopback.
//!
//! One test at a time holds it: [`SpareServer::lock`] takes an exclusive lock on a file beside
//! its data directory, across the processes nextest runs, until the value is dropped.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

/// The variable naming the spare server's TCP port on 127.0.0.1.
pub const PORT_VAR: &str = "STELE_TEST_POSTGRES_SPARE_PORT";
/// The variable naming its directory (default `/tmp/stele-pg-spare-<port>`).
pub const DIR_VAR: &str = "STELE_TEST_POSTGRES_SPARE_DIR";
/// The role that must give a password (`PASSWORD`) on the spare server.
pub const PASSWORD_ROLE: &str = "stele_password_user";
/// Its password: a text no message may ever show.
pub const PASSWORD: &str = "s3cret-Pa55word-never-shown";

/// How to get one, for the message of a test that CI requires.
const SET_A_PORT: &str = "export STELE_TEST_POSTGRES_SPARE_PORT=<a free port> (`.ci/run` does)";

/// The spare server, held by one test (see the module docs).
pub struct SpareServer {
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    _lock: File,
}

impl SpareServer {
    /// Takes the spare server (waiting for the test that holds it) and starts it if it does
    /// not run; `None` once `test` is skipped (printed) because [`PORT_VAR`] is not set.
    ///
    /// # Panics
    /// Under `CI=true` without [`PORT_VAR`]; when the server cannot be set up or started.
    #[must_use]
    #[track_caller]
    pub fn lock(test: &str) -> Option<Self> {
        let Some(port) = std::env::var(PORT_VAR).ok().filter(|p| !p.is_empty()) else {
            let reason = test_utils::skip_reason(format!("{PORT_VAR} is not set"), SET_A_PORT);
            test_utils::skip(test, &reason);
            return None;
        };
        let port: u16 = port
            .parse()
            .unwrap_or_else(|_| panic!("{PORT_VAR}={port} is not a port"));
        let dir = std::env::var(DIR_VAR)
            .ok()
            .filter(|d| !d.is_empty())
            .map_or_else(
                || PathBuf::from(format!("/tmp/stele-pg-spare-{port}")),
                PathBuf::from,
            );
        std::fs::create_dir_all(&dir).expect("the spare server's directory");
        let lock =
            File::create(format!("{}.lock", dir.display())).expect("the spare server's lock file");
        lock.lock().expect("the spare server's lock");
        let server = Self {
            port,
            dir,
            _lock: lock,
        };
        server.ensure_certificates();
        server.start();
        Some(server)
    }

    /// The test CA's certificate (PEM), the root that verifies the server.
    #[must_use]
    pub fn ca_pem(&self) -> PathBuf {
        self.tls_dir().join("ca.crt")
    }

    /// `postgres://<user_info>@<host>:<port>/<database>` with `params` as its query (none when
    /// empty).
    #[must_use]
    pub fn url(&self, user_info: &str, host: &str, database: &str, params: &str) -> String {
        let query = if params.is_empty() {
            String::new()
        } else {
            format!("?{params}")
        };
        format!(
            "postgres://{user_info}@{host}:{}/{database}{query}",
            self.port
        )
    }

    /// Starts the server if it does not run (after [`SpareServer::crash`]: recovery from its
    /// WAL), returning once it accepts connections.
    ///
    /// # Panics
    /// When it does not start.
    pub fn start(&self) {
        self.script("start");
    }

    /// Stops the server abruptly (`pg_ctl stop -m immediate`): every session is cut, nothing
    /// is checkpointed.
    ///
    /// # Panics
    /// When `pg_ctl` fails.
    pub fn crash(&self) {
        self.script("crash");
    }

    /// The server's log: `.ci/postgres.sh` starts it with `pg_ctl -l`, so a line is in the file
    /// before the client that caused it hears the answer (no logging collector in between).
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Runs `sql` on a plain connection as the superuser `postgres`, e.g. to create a role.
    ///
    /// # Panics
    /// When the server refuses the connection or the statements.
    pub async fn execute(&self, sql: &str) {
        let url = self.url("postgres", "127.0.0.1", "postgres", "sslmode=disable");
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("a connection to the spare server: {e}"));
        let driver = tokio::spawn(connection);
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("`{sql}` on the spare server: {e}"));
        drop(client);
        let _ = driver.await;
    }

    /// A store on a fresh database of this server named after `test` (dropped first if a
    /// previous run left it), with a pool of 4 and a listener that reconnects within 200 ms
    /// of the server's return, for a test that crashes and restarts the server under it.
    ///
    /// # Panics
    /// When the database cannot be made or the store cannot be opened.
    pub async fn fresh_store(&self, test: &str) -> std::sync::Arc<dyn concepts::DbConnection> {
        use storage_postgres::{PostgresConfig, PostgresStore, admin};
        let name = format!("stele_{test}_{}", std::process::id());
        let admin_config =
            PostgresConfig::from_url(&self.url("postgres", "127.0.0.1", "postgres", ""))
                .expect("the spare server's URL");
        admin::drop_database(&admin_config, &name)
            .await
            .unwrap_or_else(|e| panic!("dropping {name}: {e}"));
        admin::create_database(&admin_config, &name)
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
        let mut config =
            PostgresConfig::from_url(&self.url("postgres", "127.0.0.1", &name, "pool_size=4"))
                .expect("the spare database's URL");
        config.listener_min_backoff = std::time::Duration::from_millis(10);
        config.listener_max_backoff = std::time::Duration::from_millis(200);
        let store = PostgresStore::connect(config)
            .await
            .unwrap_or_else(|e| panic!("a store on {name}: {e}"));
        std::sync::Arc::new(store)
    }

    /// Creates [`PASSWORD_ROLE`] with [`PASSWORD`] if it does not exist.
    pub async fn ensure_password_role(&self) {
        self.execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{PASSWORD_ROLE}') \
             THEN CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'; END IF; END $$"
        ))
        .await;
    }

    fn tls_dir(&self) -> PathBuf {
        self.dir.join("tls")
    }

    fn script(&self, command: &str) {
        let tls = self.tls_dir();
        let options = format!(
            "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c max_connections=120",
            tls.join("server.crt").display(),
            tls.join("server.key").display()
        );
        let output = Command::new("bash")
            .arg(script_path())
            .arg(command)
            .env("STELE_PG_DIR", &self.dir)
            .env("STELE_PG_PORT", self.port.to_string())
            .env("STELE_PG_OPTIONS", options)
            .env(
                "STELE_PG_HBA_FIRST",
                format!("host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256"),
            )
            .output()
            .expect("bash runs .ci/postgres.sh");
        assert!(
            output.status.success(),
            "`.ci/postgres.sh {command}` for the spare server failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Makes the test CA and the server's certificate and key once per directory; the key is
    /// the server user's, mode 0600, as PostgreSQL requires.
    fn ensure_certificates(&self) {
        let tls = self.tls_dir();
        if tls.join("server.key").exists() {
            return;
        }
        std::fs::create_dir_all(&tls).expect("the certificates' directory");
        let (ca, server_cert, server_key) = certificates();
        std::fs::write(tls.join("ca.crt"), ca).expect("ca.crt");
        std::fs::write(tls.join("server.crt"), server_cert).expect("server.crt");
        let key = tls.join("server.key.tmp");
        std::fs::write(&key, server_key).expect("server.key");
        own_by_postgres(&key);
        std::fs::rename(&key, tls.join("server.key")).expect("server.key in place");
    }
}

/// The test CA (PEM), and a certificate for `localhost` it signed with its key (PEM).
fn certificates() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Stele test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("a CA key"))
        .expect("the CA certificate");
    let server_key = KeyPair::generate().expect("a server key");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server = params
        .signed_by(&server_key, &ca)
        .expect("the server certificate");
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

/// Gives `path` to the `postgres` OS user, mode 0600 (the scripts run as root).
fn own_by_postgres(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let status = Command::new("chown")
        .arg("postgres")
        .arg(path)
        .status()
        .expect("chown runs");
    assert!(status.success(), "chown postgres {}", path.display());
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/postgres.sh")
}
