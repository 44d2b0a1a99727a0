//! TLS for the server: its certificate and key, and for mutual TLS the CA
//! that client certificates must chain to. rustls (on ring) through tonic.

use std::path::Path;

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
