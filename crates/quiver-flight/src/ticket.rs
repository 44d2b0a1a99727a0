//! Tickets: what a DoGet asks for.
//!
//! Two forms are accepted:
//! - a plain UTF-8 table name (`Ticket(b"trips")`): the whole current table, so a
//!   client that never called GetFlightInfo can still read;
//! - the tickets GetFlightInfo hands out: [`TICKET_PREFIX`] followed by JSON
//!   naming the table, the version the info described and one partition. A
//!   DoGet of such a ticket after the table changed fails with `ABORTED`, so the
//!   endpoints of one FlightInfo always read one consistent version.
//!
//! A table name never starts with a NUL (names have no control characters), so
//! the two forms cannot be confused.
//!
//! A client may add two keys to an issued ticket before its DoGet (connectors
//! push column selection and filters to the server this way): `"c"`, the
//! columns to return in that order, and `"f"`, a SQL boolean expression over
//! the table's columns that the rows must satisfy. Such a ticket reads the
//! same rows of the same pinned version, filtered, then projected. Any other
//! key is refused.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The first bytes of every ticket quiver issues.
pub const TICKET_PREFIX: &[u8] = b"\0quiver-ticket-v1:";

/// A decoded ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableTicket {
    /// The table.
    #[serde(rename = "t")]
    pub table: String,
    /// The version GetFlightInfo described; `None` reads the current version.
    #[serde(rename = "v", default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// Which partition, counted from 0.
    #[serde(rename = "p", default)]
    pub partition: usize,
    /// How many partitions the table was split into (1: the whole table).
    #[serde(rename = "n", default = "one")]
    pub partitions: usize,
    /// The columns to return, by name as stored, in this order (may be
    /// empty: batches of no columns that keep their row counts); `None`:
    /// every column.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// A SQL boolean expression over the table's columns; rows for which it
    /// is not TRUE are left out. Applied before `columns`, so it may use
    /// columns not returned.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

fn one() -> usize {
    1
}

