//! Byte sizes on the command line: `1048576`, `512MiB`, `8GiB`, `1.5GB`.

use std::fmt;
use std::str::FromStr;

/// A number of bytes parsed from a human-friendly string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteSize(pub(crate) u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, unit) = s.split_at(split);
        let number: f64 = number
            .parse()
            .map_err(|_| format!("{s:?} is not a size like 1048576, 512MiB or 8GiB"))?;
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "kb" => 1_000,
            "m" | "mib" => 1 << 20,
            "mb" => 1_000_000,
            "g" | "gib" => 1 << 30,
            "gb" => 1_000_000_000,
            "t" | "tib" => 1 << 40,
            "tb" => 1_000_000_000_000,
            other => {
                return Err(format!(
                    "unknown size unit {other:?} in {s:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
                ));
            }
        };
        let bytes = number * multiplier as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(format!("size {s:?} is out of range"));
        }
        Ok(Self(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.1} {}", UNITS[unit])
        }
    }
}

/// Total RAM of this machine, from /proc/meminfo (None where unavailable).
pub(crate) fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        let cases = [
            ("1048576", 1 << 20),
            ("512MiB", 512 << 20),
            ("8GiB", 8 << 30),
            ("8g", 8 << 30),
            ("1.5GB", 1_500_000_000),
            ("2 KiB", 2048),
            ("10kb", 10_000),
        ];
        for (text, bytes) in cases {
            assert_eq!(text.parse::<ByteSize>().unwrap().0, bytes, "{text}");
        }
        for bad in ["", "GiB", "12 parsecs", "-1", "1e999"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
    }

    #[test]
    fn displays_sizes() {
        assert_eq!(ByteSize(512).to_string(), "512 B");
        assert_eq!(ByteSize(3 << 29).to_string(), "1.5 GiB");
    }
}
