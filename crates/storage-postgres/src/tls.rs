//! TLS of every connection a store opens (the pool, the listener, the admin connections):
//! `sslmode` as libpq understands it, over rustls (no system OpenSSL), and the connection
//! function they all share.
//!
//! | `sslmode` | encrypted | certificate checked | host name checked |
//! |---|---|---|---|
//! | `disable` | never | - | - |
//! | `prefer` (the default) | when the server offers TLS; plain when it does not or the handshake fails | no | no |
//! | `require` | always, or no connection | no | no |
//! | `verify-ca` | always | against the roots | no |
//! | `verify-full` | always | against the roots | yes, the URL's host (a DNS name or an IP address) |
//!
//! The roots ([`RootCertificates`]) are Mozilla's list compiled in (`webpki-roots`) unless
//! the URL names a PEM file with `sslrootcert=PATH` or the caller hands its own
//! ([`crate::PostgresConfig::with_root_certificates`]). The file is read when a store (or an
//! admin connection) is opened, so a renewed CA needs a new store, not a new binary.

use crate::error::PostgresError;
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
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::watch,
};
use tokio_postgres::{Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How a connection uses TLS: the `sslmode` of the URL (see the module docs for the table).
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

    /// The mode's name in a URL.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// What the driver is told: whether to ask for TLS, and whether to insist.
    pub(crate) fn driver_mode(self) -> tokio_postgres::config::SslMode {
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
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "`sslmode` must be one of {}, not `{other}`",
                    Self::VALUES
                ));
            }
        })
    }
}

/// The certificates a `verify-ca` or `verify-full` connection trusts.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RootCertificates {
    /// Mozilla's list of public certificate authorities, compiled in (`webpki-roots`).
    #[default]
    Mozilla,
    /// The PEM certificates of a file (`sslrootcert=PATH`), read when a store opens.
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
    /// The connector for `mode` and `roots`; an unreadable or empty root file is
    /// [`PostgresError::InvalidConfig`].
    pub(crate) fn new(
        mode: SslMode,
        roots: &RootCertificates,
        url: &str,
    ) -> Result<Self, PostgresError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(url, format!("cannot set up TLS: {e}")))?;
        let verifier: Arc<dyn ServerCertVerifier> = match mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => {
                Arc::new(EncryptionOnly(Arc::clone(&provider)))
            }
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let store = root_store(roots, url)?;
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(store),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| invalid(url, format!("cannot use the root certificates: {e}")))?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyHostName(webpki))
                }
            }
        };
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

    /// Changes each time a connection through this connector opens.
    pub(crate) fn connections(&self) -> watch::Receiver<u64> {
        self.connected.subscribe()
    }

    /// Opens one connection with `pg` (whose driver `sslmode` is set from this mode).
    /// Under `prefer`, a failed handshake is followed by one plain attempt, as libpq does.
    pub(crate) async fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> Result<
        (
            Client,
            Connection<Socket, impl AsyncRead + AsyncWrite + Unpin + Send + 'static>,
        ),
        tokio_postgres::Error,
    > {
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
}

impl deadpool_postgres::Connect for Tls {
    fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> std::pin::Pin<
        Box<
            dyn Future<
                    Output = Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
                > + Send
                + '_,
        >,
    > {
        let pg = pg.clone();
        Box::pin(async move {
            let (client, connection) = Tls::connect(self, &pg).await?;
            let driver = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "a pooled connection ended");
                }
            });
            Ok((client, driver))
        })
    }
}

/// True for a driver error of the TLS negotiation or handshake (the driver's error kind is
/// private; its message is not).
pub(crate) fn is_tls_error(err: &tokio_postgres::Error) -> bool {
    let message = err.to_string();
    message.starts_with("error performing TLS handshake")
}

fn invalid(url: &str, problem: String) -> PostgresError {
    PostgresError::InvalidConfig {
        url: url.to_string(),
        problem,
    }
}

fn root_store(roots: &RootCertificates, url: &str) -> Result<RootCertStore, PostgresError> {
    let mut store = RootCertStore::empty();
    match roots {
        RootCertificates::Mozilla => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        RootCertificates::PemFile(path) => {
            let shown = path.display();
            let certificates = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| {
                    invalid(
                        url,
                        format!("cannot read the root certificates of `sslrootcert={shown}`: {e}"),
                    )
                })?;
            let (added, _ignored) = store.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(invalid(
                    url,
                    format!("`sslrootcert={shown}` holds no usable PEM certificate"),
                ));
            }
        }
        RootCertificates::Certificates(certificates) => {
            let (added, _ignored) = store.add_parsable_certificates(certificates.iter().cloned());
            if added == 0 {
                return Err(invalid(
                    url,
                    "none of the root certificates given is usable".to_string(),
                ));
            }
        }
    }
    Ok(store)
}

/// `prefer` and `require`: any certificate, but the handshake's signatures are checked
/// (the session is encrypted to whoever holds the certificate's key).
#[derive(Debug)]
struct EncryptionOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptionOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the full check of the chain, of its dates and of the signatures, but a
/// certificate for another host name passes (the chain is checked before the name).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
