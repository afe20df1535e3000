//! The `YYYYMMDDHHMMSS[.sss]` UTC times of MDTM and the MLST `Modify`
//! fact (RFC 3659 section 2.3), to and from seconds since the epoch.
//! Written here rather than taken from a date crate: one format, both
//! ways, with the proleptic Gregorian calendar of H. Hinnant's algorithms.

/// The first and last second the format holds: years 0000 to 9999.
const FIRST: i64 = -62_167_219_200;
const LAST: i64 = 253_402_300_799;

/// `YYYYMMDDHHMMSS` in UTC for seconds since the epoch, held to the
/// years four digits give (a file of the year 11476 was listed as
/// `1147-60-81 50:52`, and its `Modify` had 15 digits).
pub fn format(secs: i64) -> String {
    let secs = secs.clamp(FIRST, LAST);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}{m:02}{d:02}{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// [`format`] with the fraction of the second after a dot where there is
/// one (`nanos`, trailing zeros dropped), as RFC 3659 allows: MLST's
/// `Modify`, so that a tree's own directory keeps its mtime to the
/// nanosecond, as every entry of the tree does.
pub fn format_ns(secs: i64, nanos: u32) -> String {
    let whole = format(secs);
    if nanos == 0 || nanos >= 1_000_000_000 || !(FIRST..=LAST).contains(&secs) {
        return whole;
    }
    let frac = format!("{nanos:09}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// [`parse`] with the fraction kept: seconds since the epoch, and
/// nanoseconds (digits past the ninth dropped).
pub fn parse_ns(t: &str) -> Option<(i64, u32)> {
    let secs = parse(t)?;
    let frac = t.split_once('.').map_or("", |f| f.1);
    let digits = &frac[..frac.len().min(9)];
    let nanos = if digits.is_empty() { 0 } else { digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32) };
    Some((secs, nanos))
}

/// Seconds since the epoch of `YYYYMMDDHHMMSS` (a fraction after a dot is
/// allowed and dropped), or `None` for anything else, including a date
/// or time out of its range.
pub fn parse(t: &str) -> Option<i64> {
    let digits = |f: &str| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit());
    let whole = t.split_once('.').map_or(t, |(w, frac)| if digits(frac) { w } else { "" });
    if whole.len() != 14 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| whole[r].parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(8..10)?, n(10..12)?, n(12..14)?);
    if !(1..=12).contains(&m) || !(1..=days_in_month(y, m)).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days_from_civil(y, m as u32, d as u32) * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Gregorian date from days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_and_parse_back() {
        assert_eq!(format(0), "19700101000000");
        assert_eq!(format(1_795_288_682), "20261121191802");
        assert_eq!(format(951_782_400), "20000229000000");
        for secs in [0, 1, 951_782_400, 1_795_288_682, -1, -86_401, 4_102_444_800, 978_307_200] {
            assert_eq!(parse(&format(secs)), Some(secs), "{secs}");
        }
        assert_eq!(parse("20261121191802.123"), Some(1_795_288_682));
    }

    #[test]
    fn times_past_four_digit_years_are_held_to_them() {
        assert_eq!(format(300_000_000_000), "99991231235959");
        assert_eq!(format(i64::MAX), "99991231235959");
        assert_eq!(format(i64::MIN), "00000101000000");
        assert_eq!(format_ns(300_000_000_000, 5), "99991231235959");
        assert_eq!(parse(&format(LAST)), Some(LAST));
        assert_eq!(parse(&format(FIRST)), Some(FIRST));
    }

    #[test]
    fn fractions_of_a_second_format_and_parse_back() {
        assert_eq!(format_ns(1_795_288_682, 0), "20261121191802");
        assert_eq!(format_ns(1_795_288_682, 500_000_000), "20261121191802.5");
        assert_eq!(format_ns(1_795_288_682, 123_456_789), "20261121191802.123456789");
        for nanos in [0, 1, 10, 500_000_000, 999_999_999, 123_456_000] {
            assert_eq!(parse_ns(&format_ns(-86_401, nanos)), Some((-86_401, nanos)), "{nanos}");
        }
        assert_eq!(parse_ns("20261121191802.1234567891"), Some((1_795_288_682, 123_456_789)));
        assert_eq!(parse_ns("20261121191802"), Some((1_795_288_682, 0)));
        assert_eq!(parse_ns("20261121191802.x"), None);
    }

    #[test]
    fn bad_times_are_refused() {
        for bad in [
            "",
            "2026112119180",
            "202611211918021",
            "2026112119180x",
            "20261321191802",
            "20260230000000",
            "20261121241802",
            "20261121196002",
            "20261121191802.",
            "20261121191802.1x",
            "+2026112119180",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse("20240229000000"), Some(1_709_164_800));
        assert_eq!(parse("20230229000000"), None);
    }
}