impl TableTicket {
    /// A ticket for the whole current version of `table`.
    pub fn whole(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            version: None,
            partition: 0,
            partitions: 1,
            columns: None,
            filter: None,
        }
    }

    /// Whether the ticket selects columns or filters rows.
    pub fn pushes_down(&self) -> bool {
        self.columns.is_some() || self.filter.is_some()
    }

    /// The ticket's bytes.
    pub fn encode(&self) -> Bytes {
        let mut out = TICKET_PREFIX.to_vec();
        serde_json::to_writer(&mut out, self).expect("a ticket always serializes");
        out.into()
    }

    /// Decodes either form (see the module docs).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let ticket = match bytes.strip_prefix(TICKET_PREFIX) {
            Some(json) => serde_json::from_slice::<Self>(json)
                .map_err(|e| Error::invalid(format!("malformed quiver ticket: {e}")))?,
            None => {
                let name = std::str::from_utf8(bytes).map_err(|_| {
                    Error::invalid("ticket is neither a quiver ticket nor a UTF-8 table name")
                })?;
                Self::whole(name)
            }
        };
        quiver_store::validate_storage_name(&ticket.table)?;
        if ticket.partitions == 0 || ticket.partition >= ticket.partitions {
            return Err(Error::invalid(format!(
                "ticket partition {} is outside 0..{}",
                ticket.partition, ticket.partitions
            )));
        }
        if let Some(columns) = &ticket.columns {
            let mut seen = std::collections::HashSet::with_capacity(columns.len());
            if let Some(twice) = columns.iter().find(|c| !seen.insert(c.as_str())) {
                return Err(Error::invalid(format!(
                    "ticket column \"{twice}\" is listed twice in \"c\""
                )));
            }
        }
        if ticket
            .filter
            .as_deref()
            .is_some_and(|f| f.trim().is_empty())
        {
            return Err(Error::invalid(
                "ticket filter \"f\" is empty: leave the key out to read every row",
            ));
        }
        Ok(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = TableTicket {
            table: "taxi/2024".into(),
            version: Some(7),
            partition: 2,
            partitions: 4,
            columns: None,
            filter: None,
        };
        assert_eq!(TableTicket::decode(&t.encode()).unwrap(), t);
        let pushed = TableTicket {
            columns: Some(vec!["fare".into(), "taxi id".into()]),
            filter: Some(r#""fare" > 10 AND vendor IN ('a', 'b')"#.into()),
            ..t
        };
        assert_eq!(TableTicket::decode(&pushed.encode()).unwrap(), pushed);
    }

    /// The JSON of a ticket's bytes.
    fn json_of(ticket: &[u8]) -> serde_json::Value {
        serde_json::from_slice(ticket.strip_prefix(TICKET_PREFIX).expect("prefixed")).unwrap()
    }

    /// A ticket's bytes from its JSON.
    fn ticket_of(json: &serde_json::Value) -> Vec<u8> {
        let mut out = TICKET_PREFIX.to_vec();
        out.extend_from_slice(json.to_string().as_bytes());
        out
    }

    #[test]
    fn issued_tickets_carry_no_pushdown_keys() {
        let mut t = TableTicket::whole("trips");
        t.version = Some(3);
        assert_eq!(
            json_of(&t.encode()),
            serde_json::json!({"t": "trips", "v": 3, "p": 0, "n": 1})
        );
        assert!(!t.pushes_down());
    }

    #[test]
    fn a_client_adds_columns_and_a_filter_to_an_issued_ticket() {
        let mut t = TableTicket::whole("trips");
        t.version = Some(3);
        let mut json = json_of(&t.encode());
        json["c"] = serde_json::json!(["b", "a"]);
        json["f"] = serde_json::json!("a > 1");
        let got = TableTicket::decode(&ticket_of(&json)).unwrap();
        assert_eq!(got.version, Some(3));
        assert_eq!(got.columns, Some(vec!["b".to_string(), "a".to_string()]));
        assert_eq!(got.filter.as_deref(), Some("a > 1"));
        assert!(got.pushes_down());
        // No columns at all: rows counted, nothing else.
        json["c"] = serde_json::json!([]);
        let got = TableTicket::decode(&ticket_of(&json)).unwrap();
        assert_eq!(got.columns, Some(vec![]));
    }

    #[test]
    fn refuses_bad_pushdown_keys() {
        let base = serde_json::json!({"t": "trips", "v": 3, "p": 0, "n": 1});
        let with = |key: &str, value: serde_json::Value| {
            let mut json = base.clone();
            json[key] = value;
            TableTicket::decode(&ticket_of(&json))
                .unwrap_err()
                .to_string()
        };
        let e = with("c", serde_json::json!(["a", "b", "a"]));
        assert!(e.contains("\"a\" is listed twice"), "{e}");
        let e = with("c", serde_json::json!("a"));
        assert!(e.contains("malformed quiver ticket"), "{e}");
        let e = with("c", serde_json::json!([1]));
        assert!(e.contains("malformed quiver ticket"), "{e}");
        let e = with("f", serde_json::json!(" "));
        assert!(e.contains("empty"), "{e}");
        let e = with("f", serde_json::json!(true));
        assert!(e.contains("malformed quiver ticket"), "{e}");
        // Unknown keys stay an error: a ticket never means more than it says.
        let e = with("limit", serde_json::json!(10));
        assert!(e.contains("unknown field `limit`"), "{e}");
    }

    #[test]
    fn plain_name_is_whole_table() {
        assert_eq!(
            TableTicket::decode(b"trips").unwrap(),
            TableTicket::whole("trips")
        );
    }

    #[test]
    fn refuses_garbage() {
        assert!(TableTicket::decode(b"").is_err());
        assert!(TableTicket::decode(&[0xff, 0x00]).is_err());
        let mut bad = TICKET_PREFIX.to_vec();
        bad.extend_from_slice(b"{not json");
        assert!(TableTicket::decode(&bad).is_err());
        let mut out_of_range = TICKET_PREFIX.to_vec();
        out_of_range.extend_from_slice(br#"{"t":"x","p":3,"n":3}"#);
        assert!(TableTicket::decode(&out_of_range).is_err());
    }
}
