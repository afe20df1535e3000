//! Human units in scenario files: sizes (`64M`, `2GiB`, `15MB`), bit rates
//! (`1Gbit`, `100Mbit`) and durations (`95ms`, `1.5s`, `10m`).
//!
//! Sizes follow the rclone convention: a bare `K`/`M`/`G`/`T` is binary
//! (`64M` = 64 MiB), `KB`/`MB`/`GB`/`TB` are decimal, `KiB`... are binary.
//! Rates are always decimal bits per second, as link speeds are quoted.

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Splits `"1.5GiB"` into `(1.5, "GiB")`.
fn split_number(text: &str) -> Result<(f64, &str)> {
    let t = text.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let num: f64 =
        num.replace('_', "").parse().with_context(|| format!("`{text}`: expected a number followed by a unit"))?;
    if !num.is_finite() || num < 0.0 {
        bail!("`{text}`: must be a non-negative number");
    }
    Ok((num, unit.trim()))
}

/// Parses a byte size.
pub fn parse_size(text: &str) -> Result<u64> {
    let (num, unit) = split_number(text)?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "K" | "KiB" | "k" => 1024.0,
        "M" | "MiB" => 1024.0 * 1024.0,
        "G" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TiB" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => bail!("`{text}`: unknown size unit `{unit}` (use B, K/KiB, M/MiB, G/GiB, KB, MB, GB)"),
    };
    Ok((num * mult).round() as u64)
}

/// Parses a bit rate in bits per second.
pub fn parse_rate(text: &str) -> Result<u64> {
    let (num, unit) = split_number(text)?;
    let mult = match unit.trim_end_matches("/s").trim_end_matches("ps") {
        "" | "bit" | "b" => 1e0,
        "k" | "K" | "kbit" | "Kbit" | "kb" => 1e3,
        "M" | "Mbit" | "Mb" => 1e6,
        "G" | "Gbit" | "Gb" => 1e9,
        _ => bail!("`{text}`: unknown rate unit `{unit}` (use bit, kbit, Mbit, Gbit)"),
    };
    Ok((num * mult).round() as u64)
}

/// Parses a duration.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let (num, unit) = split_number(text)?;
    let secs = match unit {
        "us" | "µs" => num / 1e6,
        "ms" => num / 1e3,
        "" | "s" => num,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        _ => bail!("`{text}`: unknown duration unit `{unit}` (use us, ms, s, m, h)"),
    };
    // Checked: a duration too long for `Duration` (300 digits) panicked.
    Duration::try_from_secs_f64(secs).map_err(|_| anyhow::anyhow!("`{text}`: not a duration this harness can wait"))
}

/// Formats bytes with a binary unit (`1.50 GiB`).
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Formats a rate in bits per second (`941 Mbit/s`, `2.31 Gbit/s`).
pub fn fmt_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.0} Mbit/s", bps / 1e6)
    } else {
        format!("{:.0} kbit/s", bps / 1e3)
    }
}

macro_rules! text_unit {
    ($name:ident, $inner:ty, $parse:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Raw {
                    Int(u64),
                    Float(f64),
                    Text(String),
                }
                let parsed = match Raw::deserialize(d)? {
                    Raw::Int(n) => $parse(&n.to_string()),
                    Raw::Float(n) => $parse(&n.to_string()),
                    Raw::Text(t) => $parse(&t),
                };
                parsed.map($name).map_err(serde::de::Error::custom)
            }
        }
    };
}

text_unit!(Size, u64, parse_size, "A byte size read from text such as `64M`.");
text_unit!(Rate, u64, parse_rate, "A bit rate read from text such as `1Gbit`.");
text_unit!(Dur, Duration, parse_duration, "A duration read from text such as `95ms`.");

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}
impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}
impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&fmt_bytes(self.0))
    }
}

/// Seconds since the Unix epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("15MB").unwrap(), 15_000_000);
        assert_eq!(parse_size("1_000").unwrap(), 1000);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("-1M").is_err());
    }

    #[test]
    fn rates_and_durations() {
        assert_eq!(parse_rate("1Gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100Mbit/s").unwrap(), 100_000_000);
        assert_eq!(parse_rate("2.5G").unwrap(), 2_500_000_000);
        assert_eq!(parse_duration("95ms").unwrap(), Duration::from_millis(95));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration(&format!("1{}h", "0".repeat(300))).is_err(), "too long: an error, no panic");
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
        assert_eq!(fmt_rate(2.5e9), "2.50 Gbit/s");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
