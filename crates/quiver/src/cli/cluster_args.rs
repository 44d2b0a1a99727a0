//! `quiver serve`'s cluster flags and `quiver cluster`'s commands
//! (crates/quiver-cluster; docs/cluster.md).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use quiver_cluster::{EtcdConfig, EtcdCredentials, EtcdTls};

/// The prefix of the cluster's keys in etcd when the URL names none.
pub(crate) const DEFAULT_PREFIX: &str = "/quiver/";

/// Cluster membership (`--cluster`); none: a single node, and nothing of the
/// cluster runs.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// Join the cluster whose catalog is in etcd:
    /// etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (default prefix /quiver/),
    /// or etcds://... for etcd over TLS (with --etcd-ca).
    #[arg(long, env = "QUIVER_CLUSTER")]
    pub(crate) cluster: Option<String>,

    /// How to reach etcd: TLS and user.
    #[command(flatten)]
    pub(crate) etcd: EtcdArgs,

    /// This node's id in the cluster: unique, and the same across restarts
    /// (with --data-dir, a restarted node serves the partitions it kept).
    #[arg(long, env = "QUIVER_NODE_ID", requires = "cluster")]
    pub(crate) node_id: Option<String>,

    /// Copies of each partition: an acknowledged put survives the loss of
    /// replicas - 1 nodes.
    #[arg(long, env = "QUIVER_REPLICAS", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(crate) replicas: u32,

    /// Seconds after its last lease renewal that a node is taken for lost
    /// (and its partitions copied again from their other replicas).
    #[arg(long, env = "QUIVER_LEASE_TTL", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) lease_ttl: u64,

    /// The CA certificate (PEM) the other nodes' TLS certificates chain to,
    /// with --tls-cert on a cluster node: the nodes speak TLS to each other,
    /// each presenting its --tls-cert (`quiver cluster init-ca` makes a CA).
    #[arg(
        long,
        env = "QUIVER_CLUSTER_CA",
        value_name = "FILE",
        requires = "cluster"
    )]
    pub(crate) cluster_ca: Option<PathBuf>,

    /// Seconds a partition no table version holds is kept before it is
    /// dropped (a put's partitions are stored before it is published; one
    /// handed to a reader is kept for --query-timeout).
    #[arg(long, env = "QUIVER_ORPHAN_GRACE", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) orphan_grace: u64,
}

/// How a node or `quiver cluster` reaches etcd besides its URL.
#[derive(Debug, Args)]
pub(crate) struct EtcdArgs {
    /// The CA certificate (PEM) of etcd's server certificate: TLS to etcd,
    /// with --cluster etcds://...
    #[arg(
        long,
        env = "QUIVER_ETCD_CA",
        value_name = "FILE",
        requires = "cluster"
    )]
    pub(crate) etcd_ca: Option<PathBuf>,

    /// This node's client certificate (PEM), for an etcd that checks its
    /// clients' certificates (--client-cert-auth).
    #[arg(
        long,
        env = "QUIVER_ETCD_CERT",
        value_name = "FILE",
        requires = "etcd_key"
    )]
    pub(crate) etcd_cert: Option<PathBuf>,

    /// The private key (PEM) of --etcd-cert.
    #[arg(
        long,
        env = "QUIVER_ETCD_KEY",
        value_name = "FILE",
        requires = "etcd_cert"
    )]
    pub(crate) etcd_key: Option<PathBuf>,

    /// A user of etcd's own authentication (with --etcd-password-file).
    #[arg(long, env = "QUIVER_ETCD_USER", requires_all = ["etcd_password_file", "cluster"])]
    pub(crate) etcd_user: Option<String>,

    /// A file whose first line is --etcd-user's password (a file, so the
    /// password shows in no process list).
    #[arg(
        long,
        env = "QUIVER_ETCD_PASSWORD_FILE",
        value_name = "FILE",
        requires = "etcd_user"
    )]
    pub(crate) etcd_password_file: Option<PathBuf>,
}

impl EtcdArgs {
    /// The catalog's settings: `url`'s endpoints and prefix, with these
    /// flags' TLS and user, their files read.
    pub(crate) fn config(&self, url: &str) -> Result<EtcdConfig, String> {
        let (endpoints, prefix) = parse_etcd_url(url)?;
        let tls_url = url.starts_with("etcds://");
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
        };
        let tls = match (&self.etcd_ca, tls_url) {
            (Some(ca), true) => Some(EtcdTls {
                ca: read("--etcd-ca", ca)?,
                identity: match (&self.etcd_cert, &self.etcd_key) {
                    (Some(cert), Some(key)) => {
                        Some((read("--etcd-cert", cert)?, read("--etcd-key", key)?))
                    }
                    _ => None,
                },
            }),
            (None, true) => {
                return Err(format!(
                    "--cluster {url}: etcd over TLS needs --etcd-ca, the CA of etcd's certificate"
                ));
            }
            (Some(_), false) => {
                return Err(format!(
                    "--etcd-ca is for etcd over TLS: write the URL as etcds://, not {url}"
                ));
            }
            (None, false) => None,
        };
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(name), Some(file)) => {
                let text = String::from_utf8(read("--etcd-password-file", file)?)
                    .map_err(|_| format!("--etcd-password-file {}: not UTF-8", file.display()))?;
                let password = text.lines().next().unwrap_or_default().to_string();
                if password.is_empty() {
                    return Err(format!(
                        "--etcd-password-file {}: the first line is empty",
                        file.display()
                    ));
                }
                Some(EtcdCredentials {
                    name: name.clone(),
                    password,
                })
            }
            _ => None,
        };
        Ok(EtcdConfig {
            endpoints,
            prefix,
            tls,
            user,
        })
    }
}

