//! What a request asks for, decoded once: every RPC turns its descriptor,
//! ticket or action into one of these enums here, and the handlers dispatch on
//! the variants.
//!
//! A descriptor or ticket is a table's or a Flight SQL message (a protobuf
//! `Any`, which starts with a byte no table name starts with, so the two
//! cannot be confused); an action is one of [`ActionKind`], its body decoded
//! into an [`ActionRequest`] after the caller's role was checked against the
//! kind.

use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, Any, Command, ProstMessageExt,
};
use arrow_flight::{ActionType, CancelFlightInfoRequest, FlightDescriptor, FlightInfo};
use prost::Message;
use serde::Deserialize;

use crate::auth::Role;
use crate::session::SessionAction;
use crate::ticket::TableTicket;
use crate::{Error, PutOptions, Result, sql, table_name};

/// What a descriptor names.
#[derive(Debug)]
pub(crate) enum Described {
    /// A stored table.
    Table(String),
    /// A Flight SQL command.
    Sql(Command),
    /// A DoExchange command: a `CMD` descriptor whose bytes are a JSON object.
    Exchange(Exchange),
    /// A cluster partition's storage name ([`partition_descriptor`]): what
    /// one node puts on another, which only nodes may do.
    Partition(String),
}

/// The key of the JSON `CMD` descriptor naming a partition's storage.
const PARTITION_KEY: &str = "partition";

/// The descriptor of a DoPut that stores a partition under its storage name
/// `name` (one starting with [`quiver_store::RESERVED_PREFIX`]) on a node:
/// `{"partition": NAME}`, which only the cluster's nodes may send.
pub fn partition_descriptor(name: &str) -> FlightDescriptor {
    FlightDescriptor::new_cmd(serde_json::json!({ PARTITION_KEY: name }).to_string())
}

/// The error for a partition descriptor sent to any RPC but DoPut.
pub(crate) fn partition_not_here(rpc: &str) -> Error {
    Error::invalid(format!(
        "a {{\"{PARTITION_KEY}\": ...}} descriptor is a node's DoPut to another node, not for {rpc}"
    ))
}

impl Described {
    pub(crate) fn decode(descriptor: &FlightDescriptor) -> Result<Self> {
        if descriptor.r#type == DescriptorType::Cmd as i32 && descriptor.cmd.first() == Some(&b'{')
        {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Partition {
                partition: String,
            }
            if let Ok(Partition { partition }) = serde_json::from_slice(&descriptor.cmd) {
                quiver_store::validate_storage_name(&partition)?;
                if !quiver_store::is_reserved(&partition) {
                    return Err(Error::invalid(format!(
                        "{partition:?} is not a partition's storage name"
                    )));
                }
                return Ok(Self::Partition(partition));
            }
            return Ok(Self::Exchange(Exchange::decode(&descriptor.cmd)?));
        }
        Ok(match sql::command(&descriptor.cmd)? {
            Some(command) => Self::Sql(command),
            None => Self::Table(table_name(descriptor)?),
        })
    }
}

/// What a DoExchange command asks for (docs/functions.md).
#[derive(Debug)]
pub(crate) enum Exchange {
    /// `{"function": NAME}`: the stream's batches through a function.
    Function(String),
    /// `{"apply": NAME, "source": TABLE, ...}`: a stored table through a function.
    Apply(Apply),
    /// `{"sql": QUERY}`: SQL over the stream.
    Sql(String),
}

/// The `apply` command.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Apply {
    /// The function.
    pub(crate) apply: String,
    /// The stored table fed to it.
    pub(crate) source: String,
    /// Where the results are stored; without it they stream back.
    pub(crate) into: Option<String>,
    #[serde(default)]
    mode: Option<serde_json::Value>,
    #[serde(default)]
    partitions: Option<serde_json::Value>,
}

