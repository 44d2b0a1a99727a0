//! Limits on how large tables grow: rows and bytes per table, rows in all.
//!
//! The memory pool ([`crate::MemoryPool`]) bounds the bytes of everything held;
//! these bound what one table (or the store) may hold, whatever memory is free.
//! A write that would pass a limit fails with [`StoreError::TableLimit`], naming
//! the flag that sets it, and the table keeps the version it had.

use crate::{Result, StoreError};

/// The flag of `quiver serve` that sets [`TableLimits::max_table_rows`].
pub const MAX_TABLE_ROWS_FLAG: &str = "--max-table-rows";
/// The flag of `quiver serve` that sets [`TableLimits::max_table_bytes`].
pub const MAX_TABLE_BYTES_FLAG: &str = "--max-table-bytes";
/// The flag of `quiver serve` that sets [`TableLimits::max_rows`].
pub const MAX_ROWS_FLAG: &str = "--max-rows";

/// Which of the [`TableLimits`] a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`TableLimits::max_table_rows`].
    TableRows,
    /// [`TableLimits::max_table_bytes`].
    TableBytes,
    /// [`TableLimits::max_rows`].
    Rows,
}

impl Limit {
    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Self::TableRows => MAX_TABLE_ROWS_FLAG,
            Self::TableBytes => MAX_TABLE_BYTES_FLAG,
            Self::Rows => MAX_ROWS_FLAG,
        }
    }

    /// What it counts.
    pub fn unit(self) -> &'static str {
        match self {
            Self::TableRows => "rows",
            Self::TableBytes => "bytes",
            Self::Rows => "rows in all tables",
        }
    }
}

/// Upper bounds on table sizes; `u64::MAX` (the default) means no bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// Rows one table may hold.
    pub max_table_rows: u64,
    /// Bytes one table may hold (as [`crate::TableVersion::num_bytes`] counts them).
    pub max_table_bytes: u64,
    /// Rows all tables together may hold.
    pub max_rows: u64,
}

impl Default for TableLimits {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

impl TableLimits {
    /// No limit at all.
    pub const UNLIMITED: Self = Self {
        max_table_rows: u64::MAX,
        max_table_bytes: u64::MAX,
        max_rows: u64::MAX,
    };

    /// Checks that table `name` may hold `rows` rows of `bytes` bytes, and the
    /// whole store `total_rows` rows.
    pub(crate) fn check(&self, name: &str, rows: u64, bytes: u64, total_rows: u64) -> Result<()> {
        self.check_table(name, rows, bytes)?;
        if total_rows > self.max_rows {
            return Err(over(name, Limit::Rows, total_rows, self.max_rows));
        }
        Ok(())
    }

    /// Checks that table `name` may hold `rows` rows of `bytes` bytes (a
    /// cluster's table, whose partitions lie on several nodes, is checked
    /// whole at its commit).
    pub fn check_table(&self, name: &str, rows: u64, bytes: u64) -> Result<()> {
        if rows > self.max_table_rows {
            return Err(over(name, Limit::TableRows, rows, self.max_table_rows));
        }
        if bytes > self.max_table_bytes {
            return Err(over(name, Limit::TableBytes, bytes, self.max_table_bytes));
        }
        Ok(())
    }
}

/// The error of a write to table `name` that would reach `would`, over `max`.
fn over(name: &str, limit: Limit, would: u64, max: u64) -> StoreError {
    StoreError::TableLimit {
        name: name.to_string(),
        limit,
        would,
        max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_names_its_flag() {
        let limits = TableLimits {
            max_table_rows: 10,
            max_table_bytes: 100,
            max_rows: 50,
        };
        assert!(limits.check("t", 10, 100, 50).is_ok());
        for ((rows, bytes, total), flag) in [
            ((11, 0, 11), MAX_TABLE_ROWS_FLAG),
            ((1, 101, 1), MAX_TABLE_BYTES_FLAG),
            ((1, 1, 51), MAX_ROWS_FLAG),
        ] {
            let err = limits.check("t", rows, bytes, total).unwrap_err();
            assert!(err.to_string().contains(flag), "{err}");
        }
        assert!(
            TableLimits::UNLIMITED
                .check("t", u64::MAX, u64::MAX, u64::MAX)
                .is_ok()
        );
    }
}
