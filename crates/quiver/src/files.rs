//! Reading and writing table files: Parquet, CSV, Arrow IPC (file and stream).

use std::fs::File;
use std::io::{BufReader, BufWriter, Seek};
use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::{RecordBatch, RecordBatchReader};

/// A table file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values with a header row.
    Csv,
    /// Arrow IPC file format (Feather v2).
    Arrow,
    /// Arrow IPC stream format.
    Arrows,
}

impl Format {
    /// The format `explicit` names, else the one `path`'s extension tells.
    pub(crate) fn resolve(explicit: Option<Self>, path: &Path) -> Result<Self, String> {
        if let Some(format) = explicit {
            return Ok(format);
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "parquet" | "pq" => Ok(Self::Parquet),
            "csv" => Ok(Self::Csv),
            "arrow" | "feather" | "ipc" => Ok(Self::Arrow),
            "arrows" => Ok(Self::Arrows),
            _ => Err(format!(
                "cannot tell the format of {}: use .parquet, .csv, .arrow, .arrows or --format",
                path.display()
            )),
        }
    }
}

/// Batches read from a file, with the row count when the file says it up front.
pub(crate) struct FileSource {
    pub(crate) reader: Box<dyn RecordBatchReader + Send>,
    pub(crate) total_rows: Option<u64>,
}

/// Opens CSV file `path` (`file`) with the types of `schema`, whose column
/// names its header must have, in order; without one, with the types
/// inferred from its first 10,000 rows.
fn csv(
    path: &Path,
    file: File,
    batch_size: usize,
    schema: Option<SchemaRef>,
) -> Result<FileSource, Box<dyn std::error::Error>> {
    let mut file = BufReader::new(file);
    // An empty field is null, as pandas and pyarrow read it.
    let empty = regex::Regex::new("^$").expect("valid regex");
    let format = arrow::csv::reader::Format::default()
        .with_header(true)
        .with_null_regex(empty);
    let (inferred, _) = format.infer_schema(&mut file, Some(10_000))?;
    file.rewind()?;
    let schema = match schema {
        Some(schema) => {
            let names = |s: &arrow::datatypes::Schema| -> Vec<String> {
                s.fields().iter().map(|f| f.name().clone()).collect()
            };
            if names(&inferred) != names(&schema) {
                return Err(format!(
                    "{}: its columns ({}) are not the table's ({}), in the same order",
                    path.display(),
                    names(&inferred).join(", "),
                    names(&schema).join(", ")
                )
                .into());
            }
            schema
        }
        None => Arc::new(inferred),
    };
    let reader = arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
        .with_format(format)
        .with_batch_size(batch_size)
        .build(file)?;
    let path = path.display().to_string();
    Ok(FileSource {
        reader: Box::new(Explained {
            reader,
            schema,
            path,
        }),
        total_rows: None,
    })
}

/// A CSV reader whose errors say which file, and the name of the column a
/// value could not be read as (arrow-csv gives its position).
struct Explained<R> {
    reader: R,
    schema: SchemaRef,
    path: String,
}

impl<R: Iterator<Item = Result<RecordBatch, ArrowError>>> Iterator for Explained<R> {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.reader.next()?.map_err(|e| {
            let columns: Vec<String> = self
                .schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| format!("{i}: {} {}", f.name(), f.data_type()))
                .collect();
            ArrowError::ParseError(format!(
                "{}: {e} (columns by position: {})",
                self.path,
                columns.join(", ")
            ))
        }))
    }
}

impl<R: Iterator<Item = Result<RecordBatch, ArrowError>>> RecordBatchReader for Explained<R> {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// Opens `path` for reading as `format`.
pub(crate) fn open(
    path: &Path,
    format: Format,
    batch_size: usize,
) -> Result<FileSource, Box<dyn std::error::Error>> {
    open_as(path, format, batch_size, None)
}

/// Opens `path` for reading as `format`; a CSV with the types of
/// `csv_schema` when given (the other formats carry their own).
pub(crate) fn open_as(
    path: &Path,
    format: Format,
    batch_size: usize,
    csv_schema: Option<SchemaRef>,
) -> Result<FileSource, Box<dyn std::error::Error>> {
    let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    Ok(match format {
        Format::Parquet => {
            let builder =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?
                    .with_batch_size(batch_size);
            let total_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
            FileSource {
                reader: Box::new(builder.build()?),
                total_rows,
            }
        }
        Format::Csv => csv(path, file, batch_size, csv_schema)?,
        Format::Arrow => {
            let reader = arrow::ipc::reader::FileReader::try_new(BufReader::new(file), None)?;
            FileSource {
                reader: Box::new(reader),
                total_rows: None,
            }
        }
        Format::Arrows => {
            let reader = arrow::ipc::reader::StreamReader::try_new(BufReader::new(file), None)?;
            FileSource {
                reader: Box::new(reader),
                total_rows: None,
            }
        }
    })
}

/// A file being written batch by batch.
pub(crate) enum FileSink {
    Parquet(parquet::arrow::ArrowWriter<File>),
    Csv(arrow::csv::Writer<BufWriter<File>>),
    Arrow(arrow::ipc::writer::FileWriter<BufWriter<File>>),
    Arrows(arrow::ipc::writer::StreamWriter<BufWriter<File>>),
}

impl FileSink {
    /// Creates `path` for writing batches of `schema` as `format`.
    pub(crate) fn create(
        path: &Path,
        format: Format,
        schema: &SchemaRef,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let file =
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(match format {
            Format::Parquet => Self::Parquet(parquet::arrow::ArrowWriter::try_new(
                file,
                Arc::clone(schema),
                None,
            )?),
            Format::Csv => Self::Csv(arrow::csv::Writer::new(BufWriter::new(file))),
            Format::Arrow => Self::Arrow(arrow::ipc::writer::FileWriter::try_new(
                BufWriter::new(file),
                schema,
            )?),
            Format::Arrows => Self::Arrows(arrow::ipc::writer::StreamWriter::try_new(
                BufWriter::new(file),
                schema,
            )?),
        })
    }

    /// Writes one batch.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Self::Parquet(w) => w.write(batch)?,
            Self::Csv(w) => w.write(batch)?,
            Self::Arrow(w) => w.write(batch)?,
            Self::Arrows(w) => w.write(batch)?,
        }
        Ok(())
    }

    /// Finishes the file (footers, flush).
    pub(crate) fn finish(self) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Self::Parquet(w) => {
                w.close()?;
            }
            Self::Csv(w) => {
                w.into_inner()
                    .into_inner()
                    .map_err(|e| ArrowError::IoError(e.to_string(), e.into_error()))?;
            }
            Self::Arrow(mut w) => w.finish()?,
            Self::Arrows(mut w) => w.finish()?,
        }
        Ok(())
    }
}
