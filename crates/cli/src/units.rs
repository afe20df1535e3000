//! Sizes as users type them: `64M`, `1G`, `4096`, `1.5G` (powers of 1024).

/// Parse a size with an optional K/M/G/T suffix (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    // `1KiB`, `1KB` and `4096B` as `1K` and `4096` (binary multiples all).
    let unit = s.strip_suffix("iB").or_else(|| s.strip_suffix('B')).unwrap_or(s);
    let (num, mult) = match unit.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("unknown size suffix in {s:?} (use K, M, G, T)")),
            };
            (&unit[..i], m)
        }
        _ => (unit, 1),
    };
    // Whole numbers exactly; a fraction through f64, for `1.5G`.
    let n = match num.parse::<u64>() {
        Ok(n) => n.checked_mul(mult),
        Err(_) => {
            let v: f64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("not a size: {s:?}"));
            }
            let b = v * mult as f64;
            if b.fract() != 0.0 {
                return Err(format!("not a whole number of bytes: {s:?}"));
            }
            (b < MAX_SIZE as f64).then_some(b as u64)
        }
    };
    // Beyond a file offset's range; and u64::MAX means "to the end" inside.
    n.filter(|&n| n <= MAX_SIZE)
        .ok_or_else(|| format!("size too large: {s:?} (at most 2^63 - 1 bytes, 8 EiB less one byte)"))
}

/// A MODE E block size (`cp --block`): 4 KiB to 64 MiB. Blocks of a
/// few bytes made a 300 KB tree upload take 8 s (each block a header and
/// a turn of the senders), and 0 was taken too.
pub fn parse_block(s: &str) -> Result<u64, String> {
    let b = parse_size(s)?;
    if !(MIN_BLOCK..=MAX_BLOCK).contains(&b) {
        return Err(format!("block size {b} is not in 4K..=64M"));
    }
    Ok(b)
}

const MIN_BLOCK: u64 = 4 << 10;
const MAX_BLOCK: u64 = 64 << 20;

/// The largest size a file offset (`off_t`) can say.
const MAX_SIZE: u64 = i64::MAX as u64;

/// Seconds in a week: the bound of the durations options take (an
/// `Instant` plus much more overflows).
pub const WEEK: u64 = 7 * 24 * 3600;

/// Parse a rate in bits/s with an optional K/M/G/T suffix (powers of 1000).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                _ => return Err(format!("unknown rate suffix in {t:?} (use K, M, G, T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("not a rate: {t:?}"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("not a rate: {t:?}"));
    }
    Ok((v * mult) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_are_bounded() {
        assert_eq!(parse_block("256K"), Ok(256 << 10));
        assert_eq!(parse_block("4K"), Ok(4096));
        assert_eq!(parse_block("64M"), Ok(64 << 20));
        for bad in ["0", "1", "4095", "64.5M", "1G"] {
            assert!(parse_block(bad).is_err_and(|e| e.contains("4K..=64M")), "{bad}");
        }
        assert!(parse_block("x").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert!(parse_size("12X").is_err() && parse_size("-1").is_err() && parse_size("").is_err());
        assert_eq!(parse_size("9223372036854775807"), Ok(i64::MAX as u64), "whole numbers exactly");
        for huge in ["1e30", "9223372036854775808", "18446744073709551615", "8388608T", "1e7T"] {
            assert!(parse_size(huge).unwrap_err().contains("too large"), "{huge}");
        }
        // `--off 0.5` was taken as 0 (a defect hunt); `1KiB` was refused.
        for frac in ["0.5", "1.0001K"] {
            assert!(parse_size(frac).unwrap_err().contains("whole number"), "{frac}");
        }
        for (s, n) in [("1KiB", 1024), ("1KB", 1024), ("4096B", 4096), ("2MiB", 2 << 20), ("1.5GiB", 3 << 29)] {
            assert_eq!(parse_size(s), Ok(n), "{s}");
        }
        assert!(parse_size("B").is_err() && parse_size("iB").is_err() && parse_size("1XiB").is_err());
        assert_eq!(parse_rate("1G"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5M"), Ok(2_500_000));
        assert!(parse_rate("0").is_err() && parse_rate("fast").is_err());
    }
}
