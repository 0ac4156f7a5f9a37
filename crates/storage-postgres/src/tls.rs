//! TLS of every connection a store opens (the pool, the listener, the admin connections):
//! `sslmode` as libpq understands it, over rustls (no system OpenSSL), and the connection
//! function they all share.

use crate::{
    PostgresConfig,
    error::{PostgresError, invalid_config},
};
use futures_util::future::BoxFuture;
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use std::{fmt, path::PathBuf, str::FromStr, sync::Arc};
use tokio::{sync::watch, task::JoinHandle};
use tokio_postgres::{Client, Connection, Socket, tls::MakeTlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How a connection uses TLS: the `sslmode` of the URL, as libpq understands it.
///
/// | `sslmode` | encrypted | certificate checked | host name checked |
/// |---|---|---|---|
/// | `disable` | never | - | - |
/// | `prefer` (the default) | when the server offers TLS; plain when it does not or the handshake fails | no | no |
/// | `require` | always, or no connection | no | no |
/// | `verify-ca` | always | against the roots | no |
/// | `verify-full` | always | against the roots | yes, the URL's host (a DNS name or an IP address) |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, without checking its certificate; plain otherwise.
    #[default]
    Prefer,
    /// TLS or no connection, without checking the server's certificate.
    Require,
    /// TLS, with a certificate that chains to one of the roots (any host name).
    VerifyCa,
    /// TLS, with a certificate that chains to one of the roots and names the URL's host.
    VerifyFull,
}

impl SslMode {
    /// The values `sslmode` accepts, for messages.
    pub const VALUES: &'static str = "disable, prefer, require, verify-ca, verify-full";

    /// Each mode and its name in a URL, in the order of declaration.
    const NAMES: [(Self, &'static str); 5] = [
        (Self::Disable, "disable"),
        (Self::Prefer, "prefer"),
        (Self::Require, "require"),
        (Self::VerifyCa, "verify-ca"),
        (Self::VerifyFull, "verify-full"),
    ];

    /// The mode's name in a URL.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize].1
    }

    /// What the driver is told: whether to ask for TLS, and whether to insist.
    fn driver_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let named = Self::NAMES.into_iter().find(|(_, name)| *name == value);
        named
            .map(|(mode, _)| mode)
            .ok_or_else(|| format!("`sslmode` must be one of {}, not `{value}`", Self::VALUES))
    }
}

/// The certificates a `verify-ca` or `verify-full` connection trusts.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RootCertificates {
    /// Mozilla's list of public certificate authorities, compiled in (`webpki-roots`).
    #[default]
    Mozilla,
    /// The PEM certificates of a file (`sslrootcert=PATH`), read when a store (or an admin
    /// connection) opens: a renewed CA needs a new store, not a new binary.
    PemFile(PathBuf),
    /// These DER certificates ([`crate::PostgresConfig::with_root_certificates`]).
    Certificates(Vec<CertificateDer<'static>>),
}

impl fmt::Debug for RootCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mozilla => f.write_str("Mozilla"),
            Self::PemFile(path) => f.debug_tuple("PemFile").field(path).finish(),
            Self::Certificates(certificates) => {
                write!(f, "Certificates({} given)", certificates.len())
            }
        }
    }
}

type TlsConnection = Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// The connector every connection of a store uses: built once per store (the roots read
/// then), cheap to clone.
#[derive(Clone)]
pub(crate) struct Tls {
    mode: SslMode,
    connector: MakeRustlsConnect,
    /// Counts the connections opened through this connector (of every kind), so that the
    /// listener hears that the server is reachable again.
    connected: Arc<watch::Sender<u64>>,
}

impl Tls {
    /// The connector of `config`'s `sslmode` and roots (read now); an unreadable or empty root
    /// file is [`PostgresError::InvalidConfig`].
    pub(crate) fn new(config: &PostgresConfig) -> Result<Self, PostgresError> {
        let (mode, url) = (config.ssl_mode, config.redacted_url());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid_config(url, format!("cannot set up TLS: {e}")))?;
        let chain = match mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => None,
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let store = Arc::new(root_store(&config.root_certificates, url)?);
                let chain =
                    WebPkiServerVerifier::builder_with_provider(store, Arc::clone(&provider))
                        .build();
                Some(chain.map_err(|e| {
                    invalid_config(url, format!("cannot use the root certificates: {e}"))
                })?)
            }
        };
        let verifier = Arc::new(Verifier {
            provider,
            chain,
            check_name: mode == SslMode::VerifyFull,
        });
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Self {
            mode,
            connector: MakeRustlsConnect::new(config),
            connected: Arc::new(watch::Sender::new(0)),
        })
    }

    pub(crate) fn connections(&self) -> watch::Receiver<u64> {
        self.connected.subscribe()
    }

    /// Opens one connection with `pg` (whose driver `sslmode` is set from this mode).
    /// Under `prefer`, a failed handshake is followed by one plain attempt, as libpq does.
    pub(crate) async fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> Result<(Client, TlsConnection), tokio_postgres::Error> {
        let mut pg = pg.clone();
        pg.ssl_mode(self.mode.driver_mode());
        let connected = match pg.connect(self.connector.clone()).await {
            Err(e) if self.mode == SslMode::Prefer && is_tls_error(&e) => {
                tracing::debug!(error = %e, "sslmode=prefer: TLS failed, trying without");
                pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
                pg.connect(self.connector.clone()).await
            }
            other => other,
        };
        if connected.is_ok() {
            self.connected.send_modify(|n| *n = n.wrapping_add(1));
        }
        connected
    }

    /// [`Tls::connect`], the connection driven by a task of its own; `kind` names it in the
    /// log line of its end.
    pub(crate) async fn connect_driven(
        &self,
        pg: &tokio_postgres::Config,
        kind: &'static str,
    ) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        let (client, connection) = self.connect(pg).await?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "{kind} connection ended");
            }
        });
        Ok((client, driver))
    }
}

impl deadpool_postgres::Connect for Tls {
    fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let pg = pg.clone();
        Box::pin(async move { self.connect_driven(&pg, "a pooled").await })
    }
}

/// True for a driver error of the TLS negotiation or handshake (the driver's error kind is
/// private; its message is not).
pub(crate) fn is_tls_error(err: &tokio_postgres::Error) -> bool {
    err.to_string()
        .starts_with("error performing TLS handshake")
}

fn root_store(roots: &RootCertificates, url: &str) -> Result<RootCertStore, PostgresError> {
    let (certificates, none_usable) = match roots {
        RootCertificates::Mozilla => {
            return Ok(webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect());
        }
        RootCertificates::PemFile(path) => {
            let shown = path.display();
            let certificates = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| {
                    invalid_config(
                        url,
                        format!("cannot read the root certificates of `sslrootcert={shown}`: {e}"),
                    )
                })?;
            let none_usable = format!("`sslrootcert={shown}` holds no usable PEM certificate");
            (certificates, none_usable)
        }
        RootCertificates::Certificates(certificates) => (
            certificates.clone(),
            "none of the root certificates given is usable".to_string(),
        ),
    };
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(invalid_config(url, none_usable));
    }
    Ok(store)
}

/// The certificate check of every mode. The handshake's signatures are always checked (the
/// session is encrypted to whoever holds the certificate's key); with a `chain` (`verify-ca`,
/// `verify-full`) so are the chain, its dates and its signatures; the host name only with
/// `check_name` (`verify-full`). A certificate refused for its name alone passed the rest:
/// rustls checks the chain before the name.
#[derive(Debug)]
struct Verifier {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
