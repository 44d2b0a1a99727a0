//! Options of a DoPut, carried as JSON in `app_metadata`.

use quiver_store::WriteMode;
use serde::Deserialize;

use crate::{Error, Result};

/// The most partitions a table may be split into.
pub const MAX_PARTITIONS: usize = 1024;

/// How a DoPut stores its stream.
///
/// Sent as a JSON object in the `app_metadata` of the first message of the
/// stream that has any (the schema message, a metadata-only message, or the first
/// record batch); later `app_metadata` is ignored. Example:
/// `{"mode": "append"}` or `{"mode": "replace", "partitions": 4}`, or
/// `{"mode": "append", "request": "9f1c..."}`, or `{"place": "here"}`.
/// Without options the table is replaced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutOptions {
    /// `"replace"` (default) or `"append"`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: WriteMode,
    /// Endpoints GetFlightInfo splits this table over; default: the server's
    /// `--partitions`.
    #[serde(default)]
    pub partitions: Option<usize>,
    /// The put's id, 1 to [`MAX_REQUEST_ID`] printable ASCII characters: a
    /// put repeated with the id of one committed lately is answered with
    /// that commit's result, not applied again.
    #[serde(default)]
    pub request: Option<String>,
    /// Where a cluster node places the put's partitions ([`Placement`]).
    #[serde(default)]
    pub place: Placement,
}

/// Where a cluster node places a put's partitions. A single server holds
/// every put itself, whatever is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// `"spread"` (default): round the live nodes, each partition's copies
    /// on the next ones, as many partitions as live nodes by default.
    #[default]
    Spread,
    /// `"here"`: the first copy of each partition on the node the put is
    /// sent to (the others round the rest), one partition by default. An
    /// engine's task sent to one node of the `nodes` action's list has its
    /// rows held where it sent them, and the nodes share the job's tasks.
    Here,
}

/// The longest request id.
pub const MAX_REQUEST_ID: usize = 128;

/// `"replace"` or `"append"`, as a [`WriteMode`].
pub(crate) fn mode<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<WriteMode, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "replace" => Ok(WriteMode::Replace),
        "append" => Ok(WriteMode::Append),
        other => Err(serde::de::Error::custom(format!(
            "unknown mode {other:?}: expected \"replace\" or \"append\""
        ))),
    }
}

impl PutOptions {
    /// Parses options from `app_metadata`.
    pub fn from_app_metadata(bytes: &[u8]) -> Result<Self> {
        let options: Self = serde_json::from_slice(bytes).map_err(|e| {
            Error::invalid(format!(
                "DoPut app_metadata must be a JSON object like {{\"mode\": \"append\"}}: {e}"
            ))
        })?;
        check_partitions(options.partitions)?;
        if let Some(id) = &options.request
            && (id.is_empty()
                || id.len() > MAX_REQUEST_ID
                || !id.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(Error::invalid(format!(
                "request must be 1 to {MAX_REQUEST_ID} printable ASCII characters without \
                 spaces, got {id:?}"
            )));
        }
        Ok(options)
    }
}

/// Refuses a partition count outside 1 to [`MAX_PARTITIONS`].
pub(crate) fn check_partitions(partitions: Option<usize>) -> Result<()> {
    match partitions {
        Some(p) if p == 0 || p > MAX_PARTITIONS => Err(Error::invalid(format!(
            "partitions must be between 1 and {MAX_PARTITIONS}, got {p}"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            PutOptions::from_app_metadata(br#"{"mode":"append"}"#)
                .unwrap()
                .mode,
            WriteMode::Append
        );
        let o = PutOptions::from_app_metadata(br#"{"partitions":4}"#).unwrap();
        assert_eq!((o.mode, o.partitions), (WriteMode::Replace, Some(4)));
        let o = PutOptions::from_app_metadata(br#"{"request":"r-1"}"#).unwrap();
        assert_eq!(o.request.as_deref(), Some("r-1"));
        assert_eq!(o.place, Placement::Spread);
        let o = PutOptions::from_app_metadata(br#"{"place":"here"}"#).unwrap();
        assert_eq!(o.place, Placement::Here);
    }

    #[test]
    fn refuses_unknown() {
        for bad in [
            &br#"{"mode":"upsert"}"#[..],
            br#"{"mood":"append"}"#,
            br#"{"partitions":0}"#,
            br#"{"request":""}"#,
            br#"{"request":"a b"}"#,
            br#"{"place":"there"}"#,
            b"append",
        ] {
            assert!(PutOptions::from_app_metadata(bad).is_err());
        }
    }
}
