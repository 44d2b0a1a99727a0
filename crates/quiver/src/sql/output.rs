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
            Err("Parquet and Arrow results are binary: give -o FILE".into())
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

/// A result being written, batch by batch.
pub(crate) enum Output {
    /// The first [`SHOWN_ROWS`] rows, printed as a table at the end.
    Table {
        schema: SchemaRef,
        shown: Vec<RecordBatch>,
        rows: u64,
    },
    Csv(arrow::csv::Writer<Box<dyn Write>>, u64),
    Json(arrow::json::LineDelimitedWriter<Box<dyn Write>>, u64),
    File(FileSink, u64),
}

impl Output {
    /// An output of `format` into `path` (standard output without one) for
    /// batches of `schema`.
    pub(crate) fn create(
        format: SqlFormat,
        path: Option<&Path>,
        schema: &SchemaRef,
    ) -> CmdResult<Self> {
        let sink = |path: &Path| -> CmdResult<Box<dyn Write>> {
            let file =
                File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            Ok(Box::new(BufWriter::new(file)))
        };
        let text = |path: Option<&Path>| -> CmdResult<Box<dyn Write>> {
            match path {
                Some(path) => sink(path),
                None => Ok(Box::new(BufWriter::new(std::io::stdout()))),
            }
        };
        let file = |format: Format| -> CmdResult<Self> {
            let path = path.ok_or("Parquet and Arrow results are binary: give -o FILE")?;
            Ok(Self::File(FileSink::create(path, format, schema)?, 0))
        };
        Ok(match format {
            SqlFormat::Table => Self::Table {
                schema: schema.clone(),
                shown: Vec::new(),
                rows: 0,
            },
            SqlFormat::Csv => Self::Csv(arrow::csv::Writer::new(text(path)?), 0),
            // A null is written as `null`, not left out of its row.
            SqlFormat::Json => Self::Json(
                arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build(text(path)?),
                0,
            ),
            SqlFormat::Parquet => file(Format::Parquet)?,
            SqlFormat::Arrow => file(Format::Arrow)?,
            SqlFormat::Arrows => file(Format::Arrows)?,
        })
    }

    /// Writes `batch` (a table keeps it until [`Output::finish`]).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> CmdResult {
        let added = batch.num_rows() as u64;
        match self {
            Self::Table { shown, rows, .. } => {
                let room = SHOWN_ROWS.saturating_sub(*rows as usize);
                if room > 0 {
                    shown.push(batch.slice(0, batch.num_rows().min(room)));
                }
                *rows += added;
            }
            Self::Csv(writer, rows) => {
                writer.write(batch)?;
                *rows += added;
            }
            Self::Json(writer, rows) => {
                writer.write(batch)?;
                *rows += added;
            }
            Self::File(sink, rows) => {
                sink.write(batch)?;
                *rows += added;
            }
        }
        Ok(())
    }

    /// Ends the output (a table is printed now); returns the rows written.
    pub(crate) fn finish(self) -> CmdResult<u64> {
        Ok(match self {
            Self::Table {
                schema,
                shown,
                rows,
            } => {
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
                rows
            }
            Self::Csv(writer, rows) => {
                writer.into_inner().flush()?;
                rows
            }
            Self::Json(mut writer, rows) => {
                writer.finish()?;
                writer.into_inner().flush()?;
                rows
            }
            Self::File(sink, rows) => {
                sink.finish()?;
                rows
            }
        })
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
