//! Table names.

use crate::{Result, StoreError};

/// The longest table name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks that `name` may name a table: non-empty, at most
/// [`MAX_NAME_LEN`] bytes, no control characters, no leading or trailing
/// whitespace.
pub fn validate_name(name: &str) -> Result<()> {
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
    }

    #[test]
    fn refuses_bad_names() {
        for name in ["", " x", "x ", "a\nb", "a\0b"] {
            assert!(
                matches!(validate_name(name), Err(StoreError::InvalidName { .. })),
                "{name:?}"
            );
        }
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        validate_name(&"x".repeat(MAX_NAME_LEN)).unwrap();
    }
}
