//! `quiver sql`: SQL through Flight SQL, one statement from the command line
//! or an interactive shell ([`shell`]).
//!
//! A statement goes to the server as Flight SQL's `CommandStatementQuery` (or,
//! with `--param`, as a prepared statement with its parameters bound), and its
//! result comes back endpoint by endpoint through the same DoGet, with
//! failover between locations, as `quiver get` uses.

mod output;
mod shell;

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandPreparedStatementQuery, CommandStatementQuery,
    DoPutPreparedStatementResult, ProstMessageExt,
};
use arrow_flight::{Action, FlightClient, FlightDescriptor, FlightInfo};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use prost::Message;

use crate::cli::{ExportArgs, SqlArgs};
use crate::client::{Connector, describe};

use output::Output;
pub(crate) use output::SqlFormat;

type CmdResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// `quiver sql`: the statement given, or a shell when none is.
pub(crate) async fn run(connector: &Connector, args: SqlArgs) -> CmdResult {
    let Some(statement) = args.statement else {
        if args.output.is_some() || !args.params.is_empty() {
            return Err("-o and --param go with a statement: quiver sql \"SELECT ...\"".into());
        }
        return shell::run(connector, args.format, args.timing).await;
    };
    let format = output::resolve(args.format, args.output.as_deref())?;
    let mut session = Session::connect(connector).await?;
    let started = Instant::now();
    let rows = session
        .run(&statement, &args.params, format, args.output.as_deref())
        .await?;
    if args.timing {
        eprintln!("{}", timing(rows, started));
    }
    Ok(())
}

/// `quiver export TABLE URL`: a `COPY ... TO` the server runs.
pub(crate) async fn export(connector: &Connector, args: ExportArgs) -> CmdResult {
    let statement = export_statement(&args.name, &args.url);
    let mut session = Session::connect(connector).await?;
    let rows = session.count(&statement).await?;
    println!("exported '{}' ({rows} rows) to {}", args.name, args.url);
    Ok(())
}

/// The statement that writes table `name` to `url` as Parquet.
fn export_statement(name: &str, url: &str) -> String {
    format!(
        "COPY (SELECT * FROM \"{}\") TO '{}' STORED AS PARQUET",
        name.replace('"', "\"\""),
        url.replace('\'', "''")
    )
}

/// "N rows in T": what `--timing` and the shell's `\timing` print.
fn timing(rows: u64, started: Instant) -> String {
    let plural = if rows == 1 { "" } else { "s" };
    format!(
        "{rows} row{plural} in {:.3} s",
        started.elapsed().as_secs_f64()
    )
}

/// A connection to the server that statements run over.
struct Session<'a> {
    connector: &'a Connector,
    client: FlightClient,
}

impl<'a> Session<'a> {
    async fn connect(connector: &'a Connector) -> CmdResult<Self> {
        Ok(Self {
            connector,
            client: connector.connect_server().await?,
        })
    }

    /// Runs `sql` with `params` bound to its placeholders, and writes its
    /// result as `format` (to `path`, or standard output). Returns the rows.
    async fn run(
        &mut self,
        sql: &str,
        params: &[String],
        format: SqlFormat,
        path: Option<&std::path::Path>,
    ) -> CmdResult<u64> {
        let info = if params.is_empty() {
            let command = CommandStatementQuery {
                query: sql.to_string(),
                transaction_id: None,
            };
            self.flight_info(command.as_any().encode_to_vec()).await?
        } else {
            self.prepared(sql, params).await?
        };
        let schema: SchemaRef = Arc::new(info.clone().try_decode_schema()?);
        let mut out = Output::create(format, path, &schema)?;
        for endpoint in &info.endpoint {
            let mut batches = self.connector.do_get(endpoint).await.map_err(describe)?;
            while let Some(batch) = batches.next().await {
                out.write(&batch.map_err(describe)?)?;
            }
        }
        out.finish()
    }

    /// Runs the statement `sql` that changes tables, and returns the rows
    /// it wrote.
    async fn count(&mut self, sql: &str) -> CmdResult<u64> {
        let command = CommandStatementQuery {
            query: sql.to_string(),
            transaction_id: None,
        };
        let info = self.flight_info(command.as_any().encode_to_vec()).await?;
        let mut rows = 0;
        for endpoint in &info.endpoint {
            let mut batches = self.connector.do_get(endpoint).await.map_err(describe)?;
            while let Some(batch) = batches.next().await {
                let batch = batch.map_err(describe)?;
                let counts = arrow::compute::cast(batch.column(0), &DataType::UInt64)?;
                if let Some(counts) = counts.as_any().downcast_ref::<arrow::array::UInt64Array>() {
                    rows += counts.iter().flatten().sum::<u64>();
                }
            }
        }
        Ok(rows)
    }

    async fn flight_info(&mut self, command: Vec<u8>) -> CmdResult<FlightInfo> {
        let descriptor = FlightDescriptor::new_cmd(command);
        Ok(self
            .client
            .get_flight_info(descriptor)
            .await
            .map_err(describe)?)
    }

