//! The manifest: which tables a data directory holds and which segment files
//! make up each, replaced as a whole (atomically) on every change.

use serde::{Deserialize, Serialize};

/// The manifest format this build writes and reads.
pub(crate) const FORMAT: u32 = 1;

/// The content of `MANIFEST`, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// [`FORMAT`].
    pub(crate) format: u32,
    /// The next table version number the store hands out.
    pub(crate) next_version: u64,
    /// Every table, by name.
    pub(crate) tables: Vec<ManifestTable>,
}

/// One table in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ManifestTable {
    pub(crate) name: String,
    pub(crate) version: u64,
    pub(crate) partitions: Option<usize>,
    /// Segment file ids, in row order. The first one's schema is the table's.
    pub(crate) segments: Vec<u64>,
    /// When its data was last written, in milliseconds since the Unix
    /// epoch; 0 (and left out) when not known (a manifest of before).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) written_ms: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Manifest {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let manifest: Self = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if manifest.format != FORMAT {
            return Err(format!(
                "manifest format {} is not the {FORMAT} this build reads",
                manifest.format
            ));
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let m = Manifest {
            format: FORMAT,
            next_version: 9,
            tables: vec![ManifestTable {
                name: "a/b".into(),
                version: 3,
                partitions: Some(4),
                segments: vec![1, 7],
                written_ms: 1_765_000_000_000,
            }],
        };
        assert_eq!(Manifest::from_bytes(&m.to_bytes()).unwrap(), m);
        let bytes = m.to_bytes();
        assert!(Manifest::from_bytes(&bytes[..bytes.len() / 2]).is_err());
        let newer = String::from_utf8(bytes)
            .unwrap()
            .replace("\"format\":1", "\"format\":2");
        assert!(
            Manifest::from_bytes(newer.as_bytes())
                .unwrap_err()
                .contains("format 2")
        );
    }
}
