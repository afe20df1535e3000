//! Model-based properties: `RangeSet` against a bitmap, `LineBuffer` against
//! splitting the whole stream at once, `VPath::join` against a lexical
//! normaliser written independently here.

use lightpath_proto::line::MAX_LINE;
use lightpath_proto::ranges::{RangeError, MAX_RANGES};
use lightpath_proto::vpath::{PathError, MAX_PATH};
use lightpath_proto::{Line, LineBuffer, RangeSet, VPath};
use proptest::prelude::*;

// --------------------------------------------------------------- RangeSet

/// Small universe: bytes 0..U, so a bitmap is the obvious model.
const U: u64 = 48;

fn small_range() -> impl Strategy<Value = (u64, u64)> {
    (0..=U, 0..=U)
}

fn build(inserts: &[(u64, u64)]) -> (RangeSet, Vec<bool>) {
    let mut set = RangeSet::new();
    let mut bits = vec![false; U as usize + 8];
    for &(a, b) in inserts {
        set.insert(a, b);
        for x in a..b {
            bits[x as usize] = true;
        }
    }
    (set, bits)
}

fn check_invariants(set: &RangeSet) -> Result<(), TestCaseError> {
    for (s, e) in set.iter() {
        prop_assert!(s < e, "empty or backwards range in {:?}", set);
    }
    for w in set.ranges().windows(2) {
        // Sorted, disjoint and not even touching (touching ranges are merged).
        prop_assert!(w[0].1 < w[1].0, "unsorted/overlapping/adjacent {:?}", set);
    }
    Ok(())
}

fn in_set(set: &RangeSet, x: u64) -> bool {
    set.ranges().iter().any(|&(s, e)| s <= x && x < e)
}

proptest! {
    #[test]
    fn rangeset_matches_bitmap(inserts in proptest::collection::vec(small_range(), 0..16)) {
        let (set, bits) = build(&inserts);
        check_invariants(&set)?;
        for x in 0..bits.len() as u64 {
            prop_assert_eq!(in_set(&set, x), bits[x as usize], "byte {}", x);
        }
        prop_assert_eq!(set.covered(), bits.iter().filter(|&&b| b).count() as u64);
        prop_assert_eq!(set.is_empty(), !bits.iter().any(|&b| b));
    }

    #[test]
    fn rangeset_queries_match_bitmap(inserts in proptest::collection::vec(small_range(), 0..12)) {
        let (set, bits) = build(&inserts);
        for a in 0..=U + 2 {
            for b in 0..=U + 2 {
                let any = (a..b).any(|x| bits[x as usize]);
                let all = (a..b).all(|x| bits[x as usize]);
                prop_assert_eq!(set.overlaps(a, b), any, "overlaps({}, {}) in {:?}", a, b, set);
                prop_assert_eq!(set.contains_range(a, b), all, "contains_range({}, {}) in {:?}", a, b, set);
            }
        }
    }

    #[test]
    fn rangeset_missing_is_complement(inserts in proptest::collection::vec(small_range(), 0..12), total in 0..=U + 4) {
        let (set, bits) = build(&inserts);
        let missing = set.missing(total);
        check_invariants(&missing)?;
        for x in 0..bits.len() as u64 {
            let m = in_set(&missing, x);
            if x < total {
                // Exactly one of the two holds the byte: union is [0,total), disjoint.
                prop_assert!(m != bits[x as usize], "byte {} missing={} set={}", x, m, bits[x as usize]);
            } else {
                prop_assert!(!m, "missing() reaches past total at {}", x);
            }
        }
    }

    /// The same laws with full 64-bit bounds, checked by interval arithmetic.
    #[test]
    fn rangeset_large_values(
        inserts in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..12),
        total in any::<u64>(),
    ) {
        let mut set = RangeSet::new();
        for &(a, b) in &inserts {
            set.insert(a.min(b), a.max(b));
            check_invariants(&set)?;
        }
        for &(a, b) in &inserts {
            let (a, b) = (a.min(b), a.max(b));
            prop_assert!(set.contains_range(a, b));
            prop_assert!(a == b || set.overlaps(a, b));
        }
        let missing = set.missing(total);
        check_invariants(&missing)?;
        let covered_below: u128 =
            set.ranges().iter().map(|&(s, e)| u128::from(e.min(total) - s.min(total))).sum();
        prop_assert_eq!(u128::from(missing.covered()) + covered_below, u128::from(total));
        for (s, e) in set.iter() {
            prop_assert!(!missing.overlaps(s, e));
        }
        for (s, e) in missing.iter() {
            prop_assert!(e <= total && !set.overlaps(s, e));
        }
        // Display / parse round trip.
        prop_assert_eq!(RangeSet::parse(&set.to_string()), Ok(set.clone()));
    }

    /// Parsing a list in any order, overlapping or not, gives the same set as
    /// inserting its ranges one by one; Display then gives the canonical form.
    #[test]
    fn rangeset_parse_matches_inserts(
        ranges in proptest::collection::vec((0u64..1000, 0u64..1000), 1..10),
        spaces in any::<bool>(),
    ) {
        let sep = if spaces { " , " } else { "," };
        let text = ranges.iter().map(|(a, b)| format!("{a}-{b}")).collect::<Vec<_>>().join(sep);
        let parsed = RangeSet::parse(&text);
        if let Some(&(a, b)) = ranges.iter().find(|(a, b)| b < a) {
            prop_assert_eq!(parsed, Err(RangeError::Backwards(a, b)));
        } else {
            let mut set = RangeSet::new();
            for &(a, b) in &ranges {
                set.insert(a, b);
            }
            let parsed = parsed.unwrap();
            prop_assert_eq!(&parsed, &set);
            let canon = parsed.to_string();
            prop_assert_eq!(RangeSet::parse(&canon), Ok(parsed));
            if !canon.is_empty() {
                prop_assert_eq!(canon.split(',').count(), set.ranges().len());
            }
        }
    }

    #[test]
    fn rangeset_parse_never_panics(s in "[0-9,\\- a+]{0,40}") {
        if let Ok(set) = RangeSet::parse(&s) {
            check_invariants(&set)?;
            prop_assert_eq!(RangeSet::parse(&set.to_string()), Ok(set));
        }
    }
}

