//! A cluster table as a DataFusion table: one version from the catalog,
//! scanned partition by partition where the copies are.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::TableProvider;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::{NodeEntry, TableEntry};
use crate::sql::scan::{ClusterScanExec, Replica, ScanPart, ScanSpec};

/// One version of a cluster table. A query sees the version it was planned
/// against: its partitions are never changed, only replaced by new ones.
#[derive(Debug)]
pub(crate) struct ClusterTable {
    name: String,
    schema: SchemaRef,
    encoded_schema: String,
    parts: Vec<ScanPart>,
}

impl ClusterTable {
    /// Table `name` as `entry` has it, its replicas those of `nodes` (the
    /// live ones), less the suspects (nodes whose last call failed) where
    /// another replica is left.
    pub(crate) fn new(
        name: &str,
        entry: &TableEntry,
        nodes: &BTreeMap<String, NodeEntry>,
        suspect: &dyn Fn(&str) -> bool,
    ) -> crate::Result<Self> {
        let parts = entry
            .partitions
            .iter()
            .map(|part| {
                let mut replicas: Vec<Replica> = part
                    .replicas
                    .iter()
                    .filter_map(|id| nodes.get(id))
                    .map(|node| Replica {
                        node: node.id.clone(),
                        location: node.location.clone(),
                    })
                    .collect();
                if replicas.iter().any(|r| !suspect(&r.location)) {
                    replicas.retain(|r| !suspect(&r.location));
                }
                ScanPart {
                    name: part.name.clone(),
                    rows: part.rows,
                    bytes: part.bytes,
                    replicas,
                }
            })
            .collect();
        Ok(Self {
            name: name.to_string(),
            schema: entry.schema()?,
            encoded_schema: entry.schema.clone(),
            parts,
        })
    }
}

impl ClusterTable {
    /// Its partitions, in the catalog's order.
    pub(crate) fn parts(&self) -> &[ScanPart] {
        &self.parts
    }
}

#[async_trait]
impl TableProvider for ClusterTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Planned on one node, the partitions are read in up to one output
        // partition per core; the distributed planner re-cuts this per node.
        let groups = split(&self.parts, state.config().target_partitions());
        let spec = ScanSpec {
            table: self.name.clone(),
            schema: self.encoded_schema.clone(),
            projection: projection.cloned(),
            limit,
            groups,
            node: None,
        };
        Ok(Arc::new(ClusterScanExec::try_new(
            spec,
            Arc::clone(&self.schema),
        )?))
    }
}

/// `parts` in at most `count` runs of consecutive partitions, as even in
/// number as can be; at least one run (perhaps empty).
pub(crate) fn split(parts: &[ScanPart], count: usize) -> Vec<Vec<ScanPart>> {
    let count = count.min(parts.len()).max(1);
    (0..count)
        .map(|i| {
            let from = parts.len() * i / count;
            let to = parts.len() * (i + 1) / count;
            parts[from..to].to_vec()
        })
        .collect()
}
