//! Byte range sets as GridFTP writes them in `REST` and `111 Range Marker`
//! replies: `start-end[,start-end]*`, end-exclusive (GFD.20, "Restart markers").

use std::fmt;

/// Error parsing a range list from the network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// Not of the form `a-b,c-d`.
    #[error("malformed range list")]
    Malformed,
    /// A range whose end lies before its start.
    #[error("range {0}-{1} ends before it starts")]
    Backwards(u64, u64),
    /// Too many ranges in one list.
    #[error("range list too long")]
    TooLong,
}

/// Most ranges accepted in one list from the network.
pub const MAX_RANGES: usize = 4096;

/// A set of disjoint, sorted, non-adjacent half-open ranges `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ranges, sorted and merged.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Whether no byte is covered.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of bytes covered.
    pub fn covered(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    /// Add `[start, end)`, merging with neighbours. Empty ranges are ignored.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let idx = self.ranges.partition_point(|&(_, e)| e < start);
        let mut new = (start, end);
        let mut j = idx;
        while j < self.ranges.len() && self.ranges[j].0 <= new.1 {
            new.0 = new.0.min(self.ranges[j].0);
            new.1 = new.1.max(self.ranges[j].1);
            j += 1;
        }
        self.ranges.splice(idx..j, std::iter::once(new));
    }

    /// Whether any byte of `[start, end)` is already in the set.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        let idx = self.ranges.partition_point(|&(_, e)| e <= start);
        idx < self.ranges.len() && self.ranges[idx].0 < end
    }

    /// Whether every byte of `[start, end)` is in the set.
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let idx = self.ranges.partition_point(|&(_, e)| e < end);
        idx < self.ranges.len() && self.ranges[idx].0 <= start
    }

    /// One past the last covered byte (0 when empty).
    pub fn end(&self) -> u64 {
        self.ranges.last().map_or(0, |r| r.1)
    }

    /// Whether the set is one range starting at `start`, or empty: what a
    /// complete file received from `start` on looks like (no holes).
    pub fn is_contiguous_from(&self, start: u64) -> bool {
        match self.ranges.as_slice() {
            [] => true,
            [(s, _)] => *s == start,
            _ => false,
        }
    }

    /// This set and `other` together.
    pub fn union(mut self, other: &RangeSet) -> RangeSet {
        for &(s, e) in &other.ranges {
            self.insert(s, e);
        }
        self
    }

    /// The parts of `[0, total)` not in the set (what still has to be sent).
    pub fn missing(&self, total: u64) -> RangeSet {
        let mut out = RangeSet::new();
        let mut pos = 0;
        for &(s, e) in &self.ranges {
            if s >= total {
                break;
            }
            out.insert(pos, s);
            pos = pos.max(e);
        }
        out.insert(pos, total);
        out
    }

    /// Parse `a-b,c-d` (end-exclusive). Empty input gives an empty set.
    pub fn parse(text: &str) -> Result<RangeSet, RangeError> {
        let mut set = RangeSet::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(set);
        }
        for (i, part) in text.split(',').enumerate() {
            if i >= MAX_RANGES {
                return Err(RangeError::TooLong);
            }
            let (a, b) = part.trim().split_once('-').ok_or(RangeError::Malformed)?;
            let a: u64 = parse_num(a)?;
            let b: u64 = parse_num(b)?;
            if b < a {
                return Err(RangeError::Backwards(a, b));
            }
            set.insert(a, b);
        }
        Ok(set)
    }
}

fn parse_num(s: &str) -> Result<u64, RangeError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(RangeError::Malformed);
    }
    s.parse().map_err(|_| RangeError::Malformed)
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (s, e)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}-{e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_touching_ranges() {
        let set = |r: &[(u64, u64)]| {
            r.iter().fold(RangeSet::new(), |mut s, &(a, b)| {
                s.insert(a, b);
                s
            })
        };
        let u = set(&[(0, 10), (20, 30)]).union(&set(&[(10, 20), (40, 50)]));
        assert_eq!(u.ranges(), &[(0, 30), (40, 50)]);
    }

    #[test]
    fn contiguity_and_end() {
        let mut r = RangeSet::new();
        assert!(r.is_contiguous_from(0));
        assert_eq!(r.end(), 0);
        r.insert(10, 20);
        assert!(!r.is_contiguous_from(0), "a hole at the start");
        assert!(r.is_contiguous_from(10));
        r.insert(0, 10);
        assert!(r.is_contiguous_from(0));
        r.insert(30, 40);
        assert!(!r.is_contiguous_from(0), "a hole in the middle");
        assert_eq!(r.end(), 40);
    }

    #[test]
    fn merge_and_missing() {
        let mut s = RangeSet::new();
        s.insert(10, 20);
        s.insert(0, 5);
        s.insert(5, 10);
        assert_eq!(s.ranges(), &[(0, 20)]);
        s.insert(30, 40);
        assert_eq!(s.missing(50).ranges(), &[(20, 30), (40, 50)]);
        assert!(s.overlaps(19, 21) && !s.overlaps(20, 30));
        assert!(s.contains_range(31, 40) && !s.contains_range(15, 31));
    }

    #[test]
    fn parse_rejects_garbage() {
        assert_eq!(RangeSet::parse("0-1000,2000-3000").unwrap().to_string(), "0-1000,2000-3000");
        for bad in ["1-", "-1", "a-b", "5-3", "1-2,,3-4", "+1-2", "1-99999999999999999999999"] {
            assert!(RangeSet::parse(bad).is_err(), "{bad}");
        }
    }
}