#[test]
fn rangeset_list_length_limit() {
    let ok: Vec<String> = (0..MAX_RANGES as u64).map(|i| format!("{}-{}", 2 * i, 2 * i + 1)).collect();
    assert_eq!(RangeSet::parse(&ok.join(",")).unwrap().ranges().len(), MAX_RANGES);
    let too_many: Vec<String> = (0..=MAX_RANGES as u64).map(|i| format!("{i}-{i}")).collect();
    assert_eq!(RangeSet::parse(&too_many.join(",")), Err(RangeError::TooLong));
}

// ------------------------------------------------------------- LineBuffer

/// What splitting the whole stream at once must give: every `\n` ends a
/// line, one trailing `\r` is stripped, and a line with more than MAX_LINE
/// bytes before its `\n` (the `\r` counts) becomes one `TooLong`. The
/// unfinished tail is reported as `TooLong` as soon as it is too long.
fn model_lines(data: &[u8]) -> (Vec<Line>, usize) {
    let mut out = Vec::new();
    let segments: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let (tail, complete) = segments.split_last().unwrap();
    for seg in complete {
        if seg.len() > MAX_LINE {
            out.push(Line::TooLong);
        } else {
            out.push(Line::Text(seg.strip_suffix(b"\r").unwrap_or(seg).to_vec()));
        }
    }
    let pending = if tail.len() > MAX_LINE {
        out.push(Line::TooLong);
        0
    } else {
        tail.len()
    };
    (out, pending)
}

/// A stream made of lines: short ones, ones right at the limit, long ones.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let len = prop_oneof![
        6 => 0usize..12,
        1 => (MAX_LINE - 2)..(MAX_LINE + 3),
        1 => (MAX_LINE + 3)..(3 * MAX_LINE),
    ];
    const ENDS: &[&[u8]] = &[b"\r\n", b"\n", b"\r\r\n", b""];
    let end = proptest::sample::select(ENDS);
    let line =
        (len, any::<u8>(), end, proptest::collection::vec(any::<u8>(), 0..6)).prop_map(|(n, fill, end, noise)| {
            let fill = if fill == b'\n' { b'x' } else { fill };
            let mut v = vec![fill; n];
            // Sprinkle a few arbitrary bytes (possibly CR or LF) into the line.
            for (i, b) in noise.into_iter().enumerate() {
                if !v.is_empty() {
                    let at = (i * 7919) % v.len();
                    v[at] = b;
                }
            }
            v.extend_from_slice(end);
            v
        });
    proptest::collection::vec(line, 0..8).prop_map(|ls| ls.concat())
}

fn feed(data: &[u8], cuts: &[usize]) -> (Vec<Line>, usize) {
    let mut lb = LineBuffer::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut prev = 0;
    for p in points.into_iter().chain(std::iter::once(data.len())) {
        lb.handle_bytes(&data[prev..p]);
        prev = p;
    }
    let mut out = Vec::new();
    while let Some(l) = lb.poll_line() {
        out.push(l);
    }
    (out, lb.pending())
}