impl Apply {
    /// How `into` is written: `mode` and `partitions`, as a put takes them.
    pub(crate) fn options(&self) -> Result<PutOptions> {
        let mut options = serde_json::Map::new();
        if let Some(mode) = &self.mode {
            options.insert("mode".into(), mode.clone());
        }
        if let Some(partitions) = &self.partitions {
            options.insert("partitions".into(), partitions.clone());
        }
        PutOptions::from_app_metadata(serde_json::Value::Object(options).to_string().as_bytes())
    }
}

impl Exchange {
    fn decode(cmd: &[u8]) -> Result<Self> {
        const USAGE: &str = "a command is a JSON object: {\"function\": NAME}, {\"apply\": NAME, \
                             \"source\": TABLE, \"into\": TABLE} or {\"sql\": QUERY} (a CMD \
                             descriptor starting with '{' is never a table name; name such a \
                             table with a PATH descriptor)";
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(cmd)
            .map_err(|e| Error::invalid(format!("malformed command ({e}): {USAGE}")))?;
        let only = |key: &str| -> Result<String> {
            if object.len() != 1 {
                let others: Vec<&str> = object
                    .keys()
                    .map(String::as_str)
                    .filter(|k| *k != key)
                    .collect();
                return Err(Error::invalid(format!(
                    "unknown keys {others:?} in a {key:?} command: {USAGE}"
                )));
            }
            match &object[key] {
                serde_json::Value::String(s) => Ok(s.clone()),
                other => Err(Error::invalid(format!(
                    "{key:?} must be a string, not {other}: {USAGE}"
                ))),
            }
        };
        if object.contains_key("apply") {
            let apply: Apply = serde_json::from_value(serde_json::Value::Object(object))
                .map_err(|e| Error::invalid(format!("malformed apply command ({e}): {USAGE}")))?;
            apply.options()?;
            quiver_store::validate_name(&apply.source)?;
            if let Some(into) = &apply.into {
                quiver_store::validate_name(into)?;
            }
            return Ok(Self::Apply(apply));
        }
        if object.contains_key("function") {
            return Ok(Self::Function(only("function")?));
        }
        if object.contains_key("sql") {
            return Ok(Self::Sql(only("sql")?));
        }
        Err(Error::invalid(format!("unknown command: {USAGE}")))
    }
}

/// What a DoGet ticket reads.
#[derive(Debug)]
pub(crate) enum Ticketed {
    /// A table's partition ([`TableTicket`]).
    Table(TableTicket),
    /// A Flight SQL ticket: a query's partition or a catalog command.
    Sql(Command),
}

impl Ticketed {
    pub(crate) fn decode(ticket: &[u8]) -> Result<Self> {
        Ok(match sql::command(ticket)? {
            Some(command) => Self::Sql(command),
            None => Self::Table(TableTicket::decode(ticket)?),
        })
    }
}

/// Every action quiver offers (Flight SQL's included), by its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActionKind {
    /// Drop a table.
    Delete,
    /// Rename a table.
    Rename,
    /// Publish staging tables as one table, zero-copy.
    Publish,
    /// Store totals.
    Stats,
    /// Liveness.
    Health,
    /// The cluster's nodes, for puts placed here.
    Nodes,
    /// A ticket to put a table over shared memory.
    ShmPut,
    /// Flight SQL: prepare a statement.
    CreatePreparedStatement,
    /// Flight SQL: close a prepared statement.
    ClosePreparedStatement,
    /// Cancel the query behind a FlightInfo.
    CancelFlightInfo,
    /// Flight SQL (deprecated): cancel a query.
    CancelQuery,
    /// The functions served, with their schemas.
    ListFunctions,
    /// Flight: set options of the caller's session (starting one).
    SetSessionOptions,
    /// Flight: the options of the caller's session.
    GetSessionOptions,
    /// Flight: end the caller's session.
    CloseSession,
}