    /// Prepares `sql`, binds `params` (text, cast to the types the statement
    /// takes) and returns the FlightInfo of its result. The statement is
    /// closed whatever happens.
    async fn prepared(&mut self, sql: &str, params: &[String]) -> CmdResult<FlightInfo> {
        let request = ActionCreatePreparedStatementRequest {
            query: sql.to_string(),
            transaction_id: None,
        };
        let created: ActionCreatePreparedStatementResult = self
            .action("CreatePreparedStatement", request.as_any().encode_to_vec())
            .await?;
        let handle = created.prepared_statement_handle.clone();
        let info = self.bind_and_describe(&created, params).await;
        let close = ActionClosePreparedStatementRequest {
            prepared_statement_handle: handle,
        };
        // The server forgets an unclosed statement after a while: a failed
        // close loses nothing.
        let _ = self
            .client
            .do_action(Action::new(
                "ClosePreparedStatement",
                close.as_any().encode_to_vec(),
            ))
            .await;
        info
    }

    async fn bind_and_describe(
        &mut self,
        created: &ActionCreatePreparedStatementResult,
        params: &[String],
    ) -> CmdResult<FlightInfo> {
        let expected = if created.parameter_schema.is_empty() {
            Schema::empty()
        } else {
            arrow::ipc::convert::try_schema_from_ipc_buffer(&created.parameter_schema)?
        };
        let batch = parameters(&expected, params)?;
        let mut handle = created.prepared_statement_handle.clone();
        let command = CommandPreparedStatementQuery {
            prepared_statement_handle: handle.clone(),
        };
        let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
        let data = FlightDataEncoderBuilder::new()
            .with_flight_descriptor(Some(descriptor))
            .build(futures::stream::iter([Ok(batch)]));
        let results: Vec<_> = self
            .client
            .do_put(data)
            .await
            .map_err(describe)?
            .try_collect()
            .await
            .map_err(describe)?;
        // A server may hand back a new handle for the bound statement.
        for result in results {
            if let Ok(any) = Any::decode(result.app_metadata)
                && let Ok(Some(bound)) = any.unpack::<DoPutPreparedStatementResult>()
                && let Some(new) = bound.prepared_statement_handle
            {
                handle = new;
            }
        }
        let command = CommandPreparedStatementQuery {
            prepared_statement_handle: handle,
        };
        self.flight_info(command.as_any().encode_to_vec()).await
    }

    /// Runs the Flight SQL action `kind` and decodes its one result.
    async fn action<T: ProstMessageExt + Default>(
        &mut self,
        kind: &str,
        body: Vec<u8>,
    ) -> CmdResult<T> {
        let results: Vec<Bytes> = self
            .client
            .do_action(Action::new(kind, body))
            .await
            .map_err(describe)?
            .try_collect()
            .await
            .map_err(describe)?;
        let first = results
            .into_iter()
            .next()
            .ok_or_else(|| format!("{kind}: the server sent no result"))?;
        Any::decode(first)?
            .unpack::<T>()?
            .ok_or_else(|| format!("{kind}: the server sent another kind of result").into())
    }
}

/// One row binding `params` to the placeholders `expected` lists, each text
/// cast to the type the statement takes there (kept as text where the
/// statement does not tell).
fn parameters(expected: &Schema, params: &[String]) -> CmdResult<RecordBatch> {
    if expected.fields().len() != params.len() {
        return Err(format!(
            "the statement has {} parameter(s) and --param was given {} time(s)",
            expected.fields().len(),
            params.len()
        )
        .into());
    }
    let mut fields = Vec::with_capacity(params.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(params.len());
    for (field, value) in expected.fields().iter().zip(params) {
        let text: ArrayRef = Arc::new(StringArray::from(vec![value.as_str()]));
        let column = match field.data_type() {
            DataType::Null | DataType::Utf8 => text,
            target => {
                let options = arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                arrow::compute::cast_with_options(&text, target, &options).map_err(|e| {
                    format!(
                        "--param {value:?} for {}: not a {target}: {e}",
                        field.name()
                    )
                })?
            }
        };
        fields.push(Field::new(field.name(), column.data_type().clone(), true));
        columns.push(column);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_statement_quotes_the_name_and_the_url() {
        assert_eq!(
            export_statement("Trips \"x\"", "s3://b/it's.parquet"),
            "COPY (SELECT * FROM \"Trips \"\"x\"\"\") TO 's3://b/it''s.parquet' STORED AS PARQUET"
        );
    }

    #[test]
    fn parameters_are_cast_to_the_types_the_statement_takes() {
        let expected = Schema::new(vec![
            Field::new("$1", DataType::Int64, true),
            Field::new("$2", DataType::Null, true),
            Field::new("$3", DataType::Float64, true),
        ]);
        let params = ["42".to_string(), "c7".to_string(), "2.5".to_string()];
        let batch = parameters(&expected, &params).unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.column(0).data_type(), &DataType::Int64);
        assert_eq!(batch.column(1).data_type(), &DataType::Utf8);
        assert_eq!(batch.column(2).data_type(), &DataType::Float64);
    }

    #[test]
    fn a_parameter_that_does_not_cast_or_a_missing_one_is_refused() {
        let expected = Schema::new(vec![Field::new("$1", DataType::Int64, true)]);
        let e = parameters(&expected, &["ten".to_string()]).unwrap_err();
        assert!(e.to_string().contains("not a Int64"), "{e}");
        let e = parameters(&expected, &[]).unwrap_err();
        assert!(e.to_string().contains("1 parameter(s)"), "{e}");
    }
}
