//! Statement parameters: JDBC/ODBC-style `?` placeholders and bound values.

use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;

use crate::{Result, SqlError};

/// Rewrites each `?` placeholder of `sql` as DataFusion's positional `$1`,
/// `$2`, ... in order. A `?` inside a string literal, a quoted identifier or a
/// comment is left alone. Statements that already use `$n` pass unchanged.
pub fn number_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut next = 1;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                // A literal or quoted identifier; a doubled quote escapes itself.
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == c {
                        if chars.peek() == Some(&c) {
                            out.extend(chars.next());
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                out.push(c);
                out.extend(chars.next());
                let mut star = false;
                for d in chars.by_ref() {
                    out.push(d);
                    if star && d == '/' {
                        break;
                    }
                    star = d == '*';
                }
            }
            '?' => {
                out.push('$');
                out.push_str(&next.to_string());
                next += 1;
            }
            _ => out.push(c),
        }
    }
    out
}

/// The values of row `row` of a bound parameter batch, by position.
pub fn row_values(batch: &RecordBatch, row: usize) -> Result<ParamValues> {
    let values = batch
        .columns()
        .iter()
        .map(|column| ScalarValue::try_from_array(column, row))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SqlError::invalid(format!("cannot read a bound parameter: {e}")))?;
    Ok(ParamValues::from(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_bare_placeholders_only() {
        assert_eq!(
            number_placeholders("SELECT * FROM t WHERE a > ? AND b = ?"),
            "SELECT * FROM t WHERE a > $1 AND b = $2"
        );
        assert_eq!(
            number_placeholders("SELECT '?', \"a?\" -- why?\n, ? /* ? */ FROM t"),
            "SELECT '?', \"a?\" -- why?\n, $1 /* ? */ FROM t"
        );
        assert_eq!(
            number_placeholders("SELECT 'it''s ?', ?"),
            "SELECT 'it''s ?', $1"
        );
        assert_eq!(number_placeholders("SELECT $1, $2"), "SELECT $1, $2");
        // An unterminated literal is left for the parser to report.
        assert_eq!(number_placeholders("SELECT 'x?"), "SELECT 'x?");
    }
}