/// Why a Flight SQL action quiver knows but does not offer is refused.
fn unsupported(kind: &str) -> Option<String> {
    match kind {
        "BeginTransaction" | "EndTransaction" | "BeginSavepoint" | "EndSavepoint" => Some(format!(
            "{kind}: transactions are not supported (SqlInfo FLIGHT_SQL_SERVER_TRANSACTION is NONE)"
        )),
        "CreatePreparedSubstraitPlan" => Some("Substrait plans are not supported".into()),
        _ => None,
    }
}

impl ActionKind {
    /// Every kind, in the order ListActions gives them.
    pub(crate) const ALL: [ActionKind; 15] = [
        Self::Delete,
        Self::Rename,
        Self::Publish,
        Self::Stats,
        Self::Health,
        Self::Nodes,
        Self::ShmPut,
        Self::CreatePreparedStatement,
        Self::ClosePreparedStatement,
        Self::CancelFlightInfo,
        Self::CancelQuery,
        Self::ListFunctions,
        Self::SetSessionOptions,
        Self::GetSessionOptions,
        Self::CloseSession,
    ];

    /// The action's type, as clients send it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Rename => "rename",
            Self::Publish => "publish",
            Self::Stats => "stats",
            Self::Health => "health",
            Self::Nodes => "nodes",
            Self::ShmPut => "shm-put",
            Self::CreatePreparedStatement => "CreatePreparedStatement",
            Self::ClosePreparedStatement => "ClosePreparedStatement",
            Self::CancelFlightInfo => "CancelFlightInfo",
            Self::CancelQuery => "CancelQuery",
            Self::ListFunctions => "list-functions",
            Self::SetSessionOptions => "SetSessionOptions",
            Self::GetSessionOptions => "GetSessionOptions",
            Self::CloseSession => "CloseSession",
        }
    }

    /// What ListActions says of it.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Self::Delete => {
                "Drop a table. Body: the table name. Result: JSON {deleted, rows, bytes}."
            }
            Self::Rename => {
                "Rename a table. Body: JSON {\"from\", \"to\", \"overwrite\": false}. Result: JSON."
            }
            Self::Publish => {
                "Publish tables as one, atomically and without copying: their rows, in the order \
                 given, become table `into` (after its own rows for mode append) and the sources \
                 are removed. Body: JSON {\"into\", \"from\": [names], \"mode\": \"append\" or \
                 \"replace\", \"partitions\" (optional)}. Result: JSON {table, version, rows, \
                 bytes}."
            }
            Self::Stats => {
                "Store totals as JSON: tables, rows, bytes, memory_used, memory_limit, \
                 uptime_seconds."
            }
            Self::Health => "Liveness: JSON {\"status\": \"ok\", uptime_seconds}.",
            Self::Nodes => {
                "The cluster's live nodes, for puts sent with {\"place\": \"here\"} (an engine's \
                 tasks spread over them). Result: JSON {\"nodes\": [{id, location}]}; empty on a \
                 single server."
            }
            Self::ShmPut => {
                "A ticket to put a table over the same-host shared-memory socket. Body: JSON \
                 {\"table\", \"options\": {\"mode\", \"partitions\"}}. Result: JSON {location, \
                 ticket (base64)}."
            }
            Self::CreatePreparedStatement => "Flight SQL: prepare a statement",
            Self::ClosePreparedStatement => "Flight SQL: close a prepared statement",
            Self::CancelFlightInfo => "cancel a query whose FlightInfo is given",
            Self::CancelQuery => "Flight SQL (deprecated): cancel a query",
            Self::ListFunctions => {
                "The functions served (DoExchange {\"function\": NAME}). Result: JSON \
                 {functions: [{name, description, input_schema, output_schema, ...}], workers}."
            }
            Self::SetSessionOptions => {
                "Set session options (catalog \"quiver\", schema \"public\"); starts a session, \
                 named by the cookie arrow_flight_session_id. Request: SetSessionOptionsRequest. \
                 Result: SetSessionOptionsResult."
            }
            Self::GetSessionOptions => {
                "The session's options. Request: GetSessionOptionsRequest. Result: \
                 GetSessionOptionsResult."
            }
            Self::CloseSession => {
                "End the session. Request: CloseSessionRequest. Result: CloseSessionResult."
            }
        }
    }

    /// The least role that may run it: `write` for those that change tables,
    /// `read` for the rest.
    pub(crate) fn role(self) -> Role {
        match self {
            Self::Delete | Self::Rename | Self::Publish | Self::ShmPut => Role::Write,
            _ => Role::Read,
        }
    }

    /// The kind an action's type names.
    pub(crate) fn parse(kind: &str) -> Result<Self> {
        if let Some(known) = Self::ALL.into_iter().find(|k| k.name() == kind) {
            return Ok(known);
        }
        if let Some(why) = unsupported(kind) {
            return Err(Error::Unimplemented(why));
        }
        let known: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        Err(Error::Unimplemented(format!(
            "unknown action {:?}; known actions: {}",
            kind.chars().take(100).collect::<String>(),
            known.join(", ")
        )))
    }

    /// The action types for ListActions.
    pub(crate) fn action_types() -> Vec<ActionType> {
        Self::ALL
            .iter()
            .map(|kind| ActionType {
                r#type: kind.name().to_string(),
                description: kind.description().to_string(),
            })
            .collect()
    }
}

