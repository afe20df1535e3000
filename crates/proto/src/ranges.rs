//! Byte range sets as GridFTP writes them in `REST` and `111 Range Marker`
//! replies: `start-end[,start-end]*`, end-exclusive (GFD.20, "Restart markers").

use std::collections::BTreeMap;
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
///
/// Kept in a `BTreeMap` from start to end, not a sorted `Vec`: a receiver
/// adds every block a peer sends, and a peer that sent tiny blocks at
/// falling offsets made each insertion shift the whole vector (quadratic
/// time and a stalled network thread; a review finding). Here an
/// insertion costs O(log n) plus the ranges it merges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ranges, sorted and merged.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.iter().collect()
    }

    /// The ranges in order, without collecting them.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no byte is covered.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of bytes covered.
    pub fn covered(&self) -> u64 {
        self.iter().map(|(s, e)| e - s).sum()
    }

    /// Add `[start, end)`, merging with neighbours. Empty ranges are ignored.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // The range that starts at or before `start` merges if it reaches it.
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back() {
            if pe >= s {
                (s, e) = (ps, e.max(pe));
                self.ranges.remove(&ps);
            }
        }
        // So do those that start within the new range or right at its end.
        while let Some((&ns, &ne)) = self.ranges.range(s..=e).next() {
            e = e.max(ne);
            self.ranges.remove(&ns);
        }
        self.ranges.insert(s, e);
    }

    /// Whether any byte of `[start, end)` is already in the set.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        // The last range starting before `end` reaches furthest of those.
        self.ranges.range(..end).next_back().is_some_and(|(_, &e)| e > start)
    }

    /// Whether every byte of `[start, end)` is in the set.
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        self.ranges.range(..=start).next_back().is_some_and(|(_, &e)| e >= end)
    }

    /// One past the last covered byte (0 when empty).
    pub fn end(&self) -> u64 {
        self.ranges.last_key_value().map_or(0, |(_, &e)| e)
    }

    /// Whether the set is one range starting at `start`, or empty: what a
    /// complete file received from `start` on looks like (no holes).
    pub fn is_contiguous_from(&self, start: u64) -> bool {
        match self.ranges.len() {
            0 => true,
            1 => self.ranges.contains_key(&start),
            _ => false,
        }
    }

    /// This set and `other` together.
    pub fn union(mut self, other: &RangeSet) -> RangeSet {
        for (s, e) in other.iter() {
            self.insert(s, e);
        }
        self
    }

    /// The parts of `[0, total)` not in the set (what still has to be sent).
    pub fn missing(&self, total: u64) -> RangeSet {
        let mut out = RangeSet::new();
        let mut pos = 0;
        for (s, e) in self.iter() {
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
        for (i, (s, e)) in self.iter().enumerate() {
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
    fn blocks_at_falling_offsets_stay_cheap() {
        // Quadratic with a sorted vector: about 320 GB of memmove for
        // these 200 000 (an estimate, tens of seconds), against milliseconds.
        let mut s = RangeSet::new();
        for i in (0..200_000u64).rev() {
            assert!(!s.overlaps(2 * i, 2 * i + 1));
            s.insert(2 * i, 2 * i + 1);
        }
        assert_eq!((s.len(), s.covered(), s.end()), (200_000, 200_000, 399_999));
        s.insert(1, 399_998);
        assert_eq!(s.ranges(), &[(0, 399_999)]);
    }

    #[test]
    fn parse_rejects_garbage() {
        assert_eq!(RangeSet::parse("0-1000,2000-3000").unwrap().to_string(), "0-1000,2000-3000");
        for bad in ["1-", "-1", "a-b", "5-3", "1-2,,3-4", "+1-2", "1-99999999999999999999999"] {
            assert!(RangeSet::parse(bad).is_err(), "{bad}");
        }
    }
}
