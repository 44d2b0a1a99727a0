//! The catalog's records as they lie in etcd, and the names the cluster gives
//! things.
//!
//! Under a prefix (default `/quiver/`):
//! - `nodes/<id>`: a live node, [`NodeEntry`] as JSON, attached to the node's
//!   lease, so it disappears when the node stops renewing it;
//! - `tables/<name>`: a table's current version, [`TableEntry`] as JSON. A
//!   version is published by one transaction that compares the key's
//!   modification revision with the one the commit read.
//! - `intents/<node>/<id>`: the partitions a put or a repair of that node is
//!   storing ([`IntentEntry`]), written before the first copy, attached to
//!   the node's lease, and deleted by the commit that publishes them. A
//!   partition an intent names is not an orphan; a commit whose intent is
//!   gone (the node lost its lease meanwhile) fails.
//! - `reads/<node>`: the copies of partitions that node handed to readers
//!   lately (FlightInfo endpoints, SQL plans) and holds for them
//!   ([`ReadsEntry`], under the node's lease): not orphans while they are
//!   named there.
//! - `written/<request id>`: what the put with that id published
//!   ([`RequestEntry`]), written by its commit, kept at least 5 minutes: a put
//!   retried with its id is answered with it instead of being applied again.
//!   (After `tables/` in key order, so outside what a snapshot reads.)
//! - `settings`: what `quiver cluster rebalance` and the like set for the
//!   whole cluster ([`Settings`]); absent, every default holds.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::{IpcMessage, SchemaAsIpc};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};

/// The storage names of partitions start with this: a reserved name
/// ([`quiver_store::RESERVED_PREFIX`]), which no client can name; a node's
/// local store holds them, and the catalog's tables are made of them.
pub const PARTITION_PREFIX: &str = quiver_store::RESERVED_PREFIX;

/// A node as registered in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// The node's id (`--node-id`).
    pub id: String,
    /// The Flight location clients and other nodes reach it at.
    pub location: String,
    /// The object storage locations of its tables in place (`--table`):
    /// distributed SQL gives it shares of scans of the files under them
    /// (crates/quiver-cluster/src/sql/in_place.rs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_place: Vec<String>,
}

/// A table's current version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableEntry {
    /// Counts from 1; each commit adds one.
    pub version: u64,
    /// The Arrow schema as an IPC message, base64.
    pub schema: String,
    /// Rows of the whole table.
    pub rows: u64,
    /// Bytes of the whole table.
    pub bytes: u64,
    /// The partitions, in row order.
    pub partitions: Vec<PartitionEntry>,
    /// When its data was last written (a put or an append), in
    /// milliseconds since the Unix epoch; 0 where not recorded (an entry
    /// of before). A rename, a repair or a compaction keeps it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub written_ms: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One partition of a table: a table of that name on each replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionEntry {
    /// Its storage name on the replicas (starts with [`PARTITION_PREFIX`]).
    pub name: String,
    /// Its rows.
    pub rows: u64,
    /// Its bytes.
    pub bytes: u64,
    /// The ids of the nodes that hold it, the one to read first first.
    pub replicas: Vec<String>,
}

/// The partitions a put or a repair in flight is storing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IntentEntry {
    /// The table they are for (for people reading the catalog).
    pub(crate) table: String,
    /// Their storage names.
    pub(crate) partitions: Vec<String>,
}

/// The copies a node's readers hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReadsEntry {
    /// The partitions' storage names (what nodes of earlier builds read:
    /// they spare every copy of these).
    pub(crate) partitions: Vec<String>,
    /// The copies themselves: (partition, node) for each replica the
    /// readers were handed. Absent in an entry of an earlier build.
    #[serde(default)]
    pub(crate) copies: Vec<(String, String)>,
}

/// What a put with a request id published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestEntry {
    /// The table it wrote.
    pub(crate) table: String,
    /// The version its commit made, and that version's rows and bytes.
    pub(crate) version: u64,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

/// What is set for the whole cluster, not per node: every node reads it with
/// the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Settings {
    /// Whether nodes move copies to even out what they hold
    /// ([`crate::rebalance`]); on unless turned off.
    #[serde(default = "on")]
    pub(crate) rebalance: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self { rebalance: on() }
    }
}

fn on() -> bool {
    true
}

impl TableEntry {
    /// The table's schema.
    pub fn schema(&self) -> Result<SchemaRef> {
        decode_schema(&self.schema)
    }
}