/// The body of a `rename` action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rename {
    pub(crate) from: String,
    pub(crate) to: String,
    #[serde(default)]
    pub(crate) overwrite: bool,
}

/// The body of a `publish` action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Publish {
    /// The table published into.
    pub(crate) into: String,
    /// The tables whose rows it gets, in order; each is removed.
    pub(crate) from: Vec<String>,
    /// `"append"` or `"replace"` (no default: say which).
    #[serde(deserialize_with = "crate::put_options::mode")]
    pub(crate) mode: quiver_store::WriteMode,
    /// As for a put: 1 to [`crate::MAX_PARTITIONS`].
    #[serde(default)]
    pub(crate) partitions: Option<usize>,
}

/// The body of an `shm-put` action.
#[derive(Debug)]
pub(crate) struct ShmPut {
    pub(crate) table: String,
    pub(crate) options: PutOptions,
}

/// A Flight SQL action, its body decoded.
#[derive(Debug)]
pub(crate) enum SqlAction {
    CreatePrepared(ActionCreatePreparedStatementRequest),
    ClosePrepared(ActionClosePreparedStatementRequest),
    CancelFlightInfo(CancelFlightInfoRequest),
    CancelQuery(FlightInfo),
}

/// An action that changes a table, its body decoded.
#[derive(Debug)]
pub(crate) enum TableAction {
    Delete(String),
    Rename(Rename),
    Publish(Publish),
}

/// An action, its body decoded.
#[derive(Debug)]
pub(crate) enum ActionRequest {
    Table(TableAction),
    /// `stats`: the store's totals.
    Stats,
    /// `health`.
    Health,
    /// `nodes`: where puts placed here may go.
    Nodes,
    ShmPut(ShmPut),
    Sql(SqlAction),
    /// `list-functions`.
    ListFunctions,
    Session(SessionAction),
}

