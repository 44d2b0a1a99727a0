//! Record batches across the Arrow C stream interface, both ways, without
//! copying: to pyarrow (`RecordBatchReader._import_from_c`) and from any
//! object with `__arrow_c_stream__` (the PyCapsule interface).
//!
//! The only `unsafe` code of the crate.

use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow::record_batch::RecordBatchReader;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::error::Error;

/// Name of a C stream capsule, as the PyCapsule interface fixes it.
const STREAM_CAPSULE: &std::ffi::CStr = c"arrow_array_stream";

/// `reader` as a `pyarrow.RecordBatchReader`.
pub(crate) fn to_pyarrow<'py>(
    py: Python<'py>,
    reader: Box<dyn RecordBatchReader + Send>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut stream = Box::new(FFI_ArrowArrayStream::new(reader));
    let address = &raw mut *stream as usize;
    // pyarrow moves the stream out (leaving it released), so dropping the box
    // afterwards releases nothing twice; on failure it releases the reader.
    py.import("pyarrow")?
        .getattr("RecordBatchReader")?
        .call_method1("_import_from_c", (address,))
}

/// The C stream of `data` (any object with `__arrow_c_stream__`), as a
/// reader of record batches.
pub(crate) fn from_python(data: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    let capsule = data
        .call_method0("__arrow_c_stream__")
        .map_err(|e| Error::Invalid(format!("data has no Arrow C stream: {e}")))?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
    // SAFETY: the capsule's name says it holds an `ArrowArrayStream`, which
    // `from_raw` moves out, leaving a released one for the capsule's
    // destructor to find.
    unsafe { ArrowArrayStreamReader::from_raw(pointer.as_ptr().cast()) }
        .map_err(|e| Error::Invalid(format!("data's Arrow C stream: {e}")).into())
}
