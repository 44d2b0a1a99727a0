//! What a commit published: the table's new version, its rows and bytes.
//! A single node's store and the cluster's catalog both answer with it.

/// What a cluster commit published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The table's new version in the catalog.
    pub version: u64,
    /// Rows of the whole new version.
    pub rows: u64,
    /// Bytes of the whole new version.
    pub bytes: u64,
}

impl From<&quiver_store::TableVersion> for Published {
    /// What committing `version` to a single node's store published.
    fn from(version: &quiver_store::TableVersion) -> Self {
        Self {
            version: version.version(),
            rows: version.num_rows(),
            bytes: version.num_bytes(),
        }
    }
}
