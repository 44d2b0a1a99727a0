//! The live plots' data: the server's own metrics sampled into a ring
//! buffer of the last minutes.
//!
//! A sample is taken when a page asks for the samples and the last one is
//! at least [`SAMPLE_EVERY`] old; no timer runs, so with no page open the
//! console costs nothing. Gaps while no page was open show as gaps.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;

use crate::metrics::{BYTES, RPCS, Sources};

/// Least time between two samples.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept: 10 minutes at one a second.
pub(crate) const KEPT_SAMPLES: usize = 600;

/// The server's counters and gauges at one moment.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    /// Milliseconds since the Unix epoch.
    pub(crate) t: u64,
    /// Arrow bytes received and sent so far (counters).
    pub(crate) bytes_in: f64,
    pub(crate) bytes_out: f64,
    /// RPCs finished so far, by method (counters).
    pub(crate) rpcs: BTreeMap<String, f64>,
    /// Bytes charged to the memory pool, and its limit (`--max-memory`).
    pub(crate) memory_used: u64,
    pub(crate) memory_limit: u64,
    /// Tables, rows and bytes stored.
    pub(crate) tables: usize,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

/// The last [`KEPT_SAMPLES`] samples.
#[derive(Debug, Default)]
pub(crate) struct Live {
    samples: Mutex<VecDeque<Sample>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Live {
    /// The samples, oldest first, one taken now if the last is old enough.
    pub(crate) fn samples(&self, handle: &PrometheusHandle, sources: &Sources) -> Vec<Sample> {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = now_ms();
        let due = samples.back().is_none_or(|last| {
            now.saturating_sub(last.t) >= u64::try_from(SAMPLE_EVERY.as_millis()).unwrap_or(1000)
        });
        if due {
            samples.push_back(sample(now, handle, sources));
            while samples.len() > KEPT_SAMPLES {
                samples.pop_front();
            }
        }
        samples.iter().cloned().collect()
    }
}

fn sample(t: u64, handle: &PrometheusHandle, sources: &Sources) -> Sample {
    let store = sources.store_stats();
    let mut sample = Sample {
        t,
        bytes_in: 0.0,
        bytes_out: 0.0,
        rpcs: BTreeMap::new(),
        memory_used: store.memory_used,
        memory_limit: store.memory_limit,
        tables: store.tables,
        rows: store.rows,
        bytes: store.bytes,
    };
    for (name, labels, value) in handle.render().lines().filter_map(parse_line) {
        if name == BYTES {
            match label(labels, "direction") {
                Some("received") => sample.bytes_in += value,
                Some("sent") => sample.bytes_out += value,
                _ => {}
            }
        } else if name == RPCS
            && let Some(method) = label(labels, "method")
        {
            *sample.rpcs.entry(method.to_string()).or_default() += value;
        }
    }
    sample
}

/// A sample line of Prometheus' text format: name, labels (between the
/// braces, or empty) and value. Comments and bad lines give `None`.
fn parse_line(line: &str) -> Option<(&str, &str, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    match series.split_once('{') {
        Some((name, labels)) => Some((name, labels.strip_suffix('}')?, value)),
        None => Some((series, "", value)),
    }
}

/// The value of label `key` in `labels` (`a="x",b="y"`); quiver's label
/// values have no quotes or commas in them.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_lines_parse() {
        let line = r#"quiver_bytes_total{method="DoGet",direction="sent"} 1024"#;
        let (name, labels, value) = parse_line(line).unwrap();
        assert_eq!((name, value), ("quiver_bytes_total", 1024.0));
        assert_eq!(label(labels, "direction"), Some("sent"));
        assert_eq!(label(labels, "method"), Some("DoGet"));
        assert_eq!(
            parse_line("quiver_tables 3"),
            Some(("quiver_tables", "", 3.0))
        );
        assert_eq!(parse_line("# TYPE quiver_tables gauge"), None);
        assert_eq!(parse_line("garbage"), None);
    }
}
