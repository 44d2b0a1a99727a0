//! Nodes over a real etcd for the crate's tests: each node alone in its
//! cluster of one (`--replicas 1`), so its copies are all local and no
//! Flight server is needed.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use quiver_etcd::testing::{TestEtcd, free_port};
use quiver_etcd::{Client, ConnectOptions};
use quiver_flight::Published;
use quiver_flight::PutOptions;
use quiver_store::{TableStore, WriteMode};

use crate::error::Result;
use crate::etcd::{Etcd, EtcdConfig};
use crate::node::{ClusterNode, ClusterOptions};
use crate::put::CatalogPut;

/// The prefix of the tests' keys.
pub(crate) const PREFIX: &str = "/test/";

/// etcd, and a client of it once it answers; `None` outside CI without etcd.
pub(crate) async fn etcd() -> Option<(TestEtcd, Client)> {
    let etcd = TestEtcd::start(false, &[])?;
    let client = etcd.client(ConnectOptions::default()).await;
    Some((etcd, client))
}

/// Node `id`'s options over `etcd`: one copy, a 2 s lease, no grace.
pub(crate) fn options(etcd: &TestEtcd, id: &str) -> ClusterOptions {
    ClusterOptions {
        etcd: config(etcd),
        node_id: id.to_string(),
        location: format!("grpc+tcp://127.0.0.1:{}", free_port()),
        tables_in_place: Vec::new(),
        peer_tls: None,
        replicas: 1,
        lease_ttl: Duration::from_secs(2),
        repair_every: Duration::from_millis(250),
        orphan_grace: Duration::ZERO,
        read_hold: Duration::from_secs(2),
        history_keep: 0,
        compact_every: Duration::from_millis(250),
        compact_above: 4,
    }
}

pub(crate) fn config(etcd: &TestEtcd) -> EtcdConfig {
    EtcdConfig {
        endpoints: vec![format!("http://{}", etcd.endpoint)],
        prefix: PREFIX.to_string(),
        tls: None,
        user: None,
    }
}

/// The crate's own view of `etcd`'s catalog.
pub(crate) fn catalog(etcd: &TestEtcd) -> Etcd {
    Etcd::connect(&config(etcd)).expect("etcd's config")
}

/// Node `id` joined over `etcd`, with an empty store.
pub(crate) async fn node(etcd: &TestEtcd, id: &str) -> Arc<ClusterNode> {
    ClusterNode::join(options(etcd, id), Arc::new(TableStore::new(u64::MAX)))
        .await
        .expect("the node joins")
}

/// A put of `rows` rows of one Int64 column as `table`, through `node`.
pub(crate) async fn put(
    node: &Arc<ClusterNode>,
    table: &str,
    mode: WriteMode,
    rows: i64,
) -> Result<Published> {
    put_values(node, table, mode, 0..rows, None).await
}

/// A put of the values `values` as `table` in one partition through
/// `node`, with request id `request`.
pub(crate) async fn put_values(
    node: &Arc<ClusterNode>,
    table: &str,
    mode: WriteMode,
    values: std::ops::Range<i64>,
    request: Option<&str>,
) -> Result<Published> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(Int64Array::from_iter_values(values))],
    )
    .expect("a batch");
    // Only to read and charge the rows, as a put's writer on a cluster node.
    let writer = node
        .store
        .writer(table, WriteMode::Replace, schema, None)
        .expect("a writer");
    let options = PutOptions {
        mode,
        partitions: Some(1),
        request: request.map(str::to_string),
        ..PutOptions::default()
    };
    let mut put = CatalogPut::new(Arc::clone(node), table, &options, writer);
    let bytes = quiver_store::batch_bytes(&batch);
    put.add(batch, bytes).await?;
    put.publish().await
}
