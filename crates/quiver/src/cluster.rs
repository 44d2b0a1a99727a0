//! The cluster from the command line: joining one (`serve --cluster`) and
//! `quiver cluster status`.

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_cluster::ClusterError;
use quiver_flight::ServerConfig;
use quiver_flight::server::default_location;
use quiver_store::TableStore;

use crate::cli::{ClusterArgs, ClusterCommand};

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How often a node reads the catalog and repairs what a lost node held: a
/// lost node's partitions start to be copied again within this of its lease's
/// end, for two small etcd reads per node per tick.
const REPAIR_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Why a cluster flag cannot be used with the rest. `shared_tokens`: the
/// tokens' key comes from `--token-secret-file`, not from this process.
fn refuse(config: &ServerConfig, addr: SocketAddr, shared_tokens: bool) -> CliResult<()> {
    if config.tls.is_some() {
        return Err(
            "--cluster with TLS: nodes talk to each other in plain gRPC for now; \
                    run the cluster on a private network without --tls-cert"
                .into(),
        );
    }
    if config.auth.is_some() && !shared_tokens {
        return Err(
            "--cluster with --users needs --token-secret-file, the same file on every \
             node: a client logs in on one node and reads a table's partitions from the \
             others with the token it got"
                .into(),
        );
    }
    if config.advertise.is_none() && addr.ip().is_unspecified() {
        return Err(format!(
            "--cluster listening on {addr}: give --advertise grpc+tcp://HOST:PORT, the \
             address the other nodes and clients reach this one at"
        )
        .into());
    }
    Ok(())
}

/// This node in the cluster, joined, its background work started.
pub(crate) type Node = Arc<quiver_cluster::ClusterNode>;

/// Joins the cluster `args` names, if any, and hooks it into `config`.
pub(crate) async fn join(
    args: &ClusterArgs,
    store: &Arc<TableStore>,
    config: &mut ServerConfig,
    addr: SocketAddr,
    shared_tokens: bool,
) -> CliResult<Option<Node>> {
    let Some(url) = &args.cluster else {
        return Ok(None);
    };
    let etcd = args.etcd.config(url)?;
    let hint = hint(&etcd);
    refuse(config, addr, shared_tokens)?;
    let node_id = args
        .node_id
        .clone()
        .ok_or("--cluster needs --node-id: this node's id, the same across restarts")?;
    let location = config
        .advertise
        .clone()
        .unwrap_or_else(|| default_location(addr));
    let options = quiver_cluster::ClusterOptions {
        etcd,
        node_id,
        location,
        replicas: args.replicas as usize,
        lease_ttl: args.lease_ttl(),
        repair_every: REPAIR_EVERY,
        orphan_grace: args.orphan_grace(),
    };
    let node = quiver_cluster::ClusterNode::join(options, Arc::clone(store))
        .await
        .map_err(|e| format!("--cluster {url}: {e}{}", hint(&e)))?;
    node.spawn_background();
    config.cluster = Some(Arc::clone(&node) as quiver_flight::cluster::Cluster);
    Ok(Some(node))
}

/// What to add to an error from etcd that the flags may explain. An etcd
/// that checks client certificates (`--client-cert-auth`) closes a TLS
/// connection without one, which the client sees only as a broken
/// connection: "unreachable".
fn hint(etcd: &quiver_cluster::EtcdConfig) -> impl Fn(&ClusterError) -> &'static str + use<> {
    let no_certificate = etcd.tls.as_ref().is_some_and(|tls| tls.identity.is_none());
    move |e| match e {
        ClusterError::Catalog(_) if no_certificate => {
            " (if etcd checks its clients' certificates, give this node one with \
             --etcd-cert and --etcd-key)"
        }
        _ => "",
    }
}

/// Leaves the cluster on shutdown: the others repair at once.
pub(crate) async fn leave(node: Option<Node>) {
    if let Some(node) = node {
        node.leave().await;
    }
}

/// `quiver cluster ...`.
pub(crate) async fn run(command: ClusterCommand) -> CliResult<()> {
    match command {
        ClusterCommand::Status(args) => {
            let etcd = args.etcd.config(&args.cluster)?;
            let status = quiver_cluster::status(&etcd, args.replicas as usize)
                .await
                .map_err(|e| format!("{}: {e}{}", args.cluster, hint(&etcd)(&e)))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{status}");
            }
            Ok(())
        }
    }
}
