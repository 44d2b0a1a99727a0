//! The DataFusion session settings: the partitions quiver chooses, the
//! settings an operator sets with `--sql-setting`, and the row `EXPLAIN`
//! shows them in.
//!
//! docs/performance.md says why each choice is made and what it was
//! measured to do.

use std::sync::Arc;

use arrow::array::StringArray;
use arrow::record_batch::RecordBatch;
use datafusion::config::ConfigOptions;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::prelude::SessionConfig;

use crate::{Result, SqlError};

/// The `plan_type` of the row `EXPLAIN` adds: the settings the plan was
/// made under.
pub const SETTINGS_ROW: &str = "quiver_settings";

/// The settings `EXPLAIN` shows: those that decide how a plan is cut up,
/// joined and read from files. DataFusion's defaults but the partitions
/// and the statistics registry (docs/performance.md, "Session settings" and
/// "Build sides past a join", says why).
const SHOWN: [&str; 10] = [
    "datafusion.execution.target_partitions",
    "datafusion.execution.batch_size",
    "datafusion.optimizer.repartition_joins",
    "datafusion.optimizer.repartition_aggregations",
    "datafusion.optimizer.prefer_hash_join",
    "datafusion.optimizer.use_statistics_registry",
    "datafusion.execution.collect_statistics",
    "datafusion.execution.parquet.pushdown_filters",
    "datafusion.execution.parquet.reorder_filters",
    "datafusion.execution.parquet.enable_page_index",
];

/// A DataFusion setting, `key` (as in `datafusion.execution.batch_size`)
/// set to `value`, checked against DataFusion's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    key: String,
    value: String,
}

impl Setting {
    /// `KEY=VALUE`, with a key DataFusion knows and a value it takes; the
    /// prefix `datafusion.` may be left out.
    pub fn parse(text: &str) -> Result<Self> {
        let (key, value) = text
            .split_once('=')
            .filter(|(key, _)| !key.trim().is_empty())
            .ok_or_else(|| {
                SqlError::Setting(format!(
                    "{text:?}: expected KEY=VALUE, as in \
                     datafusion.execution.parquet.pushdown_filters=false"
                ))
            })?;
        let key = key.trim();
        let key = if key.starts_with("datafusion.") {
            key.to_string()
        } else {
            format!("datafusion.{key}")
        };
        let setting = Self {
            key,
            value: value.trim().to_string(),
        };
        setting.apply(&mut ConfigOptions::new())?;
        Ok(setting)
    }

    fn apply(&self, options: &mut ConfigOptions) -> Result<()> {
        options
            .set(&self.key, &self.value)
            .map_err(|e| SqlError::Setting(format!("{}={}: {e}", self.key, self.value)))
    }
}

/// The session's settings: `target_partitions` partitions, join selection
/// by the session's statistics registry (`join_sizes.rs`), then `settings`,
/// which win.
pub(crate) fn session_config(target_partitions: usize, settings: &[Setting]) -> SessionConfig {
    let mut config = SessionConfig::new().with_target_partitions(target_partitions);
    let options = config.options_mut();
    options.optimizer.use_statistics_registry = true;
    for setting in settings {
        // Checked when parsed: no error here.
        if let Err(e) = setting.apply(options) {
            tracing::warn!(error = %e, "DataFusion refused a setting");
        }
    }
    config
}

/// The settings [`SHOWN`] and those of `set` (an operator's), as
/// `key=value` lines, `datafusion.` left out.
pub(crate) fn describe(options: &ConfigOptions, set: &[Setting]) -> String {
    let values = options.entries();
    let mut keys: Vec<&str> = SHOWN.to_vec();
    for setting in set {
        if !keys.contains(&setting.key.as_str()) {
            keys.push(&setting.key);
        }
    }
    keys.iter()
        .filter_map(|key| values.iter().find(|entry| entry.key == *key))
        .map(|entry| {
            let key = entry.key.strip_prefix("datafusion.").unwrap_or(&entry.key);
            let value = entry.value.as_deref().unwrap_or("");
            format!("{key}={value}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// If `plan` is an `EXPLAIN` (not `EXPLAIN ANALYZE`), the rows it gives and a
/// last one, [`SETTINGS_ROW`], with the settings it was planned under
/// (`options`, after the operator's `set`).
pub(crate) async fn explained_with_settings(
    plan: &Arc<dyn ExecutionPlan>,
    options: &ConfigOptions,
    set: &[Setting],
) -> Result<Option<RecordBatch>> {
    let Some(explain) = plan.downcast_ref::<ExplainExec>() else {
        return Ok(None);
    };
    let task = Arc::new(datafusion::execution::TaskContext::default());
    let batches = datafusion::physical_plan::collect(Arc::new(explain.clone()), task).await?;
    let schema = explain.schema();
    let settings = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from(vec![SETTINGS_ROW])),
            Arc::new(StringArray::from(vec![describe(options, set)])),
        ],
    )
    .and_then(|settings| arrow::compute::concat_batches(&schema, batches.iter().chain([&settings])))
    .map_err(|e| SqlError::Internal(format!("the rows of EXPLAIN: {e}")))?;
    Ok(Some(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_against_datafusions() {
        let set = Setting::parse("execution.batch_size = 4096").unwrap();
        assert_eq!(set.key, "datafusion.execution.batch_size");
        assert_eq!(set.value, "4096");
        for (bad, says) in [
            ("execution.no_such_thing=1", "no_such_thing"),
            ("execution.batch_size=many", "many"),
            ("batch_size", "expected KEY=VALUE"),
            ("=1", "expected KEY=VALUE"),
        ] {
            let error = Setting::parse(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn an_operators_setting_wins_over_the_defaults() {
        let config = session_config(3, &[]);
        let shown = describe(config.options(), &[]);
        assert!(shown.contains("execution.target_partitions=3"), "{shown}");
        assert!(shown.contains("parquet.pushdown_filters=false"), "{shown}");
        assert!(
            shown.contains("optimizer.use_statistics_registry=true"),
            "{shown}"
        );
        assert_eq!(shown.lines().count(), SHOWN.len(), "{shown}");
        let off = Setting::parse("optimizer.use_statistics_registry=false").unwrap();
        let set = [off];
        let shown = describe(session_config(3, &set).options(), &set);
        assert!(
            shown.contains("optimizer.use_statistics_registry=false"),
            "{shown}"
        );
        let on = Setting::parse("execution.parquet.pushdown_filters=true").unwrap();
        let five = Setting::parse("execution.target_partitions=5").unwrap();
        let bloom = Setting::parse("execution.parquet.bloom_filter_on_read=false").unwrap();
        let set = [on, five, bloom];
        let shown = describe(session_config(3, &set).options(), &set);
        assert!(shown.contains("parquet.pushdown_filters=true"), "{shown}");
        assert!(shown.contains("execution.target_partitions=5"), "{shown}");
        // A setting EXPLAIN does not show by default is shown once set.
        assert!(
            shown.ends_with("execution.parquet.bloom_filter_on_read=false"),
            "{shown}"
        );
        assert_eq!(shown.lines().count(), SHOWN.len() + 1, "{shown}");
    }
}
