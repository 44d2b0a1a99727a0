//! DoAction's JSON results: the table actions' (`delete`, `rename`,
//! `publish`, run on a node's [`crate::tables::Tables`]) and the server's
//! (`stats`, `health`). Actions are decoded in [`crate::request`].

use std::time::Instant;

use bytes::Bytes;
use quiver_store::TableStore;
use serde_json::json;

use quiver_wire::BodyPool;

/// The `stats` action's result: the store's totals.
pub(crate) fn stats(store: &TableStore, body_pool: &BodyPool, started: Instant) -> Bytes {
    let s = store.stats();
    let pool = body_pool.stats();
    json_bytes(json!({
        "tables": s.tables,
        "rows": s.rows,
        "bytes": s.bytes,
        "memory_used": s.memory_used,
        "memory_limit": s.memory_limit,
        "put_buffer_pool_bytes": pool.idle_bytes,
        "uptime_seconds": started.elapsed().as_secs_f64(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// The `health` action's result.
pub(crate) fn health(started: Instant) -> Bytes {
    json_bytes(json!({"status": "ok", "uptime_seconds": started.elapsed().as_secs_f64()}))
}

/// The `nodes` action's result.
pub(crate) fn nodes(nodes: &[crate::tables::NodeLocation]) -> Bytes {
    json_bytes(json!({ "nodes": nodes }))
}

/// The `delete` action's result, from a single node or a cluster.
pub(crate) fn deleted_body(table: &str, rows: u64, bytes: u64) -> Bytes {
    json_bytes(json!({"deleted": table, "rows": rows, "bytes": bytes}))
}

/// The `rename` action's result.
pub(crate) fn renamed_body(from: &str, to: &str, version: u64) -> Bytes {
    json_bytes(json!({"renamed": from, "to": to, "version": version}))
}

/// DoPut's PutResult metadata, and the `publish` action's result (the same shape).
pub(crate) fn published_body(table: &str, version: u64, rows: u64, bytes: u64) -> Bytes {
    json_bytes(json!({"table": table, "version": version, "rows": rows, "bytes": bytes}))
}

fn json_bytes(value: serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}
