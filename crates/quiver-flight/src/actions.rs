//! DoAction: the store's actions (`delete`, `rename`, `publish`, `stats`,
//! `health`) and their JSON results. Actions are decoded in [`crate::request`].

use std::time::Instant;

use bytes::Bytes;
use quiver_store::TableStore;
use serde_json::json;

use crate::Result;
use crate::request::StoreAction;
use quiver_wire::BodyPool;

/// What one action did, for the RPC log.
#[derive(Debug, Default)]
pub(crate) struct ActionOutcome {
    pub(crate) body: Bytes,
    pub(crate) table: Option<String>,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

/// Runs a store action.
pub(crate) fn run(
    store: &TableStore,
    body_pool: &BodyPool,
    started: Instant,
    action: StoreAction,
) -> Result<ActionOutcome> {
    let uptime = started.elapsed().as_secs_f64();
    match action {
        StoreAction::Delete(name) => {
            let removed = store.remove(&name)?;
            Ok(ActionOutcome {
                body: deleted_body(&name, removed.num_rows(), removed.num_bytes()),
                table: Some(name),
                rows: removed.num_rows(),
                bytes: removed.num_bytes(),
            })
        }
        StoreAction::Rename(args) => {
            let renamed = store.rename(&args.from, &args.to, args.overwrite)?;
            Ok(ActionOutcome {
                body: renamed_body(&args.from, &args.to, renamed.version()),
                table: Some(args.from),
                rows: renamed.num_rows(),
                bytes: renamed.num_bytes(),
            })
        }
        StoreAction::Publish(args) => {
            let version = store.publish(&args.into, &args.from, args.mode, args.partitions)?;
            let (rows, bytes) = (version.num_rows(), version.num_bytes());
            Ok(ActionOutcome {
                body: published_body(&args.into, version.version(), rows, bytes),
                table: Some(args.into),
                rows,
                bytes,
            })
        }
        StoreAction::Stats => {
            let s = store.stats();
            let pool = body_pool.stats();
            Ok(ActionOutcome {
                body: json_bytes(json!({
                    "tables": s.tables,
                    "rows": s.rows,
                    "bytes": s.bytes,
                    "memory_used": s.memory_used,
                    "memory_limit": s.memory_limit,
                    "put_buffer_pool_bytes": pool.idle_bytes,
                    "uptime_seconds": uptime,
                    "version": env!("CARGO_PKG_VERSION"),
                })),
                ..Default::default()
            })
        }
        StoreAction::Health => Ok(ActionOutcome {
            body: json_bytes(json!({"status": "ok", "uptime_seconds": uptime})),
            ..Default::default()
        }),
    }
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
