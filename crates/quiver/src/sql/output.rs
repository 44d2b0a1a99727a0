//! Where a statement's result goes: a table on the terminal, CSV or JSON lines
//! to standard output or a file, Parquet or Arrow IPC into a file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::files::{FileSink, Format};

type CmdResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Rows a table on the terminal shows; the rest are counted.
const SHOWN_ROWS: usize = 1000;

const BINARY_NEEDS_A_FILE: &str = "Parquet and Arrow results are binary: give -o FILE";

/// How `quiver sql` writes a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SqlFormat {
    /// An aligned table, for people (the default without -o).
    Table,
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per row.
    Json,
    /// Apache Parquet (into -o FILE).
    Parquet,
    /// Arrow IPC file format (into -o FILE).
    Arrow,
    /// Arrow IPC stream format (into -o FILE).
    Arrows,
}

/// The format of a result written to `path` (or standard output) when
/// `explicit` is given or not.
pub(crate) fn resolve(explicit: Option<SqlFormat>, path: Option<&Path>) -> CmdResult<SqlFormat> {
    match (explicit, path) {
        (Some(SqlFormat::Table), Some(_)) => Err(
            "--format table is for the terminal; into -o FILE write csv, json, parquet, \
                 arrow or arrows"
                .into(),
        ),
        (Some(SqlFormat::Parquet | SqlFormat::Arrow | SqlFormat::Arrows), None) => {
            Err(BINARY_NEEDS_A_FILE.into())
        }
        (Some(format), _) => Ok(format),
        (None, None) => Ok(SqlFormat::Table),
        (None, Some(path)) => {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase);
            if matches!(ext.as_deref(), Some("json" | "jsonl" | "ndjson")) {
                return Ok(SqlFormat::Json);
            }
            Ok(match Format::resolve(None, path)? {
                Format::Parquet => SqlFormat::Parquet,
                Format::Csv => SqlFormat::Csv,
                Format::Arrow => SqlFormat::Arrow,
                Format::Arrows => SqlFormat::Arrows,
            })
        }
    }
}

/// A result being written, batch by batch, and the rows written so far.
pub(crate) struct Output {
    sink: Sink,
    rows: u64,
}

/// Where the batches go.
enum Sink {
    /// The first [`SHOWN_ROWS`] rows, printed as a table at the end.
    Table {
        schema: SchemaRef,
        shown: Vec<RecordBatch>,
    },
    Csv(arrow::csv::Writer<Box<dyn Write>>),
    Json(arrow::json::LineDelimitedWriter<Box<dyn Write>>),
    File(FileSink),
}

impl Output {
    /// An output of `format` into `path` (standard output without one) for
    /// batches of `schema`.
    pub(crate) fn create(
        format: SqlFormat,
        path: Option<&Path>,
        schema: &SchemaRef,
    ) -> CmdResult<Self> {
        let text = || -> CmdResult<Box<dyn Write>> {
            Ok(match path {
                Some(path) => Box::new(BufWriter::new(
                    File::create(path)
                        .map_err(|e| format!("cannot create {}: {e}", path.display()))?,
                )),
                None => Box::new(BufWriter::new(std::io::stdout())),
            })
        };
        let file = |format: Format| -> CmdResult<Sink> {
            let path = path.ok_or(BINARY_NEEDS_A_FILE)?;
            Ok(Sink::File(FileSink::create(path, format, schema)?))
        };
        let sink = match format {
            SqlFormat::Table => Sink::Table {
                schema: schema.clone(),
                shown: Vec::new(),
            },
            SqlFormat::Csv => Sink::Csv(arrow::csv::Writer::new(text()?)),
            // A null is written as `null`, not left out of its row.
            SqlFormat::Json => Sink::Json(
                arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build(text()?),
            ),
            SqlFormat::Parquet => file(Format::Parquet)?,
            SqlFormat::Arrow => file(Format::Arrow)?,
            SqlFormat::Arrows => file(Format::Arrows)?,
        };
        Ok(Self { sink, rows: 0 })
    }

    /// Writes `batch` (a table keeps it until [`Output::finish`]).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> CmdResult {
        match &mut self.sink {
            Sink::Table { shown, .. } => {
                let room = SHOWN_ROWS.saturating_sub(self.rows as usize);
                if room > 0 {
                    shown.push(batch.slice(0, batch.num_rows().min(room)));
                }
            }
            Sink::Csv(writer) => writer.write(batch)?,
            Sink::Json(writer) => writer.write(batch)?,
            Sink::File(sink) => sink.write(batch)?,
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Ends the output (a table is printed now); returns the rows written.
    pub(crate) fn finish(self) -> CmdResult<u64> {
        let rows = self.rows;
        match self.sink {
            Sink::Table { schema, shown } => {
                let table = arrow::util::pretty::pretty_format_batches_with_schema(schema, &shown)?;
                let plural = if rows == 1 { "" } else { "s" };
                let footer = if rows as usize > SHOWN_ROWS {
                    format!(
                        "({rows} rows; the first {SHOWN_ROWS} shown: --format csv or -o FILE \
                         for all)"
                    )
                } else {
                    format!("({rows} row{plural})")
                };
                println!("{table}\n{footer}");
            }
            Sink::Csv(writer) => writer.into_inner().flush()?,
            Sink::Json(mut writer) => {
                writer.finish()?;
                writer.into_inner().flush()?;
            }
            Sink::File(sink) => sink.finish()?,
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_comes_from_the_flag_or_the_file() {
        let path = |p: &str| Some(Path::new(p).to_path_buf());
        assert_eq!(resolve(None, None).unwrap(), SqlFormat::Table);
        assert_eq!(resolve(Some(SqlFormat::Csv), None).unwrap(), SqlFormat::Csv);
        assert_eq!(
            resolve(None, path("out.parquet").as_deref()).unwrap(),
            SqlFormat::Parquet
        );
        assert_eq!(
            resolve(None, path("out.jsonl").as_deref()).unwrap(),
            SqlFormat::Json
        );
        assert!(resolve(Some(SqlFormat::Parquet), None).is_err());
        assert!(resolve(Some(SqlFormat::Table), path("t.csv").as_deref()).is_err());
        assert!(resolve(None, path("out.xyz").as_deref()).is_err());
    }
}
