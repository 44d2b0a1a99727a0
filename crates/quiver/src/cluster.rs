//! The cluster from the command line: joining one (`serve --cluster`) and
//! `quiver cluster status`.

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_cluster::ClusterError;
use quiver_flight::ServerConfig;
use quiver_flight::server::advertised_location;
use quiver_store::TableStore;

use crate::cli::{ClusterArgs, ClusterCommand, Switch};

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How often a node reads the catalog and repairs what a lost node held: a
/// lost node's partitions start to be copied again within this of its lease's
/// end, for two small etcd reads per node per tick.
const REPAIR_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Partitions a cluster table may have before its small ones are merged.
const COMPACT_ABOVE: usize = 64;

/// How many of etcd's latest revisions the cluster keeps (quiver_cluster's
/// history module says why it is compacted at all), compacting at most this
/// often.
const ETCD_HISTORY_KEEP: i64 = 10_000;
const ETCD_COMPACT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a cluster flag cannot be used with the rest. `shared_tokens`: the
/// tokens' key comes from `--token-secret-file`, not from this process.
fn refuse(config: &ServerConfig, addr: SocketAddr, shared_tokens: bool) -> CliResult<()> {
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
    let location = advertised_location(config, Some(addr));
    let peer_tls = peer_tls(args, config)?;
    let options = quiver_cluster::ClusterOptions {
        etcd,
        node_id,
        location,
        tables_in_place: config.tables.iter().map(|(_, l)| l.clone()).collect(),
        peer_tls,
        replicas: args.replicas as usize,
        lease_ttl: args.lease_ttl(),
        repair_every: REPAIR_EVERY,
        orphan_grace: args.orphan_grace(),
        read_hold: config.sql.query_timeout,
        history_keep: ETCD_HISTORY_KEEP,
        compact_every: ETCD_COMPACT_EVERY,
        compact_above: COMPACT_ABOVE,
    };
    let node = quiver_cluster::ClusterNode::join(options, Arc::clone(store))
        .await
        .map_err(|e| format!("--cluster {url}: {e}{}", hint(&e)))?;
    node.spawn_background();
    config.topology = Arc::clone(&node) as Arc<dyn quiver_flight::cluster::Topology>;
    Ok(Some(node))
}

/// TLS to the other nodes: with `--tls-cert`, the nodes' locations are
/// `grpc+tls://`, checked against `--cluster-ca`, and this node presents its
/// own certificate (for nodes that ask for clients' certificates).
fn peer_tls(
    args: &ClusterArgs,
    config: &ServerConfig,
) -> CliResult<Option<quiver_cluster::EtcdTls>> {
    match (&config.tls, &args.cluster_ca) {
        (Some(tls), Some(ca)) => {
            let ca =
                std::fs::read(ca).map_err(|e| format!("--cluster-ca {}: {e}", ca.display()))?;
            let (cert, key) = tls.identity_pem();
            Ok(Some(quiver_cluster::EtcdTls {
                ca,
                identity: Some((cert.to_vec(), key.to_vec())),
            }))
        }
        (Some(_), None) => Err(
            "--cluster with --tls-cert needs --cluster-ca: the CA the other \
                                nodes' certificates chain to (quiver cluster init-ca makes one)"
                .into(),
        ),
        (None, Some(_)) => Err(
            "--cluster-ca is for TLS between the nodes: give --tls-cert and \
                                --tls-key too"
                .into(),
        ),
        (None, None) => Ok(None),
    }
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
        ClusterCommand::Rebalance(args) => {
            let etcd = args.etcd.config(&args.cluster)?;
            let on = args.state == Switch::On;
            quiver_cluster::set_rebalance(&etcd, on)
                .await
                .map_err(|e| format!("{}: {e}{}", args.cluster, hint(&etcd)(&e)))?;
            println!("rebalancing: {}", if on { "on" } else { "off" });
            Ok(())
        }
        ClusterCommand::InitCa(args) => Ok(crate::certs::init_ca(&args.dir, args.days)?),
        ClusterCommand::IssueCert(args) => Ok(crate::certs::issue(
            &args.dir,
            &args.node,
            &args.hosts,
            args.days,
        )?),
    }
}
