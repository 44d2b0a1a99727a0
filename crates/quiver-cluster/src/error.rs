//! The crate's one error type, and the one place it becomes a gRPC status.

use tonic::{Code, Status};

/// What can go wrong in the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd could not be reached, or did not answer in time.
    #[error("the cluster catalog (etcd) is unreachable: {0}")]
    Catalog(String),
    /// etcd answered, and refused this node: its certificate, user or
    /// role does not allow what it asked (a setting of the node's to fix,
    /// not an outage).
    #[error("the cluster catalog (etcd) refused this node: {0}")]
    CatalogRefused(String),
    /// Another commit changed the table first, every time it was retried.
    #[error("table '{table}' was changed by concurrent commits {attempts} times; try again")]
    Conflict {
        /// The table committed.
        table: String,
        /// Attempts made.
        attempts: usize,
    },
    /// Fewer live nodes than the copies a partition needs.
    #[error("{live} live node(s), and each partition needs {replicas}: not enough to store a put")]
    TooFewNodes {
        /// Nodes alive now.
        live: usize,
        /// Copies wanted (`--replicas`).
        replicas: usize,
    },
    /// A partition could not be stored on one of its replicas.
    #[error("storing partition {partition} on node {node} ({location}) failed: {status}")]
    Replica {
        /// The partition's storage name.
        partition: String,
        /// The node that failed.
        node: String,
        /// Its location.
        location: String,
        /// What it said.
        status: Box<Status>,
    },
    /// Another node could not be reached.
    #[error("the cluster node at {location} is unreachable: {detail}")]
    NodeUnreachable {
        /// Its location.
        location: String,
        /// What the connection said.
        detail: String,
    },
    /// Another live process is registered with this node's id.
    #[error(
        "node id '{id}' is in use by a live node at {location}: two processes with one id would \
         take each other's place in the cluster; give this one another --node-id, or stop the \
         other first"
    )]
    IdInUse {
        /// The id.
        id: String,
        /// Where the other process is.
        location: String,
    },
    /// This node is not registered now (its lease was lost): it refuses
    /// writes until it is again.
    #[error(
        "this node is not registered in the cluster now (its lease ran out); it refuses writes \
         until it registers again: try another node, or again shortly"
    )]
    NotRegistered,
    /// A put's or repair's intent vanished with this node's lease before
    /// its commit: the other nodes may have dropped its partitions, so
    /// nothing was published.
    #[error(
        "this node lost its lease while storing the put's partitions; nothing was published: \
         try again"
    )]
    Fenced,
    /// A table's partitions could not be read (no replica answered).
    #[error("{0}")]
    Unreadable(String),
    /// The catalog has no such table.
    #[error("table '{0}' not found")]
    NotFound(String),
    /// A create of a table that exists.
    #[error("table '{0}' already exists")]
    AlreadyExists(String),
    /// A request the cluster refuses (an append of another schema, ...).
    #[error("{0}")]
    Invalid(String),
    /// A catalog entry that does not parse: written by something else.
    #[error("the catalog entry {key} is malformed: {detail}")]
    Malformed {
        /// The etcd key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The local store refused a partition.
    #[error(transparent)]
    Store(#[from] quiver_store::StoreError),
    /// Arrow failed on a partition's data.
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

impl From<quiver_etcd::EtcdError> for ClusterError {
    fn from(e: quiver_etcd::EtcdError) -> Self {
        match e.code() {
            Code::PermissionDenied | Code::Unauthenticated => Self::CatalogRefused(e.to_string()),
            _ => Self::Catalog(e.to_string()),
        }
    }
}

impl From<ClusterError> for quiver_flight::Error {
    /// The one place a cluster error gets its Flight status and kind.
    fn from(e: ClusterError) -> Self {
        use quiver_flight::Error as E;
        use quiver_store::StoreError;
        let message = e.to_string();
        match e {
            ClusterError::Store(store) => E::Store(store),
            ClusterError::NotFound(name) => E::Store(StoreError::NotFound { name }),
            ClusterError::AlreadyExists(name) => E::Store(StoreError::AlreadyExists { name }),
            ClusterError::Invalid(_) => E::InvalidArgument(message),
            ClusterError::Conflict { .. } => E::Conflict(message),
            // A node refused by etcd cannot serve the catalog: to its clients
            // that is an outage of the service, whose message says why.
            ClusterError::Catalog(_)
            | ClusterError::CatalogRefused(_)
            | ClusterError::TooFewNodes { .. }
            | ClusterError::NodeUnreachable { .. }
            | ClusterError::NotRegistered
            | ClusterError::Fenced
            | ClusterError::Unreadable(_) => E::Unavailable(message),
            // A replica out of room says so with its own kind (its memory
            // or storage limit), under this node's words for what failed.
            ClusterError::Replica { status, .. } if status.code() == Code::ResourceExhausted => {
                E::Status(Box::new(Status::with_details(
                    Code::ResourceExhausted,
                    message,
                    status.details().to_vec().into(),
                )))
            }
            ClusterError::Replica { .. } => E::Unavailable(message),
            ClusterError::IdInUse { .. } => E::Config(message),
            ClusterError::Malformed { .. } | ClusterError::Arrow(_) => E::Internal(message),
        }
    }
}

/// A cluster result as the Flight service's.
pub(crate) fn flight<T>(result: Result<T>) -> quiver_flight::Result<T> {
    result.map_err(quiver_flight::Error::from)
}

impl From<ClusterError> for Status {
    fn from(e: ClusterError) -> Self {
        quiver_flight::Error::from(e).into()
    }
}
