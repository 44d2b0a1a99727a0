//! A stream already running, as a plan of one partition: how an operator of
//! quiver's hands what it has read to a DataFusion operator it builds while
//! it runs (a sort to fall back on, a merge of the states it peeked at).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};

/// `stream` as the one partition of a plan, read once: a second read gets no
/// rows (the plans built over it read each partition once).
pub(crate) fn once(stream: SendableRecordBatchStream) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = stream.schema();
    let source = Arc::new(Once {
        schema: Arc::clone(&schema),
        stream: Mutex::new(Some(stream)),
    });
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        vec![source],
        None,
        [],
        false,
        None,
    )?))
}

struct Once {
    schema: SchemaRef,
    stream: Mutex<Option<SendableRecordBatchStream>>,
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Once")
    }
}

impl PartitionStream for Once {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        taken.unwrap_or_else(|| {
            Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::empty(),
            ))
        })
    }
}
