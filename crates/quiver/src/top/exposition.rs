//! Reading the Prometheus text exposition format a quiver server's
//! `/metrics` serves: samples by metric name and labels.

use std::collections::BTreeMap;

/// One sample: the metric's name, its labels (sorted), its value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

impl Sample {
    /// The value of label `name`, or "".
    pub(crate) fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrape {
    pub(crate) samples: Vec<Sample>,
}

impl Scrape {
    /// Parses the text format. Comments and blank lines are skipped; a line
    /// that is not a sample is an error naming it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| sample(line).ok_or_else(|| format!("not a metrics sample: {line:?}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { samples })
    }

    /// The samples of metric `name`.
    pub(crate) fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The sum over every series of metric `name` (0 if there is none).
    pub(crate) fn total(&self, name: &str) -> f64 {
        self.series(name).map(|s| s.value).sum()
    }

    /// The sum over the series of `name` whose label `label` is `value`.
    pub(crate) fn total_where(&self, name: &str, label: &str, value: &str) -> f64 {
        self.series(name)
            .filter(|s| s.label(label) == value)
            .map(|s| s.value)
            .sum()
    }
}

/// `name{label="value",...} value [timestamp]`.
fn sample(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The labels up to the closing `}`, and what follows it.
fn label_set(mut s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        let mut chars = s[eq + 1..].strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.insert(key, value);
        s = &s[eq + 1 + 1 + end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_and_without_labels() {
        let scrape = Scrape::parse(
            "# HELP quiver_tables Tables stored\n# TYPE quiver_tables gauge\nquiver_tables 3\n\n\
             quiver_rpcs_total{method=\"DoGet\",code=\"OK\"} 12\n\
             quiver_rpc_duration_seconds_bucket{method=\"DoGet\",le=\"+Inf\"} 12\n\
             odd{a=\"x\\\"y, }\\\\\",b=\"\"} 1.5e3 1700000000\n",
        )
        .unwrap();
        assert_eq!(scrape.samples.len(), 4);
        assert_eq!(scrape.total("quiver_tables"), 3.0);
        assert_eq!(
            scrape.total_where("quiver_rpcs_total", "method", "DoGet"),
            12.0
        );
        let bucket = scrape
            .series("quiver_rpc_duration_seconds_bucket")
            .next()
            .unwrap();
        assert_eq!(bucket.label("le"), "+Inf");
        let odd = scrape.series("odd").next().unwrap();
        assert_eq!(odd.label("a"), "x\"y, }\\");
        assert_eq!(odd.label("b"), "");
        assert_eq!(odd.value, 1500.0);
    }

    #[test]
    fn a_line_that_is_no_sample_is_an_error() {
        assert!(Scrape::parse("quiver_tables\n").is_err());
        assert!(Scrape::parse("x{a=\"unclosed} 1\n").is_err());
        assert!(Scrape::parse("x{a=1} 1\n").is_err());
    }
}
