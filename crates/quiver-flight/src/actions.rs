//! DoAction: the actions quiver offers and their JSON results.

use std::time::Instant;

use arrow_flight::ActionType;
use bytes::Bytes;
use quiver_store::TableStore;
use serde::Deserialize;
use serde_json::json;

use crate::auth::Role;
use crate::wire::body_pool::BodyPool;
use crate::{Error, Result};

/// Every action: its type and a description for ListActions.
pub const ACTIONS: &[(&str, &str)] = &[
    (
        "delete",
        "Drop a table. Body: the table name. Result: JSON {deleted, rows, bytes}.",
    ),
    (
        "rename",
        "Rename a table. Body: JSON {\"from\", \"to\", \"overwrite\": false}. Result: JSON.",
    ),
    (
        "stats",
        "Store totals as JSON: tables, rows, bytes, memory_used, memory_limit, uptime_seconds.",
    ),
    (
        "health",
        "Liveness: JSON {\"status\": \"ok\", uptime_seconds}.",
    ),
    (
        "shm-put",
        "A ticket to put a table over the same-host shared-memory socket. Body: JSON \
         {\"table\", \"options\": {\"mode\", \"partitions\"}}. Result: JSON {location, ticket (base64)}.",
    ),
];

/// The action types for ListActions.
pub fn action_types() -> Vec<ActionType> {
    ACTIONS
        .iter()
        .map(|(name, description)| ActionType {
            r#type: name.to_string(),
            description: description.to_string(),
        })
        .collect()
}

/// The least role that may run action `kind` (Flight SQL's actions included):
/// `write` for those that change tables, `read` for the rest.
pub(crate) fn role_needed(kind: &str) -> Role {
    match kind {
        "delete" | "rename" | "shm-put" => Role::Write,
        _ => Role::Read,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameBody {
    from: String,
    to: String,
    #[serde(default)]
    overwrite: bool,
}

/// What one action did, for the RPC log.
#[derive(Debug, Default)]
pub(crate) struct ActionOutcome {
    pub(crate) body: Bytes,
    pub(crate) table: Option<String>,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

/// Runs the action `kind` with `body`.
pub(crate) fn run(
    store: &TableStore,
    body_pool: &BodyPool,
    started: Instant,
    kind: &str,
    body: &[u8],
) -> Result<ActionOutcome> {
    let uptime = started.elapsed().as_secs_f64();
    match kind {
        "delete" => {
            let name = std::str::from_utf8(body)
                .map_err(|_| Error::invalid("delete: body must be a UTF-8 table name"))?;
            let removed = store.remove(name)?;
            Ok(ActionOutcome {
                body: json_bytes(json!({
                    "deleted": name,
                    "rows": removed.num_rows(),
                    "bytes": removed.num_bytes(),
                })),
                table: Some(name.to_string()),
                rows: removed.num_rows(),
                bytes: removed.num_bytes(),
            })
        }
        "rename" => {
            let args: RenameBody = serde_json::from_slice(body).map_err(|e| {
                Error::invalid(format!(
                    "rename: body must be JSON {{\"from\": ..., \"to\": ..., \"overwrite\": false}}: {e}"
                ))
            })?;
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
        "stats" => {
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
        "health" => Ok(ActionOutcome {
            body: json_bytes(json!({"status": "ok", "uptime_seconds": uptime})),
            ..Default::default()
        }),
        other => {
            let known: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
            Err(Error::invalid(format!(
                "unknown action {:?}; known actions: {}",
                other.chars().take(100).collect::<String>(),
                known.join(", ")
            )))
        }
    }
}

fn json_bytes(value: serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}
