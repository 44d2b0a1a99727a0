//! `quiver serve`'s cluster flags and `quiver cluster`'s commands
//! (crates/quiver-cluster; docs/cluster.md). The cluster is compiled in with
//! the `cluster` feature (its etcd client needs `protoc` to build); without
//! it, `--cluster` is refused with a message that says so.

use std::time::Duration;

use clap::{Args, Subcommand};

/// The prefix of the cluster's keys in etcd when the URL names none.
pub(crate) const DEFAULT_PREFIX: &str = "/quiver/";

/// Cluster membership (`--cluster`); none: a single node, and nothing of the
/// cluster runs.
#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// Join the cluster whose catalog is in etcd:
    /// etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (default prefix /quiver/).
    #[arg(long, env = "QUIVER_CLUSTER")]
    pub(crate) cluster: Option<String>,

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

    /// Seconds a partition no table version holds is kept before it is
    /// dropped (a put's partitions are stored before it is published).
    #[arg(long, env = "QUIVER_ORPHAN_GRACE", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) orphan_grace: u64,
}

/// etcd's endpoints and the key prefix in an `etcd://` URL.
pub(crate) fn parse_etcd_url(url: &str) -> Result<(Vec<String>, String), String> {
    let rest = url.strip_prefix("etcd://").ok_or_else(|| {
        format!("--cluster {url}: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")
    })?;
    let (hosts, prefix) = match rest.split_once('/') {
        Some((hosts, "")) => (hosts, DEFAULT_PREFIX.to_string()),
        Some((hosts, prefix)) => (hosts, format!("/{}/", prefix.trim_matches('/'))),
        None => (rest, DEFAULT_PREFIX.to_string()),
    };
    let endpoints: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("http://{h}"))
        .collect();
    if endpoints.is_empty() {
        return Err(format!("--cluster {url}: no etcd endpoint given"));
    }
    Ok((endpoints, prefix))
}

#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
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
}

/// `quiver cluster status`'s flags.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The cluster: etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
    #[arg(long, env = "QUIVER_CLUSTER")]
    pub(crate) cluster: String,

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
        assert!(parse_etcd_url("http://a:1").is_err());
        assert!(parse_etcd_url("etcd:///x").is_err());
    }
}
