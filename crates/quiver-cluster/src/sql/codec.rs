//! How a cluster scan travels to a worker: its [`ScanSpec`] as JSON inside
//! DataFusion's plan protobuf.

use std::sync::Arc;

use datafusion::common::internal_err;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::catalog::decode_schema;
use crate::sql::scan::{ClusterScanExec, ScanSpec};

/// Encodes and decodes [`ClusterScanExec`], the one plan node of quiver's
/// that crosses between nodes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClusterCodec;

impl PhysicalExtensionCodec for ClusterCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return internal_err!("ClusterScanExec has no inputs, got {}", inputs.len());
        }
        let spec: ScanSpec = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Internal(format!("decoding a cluster scan: {e}")))?;
        let schema = decode_schema(&spec.schema)
            .map_err(|e| DataFusionError::Internal(format!("decoding a cluster scan: {e}")))?;
        Ok(Arc::new(ClusterScanExec::try_new(spec, schema)?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(scan) = node.downcast_ref::<ClusterScanExec>() else {
            return internal_err!("quiver's plan codec cannot encode {}", node.name());
        };
        serde_json::to_writer(buf, &scan.spec)
            .map_err(|e| DataFusionError::Internal(format!("encoding a cluster scan: {e}")))
    }
}
