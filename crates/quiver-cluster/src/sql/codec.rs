//! How quiver's scans travel to a worker: a cluster scan's [`ScanSpec`], or
//! a share of a scan of files in place's [`InPlaceSpec`] (its file scan its
//! one input, as DataFusion encodes it), as JSON inside DataFusion's plan
//! protobuf.

use std::sync::Arc;

use datafusion::common::internal_err;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::catalog::decode_schema;
use crate::sql::in_place::{InPlaceScanExec, InPlaceSpec};
use crate::sql::scan::{ClusterScanExec, ScanSpec};

/// Encodes and decodes [`ClusterScanExec`] (no inputs) and
/// [`InPlaceScanExec`] (one), the plan nodes of quiver's that cross between
/// nodes.
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
        match inputs {
            [] => {}
            [input] => {
                let spec: InPlaceSpec = serde_json::from_slice(buf).map_err(|e| {
                    DataFusionError::Internal(format!("decoding a scan of files in place: {e}"))
                })?;
                return Ok(Arc::new(InPlaceScanExec::new(spec, Arc::clone(input))));
            }
            _ => {
                return internal_err!(
                    "quiver's scans have one input at most, got {}",
                    inputs.len()
                );
            }
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
        if let Some(share) = node.downcast_ref::<InPlaceScanExec>() {
            return serde_json::to_writer(buf, &share.spec).map_err(|e| {
                DataFusionError::Internal(format!("encoding a scan of files in place: {e}"))
            });
        }
        let Some(scan) = node.downcast_ref::<ClusterScanExec>() else {
            return internal_err!("quiver's plan codec cannot encode {}", node.name());
        };
        serde_json::to_writer(buf, &scan.spec)
            .map_err(|e| DataFusionError::Internal(format!("encoding a cluster scan: {e}")))
    }
}
