//! TLS for the server: its certificate and key, and for mutual TLS the CA
//! that client certificates must chain to. rustls (on ring) through tonic.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use tonic::transport::server::ServerTlsConfig;
use tonic::transport::{Certificate, Identity};

use crate::{Error, Result};

/// The PEM files of the server's TLS setup.
#[derive(Clone)]
pub struct TlsConfig {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>> {
    let pem = std::fs::read(path)
        .map_err(|e| Error::Config(format!("{flag} {}: {e}", path.display())))?;
    if !pem.starts_with(b"-----BEGIN") && !String::from_utf8_lossy(&pem).contains("-----BEGIN ") {
        return Err(Error::Config(format!(
            "{flag} {}: not a PEM file",
            path.display()
        )));
    }
    Ok(pem)
}

impl TlsConfig {
    /// Reads the server's certificate chain and private key (PEM) and, for
    /// mutual TLS, the CA certificates (PEM) client certificates must chain to.
    pub fn from_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Self> {
        Ok(Self {
            cert_pem: read("--tls-cert", cert)?,
            key_pem: read("--tls-key", key)?,
            client_ca_pem: client_ca.map(|p| read("--tls-client-ca", p)).transpose()?,
        })
    }

    /// The server's certificate chain and private key (PEM): a cluster
    /// node presents them to the other nodes too.
    pub fn identity_pem(&self) -> (&[u8], &[u8]) {
        (&self.cert_pem, &self.key_pem)
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// rustls' server settings for the console's HTTP/1.1 listener: the same
    /// certificate and, for mutual TLS, the same client CA as Flight.
    pub(crate) fn rustls_server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        let bad = |what: &str, e: &dyn std::fmt::Display| Error::Config(format!("{what}: {e}"));
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| bad("--tls-cert", &e))?;
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| bad("--tls-key", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS", &e))?;
        let builder = match &self.client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca) {
                    roots
                        .add(cert.map_err(|e| bad("--tls-client-ca", &e))?)
                        .map_err(|e| bad("--tls-client-ca", &e))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| bad("--tls-client-ca", &e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| bad("--tls-cert", &e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// tonic's server TLS settings: with a client CA, a client certificate
    /// signed by it is required (the handshake fails without one).
    pub(crate) fn server_config(&self) -> ServerTlsConfig {
        let config =
            ServerTlsConfig::new().identity(Identity::from_pem(&self.cert_pem, &self.key_pem));
        match &self.client_ca_pem {
            Some(ca) => config
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(false),
            None => config,
        }
    }
}
