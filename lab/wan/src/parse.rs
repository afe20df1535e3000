//! Parsers for the command line: rates (`1G` bits/s), sizes (`12M` bytes),
//! durations (`95ms`) and probabilities (`0.01%` or `0.0001`).
use std::time::Duration;

use crate::LabError;

fn bad(what: &str, input: &str, hint: &str) -> LabError {
    LabError::Parse(format!("bad {what} {input:?}: {hint}"))
}

/// Splits `"1.5Gbit"` into `(1.5, "gbit")` (unit lowercased).
fn split_number(s: &str) -> Option<(f64, String)> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let value: f64 = s[..end].parse().ok()?;
    Some((value, s[end..].trim().to_ascii_lowercase()))
}

/// Parses a rate in bits per second: `1G`, `100M`, `1.5Gbit`, `800kbps`,
/// `2500000`. Suffixes are decimal (k=1e3, M=1e6, G=1e9, T=1e12).
pub fn parse_rate(s: &str) -> Result<u64, LabError> {
    let hint = "use a number of bits/s with k, M, G or T, e.g. 1G or 200M";
    let (v, unit) = split_number(s).ok_or_else(|| bad("rate", s, hint))?;
    let unit = unit.trim_end_matches("bps").trim_end_matches("bit/s").trim_end_matches("bit").trim_end_matches("b/s");
    let mult = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => return Err(bad("rate", s, hint)),
    };
    let bps = v * mult;
    if !(1.0..=1e13).contains(&bps) {
        return Err(bad("rate", s, "must be between 1 bit/s and 10 Tbit/s"));
    }
    Ok(bps.round() as u64)
}

/// Parses a size in bytes: `12M`, `64K`, `1.5G`, `9000`, `12MiB`, `12MB`.
/// Suffixes are binary (K=1024), as in rclone's `--buffer-size`.
pub fn parse_size(s: &str) -> Result<u64, LabError> {
    let hint = "use a number of bytes with K, M or G (powers of 1024), e.g. 12M";
    let (v, unit) = split_number(s).ok_or_else(|| bad("size", s, hint))?;
    let unit = unit.trim_end_matches("ib").trim_end_matches('b');
    let mult = match unit {
        "" => 1u64,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(bad("size", s, hint)),
    };
    let bytes = v * mult as f64;
    if bytes > (1u64 << 50) as f64 {
        return Err(bad("size", s, "too large"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration: `95ms`, `1.5s`, `250us`, `2m`, `0`. A bare number is
/// taken as milliseconds only when it is 0; otherwise a unit is required.
pub fn parse_duration(s: &str) -> Result<Duration, LabError> {
    let hint = "use a number with ns, us, ms, s or m, e.g. 95ms";
    let (v, unit) = split_number(s).ok_or_else(|| bad("duration", s, hint))?;
    let secs = match unit.as_str() {
        "" if v == 0.0 => 0.0,
        "ns" => v * 1e-9,
        "us" | "µs" => v * 1e-6,
        "ms" => v * 1e-3,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return Err(bad("duration", s, hint)),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| bad("duration", s, "out of range"))
}

/// Parses a probability: `0.01%` (percent) or `0.0001` (fraction, 0..=1).
pub fn parse_fraction(s: &str) -> Result<f64, LabError> {
    let hint = "use a percentage like 0.01% or a fraction like 0.0001";
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| bad("probability", s, hint))?;
    let p = v * scale;
    if !(0.0..=1.0).contains(&p) || !p.is_finite() {
        return Err(bad("probability", s, "must be between 0 and 1 (0% and 100%)"));
    }
    Ok(p)
}

/// Formats bits/s compactly: `1G`, `200M`, `1.5G`.
pub fn format_rate(bps: u64) -> String {
    let (div, unit) = match bps {
        b if b >= 1_000_000_000 => (1e9, "G"),
        b if b >= 1_000_000 => (1e6, "M"),
        b if b >= 1_000 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let v = bps as f64 / div;
    if (v - v.round()).abs() < 1e-9 {
        format!("{}{unit}", v.round())
    } else {
        format!("{v:.3}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("200M").unwrap(), 200_000_000);
        assert_eq!(parse_rate("1.5Gbit").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("800kbps").unwrap(), 800_000);
        assert_eq!(parse_rate("2500000").unwrap(), 2_500_000);
        assert_eq!(parse_rate(" 10g ").unwrap(), 10_000_000_000);
        for bad in ["", "G", "1X", "-1G", "0", "1.2.3M", "100P"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("12M").unwrap(), 12 << 20);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("12MiB").unwrap(), 12 << 20);
        assert_eq!(parse_size("12MB").unwrap(), 12 << 20);
        assert_eq!(parse_size("9000").unwrap(), 9000);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        for bad in ["", "M", "12X", "-4K"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("95ms").unwrap(), Duration::from_millis(95));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "95", "ms", "5h", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fractions() {
        assert!((parse_fraction("0.01%").unwrap() - 0.0001).abs() < 1e-15);
        assert!((parse_fraction("1%").unwrap() - 0.01).abs() < 1e-15);
        assert_eq!(parse_fraction("0.0001").unwrap(), 0.0001);
        assert_eq!(parse_fraction("0").unwrap(), 0.0);
        assert_eq!(parse_fraction("100%").unwrap(), 1.0);
        for bad in ["", "%", "2", "101%", "-1%", "x", "nan"] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rate_format_round_trips() {
        for s in ["1G", "200M", "1.500G", "800k", "12"] {
            assert_eq!(format_rate(parse_rate(s).unwrap()), s);
        }
    }
}