proptest! {
    #[test]
    fn linebuffer_chunking_is_invisible(data in stream(), cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
        let (model, model_pending) = model_lines(&data);
        let (whole, whole_pending) = feed(&data, &[]);
        let (chunked, chunked_pending) = feed(&data, &cuts);
        prop_assert_eq!(&whole, &model);
        prop_assert_eq!(&chunked, &model);
        prop_assert_eq!(whole_pending, model_pending);
        prop_assert_eq!(chunked_pending, model_pending);
        for l in &chunked {
            if let Line::Text(t) = l {
                prop_assert!(!t.contains(&b'\n') && t.len() <= MAX_LINE);
            }
        }
    }

    #[test]
    fn linebuffer_byte_at_a_time(data in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'\r'), Just(b'\n')], 0..200)) {
        let mut lb = LineBuffer::new();
        for b in &data {
            lb.handle_bytes(std::slice::from_ref(b));
        }
        let mut out = Vec::new();
        while let Some(l) = lb.poll_line() {
            out.push(l);
        }
        prop_assert_eq!((out, lb.pending()), model_lines(&data));
    }

    /// An over-long line gives exactly one TooLong, however it arrives, and
    /// the line after it is delivered intact.
    #[test]
    fn linebuffer_overlong_then_next(
        before in "[A-Z]{0,6}",
        extra in 1usize..(2 * MAX_LINE),
        fill in any::<u8>(),
        crlf in any::<bool>(),
        next in "[ -~]{0,30}",
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
    ) {
        let fill = if fill == b'\n' { b'y' } else { fill };
        let mut data = format!("{before}\r\n").into_bytes();
        data.extend(std::iter::repeat_n(fill, MAX_LINE + extra));
        data.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        data.extend_from_slice(next.as_bytes());
        data.extend_from_slice(b"\r\n");
        let (got, pending) = feed(&data, &cuts);
        prop_assert_eq!(pending, 0);
        prop_assert_eq!(got, vec![Line::Text(before.into_bytes()), Line::TooLong, Line::Text(next.into_bytes())]);
    }
}

#[test]
fn linebuffer_limit_boundary() {
    // MAX_LINE bytes before the LF are accepted (the CR counts), one more is not.
    let mut data = vec![b'a'; MAX_LINE - 1];
    data.extend_from_slice(b"\r\n");
    data.extend(vec![b'b'; MAX_LINE]);
    data.extend_from_slice(b"\r\nok\r\n");
    let (got, _) = feed(&data, &[]);
    assert_eq!(got, vec![Line::Text(vec![b'a'; MAX_LINE - 1]), Line::TooLong, Line::Text(b"ok".to_vec())]);
}

// ------------------------------------------------------------------ VPath

/// Reference normaliser: resolve `arg` against `cwd` (already normal).
fn normalise(cwd: &[u8], arg: &[u8]) -> Vec<u8> {
    let mut stack: Vec<Vec<u8>> = Vec::new();
    let mut input = Vec::new();
    if !arg.starts_with(b"/") {
        input.extend_from_slice(cwd);
        input.push(b'/');
    }
    input.extend_from_slice(arg);
    for c in input.split(|&b| b == b'/') {
        if c.is_empty() || c == b"." {
            continue;
        }
        if c == b".." {
            stack.pop();
        } else {
            stack.push(c.to_vec());
        }
    }
    if stack.is_empty() {
        return b"/".to_vec();
    }
    stack.iter().flat_map(|c| std::iter::once(b'/').chain(c.iter().copied())).collect()
}

fn component() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(b"..".to_vec()),
        2 => Just(b".".to_vec()),
        2 => Just(Vec::new()),
        1 => Just(b"...".to_vec()),
        1 => Just(b".hidden".to_vec()),
        6 => proptest::collection::vec(prop_oneof![b'a'..=b'z', Just(b' '), Just(b'.'), 0x80u8..=0xff, 0x20u8..0x7f], 1..12)
            .prop_map(|v| v.into_iter().filter(|&b| b != b'/').collect::<Vec<u8>>()),
        // Long names, so joined paths get near and past MAX_PATH.
        3 => (1usize..1500, b'a'..=b'z').prop_map(|(n, b)| vec![b; n]),
    ]
}

fn path_arg() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), proptest::collection::vec(component(), 0..16), any::<bool>()).prop_map(|(abs, comps, trailing)| {
        let mut v = if abs { b"/".to_vec() } else { Vec::new() };
        v.extend(comps.join(&b'/'));
        if trailing {
            v.push(b'/');
        }
        v
    })
}

