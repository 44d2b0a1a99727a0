//! The cluster from the command line: joining one (`serve --cluster`) and
//! `quiver cluster status`. Compiled in with the `cluster` feature.

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_flight::ServerConfig;
use quiver_flight::server::default_location;
use quiver_store::TableStore;

use crate::cli::{ClusterArgs, ClusterCommand, parse_etcd_url};

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How often a node reads the catalog and repairs what a lost node held: a
/// lost node's partitions start to be copied again within this of its lease's
/// end, for two small etcd reads per node per tick.
#[cfg(feature = "cluster")]
const REPAIR_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Why a cluster flag cannot be used with the rest.
fn refuse(config: &ServerConfig, addr: SocketAddr) -> CliResult<()> {
    if config.tls.is_some() {
        return Err(
            "--cluster with TLS: nodes talk to each other in plain gRPC for now; \
                    run the cluster on a private network without --tls-cert"
                .into(),
        );
    }
    if config.auth.is_some() {
        return Err(
            "--cluster with --users: nodes' calls to each other carry no \
                    credentials yet; run the cluster without --users"
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
#[cfg(feature = "cluster")]
pub(crate) type Node = Arc<quiver_cluster::ClusterNode>;
#[cfg(not(feature = "cluster"))]
pub(crate) type Node = std::convert::Infallible;

/// Joins the cluster `args` names, if any, and hooks it into `config`.
pub(crate) async fn join(
    args: &ClusterArgs,
    store: &Arc<TableStore>,
    config: &mut ServerConfig,
    addr: SocketAddr,
) -> CliResult<Option<Node>> {
    let Some(url) = &args.cluster else {
        return Ok(None);
    };
    let (endpoints, prefix) = parse_etcd_url(url)?;
    refuse(config, addr)?;
    let node_id = args
        .node_id
        .clone()
        .ok_or("--cluster needs --node-id: this node's id, the same across restarts")?;
    let location = config
        .advertise
        .clone()
        .unwrap_or_else(|| default_location(addr));
    #[cfg(feature = "cluster")]
    {
        let options = quiver_cluster::ClusterOptions {
            etcd: endpoints,
            prefix,
            node_id,
            location,
            replicas: args.replicas as usize,
            lease_ttl: args.lease_ttl(),
            repair_every: REPAIR_EVERY,
            orphan_grace: args.orphan_grace(),
        };
        let node = quiver_cluster::ClusterNode::join(options, Arc::clone(store))
            .await
            .map_err(|e| format!("--cluster {url}: {e}"))?;
        node.spawn_background();
        config.cluster = Some(Arc::clone(&node) as quiver_flight::cluster::Cluster);
        Ok(Some(node))
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (endpoints, prefix, node_id, location, store);
        Err(format!(
            "--cluster {url}: this quiver was built without cluster support; build it with \
             `cargo build --release --features cluster` (needs protoc: apt-get install \
             protobuf-compiler)"
        )
        .into())
    }
}

/// Leaves the cluster on shutdown: the others repair at once.
pub(crate) async fn leave(node: Option<Node>) {
    #[cfg(feature = "cluster")]
    if let Some(node) = node {
        node.leave().await;
    }
    #[cfg(not(feature = "cluster"))]
    let _ = node;
}

/// `quiver cluster ...`.
pub(crate) async fn run(command: ClusterCommand) -> CliResult<()> {
    match command {
        ClusterCommand::Status(args) => {
            let (endpoints, prefix) = parse_etcd_url(&args.cluster)?;
            #[cfg(feature = "cluster")]
            {
                let status = quiver_cluster::status(&endpoints, &prefix, args.replicas as usize)
                    .await
                    .map_err(|e| format!("{}: {e}", args.cluster))?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                } else {
                    print!("{status}");
                }
                Ok(())
            }
            #[cfg(not(feature = "cluster"))]
            {
                let _ = (endpoints, prefix, args.json);
                Err("this quiver was built without cluster support (cargo build --features cluster)".into())
            }
        }
    }
}
