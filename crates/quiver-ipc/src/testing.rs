//! The batch of every type the workspace's tests round-trip. Always built, not
//! behind a feature: a feature only tests turned on would compile this crate
//! and every crate above it a second time for `cargo test --workspace`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, LargeListArray, ListArray,
    RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type};

/// Index of the `LargeList` column, which arrow-flight's stock encoder rewrites
/// as `List` (quiver's own encoder keeps it).
pub const LARGE_LIST_COLUMN: usize = 8;

/// `rows` rows of many types, ids from `offset`: integers, strings, floats and
/// booleans with nulls, a list, a timestamp with a time zone, a dictionary, a
/// struct and a large list.
pub fn every_type(offset: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (0..rows as i64).map(|i| i + offset).collect();
    let names: Vec<Option<String>> = ids
        .iter()
        .map(|i| (i % 7 != 0).then(|| format!("name-{i}")))
        .collect();
    let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(
        ids.iter()
            .map(|i| (i % 5 != 0).then(|| vec![Some(*i as i32), None])),
    );
    let large = LargeListArray::from_iter_primitive::<Int64Type, _, _>(
        ids.iter()
            .map(|i| (i % 4 != 0).then(|| vec![Some(*i), None])),
    );
    let dict: DictionaryArray<Int32Type> = ids
        .iter()
        .map(|i| ["red", "green", "blue"][(*i % 3) as usize])
        .collect();
    let nested = StructArray::from(vec![(
        Arc::new(Field::new("even", DataType::Boolean, true)),
        Arc::new(BooleanArray::from_iter(
            ids.iter().map(|i| (i % 5 != 0).then_some(i % 2 == 0)),
        )) as ArrayRef,
    )]);
    #[allow(clippy::expect_used)]
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef),
        (
            "score",
            Arc::new(Float64Array::from_iter(
                ids.iter().map(|i| (i % 3 != 0).then_some(*i as f64 / 3.0)),
            )) as ArrayRef,
        ),
        (
            "flag",
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|i| Some(i % 2 == 0)),
            )),
        ),
        ("tags", Arc::new(lists) as ArrayRef),
        (
            "at",
            Arc::new(TimestampMicrosecondArray::from(ids.clone()).with_timezone("UTC")) as ArrayRef,
        ),
        ("color", Arc::new(dict) as ArrayRef),
        ("nested", Arc::new(nested) as ArrayRef),
        ("large", Arc::new(large) as ArrayRef),
    ])
    .expect("columns of one length")
}

/// [`every_type`] without the `LargeList` column: what the stock arrow-flight
/// encoder sends back unchanged.
pub fn every_type_for_stock_encoder(offset: i64, rows: usize) -> RecordBatch {
    let mut batch = every_type(offset, rows);
    batch.remove_column(LARGE_LIST_COLUMN);
    batch
}
