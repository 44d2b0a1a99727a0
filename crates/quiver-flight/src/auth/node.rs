//! How a cluster node proves it is one: every call it makes to another node
//! carries an [`NODE_HEADER`] header, an HMAC-SHA256 keyed with the
//! cluster's secret over the node's id, the time and the RPC's path.
//!
//! The value is `v1 TIME MAC NODE`: `TIME` in seconds since the Unix epoch,
//! `MAC` in base64url without padding. A receiver accepts it within
//! [`MAX_SKEW`] of its own clock, so a copied header is good only for the
//! same RPC and only for minutes; over TLS nobody on the network sees one.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

/// The header a node's call carries.
pub const NODE_HEADER: &str = "x-quiver-node";

/// What the MAC covers besides the node, time and path: no MAC made for
/// anything else with the same key passes as a node's.
const DOMAIN: &[u8] = b"quiver cluster node v1\0";

/// The least secret accepted: 32 bytes.
const SECRET_LEN: usize = 32;

/// How far a header's time may be from the receiver's clock: the clocks of
/// the nodes may differ by this much.
pub const MAX_SKEW: u64 = 300;

/// The cluster's secret: signs this node's calls, checks the others'.
#[derive(Clone)]
pub struct NodeKey {
    key: Arc<[u8]>,
    /// This node's id, which its calls name.
    node: Arc<str>,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    /// The key of node `node` from the cluster's `secret` (at least 32 bytes).
    pub fn new(secret: &[u8], node: &str) -> Result<Self> {
        if secret.len() < SECRET_LEN {
            return Err(Error::Config(format!(
                "a cluster secret must hold at least {SECRET_LEN} bytes, this one has {}",
                secret.len()
            )));
        }
        Ok(Self {
            key: Arc::from(secret),
            node: Arc::from(node),
        })
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    fn mac(&self, node: &str, time: u64, path: &str) -> HmacSha256 {
        // Any key length is valid for HMAC.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(DOMAIN);
        mac.update(&time.to_be_bytes());
        mac.update(&(path.len() as u64).to_be_bytes());
        mac.update(path.as_bytes());
        mac.update(node.as_bytes());
        mac
    }

    /// The header value for a call of `path` made at `time`.
    pub fn sign(&self, path: &str, time: u64) -> http::HeaderValue {
        let tag = self.mac(&self.node, time, path).finalize().into_bytes();
        let value = format!("v1 {time} {} {}", URL_SAFE_NO_PAD.encode(tag), self.node);
        http::HeaderValue::try_from(value).unwrap_or_else(|_| {
            // Node ids are checked to be printable ASCII where they are set.
            http::HeaderValue::from_static("v1 0 invalid")
        })
    }

    /// The node that signed `value` for a call of `path`, if the signature
    /// is the cluster's and its time within [`MAX_SKEW`] of `now`.
    pub fn verify(&self, value: &http::HeaderValue, path: &str, now: u64) -> Result<String> {
        let invalid = |why: &str| Error::Unauthenticated(format!("{NODE_HEADER}: {why}"));
        let value = value.to_str().map_err(|_| invalid("not ASCII"))?;
        let mut parts = value.splitn(4, ' ');
        let (Some("v1"), Some(time), Some(tag), Some(node)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("malformed"));
        };
        let time: u64 = time.parse().map_err(|_| invalid("malformed time"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| invalid("malformed signature"))?;
        self.mac(node, time, path)
            .verify_slice(&tag)
            .map_err(|_| invalid("not signed with this cluster's secret"))?;
        if time.abs_diff(now) > MAX_SKEW {
            return Err(invalid(&format!(
                "signed at {time}, {} s from this node's clock: more than {MAX_SKEW} s",
                time.abs_diff(now)
            )));
        }
        Ok(node.to_string())
    }
}

/// Checks a node id: printable ASCII without spaces, as it travels in a
/// header.
pub fn validate_node_id(node: &str) -> std::result::Result<(), String> {
    if node.is_empty() || node.len() > 128 || !node.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "node id {node:?}: 1 to 128 printable ASCII characters without spaces"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/arrow.flight.protocol.FlightService/DoPut";

    #[test]
    fn a_signed_call_verifies_for_its_path_and_time_only() {
        let n1 = NodeKey::new(&[7; 32], "n1").unwrap();
        let n2 = NodeKey::new(&[7; 32], "n2").unwrap();
        let header = n1.sign(PATH, 1_000);
        assert_eq!(n2.verify(&header, PATH, 1_000).unwrap(), "n1");
        assert_eq!(n2.verify(&header, PATH, 1_000 + MAX_SKEW).unwrap(), "n1");
        for (path, now) in [
            ("/arrow.flight.protocol.FlightService/DoGet", 1_000),
            (PATH, 1_001 + MAX_SKEW),
            (PATH, 999 - MAX_SKEW),
        ] {
            assert!(
                matches!(
                    n2.verify(&header, path, now),
                    Err(Error::Unauthenticated(_))
                ),
                "{path} {now}"
            );
        }
        let stranger = NodeKey::new(&[8; 32], "n1").unwrap();
        let forged = stranger.sign(PATH, 1_000);
        let refused = n2.verify(&forged, PATH, 1_000).unwrap_err();
        assert!(
            refused.to_string().contains("this cluster's secret"),
            "{refused}"
        );
        // Another node's id in a header signed by n1.
        let text = header.to_str().unwrap().replace(" n1", " n2");
        let renamed = http::HeaderValue::try_from(text).unwrap();
        assert!(n2.verify(&renamed, PATH, 1_000).is_err());
        for bad in ["", "v1", "v2 1000 abc n1", "v1 x abc n1", "v1 1000 !!! n1"] {
            let value = http::HeaderValue::from_static(bad);
            assert!(n2.verify(&value, PATH, 1_000).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_secrets_and_bad_ids_are_refused() {
        assert!(NodeKey::new(&[1; 31], "n1").is_err());
        assert!(validate_node_id("n1").is_ok());
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert!(validate_node_id(bad).is_err(), "{bad:?}");
        }
    }
}
