//! Table names.

use crate::{Result, StoreError};

/// The longest table name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Names that start with this are quiver's own storage (a cluster node's
/// partitions), never tables: no client can name, put, delete or rename
/// them; see [`validate_name`]. ([`STAGING_PREFIX`]'s names are tables.)
pub const RESERVED_PREFIX: &str = ".quiver-part/";

/// Names that start with this are where clients stage a write before a
/// `publish` (`quiver.splits.WriteJob`, the JVM connector, a replace from a
/// stream): tables, each living for one job.
pub const STAGING_PREFIX: &str = ".quiver-staging/";

/// Whether `name` is one of quiver's own storage names.
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// Checks that `name` may name a table, as a client gives it: a storage
/// name ([`validate_storage_name`]) that is not reserved ([`RESERVED_PREFIX`]).
pub fn validate_name(name: &str) -> Result<()> {
    validate_storage_name(name)?;
    if is_reserved(name) {
        return Err(StoreError::InvalidName {
            name: name.chars().take(80).collect(),
            reason: "names starting with '.quiver-part/' are kept for quiver's own storage",
        });
    }
    Ok(())
}

/// Checks that `name` may name what the store holds: non-empty, at most
/// [`MAX_NAME_LEN`] bytes, no control characters, no leading or trailing
/// whitespace. Reserved names pass: the store holds a cluster node's
/// partitions under them.
pub fn validate_storage_name(name: &str) -> Result<()> {
    let invalid = |reason| StoreError::InvalidName {
        name: name.chars().take(80).collect(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("a table name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("a table name is at most 1024 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("a table name must not contain control characters"));
    }
    if name.trim() != name {
        return Err(invalid(
            "a table name must not start or end with whitespace",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for name in ["trips", "nyc/taxi/2024", "émissions", "a b"] {
            validate_name(name).unwrap();
        }
        validate_storage_name(".quiver-part/t#1.0").unwrap();
        validate_name(".quiver-staging/abc").unwrap();
    }

    #[test]
    fn refuses_bad_names() {
        for name in ["", " x", "x ", "a\nb", "a\0b", ".quiver-part/t#1.0"] {
            assert!(
                matches!(validate_name(name), Err(StoreError::InvalidName { .. })),
                "{name:?}"
            );
        }
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        validate_name(&"x".repeat(MAX_NAME_LEN)).unwrap();
    }
}