impl ActionRequest {
    /// Decodes the body of an action of `kind`.
    pub(crate) fn decode(kind: ActionKind, body: &[u8]) -> Result<Self> {
        Ok(match kind {
            ActionKind::Delete => {
                let name = std::str::from_utf8(body)
                    .map_err(|_| Error::invalid("delete: body must be a UTF-8 table name"))?;
                quiver_store::validate_name(name)?;
                Self::Table(TableAction::Delete(name.to_string()))
            }
            ActionKind::Rename => {
                let rename: Rename = serde_json::from_slice(body).map_err(|e| {
                    Error::invalid(format!(
                        "rename: body must be JSON {{\"from\": ..., \"to\": ..., \"overwrite\": false}}: {e}"
                    ))
                })?;
                quiver_store::validate_name(&rename.from)?;
                quiver_store::validate_name(&rename.to)?;
                Self::Table(TableAction::Rename(rename))
            }
            ActionKind::Publish => Self::Table(TableAction::Publish(publish(body)?)),
            ActionKind::Stats => Self::Stats,
            ActionKind::Health => Self::Health,
            ActionKind::Nodes => Self::Nodes,
            ActionKind::ShmPut => Self::ShmPut(shm_put(body)?),
            ActionKind::ListFunctions => Self::ListFunctions,
            ActionKind::SetSessionOptions => Self::Session(SessionAction::set(body)?),
            ActionKind::GetSessionOptions => Self::Session(SessionAction::Get),
            ActionKind::CloseSession => Self::Session(SessionAction::Close),
            ActionKind::CreatePreparedStatement => {
                Self::Sql(SqlAction::CreatePrepared(unpack(body)?))
            }
            ActionKind::ClosePreparedStatement => {
                Self::Sql(SqlAction::ClosePrepared(unpack(body)?))
            }
            ActionKind::CancelFlightInfo => Self::Sql(SqlAction::CancelFlightInfo(
                CancelFlightInfoRequest::decode(body).map_err(|e| {
                    Error::invalid(format!("malformed CancelFlightInfoRequest: {e}"))
                })?,
            )),
            ActionKind::CancelQuery => {
                let request: ActionCancelQueryRequest = unpack(body)?;
                Self::Sql(SqlAction::CancelQuery(
                    FlightInfo::decode(request.info)
                        .map_err(|e| Error::invalid(format!("malformed FlightInfo: {e}")))?,
                ))
            }
        })
    }
}

/// The Flight SQL message of an action's body (a protobuf `Any`).
fn unpack<M: ProstMessageExt>(body: &[u8]) -> Result<M> {
    let any = Any::decode(body)
        .map_err(|e| Error::invalid(format!("action body is not a protobuf Any: {e}")))?;
    any.unpack::<M>()
        .map_err(|e| Error::invalid(format!("malformed action body: {e}")))?
        .ok_or_else(|| {
            Error::invalid(format!(
                "action body is a {}, expected a {}",
                any.type_url,
                M::type_url()
            ))
        })
}

fn publish(body: &[u8]) -> Result<Publish> {
    let publish: Publish = serde_json::from_slice(body).map_err(|e| {
        Error::invalid(format!(
            "publish: body must be JSON {{\"into\": NAME, \"from\": [NAME, ...], \"mode\": \
             \"append\" or \"replace\", \"partitions\": N (optional)}}: {e}"
        ))
    })?;
    crate::put_options::check_partitions(publish.partitions)?;
    quiver_store::validate_name(&publish.into)?;
    for name in &publish.from {
        quiver_store::validate_name(name)?;
    }
    Ok(publish)
}