/// A working directory reached by a few CWDs (errors leave it unchanged).
fn cwd() -> impl Strategy<Value = VPath> {
    proptest::collection::vec(path_arg(), 0..4).prop_map(|args| {
        let mut cwd = VPath::root();
        for a in args {
            if let Ok(p) = cwd.join(&a) {
                cwd = p;
            }
        }
        cwd
    })
}

fn check_vpath(p: &VPath) -> Result<(), TestCaseError> {
    let b = p.as_bytes();
    prop_assert!(b.starts_with(b"/"), "{:?}", p);
    prop_assert!(b.len() <= MAX_PATH);
    prop_assert!(!b.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n')), "NUL or line break in {:?}", p);
    if b != b"/" {
        prop_assert!(!b.ends_with(b"/"), "{:?}", p);
        for c in b[1..].split(|&c| c == b'/') {
            prop_assert!(!c.is_empty() && c != b"." && c != b"..", "component {:?} in {:?}", c, p);
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn vpath_join_normalises(cwd in cwd(), arg in path_arg()) {
        check_vpath(&cwd)?;
        let expect = normalise(cwd.as_bytes(), &arg);
        match cwd.join(&arg) {
            Ok(p) => {
                check_vpath(&p)?;
                prop_assert_eq!(p.as_bytes(), &expect[..]);
                // Idempotent: the result names itself from anywhere.
                prop_assert_eq!(VPath::root().join(p.as_bytes()), Ok(p.clone()));
                prop_assert_eq!(cwd.join(p.as_bytes()), Ok(p.clone()));
                prop_assert_eq!(p.join(p.as_bytes()), Ok(p.clone()));
                prop_assert_eq!(p.join(b"."), Ok(p.clone()));
                prop_assert_eq!(p.join(b".."), Ok(p.parent()));
                if !p.is_root() {
                    prop_assert_eq!(p.parent().join(p.file_name()), Ok(p.clone()));
                    prop_assert_eq!(p.relative(), &p.as_bytes()[1..]);
                }
            }
            Err(e) => {
                // Refused only when the result would be too long (or the
                // argument alone already is).
                prop_assert_eq!(e, PathError::TooLong);
                prop_assert!(expect.len() > MAX_PATH || arg.len() > MAX_PATH, "{} byte result refused", expect.len());
            }
        }
    }

    #[test]
    fn vpath_rejects_control_bytes(cwd in cwd(), mut arg in path_arg(), ctl in prop_oneof![Just(0u8), Just(b'\r'), Just(b'\n')], at in any::<usize>()) {
        let at = at % (arg.len() + 1);
        arg.insert(at, ctl);
        prop_assert_eq!(cwd.join(&arg), Err(PathError::ControlBytes));
    }

    #[test]
    fn vpath_join_arbitrary_bytes(cwd in cwd(), arg in proptest::collection::vec(any::<u8>(), 0..64)) {
        match cwd.join(&arg) {
            Ok(p) => {
                check_vpath(&p)?;
                prop_assert_eq!(p.as_bytes(), &normalise(cwd.as_bytes(), &arg)[..]);
            }
            Err(PathError::ControlBytes) => prop_assert!(arg.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))),
            Err(e) => {
                prop_assert_eq!(e, PathError::TooLong);
                prop_assert!(normalise(cwd.as_bytes(), &arg).len() > MAX_PATH);
            }
        }
    }
}

/// Regression: the length check used to add the cwd length to the argument
/// length, so a valid path longer than MAX_PATH/2 could not be named by its
/// own absolute form, and one of exactly MAX_PATH bytes could not even be
/// re-joined to the root.
#[test]
fn vpath_long_paths_stay_nameable() {
    let name = vec![b'd'; 250];
    let mut deep = VPath::root();
    while deep.as_bytes().len() + 251 <= MAX_PATH {
        deep = deep.join(&name).unwrap();
    }
    let fill = MAX_PATH - deep.as_bytes().len() - 1;
    let full = deep.join(&vec![b'e'; fill]).unwrap();
    assert_eq!(full.as_bytes().len(), MAX_PATH);
    assert_eq!(VPath::root().join(full.as_bytes()).unwrap(), full);
    assert_eq!(full.join(full.as_bytes()).unwrap(), full);
    assert_eq!(full.join(b".").unwrap(), full);
    assert_eq!(full.join(b"..").unwrap(), deep);
    assert_eq!(full.join(b"/etc").unwrap().as_bytes(), b"/etc");
    // Still bounded: one byte more is refused.
    assert_eq!(full.join(b"x"), Err(PathError::TooLong));
    assert_eq!(VPath::root().join(&vec![b'f'; MAX_PATH + 1]), Err(PathError::TooLong));
}
