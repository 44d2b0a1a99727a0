//! Capabilities: what a client authorized over Flight may fetch or put over
//! the socket.
//!
//! GetFlightInfo (for a read) or the `shm-put` action (for a write) checks the
//! caller's role and gives out a ticket naming a grant: 16 random bytes, used
//! once, valid for [`GRANT_TTL`]. The socket accepts nothing else, so a local
//! process that can connect to it but holds no ticket gets nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quiver_store::TableVersion;

use crate::adopt::PutInto;
use crate::{Result, ShmError};

/// How long a ticket stays valid.
pub const GRANT_TTL: Duration = Duration::from_secs(60);

/// The first bytes of every shm ticket.
pub const SHM_TICKET_PREFIX: &[u8] = b"\0quiver-shm-v1:";

/// Most grants outstanding at once.
const MAX_GRANTS: usize = 65_536;

/// What a ticket allows.
#[derive(Debug, Clone)]
pub(crate) enum Grant {
    /// Read this version (pinned from GetFlightInfo on).
    Get(Arc<TableVersion>),
    /// Put a table where `into` says, for `caller`.
    Put { into: PutInto, caller: Arc<str> },
}

/// The grants outstanding.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    live: Mutex<HashMap<[u8; 16], (Instant, Grant)>>,
}

impl Grants {
    /// Records `grant`; returns its ticket.
    pub(crate) fn issue(&self, grant: Grant) -> Result<Vec<u8>> {
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).map_err(|e| ShmError::Internal(format!("no randomness: {e}")))?;
        let now = Instant::now();
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|_, (expires, _)| *expires > now);
        if live.len() >= MAX_GRANTS {
            return Err(ShmError::ResourceExhausted(format!(
                "{MAX_GRANTS} shared-memory tickets outstanding: use them or wait {} s",
                GRANT_TTL.as_secs()
            )));
        }
        live.insert(key, (now + GRANT_TTL, grant));
        let mut ticket = SHM_TICKET_PREFIX.to_vec();
        ticket.extend_from_slice(&key);
        Ok(ticket)
    }

    /// Grants issued and neither redeemed nor expired.
    pub(crate) fn outstanding(&self) -> usize {
        let now = Instant::now();
        let live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.values().filter(|(expires, _)| *expires > now).count()
    }

    /// The grant `ticket` names, removed: a ticket is used once.
    pub(crate) fn redeem(&self, ticket: &[u8]) -> Result<Grant> {
        let key: [u8; 16] = ticket
            .strip_prefix(SHM_TICKET_PREFIX)
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| ShmError::invalid("not a quiver shared-memory ticket"))?;
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match live.remove(&key) {
            Some((expires, grant)) if expires > Instant::now() => Ok(grant),
            _ => Err(ShmError::PermissionDenied(
                "unknown, used or expired shared-memory ticket: call GetFlightInfo \
                 (or shm-put) again"
                    .to_string(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put() -> Grant {
        Grant::Put {
            into: PutInto::Store(crate::adopt::PutRequest {
                table: "t".into(),
                mode: quiver_store::WriteMode::Replace,
                partitions: None,
            }),
            caller: Arc::from(""),
        }
    }

    #[test]
    fn a_ticket_is_used_once() {
        let grants = Grants::default();
        let ticket = grants.issue(put()).unwrap();
        assert!(ticket.starts_with(SHM_TICKET_PREFIX));
        assert!(matches!(grants.redeem(&ticket), Ok(Grant::Put { .. })));
        assert!(matches!(
            grants.redeem(&ticket),
            Err(ShmError::PermissionDenied(_))
        ));
    }

    #[test]
    fn forged_tickets_are_refused() {
        let grants = Grants::default();
        let mut ticket = grants.issue(put()).unwrap();
        *ticket.last_mut().unwrap() ^= 1;
        assert!(matches!(
            grants.redeem(&ticket),
            Err(ShmError::PermissionDenied(_))
        ));
        assert!(matches!(
            grants.redeem(b"table"),
            Err(ShmError::InvalidArgument(_))
        ));
    }
}
