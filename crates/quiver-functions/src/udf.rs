//! Served functions as vectorized scalar SQL functions: `SELECT
//! score(fare_amount, trip_distance) FROM trips` sends each batch of the two
//! columns to a worker, as a call over DoExchange would, and takes the
//! result's column as the value.
//!
//! Only functions that declare an output schema are SQL functions (the
//! planner needs the type before anything runs): one field gives its type, several
//! a struct of them. A declared input schema gives the exact argument types
//! (SQL casts to them) and the names the function sees; without one the
//! function takes any arguments, named as the query's expressions are. The
//! result must have one row per input row. Functions are volatile: never
//! evaluated while planning, nor folded into constants.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{ArrayRef, StructArray, new_empty_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use quiver_sql::SqlError;

use crate::{FunctionError, FunctionPool, FunctionSpec};

/// The SQL functions of every function the pool serves that SQL may call
/// (declared `sql=True`, with an output schema), and the names of those left
/// out with why.
pub fn sql_functions(pool: &Arc<FunctionPool>) -> (Vec<ScalarUDF>, Vec<(String, &'static str)>) {
    let mut udfs = Vec::new();
    let mut skipped = Vec::new();
    let registry = pool.registry();
    for spec in registry.functions() {
        match SqlFunction::new(Arc::clone(pool), Arc::clone(spec)) {
            Ok(function) => udfs.push(AsyncScalarUDF::new(Arc::new(function)).into_scalar_udf()),
            Err(why) => skipped.push((spec.name.clone(), why)),
        }
    }
    (udfs, skipped)
}

/// One served function as a SQL function.
#[derive(Debug)]
struct SqlFunction {
    pool: Arc<FunctionPool>,
    spec: Arc<FunctionSpec>,
    signature: Signature,
    output: SchemaRef,
    /// Batches sent so far, numbering them in error messages.
    batches: AtomicU64,
}

impl SqlFunction {
    fn new(pool: Arc<FunctionPool>, spec: Arc<FunctionSpec>) -> Result<Self, &'static str> {
        if !spec.sql {
            return Err("declared sql=False");
        }
        let Some(output) = spec.output_schema.clone() else {
            return Err("no output_schema: SQL needs the result's type before it runs");
        };
        if output.fields().is_empty() {
            return Err("its output_schema has no field");
        }
        let signature = match &spec.input_schema {
            Some(input) => Signature::exact(
                input
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect(),
                Volatility::Volatile,
            ),
            None => Signature::variadic_any(Volatility::Volatile),
        };
        Ok(Self {
            pool,
            spec,
            signature,
            output,
            batches: AtomicU64::new(0),
        })
    }

    /// The value's type: the output's one field, or a struct of its fields.
    fn value_type(&self) -> DataType {
        match self.output.fields().len() {
            1 => self.output.field(0).data_type().clone(),
            _ => DataType::Struct(self.output.fields().clone()),
        }
    }

    /// The arguments as the batch the function gets: named as the declared
    /// input schema says, else as the query's expressions (`c0`, `c1`, ...
    /// where two would share a name).
    fn input_batch(
        &self,
        args: &ScalarFunctionArgs,
        columns: Vec<ArrayRef>,
    ) -> DfResult<RecordBatch> {
        let fields: Vec<Field> = match &self.spec.input_schema {
            Some(input) => input
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
                .collect(),
            None => {
                let names: Vec<&str> = args.arg_fields.iter().map(|f| f.name().as_str()).collect();
                let unique = names
                    .iter()
                    .enumerate()
                    .all(|(i, n)| !names[..i].contains(n));
                columns
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let name = if unique {
                            names[i].to_string()
                        } else {
                            format!("c{i}")
                        };
                        Field::new(name, c.data_type().clone(), true)
                    })
                    .collect()
            }
        };
        let options = RecordBatchOptions::new().with_row_count(Some(args.number_rows));
        Ok(RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &options,
        )?)
    }

    /// The function's result as the value's column.
    fn value(
        &self,
        results: Vec<RecordBatch>,
        rows: usize,
        batch: u64,
    ) -> Result<ArrayRef, FunctionError> {
        let output = |message: String| FunctionError::Output {
            function: self.spec.name.clone(),
            message,
            batch,
        };
        let result = arrow::compute::concat_batches(&self.output, &results)
            .map_err(|e| output(format!("its results do not concatenate: {e}")))?;
        if result.num_rows() != rows {
            return Err(output(format!(
                "returned {} rows for {rows}: called from SQL, a function returns one row per \
                 input row",
                result.num_rows()
            )));
        }
        Ok(match result.num_columns() {
            1 => Arc::clone(result.column(0)),
            _ => Arc::new(StructArray::from(result)),
        })
    }
}

fn external(e: FunctionError) -> DataFusionError {
    DataFusionError::External(Box::new(SqlError::Function(Arc::new(e))))
}

impl PartialEq for SqlFunction {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pool, &other.pool) && self.spec.name == other.spec.name
    }
}

impl Eq for SqlFunction {}

impl Hash for SqlFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.spec.name.hash(state);
    }
}

impl ScalarUDFImpl for SqlFunction {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.value_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(DataFusionError::Internal(format!(
            "{} runs in a function worker: it is only called asynchronously",
            self.spec.name
        )))
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for SqlFunction {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        if rows == 0 {
            return Ok(ColumnarValue::Array(new_empty_array(&self.value_type())));
        }
        let columns = ColumnarValue::values_to_arrays(&args.args)?;
        // Named as declared; typed as declared by the signature (SQL casts).
        let input = self.input_batch(&args, columns)?;
        let batch = self.batches.fetch_add(1, Ordering::Relaxed);
        let (_, results) = self
            .pool
            .call(&self.spec, input, batch)
            .await
            .map_err(external)?;
        let value = self.value(results, rows, batch).map_err(external)?;
        Ok(ColumnarValue::Array(value))
    }
}
