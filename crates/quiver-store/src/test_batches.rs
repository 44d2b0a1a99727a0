//! The store's test batches: one `Int64` column `x`.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};

/// A batch of `values` in column `x`.
pub(crate) fn batch(values: &[i64]) -> RecordBatch {
    #[allow(clippy::unwrap_used)]
    RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(values.to_vec())) as ArrayRef)])
        .unwrap()
}