fn shm_put(body: &[u8]) -> Result<ShmPut> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        table: String,
        #[serde(default)]
        options: Option<serde_json::Value>,
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| {
        Error::invalid(format!(
            "shm-put takes JSON {{\"table\": NAME, \"options\": {{\"mode\": \"append\"}}}}: {e}"
        ))
    })?;
    quiver_store::validate_name(&body.table)?;
    let options = match &body.options {
        None => PutOptions::default(),
        Some(o) => PutOptions::from_app_metadata(o.to_string().as_bytes())?,
    };
    Ok(ShmPut {
        table: body.table,
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_back_from_its_name() {
        for kind in ActionKind::ALL {
            assert_eq!(ActionKind::parse(kind.name()).unwrap(), kind);
        }
        let unknown = ActionKind::parse("nope").unwrap_err();
        assert!(matches!(unknown, Error::Unimplemented(_)), "{unknown}");
        assert!(
            unknown
                .to_string()
                .contains("known actions: delete, rename")
        );
        assert!(matches!(
            ActionKind::parse("BeginTransaction"),
            Err(Error::Unimplemented(_))
        ));
    }

    #[test]
    fn writes_need_the_write_role() {
        let writes: Vec<_> = ActionKind::ALL
            .into_iter()
            .filter(|k| k.role() == Role::Write)
            .collect();
        assert_eq!(
            writes,
            [
                ActionKind::Delete,
                ActionKind::Rename,
                ActionKind::Publish,
                ActionKind::ShmPut
            ]
        );
    }

    #[test]
    fn publish_bodies_are_checked() {
        let decode = |body: &str| match ActionRequest::decode(ActionKind::Publish, body.as_bytes())?
        {
            ActionRequest::Table(TableAction::Publish(p)) => Ok(p),
            other => panic!("{other:?}"),
        };
        let p = decode(r#"{"into": "t", "from": ["a", "b"], "mode": "append"}"#).unwrap();
        assert_eq!(
            (p.into.as_str(), p.from.as_slice()),
            ("t", &["a".to_string(), "b".into()][..])
        );
        assert_eq!(
            (p.mode, p.partitions),
            (quiver_store::WriteMode::Append, None)
        );
        let p =
            decode(r#"{"into": "t", "from": ["a"], "mode": "replace", "partitions": 4}"#).unwrap();
        assert_eq!(
            (p.mode, p.partitions),
            (quiver_store::WriteMode::Replace, Some(4))
        );
        for bad in [
            "",
            "t",
            r#"{"into": "t", "from": ["a"]}"#,
            r#"{"into": "t", "from": "a", "mode": "append"}"#,
            r#"{"into": "t", "from": ["a"], "mode": "create"}"#,
            r#"{"into": "t", "from": ["a"], "mode": "append", "partitions": 0}"#,
            r#"{"into": "t", "from": ["a"], "mode": "append", "partitions": 1025}"#,
            r#"{"into": "t", "from": ["a"], "mode": "append", "overwrite": true}"#,
        ] {
            let e = decode(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn json_commands_are_exchanges_and_checked() {
        let decode = |cmd: &str| Described::decode(&FlightDescriptor::new_cmd(cmd.to_string()));
        assert!(matches!(
            decode(r#"{"function": "score"}"#).unwrap(),
            Described::Exchange(Exchange::Function(f)) if f == "score"
        ));
        assert!(matches!(
            decode(r#"{"sql": "SELECT 1"}"#).unwrap(),
            Described::Exchange(Exchange::Sql(_))
        ));
        match decode(r#"{"apply": "f", "source": "t", "into": "u", "mode": "append"}"#).unwrap() {
            Described::Exchange(Exchange::Apply(a)) => {
                assert_eq!((a.apply.as_str(), a.source.as_str()), ("f", "t"));
                assert_eq!(a.options().unwrap().mode, quiver_store::WriteMode::Append);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "{",
            r#"{"function": 3}"#,
            r#"{"function": "f", "extra": 1}"#,
            r#"{"apply": "f"}"#,
            r#"{"apply": "f", "source": "t", "mode": "sideways"}"#,
            r#"{"nothing": 1}"#,
        ] {
            let e = decode(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
        }
        // A PATH descriptor still names a table whose name starts with '{'.
        assert!(matches!(
            Described::decode(&FlightDescriptor::new_path(vec!["{odd}".into()])).unwrap(),
            Described::Table(name) if name == "{odd}"
        ));
    }

    #[test]
    fn descriptors_and_tickets_are_tables_or_sql() {
        assert!(matches!(
            Described::decode(&FlightDescriptor::new_path(vec!["t".into()])).unwrap(),
            Described::Table(name) if name == "t"
        ));
        assert!(matches!(
            Ticketed::decode(b"t").unwrap(),
            Ticketed::Table(t) if t.table == "t"
        ));
        let bad = ActionRequest::decode(ActionKind::Rename, b"{}").unwrap_err();
        assert!(bad.to_string().starts_with("rename: body must be JSON"));
    }
}
