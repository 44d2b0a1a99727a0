//! The one error type of the crate; each side maps it to its own status.

/// What can be wrong with a gRPC message or a FlightData on the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The bytes are not a well-formed FlightData (or gRPC message).
    #[error("malformed FlightData: {0}")]
    Malformed(String),
    /// A compressed gRPC message: quiver neither sends nor reads them.
    #[error("compressed gRPC messages are not supported")]
    Compressed,
    /// A message longer than the limit the receiver set.
    #[error("a message of {len} bytes is over the {limit}-byte limit ({flag})")]
    MessageTooLarge {
        /// Declared length of the message.
        len: usize,
        /// The limit.
        limit: usize,
        /// What sets the limit (a flag or an option), for the message.
        flag: &'static str,
    },
    /// A message too long for gRPC's 32-bit length prefix.
    #[error("a FlightData message over 4 GiB cannot be framed for gRPC")]
    TooLargeToFrame,
}

/// A [`WireError::Malformed`] from anything printable.
pub fn malformed(e: impl std::fmt::Display) -> WireError {
    WireError::Malformed(e.to_string())
}

/// An error and its causes on one line: a connection's error alone (tonic's
/// transport error, hyper's) often says only "transport error".
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}
