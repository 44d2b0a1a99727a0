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
                body: json_bytes(json!({
                    "deleted": name,
                    "rows": removed.num_rows(),
                    "bytes": removed.num_bytes(),
                })),
                table: Some(name),
                rows: removed.num_rows(),
                bytes: removed.num_bytes(),
            })
        }
        StoreAction::Rename(args) => {
            let renamed = store.rename(&args.from, &args.to, args.overwrite)?;
            Ok(ActionOutcome {
                body: json_bytes(json!({
                    "renamed": args.from,
                    "to": args.to,
                    "version": renamed.version(),
                })),
                table: Some(args.from),
                rows: renamed.num_rows(),
                bytes: renamed.num_bytes(),
            })
        }
        StoreAction::Publish(args) => {
            let version = store.publish(&args.into, &args.from, args.mode, args.partitions)?;
            let (rows, bytes) = (version.num_rows(), version.num_bytes());
            Ok(ActionOutcome {
                // The shape of DoPut's PutResult.
                body: json_bytes(json!({
                    "table": args.into,
                    "version": version.version(),
                    "rows": rows,
                    "bytes": bytes,
                })),
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

fn json_bytes(value: serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}
