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

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The first bytes of every ticket quiver issues.
pub const TICKET_PREFIX: &[u8] = b"\0quiver-ticket-v1:";

/// A decoded ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        }
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
        quiver_store::validate_name(&ticket.table)?;
        if ticket.partitions == 0 || ticket.partition >= ticket.partitions {
            return Err(Error::invalid(format!(
                "ticket partition {} is outside 0..{}",
                ticket.partition, ticket.partitions
            )));
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
        };
        assert_eq!(TableTicket::decode(&t.encode()).unwrap(), t);
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
