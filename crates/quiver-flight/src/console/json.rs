//! Arrow results as the JSON the page reads: a schema of names and types,
//! and the values column by column.
//!
//! A null is JSON `null`, never a string, so the page tells a null from the
//! text "null". Integers are numbers while JavaScript holds them exactly
//! (|n| ≤ 2^53 − 1), strings past that; floats are numbers, NaN and the
//! infinities strings; booleans are booleans; everything else (strings,
//! dates, times, decimals, lists...) is the text Arrow's formatter gives.

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{Map, Number, Value, json};

/// Largest integer JavaScript's numbers hold exactly.
const MAX_SAFE_INTEGER: i128 = (1 << 53) - 1;

/// The schema as the page shows it: one `{name, type, nullable}` per column.
pub(crate) fn schema(schema: &Schema) -> Value {
    Value::Array(
        schema
            .fields()
            .iter()
            .map(|f| {
                json!({
                    "name": f.name(),
                    "type": f.data_type().to_string(),
                    "nullable": f.is_nullable(),
                })
            })
            .collect(),
    )
}

/// Rows `offset..offset + limit` of `batches` (together one result), one
/// JSON array per column.
pub(crate) fn columns(
    schema: &Schema,
    batches: &[RecordBatch],
    offset: usize,
    limit: usize,
) -> Result<Value, arrow::error::ArrowError> {
    let mut columns: Vec<Vec<Value>> = vec![Vec::new(); schema.fields().len()];
    let mut skip = offset;
    let mut left = limit;
    for batch in batches {
        if left == 0 {
            break;
        }
        if skip >= batch.num_rows() {
            skip -= batch.num_rows();
            continue;
        }
        let take = left.min(batch.num_rows() - skip);
        for (out, array) in columns.iter_mut().zip(batch.columns()) {
            out.extend(values(&array.slice(skip, take))?);
        }
        left -= take;
        skip = 0;
    }
    Ok(Value::Array(
        columns.into_iter().map(Value::Array).collect(),
    ))
}

/// One row of every column of `batch`, by column name (a statistics row).
pub(crate) fn row(
    batch: &RecordBatch,
    row: usize,
) -> Result<Map<String, Value>, arrow::error::ArrowError> {
    let mut out = Map::new();
    for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
        let value = values(&array.slice(row, 1))?.pop().unwrap_or(Value::Null);
        out.insert(field.name().clone(), value);
    }
    Ok(out)
}

/// A plan's operator and those it reads, nested: `{name, detail,
/// partitions, output_rows, elapsed_compute_ns, metrics: [{name, value}],
/// children}` (rows and time `null` before it ran).
pub(crate) fn operator(node: &quiver_sql::Operator) -> Value {
    json!({
        "name": node.name,
        "detail": node.detail,
        "partitions": node.partitions,
        "output_rows": node.output_rows,
        "elapsed_compute_ns": node.elapsed_compute_ns,
        "metrics": node
            .metrics
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect::<Vec<_>>(),
        "children": node.children.iter().map(operator).collect::<Vec<_>>(),
    })
}

/// The values of `array`, in order.
fn values(array: &ArrayRef) -> Result<Vec<Value>, arrow::error::ArrowError> {
    let options = FormatOptions::default().with_null("");
    let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
    let kind = Kind::of(array.data_type());
    Ok((0..array.len())
        .map(|i| {
            if array.is_null(i) {
                return Value::Null;
            }
            let text = formatter.value(i).to_string();
            match kind {
                Kind::Integer => match text.parse::<i128>() {
                    Ok(n) if n.abs() <= MAX_SAFE_INTEGER => Value::Number(Number::from(n as i64)),
                    _ => Value::String(text),
                },
                Kind::Float => match text.parse::<f64>().ok().and_then(Number::from_f64) {
                    Some(n) => Value::Number(n),
                    None => Value::String(text),
                },
                Kind::Boolean => Value::Bool(text == "true"),
                Kind::Text => Value::String(text),
            }
        })
        .collect())
}

/// How a type's values are written.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    Float,
    Boolean,
    Text,
}

impl Kind {
    fn of(data_type: &DataType) -> Self {
        match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Self::Integer,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Self::Float,
            DataType::Boolean => Self::Boolean,
            DataType::Dictionary(_, values) => Self::of(values),
            _ => Self::Text,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::Field;

    use super::*;

    #[test]
    fn nulls_numbers_and_text_keep_their_kinds() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(i64::MAX)])),
                Arc::new(Float64Array::from(vec![Some(0.5), Some(f64::NAN), None])),
                Arc::new(StringArray::from(vec![Some("null"), None, Some("x")])),
                Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
            ],
        )
        .unwrap();
        let got = columns(&schema, &[batch.clone(), batch], 2, 2).unwrap();
        assert_eq!(
            got,
            json!([
                [i64::MAX.to_string(), 1],
                [null, 0.5],
                ["x", "null"],
                [null, true],
            ])
        );
    }
}
