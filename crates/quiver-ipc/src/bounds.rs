//! Refusing IPC messages whose buffers lie outside their body.
//!
//! arrow-ipc 59's decoder slices each buffer a record batch or dictionary
//! message declares out of the message body and panics when the declared
//! offset or length passes the body's end (arrow-buffer's `Buffer::slice`).
//! A client controls both numbers, so DoPut checks them first and answers
//! INVALID_ARGUMENT. Found by the fuzz target in `fuzz/` (docs/limits.md).
//!
//! Other malformed messages make the decoder panic elsewhere (a validity
//! bitmap shorter than its array, for one); `quiver-flight`'s DoPut decoder catches
//! those around the decoder and refuses the put the same way.

use arrow::ipc::{MessageHeader, root_as_message};

/// Checks that every buffer the IPC message `header` declares lies within a
/// body of `body_len` bytes. A header that is no IPC message is left to the
/// decoder, which refuses it.
pub fn check_buffers(header: &[u8], body_len: usize) -> Result<(), String> {
    let Ok(message) = root_as_message(header) else {
        return Ok(());
    };
    let buffers = match message.header_type() {
        MessageHeader::RecordBatch => message.header_as_record_batch().and_then(|b| b.buffers()),
        MessageHeader::DictionaryBatch => message
            .header_as_dictionary_batch()
            .and_then(|d| d.data())
            .and_then(|b| b.buffers()),
        _ => None,
    };
    buffers_within(buffers.into_iter().flatten(), body_len)
}

/// Checks that every buffer of an IPC header already parsed (a record
/// batch's, or a dictionary batch's data) lies within a body of `body_len`
/// bytes.
pub fn buffers_within<'a>(
    buffers: impl IntoIterator<Item = &'a arrow::ipc::Buffer>,
    body_len: usize,
) -> Result<(), String> {
    for (index, buffer) in buffers.into_iter().enumerate() {
        let end = u64::try_from(buffer.offset())
            .ok()
            .zip(u64::try_from(buffer.length()).ok())
            .and_then(|(offset, length)| offset.checked_add(length));
        if end.is_none_or(|end| end > body_len as u64) {
            return Err(format!(
                "buffer {index} of an IPC message (offset {}, length {}) lies outside its \
                 {body_len}-byte body",
                buffer.offset(),
                buffer.length()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    #[test]
    fn accepts_real_messages_and_refuses_short_bodies() {
        let batch = RecordBatch::try_from_iter([(
            "a",
            Arc::new(Int64Array::from_iter_values(0..100)) as _,
        )])
        .unwrap();
        let (_, encoded) = IpcDataGenerator::default()
            .encode(
                &batch,
                &mut DictionaryTracker::new(false),
                &IpcWriteOptions::default(),
                &mut Default::default(),
            )
            .unwrap();
        let body_len = encoded.arrow_data.len();
        assert!(body_len >= 800);
        check_buffers(&encoded.ipc_message, body_len).unwrap();
        let err = check_buffers(&encoded.ipc_message, 799).unwrap_err(); // 800 bytes of values
        assert!(err.contains("outside"), "{err}");
        check_buffers(b"not a flatbuffer", 0).unwrap();
    }
}
