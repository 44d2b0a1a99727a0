//! `quiver cluster init-ca` and `issue-cert`: a cluster's own certificate
//! authority, and certificates it signs for the nodes (and their clients),
//! so a cluster with TLS between its nodes needs no other tool.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// The CA's common name. `issue-cert` signs with the CA's key and this name,
/// which must be the CA certificate's subject for chains to verify.
const CA_NAME: &str = "quiver cluster CA";

/// The CA's files in a directory.
fn ca_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.pem"), dir.join("ca.key"))
}

/// Writes `contents` to a new file `path`; `secret`: readable by its owner only.
fn create(path: &Path, contents: &str, secret: bool) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    // An hour back: nodes whose clocks lag a little accept it at once.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days));
}

fn ca_params(days: u32) -> Result<CertificateParams, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    validity(&mut params, days);
    Ok(params)
}

/// Makes a new CA in `dir`: `ca.pem` and `ca.key` (owner-only). Refuses to
/// overwrite one.
pub(crate) fn init_ca(dir: &Path, days: u32) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (cert_path, key_path) = ca_files(dir);
    if cert_path.exists() || key_path.exists() {
        return Err(format!(
            "{} already holds a CA: remove ca.pem and ca.key to make a new one",
            dir.display()
        ));
    }
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = ca_params(days)?
        .self_signed(&key)
        .map_err(|e| e.to_string())?;
    create(&key_path, &key.serialize_pem(), true)?;
    create(&cert_path, &cert.pem(), false)?;
    println!(
        "{}: the CA certificate: --cluster-ca on every node (and --tls-client-ca for mutual TLS)",
        cert_path.display()
    );
    println!(
        "{}: its key: keep it where issue-cert runs, nowhere else",
        key_path.display()
    );
    Ok(())
}

/// Issues `name`'s certificate, valid for `hosts` (IP addresses or DNS
/// names), signed by the CA in `dir`: `NAME.pem` and `NAME.key` there. It
/// serves TLS and authenticates as a client, so one certificate is a node's
/// `--tls-cert` towards clients and towards the other nodes.
pub(crate) fn issue(dir: &Path, name: &str, hosts: &[String], days: u32) -> Result<(), String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "--node {name:?}: letters, digits, '-', '_' and '.' only (it names the files)"
        ));
    }
    if hosts.is_empty() {
        return Err("--host: give the IP addresses or DNS names the node is reached at".into());
    }
    let (_, ca_key_path) = ca_files(dir);
    let ca_key = std::fs::read_to_string(&ca_key_path).map_err(|e| {
        format!(
            "{}: {e} (run quiver cluster init-ca first)",
            ca_key_path.display()
        )
    })?;
    let ca_key =
        KeyPair::from_pem(&ca_key).map_err(|e| format!("{}: {e}", ca_key_path.display()))?;
    let issuer = Issuer::new(ca_params(days)?, ca_key);
    let mut params =
        CertificateParams::new(hosts.to_vec()).map_err(|e| format!("--host {hosts:?}: {e}"))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
    let (cert_path, key_path) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    create(&key_path, &key.serialize_pem(), true)?;
    create(&cert_path, &cert.pem(), false)?;
    println!(
        "{} and {}: --tls-cert and --tls-key of {name}",
        cert_path.display(),
        key_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_issues_and_refuses_to_be_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        init_ca(dir.path(), 30).unwrap();
        assert!(
            init_ca(dir.path(), 30)
                .unwrap_err()
                .contains("already holds a CA")
        );
        issue(
            dir.path(),
            "n1",
            &["127.0.0.1".into(), "node1.local".into()],
            30,
        )
        .unwrap();
        assert!(issue(dir.path(), "n1", &["127.0.0.1".into()], 30).is_err());
        assert!(issue(dir.path(), "../n2", &["127.0.0.1".into()], 30).is_err());
        assert!(issue(dir.path(), "n2", &[], 30).is_err());
        let pem = std::fs::read_to_string(dir.path().join("n1.pem")).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("n1.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0);
        }
    }
}
