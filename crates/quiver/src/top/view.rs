//! One screen of `quiver top`, drawn from two scrapes a moment apart.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::exposition::Scrape;
use crate::size::ByteSize;

/// RPC rows shown, slowest first.
const RPC_ROWS: usize = 12;

/// Per method, over the interval: calls, failed calls, time spent, and the
/// histogram's buckets (upper bound, calls at most that long).
#[derive(Debug, Default)]
struct Method {
    calls: f64,
    failed: f64,
    seconds: f64,
    buckets: Vec<(f64, f64)>,
}

impl Method {
    /// The latency under which `q` of the calls fell, as the bucket bound.
    fn quantile(&self, q: f64) -> Option<f64> {
        let target = q * self.calls;
        self.buckets
            .iter()
            .find(|(_, count)| *count >= target)
            .map(|(le, _)| *le)
    }
}

/// The screen for `now`, with rates since `before`, `seconds` earlier.
pub(crate) fn render(source: &str, before: &Scrape, now: &Scrape, seconds: f64) -> String {
    let seconds = seconds.max(1e-3);
    let rate = |name: &str, label: &str, value: &str| {
        (now.total_where(name, label, value) - before.total_where(name, label, value)).max(0.0)
            / seconds
    };
    let bytes = |v: f64| ByteSize(v.max(0.0) as u64);
    let mut out = String::new();
    let version = now
        .series("quiver_build_info")
        .next()
        .map_or("?", |s| s.label("version"));
    let uptime = now.total("quiver_uptime_seconds") as u64;
    let _ = writeln!(
        out,
        "quiver top  {source}  version {version}  up {}h{:02}m{:02}s",
        uptime / 3600,
        uptime / 60 % 60,
        uptime % 60
    );
    let used = now.total("quiver_memory_used_bytes");
    let limit = now.total("quiver_memory_limit_bytes");
    let _ = writeln!(
        out,
        "tables {}  rows {}  stored {}  memory {} of {} ({:.0}%)  put buffers {}",
        now.total("quiver_tables"),
        now.total("quiver_stored_rows"),
        bytes(now.total("quiver_stored_bytes")),
        bytes(used),
        bytes(limit),
        if limit > 0.0 {
            100.0 * used / limit
        } else {
            0.0
        },
        bytes(now.total("quiver_put_buffer_pool_bytes")),
    );
    let _ = writeln!(
        out,
        "in {}/s {:.0} rows/s  out {}/s {:.0} rows/s  shm: {} connections, {} tickets",
        bytes(rate("quiver_bytes_total", "direction", "received")),
        rate("quiver_rows_total", "direction", "received"),
        bytes(rate("quiver_bytes_total", "direction", "sent")),
        rate("quiver_rows_total", "direction", "sent"),
        now.total("quiver_shm_connections"),
        now.total("quiver_shm_grants"),
    );
    let mut rejected: Vec<String> = now
        .series("quiver_rejected_requests_total")
        .map(|s| format!("{} {}", s.label("limit"), s.value))
        .collect();
    rejected.sort();
    let queries: Vec<String> = ["ok", "failed", "timeout", "cancelled"]
        .iter()
        .map(|o| format!("{o} {:.1}", rate("quiver_sql_queries_total", "outcome", o)))
        .collect();
    let _ = writeln!(
        out,
        "SQL/s: {}  refused since start: {}",
        queries.join(" "),
        if rejected.is_empty() {
            "none".to_string()
        } else {
            rejected.join(", ")
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "RPC (slowest)", "calls/s", "failed/s", "mean ms", "p50 ms", "p99 ms"
    );
    let mut methods = methods(before, now);
    methods.sort_by(|a, b| {
        let mean = |m: &Method| m.seconds / m.calls.max(1.0);
        mean(&b.1).total_cmp(&mean(&a.1)).then(a.0.cmp(&b.0))
    });
    let ms = |v: Option<f64>| match v {
        Some(v) if v.is_finite() => format!("≤{:.1}", v * 1e3),
        Some(_) => "slow".to_string(),
        None => "-".to_string(),
    };
    for (name, m) in methods.iter().take(RPC_ROWS) {
        let mean = if m.calls > 0.0 {
            format!("{:.2}", m.seconds / m.calls * 1e3)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "{:<16} {:>9.1} {:>9.1} {:>10} {:>10} {:>10}",
            name,
            m.calls / seconds,
            m.failed / seconds,
            mean,
            ms(m.quantile(0.5)),
            ms(m.quantile(0.99)),
        );
    }
    if methods.is_empty() {
        let _ = writeln!(out, "(no RPCs yet)");
    }
    out
}

/// Each method's calls over the interval, from the counters and histograms.
fn methods(before: &Scrape, now: &Scrape) -> Vec<(String, Method)> {
    let mut by_method: BTreeMap<String, Method> = BTreeMap::new();
    let delta = |name: &str, method: &str, extra: Option<(&str, &str)>| {
        let pick = |scrape: &Scrape| {
            scrape
                .series(name)
                .filter(|s| s.label("method") == method)
                .filter(|s| extra.is_none_or(|(k, v)| s.label(k) == v))
                .map(|s| s.value)
                .sum::<f64>()
        };
        (pick(now) - pick(before)).max(0.0)
    };
    for sample in now.series("quiver_rpcs_total") {
        by_method
            .entry(sample.label("method").to_string())
            .or_default();
    }
    for (method, m) in &mut by_method {
        m.calls = delta("quiver_rpcs_total", method, None);
        m.failed = m.calls - delta("quiver_rpcs_total", method, Some(("code", "OK")));
        m.seconds = delta("quiver_rpc_duration_seconds_sum", method, None);
        let mut bounds: Vec<(f64, String)> = now
            .series("quiver_rpc_duration_seconds_bucket")
            .filter(|s| s.label("method") == method)
            .filter_map(|s| {
                let le = s.label("le");
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((bound, le.to_string()))
            })
            .collect();
        bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
        m.buckets = bounds
            .into_iter()
            .map(|(bound, le)| {
                let count = delta(
                    "quiver_rpc_duration_seconds_bucket",
                    method,
                    Some(("le", le.as_str())),
                );
                (bound, count)
            })
            .collect();
    }
    by_method.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(gets: u64, failed: u64, sum: f64, fast: u64, stored: u64) -> Scrape {
        Scrape::parse(&format!(
            "quiver_build_info{{version=\"0.1.0\"}} 1\nquiver_uptime_seconds 3723\n\
             quiver_tables 2\nquiver_stored_rows 1000\nquiver_stored_bytes {stored}\n\
             quiver_memory_used_bytes 1073741824\nquiver_memory_limit_bytes 4294967296\n\
             quiver_rpcs_total{{method=\"DoGet\",code=\"OK\"}} {}\n\
             quiver_rpcs_total{{method=\"DoGet\",code=\"NotFound\"}} {failed}\n\
             quiver_rpcs_total{{method=\"DoAction\",code=\"OK\"}} 5\n\
             quiver_rpc_duration_seconds_bucket{{method=\"DoGet\",le=\"0.01\"}} {fast}\n\
             quiver_rpc_duration_seconds_bucket{{method=\"DoGet\",le=\"1\"}} {gets}\n\
             quiver_rpc_duration_seconds_bucket{{method=\"DoGet\",le=\"+Inf\"}} {gets}\n\
             quiver_rpc_duration_seconds_sum{{method=\"DoGet\"}} {sum}\n\
             quiver_rpc_duration_seconds_count{{method=\"DoGet\"}} {gets}\n\
             quiver_bytes_total{{method=\"DoGet\",direction=\"sent\"}} {stored}\n\
             quiver_rejected_requests_total{{limit=\"MEMORY_LIMIT\"}} 2\n",
            gets - failed
        ))
        .unwrap()
    }

    #[test]
    fn rates_and_latencies_are_over_the_interval() {
        let before = scrape(10, 0, 1.0, 10, 0);
        // 20 more DoGets in 2 s, 4 of them failed, 2 s spent, half under 10 ms.
        let now = scrape(30, 4, 3.0, 20, 2 << 20);
        let screen = render("http://x/metrics", &before, &now, 2.0);
        assert!(screen.contains("version 0.1.0  up 1h02m03s"), "{screen}");
        assert!(screen.contains("tables 2  rows 1000"), "{screen}");
        assert!(screen.contains("(25%)"), "{screen}");
        assert!(screen.contains("out 1.0 MiB/s"), "{screen}");
        assert!(screen.contains("MEMORY_LIMIT 2"), "{screen}");
        let row = screen.lines().find(|l| l.starts_with("DoGet")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells[1..],
            ["10.0", "2.0", "100.00", "≤10.0", "≤1000.0"],
            "{row}"
        );
        // DoAction made no calls in the interval: listed after, with no mean.
        let action = screen.lines().find(|l| l.starts_with("DoAction")).unwrap();
        assert!(action.contains(" - "), "{action}");
        let get_at = screen.find("DoGet").unwrap();
        assert!(get_at < screen.find("DoAction").unwrap(), "slowest first");
    }
}