/// etcd's endpoints and the key prefix in an `etcd://` (or, over TLS,
/// `etcds://`) URL.
pub(crate) fn parse_etcd_url(url: &str) -> Result<(Vec<String>, String), String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("etcd://") {
        ("http", rest)
    } else if let Some(rest) = url.strip_prefix("etcds://") {
        ("https", rest)
    } else {
        return Err(format!(
            "--cluster {url}: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (etcds:// for TLS)"
        ));
    };
    let (hosts, prefix) = match rest.split_once('/') {
        Some((hosts, "")) => (hosts, DEFAULT_PREFIX.to_string()),
        Some((hosts, prefix)) => (hosts, format!("/{}/", prefix.trim_matches('/'))),
        None => (rest, DEFAULT_PREFIX.to_string()),
    };
    let endpoints: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{h}"))
        .collect();
    if endpoints.is_empty() {
        return Err(format!("--cluster {url}: no etcd endpoint given"));
    }
    Ok((endpoints, prefix))
}

impl ClusterArgs {
    /// How long a node's lease lasts.
    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl)
    }

    /// How long an orphan partition is kept.
    pub(crate) fn orphan_grace(&self) -> Duration {
        Duration::from_secs(self.orphan_grace)
    }
}

/// `quiver cluster ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Nodes, tables, partitions and under-replicated data, from etcd.
    Status(StatusArgs),
    /// Make the cluster's certificate authority: DIR/ca.pem (every node's
    /// --cluster-ca) and DIR/ca.key (readable by its owner only).
    InitCa(InitCaArgs),
    /// Issue a node's certificate, signed by the CA in --dir: DIR/NODE.pem
    /// and DIR/NODE.key, its --tls-cert and --tls-key (for TLS to clients
    /// and to the other nodes).
    IssueCert(IssueCertArgs),
    /// Turn rebalancing on or off for the whole cluster: while off, no node
    /// moves copies to even out what the nodes hold (lost copies are still
    /// copied again). On unless turned off.
    Rebalance(RebalanceArgs),
}

/// `quiver cluster rebalance`'s flags.
#[derive(Debug, Args)]
pub(crate) struct RebalanceArgs {
    /// `on` or `off`.
    #[arg(value_enum)]
    pub(crate) state: Switch,

    /// The cluster: etcd://HOST:PORT[,HOST:PORT...][/PREFIX], or etcds://...
    /// for etcd over TLS (with --etcd-ca).
    #[arg(long, env = "QUIVER_CLUSTER")]
    pub(crate) cluster: String,

    /// How to reach etcd: TLS and user.
    #[command(flatten)]
    pub(crate) etcd: EtcdArgs,
}

/// A cluster setting's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Switch {
    On,
    Off,
}

/// `quiver cluster init-ca`'s flags.
#[derive(Debug, Args)]
pub(crate) struct InitCaArgs {
    /// Where the CA's files go (made if absent).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// Days the CA is valid.
    #[arg(long, default_value_t = 3650)]
    pub(crate) days: u32,
}

/// `quiver cluster issue-cert`'s flags.
#[derive(Debug, Args)]
pub(crate) struct IssueCertArgs {
    /// The CA's directory (`init-ca --dir`); the certificate is written there.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,

    /// The node's id (or a client's name): the certificate's name and files.
    #[arg(long)]
    pub(crate) node: String,

    /// An IP address or DNS name the node is reached at (repeatable): the
    /// host of its --advertise location.
    #[arg(long = "host", value_name = "HOST", required = true)]
    pub(crate) hosts: Vec<String>,

    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365)]
    pub(crate) days: u32,
}

/// `quiver cluster status`'s flags.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The cluster: etcd://HOST:PORT[,HOST:PORT...][/PREFIX], or etcds://...
    /// for etcd over TLS (with --etcd-ca).
    #[arg(long, env = "QUIVER_CLUSTER")]
    pub(crate) cluster: String,

    /// How to reach etcd: TLS and user.
    #[command(flatten)]
    pub(crate) etcd: EtcdArgs,

    /// Copies each partition should have (the nodes' --replicas).
    #[arg(long, env = "QUIVER_REPLICAS", default_value_t = 2)]
    pub(crate) replicas: u32,

    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_urls() {
        assert_eq!(
            parse_etcd_url("etcd://127.0.0.1:2379").unwrap(),
            (
                vec!["http://127.0.0.1:2379".to_string()],
                "/quiver/".to_string()
            )
        );
        assert_eq!(
            parse_etcd_url("etcd://a:1,b:2/prod/q").unwrap(),
            (
                vec!["http://a:1".to_string(), "http://b:2".to_string()],
                "/prod/q/".to_string()
            )
        );
        assert_eq!(
            parse_etcd_url("etcds://a:1").unwrap().0,
            vec!["https://a:1".to_string()]
        );
        assert!(parse_etcd_url("http://a:1").is_err());
        assert!(parse_etcd_url("etcd:///x").is_err());
    }
}