/// The etcd keys of one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`, which ends with `/`.
    pub(crate) fn new(prefix: &str) -> Self {
        let mut prefix = prefix.to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self { prefix }
    }

    /// The prefix of every node key.
    pub(crate) fn nodes(&self) -> String {
        format!("{}nodes/", self.prefix)
    }

    /// Node `id`'s key.
    pub(crate) fn node(&self, id: &str) -> String {
        format!("{}nodes/{id}", self.prefix)
    }

    /// The cluster's secret, which signs the nodes' calls to each other.
    pub(crate) fn secret(&self) -> String {
        format!("{}secret", self.prefix)
    }

    /// The prefix of every intent key.
    pub(crate) fn intents(&self) -> String {
        format!("{}intents/", self.prefix)
    }

    /// The prefix of node `id`'s intent keys.
    pub(crate) fn intents_of(&self, id: &str) -> String {
        format!("{}intents/{id}/", self.prefix)
    }

    /// The prefix of every key of what readers hold.
    pub(crate) fn reads(&self) -> String {
        format!("{}reads/", self.prefix)
    }

    /// The key of what node `id`'s readers hold.
    pub(crate) fn reads_of(&self, id: &str) -> String {
        format!("{}reads/{id}", self.prefix)
    }

    /// The cluster's [`Settings`].
    pub(crate) fn settings(&self) -> String {
        format!("{}settings", self.prefix)
    }

    /// The keys a snapshot reads, `[start, end)`: intents, nodes, reads, the
    /// secret, the settings and tables, not the records of requests (`written/`), which
    /// only puts that carry an id read, one by one.
    pub(crate) fn snapshot_range(&self) -> (String, String) {
        // "tables0" is the first key after every "tables/..." ('0' follows '/').
        (self.intents(), format!("{}tables0", self.prefix))
    }

    /// The record of the put with request id `id`.
    pub(crate) fn written(&self, id: &str) -> String {
        format!("{}written/{id}", self.prefix)
    }

    /// The prefix of every table key.
    pub(crate) fn tables(&self) -> String {
        format!("{}tables/", self.prefix)
    }

    /// Table `name`'s key.
    pub(crate) fn table(&self, name: &str) -> String {
        format!("{}tables/{name}", self.prefix)
    }
}

/// A new partition's storage name: the table's, when it was made (for
/// people reading the logs) and a unique part.
pub(crate) fn partition_name(table: &str, index: usize) -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let unique = uuid::Uuid::new_v4().simple();
    format!("{PARTITION_PREFIX}{table}#{millis}.{unique}.{index}")
}

/// `schema` as stored in a [`TableEntry`].
pub(crate) fn encode_schema(schema: &Schema) -> Result<String> {
    let message = IpcMessage::try_from(SchemaAsIpc::new(schema, &IpcWriteOptions::default()))?;
    Ok(BASE64.encode(&message.0))
}

/// The schema a [`TableEntry`] stores.
pub(crate) fn decode_schema(text: &str) -> Result<SchemaRef> {
    let bytes = BASE64.decode(text).map_err(|e| ClusterError::Malformed {
        key: "schema".into(),
        detail: e.to_string(),
    })?;
    let schema = Schema::try_from(IpcMessage(bytes.into()))?;
    Ok(Arc::new(schema))
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, TimeUnit};

    use super::*;

    #[test]
    fn schemas_round_trip() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Microsecond, Some("Europe/Paris".into())),
                true,
            ),
            Field::new_list("l", Field::new_list_field(DataType::Utf8, true), true),
        ]);
        let text = encode_schema(&schema).expect("encode");
        assert_eq!(*decode_schema(&text).expect("decode"), schema);
        assert!(decode_schema("not base64!").is_err());
    }

    #[test]
    fn partition_names_are_unique_under_the_prefix() {
        let (a, b) = (partition_name("a#b/c", 3), partition_name("a#b/c", 3));
        assert!(a.starts_with(PARTITION_PREFIX) && a.ends_with(".3"));
        assert!(quiver_store::is_reserved(&a) && quiver_store::validate_name(&a).is_err());
        assert_ne!(a, b);
    }

    #[test]
    fn keys_nest_under_the_prefix() {
        let keys = Keys::new("/q");
        assert_eq!(keys.node("n1"), "/q/nodes/n1");
        assert_eq!(keys.table("t/x"), "/q/tables/t/x");
        assert!(keys.table("t").starts_with(&keys.tables()));
        assert!(keys.intents_of("n1").starts_with(&keys.intents()));
        assert_eq!(keys.intents_of("n1"), "/q/intents/n1/");
        let (start, end) = keys.snapshot_range();
        let read = |key: &str| start.as_str() <= key && key < end.as_str();
        for key in [
            keys.intents_of("n1"),
            keys.node("n1"),
            keys.secret(),
            keys.settings(),
            keys.table("t"),
            keys.table("\u{10ffff}"),
        ] {
            assert!(read(&key), "{key}");
        }
        assert!(!read(&keys.written("r")) && !read("/r/tables/t"));
    }

    #[test]
    fn settings_absent_from_an_entry_keep_their_defaults() {
        let empty: Settings = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Settings::default());
        assert!(empty.rebalance);
        let off: Settings = serde_json::from_str(r#"{"rebalance": false}"#).unwrap();
        assert!(!off.rebalance);
    }
}
