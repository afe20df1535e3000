//! Properties of the virtual-file manifest codec: encode/decode round trips
//! under arbitrary chunking, and hostile variants refused.

use lightpath_proto::manifest::{
    check_path, encode_end_unchecked, encode_entry_unchecked, encode_header, parent, Decoder, Encoder, Entry, Kind,
    Limits, ManifestError, Summary, HEADER_LEN, MAX_NAME,
};
use proptest::prelude::*;

// ---------------------------------------------------------------- trees

/// One step of building a tree: what to add, under which directory, named how.
#[derive(Debug, Clone)]
struct Op {
    kind: u8,
    parent: usize,
    name: Vec<u8>,
    size: u64,
    mode: u32,
    mtime: i64,
    link: Vec<u8>,
}

fn name_byte() -> impl Strategy<Value = u8> {
    prop_oneof![8 => b'a'..=b'z', 1 => Just(b' '), 1 => Just(b'\n'), 1 => Just(b'.'), 2 => 0x80u8..=0xff, 1 => 1u8..0x20]
}

fn op() -> impl Strategy<Value = Op> {
    let name = proptest::collection::vec(name_byte(), 1..12);
    let link = proptest::collection::vec(1u8..=255, 1..40);
    (0u8..5, any::<usize>(), name, 0u64..5000, 0u32..=0o7777, any::<i64>(), link)
        .prop_map(|(kind, parent, name, size, mode, mtime, link)| Op { kind, parent, name, size, mode, mtime, link })
}

/// Build a valid manifest from ops: parents are earlier directories, names
/// are made unique, offsets are contiguous, hard links point to earlier files.
fn build(ops: &[Op]) -> Vec<Entry> {
    let (mut dirs, mut files, mut out) = (Vec::<Vec<u8>>::new(), Vec::<Vec<u8>>::new(), Vec::new());
    let mut offset = 0;
    for (i, op) in ops.iter().enumerate() {
        let mut name = op.name.clone();
        if name == b"." || name == b".." || out.iter().any(|e: &Entry| e.path.ends_with(&name)) {
            name.extend_from_slice(format!("~{i}").as_bytes());
        }
        let mut path = match (op.parent % (dirs.len() + 1)).checked_sub(1) {
            Some(d) => [dirs[d].as_slice(), b"/"].concat(),
            None => Vec::new(),
        };
        path.extend_from_slice(&name);
        if check_path(&path).is_err() {
            continue;
        }
        let kind = match op.kind {
            0 | 1 => {
                offset += op.size;
                files.push(path.clone());
                Kind::File { size: op.size, offset: offset - op.size }
            }
            2 => {
                dirs.push(path.clone());
                Kind::Dir
            }
            3 => Kind::Symlink { target: op.link.clone() },
            _ if files.is_empty() => continue,
            _ => Kind::HardLink { target: files[op.parent % files.len()].clone() },
        };
        out.push(Entry { path, kind, mode: op.mode, mtime_ns: op.mtime });
    }
    out
}

fn tree() -> impl Strategy<Value = Vec<Entry>> {
    proptest::collection::vec(op(), 0..60).prop_map(|ops| build(&ops))
}

fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut enc = Encoder::new(Limits::default());
    let mut out = Vec::new();
    for e in entries {
        enc.entry(e, &mut out).expect("valid entry");
    }
    enc.finish(&mut out).unwrap();
    out
}

fn encode_raw(entries: &[Entry], end: Option<Summary>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_header(&mut out);
    for e in entries {
        encode_entry_unchecked(e, &mut out);
    }
    let total = entries.iter().map(|e| if let Kind::File { size, .. } = e.kind { size } else { 0 }).sum();
    encode_end_unchecked(end.unwrap_or(Summary { entries: entries.len() as u64, total }), &mut out);
    out
}

/// Feed `bytes` in chunks of the given sizes (cycled), polling after each.
fn decode_chunked(bytes: &[u8], chunks: &[usize]) -> Result<(Vec<Entry>, Summary), ManifestError> {
    let mut d = Decoder::new(Limits::default());
    let mut out = Vec::new();
    let mut pos = 0;
    let mut sizes = chunks.iter().cycle();
    while pos < bytes.len() {
        let n = (*sizes.next().unwrap_or(&1)).clamp(1, bytes.len() - pos);
        d.handle_bytes(&bytes[pos..pos + n]);
        pos += n;
        while let Some(e) = d.poll_entry()? {
            out.push(e);
        }
    }
    Ok((out, d.finish()?))
}

// ---------------------------------------------------------------- properties

proptest! {
    #[test]
    fn round_trip_any_chunking(entries in tree(), chunks in proptest::collection::vec(1usize..200, 1..10)) {
        let bytes = encode(&entries);
        let (got, summary) = decode_chunked(&bytes, &chunks).unwrap();
        prop_assert_eq!(summary.entries, entries.len() as u64);
        prop_assert_eq!(got, entries);
    }

    #[test]
    fn truncation_is_never_complete(entries in tree(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&entries);
        let cut = cut.index(bytes.len());
        prop_assert_eq!(decode_chunked(&bytes[..cut], &[7]).unwrap_err(), ManifestError::Truncated);
    }

    #[test]
    fn hostile_variants_refused(entries in tree(), pick in any::<prop::sample::Index>(), how in 0u8..10) {
        prop_assume!(!entries.is_empty());
        let (bytes, expect_ok) = hostile(&entries, pick.index(entries.len()), how);
        if !expect_ok {
            prop_assert!(decode_chunked(&bytes, &[3, 50]).is_err());
        }
    }

    #[test]
    fn mutated_bytes_never_panic_and_accepted_paths_are_safe(
        entries in tree(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&entries);
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let mut d = Decoder::new(Limits::default());
        d.handle_bytes(&bytes);
        while let Ok(Some(e)) = d.poll_entry() {
            prop_assert!(check_path(&e.path).is_ok());
            prop_assert!(e.path.split(|&c| c == b'/').all(|c| c.len() <= MAX_NAME));
        }
    }
}

/// A hostile variant of a valid manifest. Returns the bytes and whether the
/// mutation happened to leave it valid (e.g. nothing to mutate).
fn hostile(entries: &[Entry], i: usize, how: u8) -> (Vec<u8>, bool) {
    let mut es = entries.to_vec();
    let file_idx = es.iter().position(|e| matches!(e.kind, Kind::File { .. }));
    let target = &mut es[i];
    match how {
        0 => target.path.insert(0, b'/'),
        1 => target.path.extend_from_slice(b"/../x"),
        2 => target.path.push(0),
        3 => {
            let dup = Entry { kind: Kind::Dir, ..target.clone() };
            es.push(dup);
        }
        4 => {
            // something under a non-directory (file, symlink or hard link)
            let Some(p) = es.iter().find(|e| e.kind != Kind::Dir).map(|e| e.path.clone()) else {
                return (vec![], true);
            };
            es.push(Entry { path: [p.as_slice(), b"/x"].concat(), kind: Kind::Dir, mode: 0, mtime_ns: 0 });
        }
        5 => {
            let Some(f) = file_idx else { return (vec![], true) };
            if let Kind::File { offset, .. } = &mut es[f].kind {
                *offset += 1;
            }
        }
        6 => {
            let Some(d) = es.iter().find(|e| e.kind == Kind::Dir).map(|e| e.path.clone()) else {
                return (vec![], true);
            };
            es.push(Entry { path: b"hl-to-dir".to_vec(), kind: Kind::HardLink { target: d }, mode: 0, mtime_ns: 0 });
        }
        7 => es.push(Entry {
            path: b"zz".to_vec(),
            kind: Kind::HardLink { target: b"~~nope".to_vec() },
            mode: 0,
            mtime_ns: 0,
        }),
        8 => {
            let s = Summary { entries: es.len() as u64, total: u64::MAX };
            return (encode_raw(&es, Some(s)), false);
        }
        _ => {
            let mut b = encode_raw(&es, None);
            b[4] = 2;
            return (b, false);
        }
    }
    (encode_raw(&es, None), false)
}

#[test]
fn symlink_then_path_through_it_refused() {
    let es = vec![
        Entry { path: b"a".to_vec(), kind: Kind::Symlink { target: b"/etc".to_vec() }, mode: 0o777, mtime_ns: 0 },
        Entry { path: b"a/passwd".to_vec(), kind: Kind::File { size: 0, offset: 0 }, mode: 0o644, mtime_ns: 0 },
    ];
    assert_eq!(
        decode_chunked(&encode_raw(&es, None), &[1]).unwrap_err(),
        ManifestError::ParentNotDir("a/passwd".into())
    );
}

#[test]
fn undeclared_parent_refused() {
    let es = vec![Entry { path: b"d/f".to_vec(), kind: Kind::File { size: 1, offset: 0 }, mode: 0, mtime_ns: 0 }];
    assert!(matches!(decode_chunked(&encode_raw(&es, None), &[64]), Err(ManifestError::ParentNotDir(_))));
    assert_eq!(parent(b"d/f"), Some(&b"d"[..]));
    assert_eq!(parent(b"f"), None);
}

#[test]
fn hostile_lengths_refused_before_buffering() {
    let mut b = Vec::new();
    encode_header(&mut b);
    b.push(1);
    b.extend_from_slice(&[1, 0, 0, 0, 0]);
    b.extend_from_slice(&[0; 24]);
    b.extend_from_slice(&0xffffu16.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    assert_eq!(b.len(), HEADER_LEN + 34);
    let mut d = Decoder::new(Limits::default());
    d.handle_bytes(&b);
    assert!(matches!(d.poll_entry(), Err(ManifestError::BadPath { .. })));
}

/// The example in docs/manifest.md, byte for byte.
#[test]
fn documented_example_bytes() {
    let entries = [
        Entry { path: b"d".to_vec(), kind: Kind::Dir, mode: 0o755, mtime_ns: 0 },
        Entry { path: b"d/x".to_vec(), kind: Kind::File { size: 3, offset: 0 }, mode: 0o644, mtime_ns: 0 },
    ];
    let hex: String = encode(&entries).iter().map(|b| format!("{b:02x}")).collect();
    let want = concat!(
        "4c50564601000000",
        "01",
        "02",
        "000001ed",
        "0000000000000000",
        "0000000000000000",
        "0000000000000000",
        "0001",
        "0000",
        "64",
        "01",
        "01",
        "000001a4",
        "0000000000000000",
        "0000000000000003",
        "0000000000000000",
        "0003",
        "0000",
        "642f78",
        "02",
        "0000000000000002",
        "0000000000000003",
    );
    assert_eq!(hex, want);
}

#[test]
fn link_targets_count_against_the_name_limit() {
    let limits = Limits { max_entries: 10, max_path_bytes: 100, max_total: 10 };
    let mut v = lightpath_proto::manifest::Validator::new(limits);
    let link = Entry { path: b"l".to_vec(), kind: Kind::Symlink { target: vec![b'x'; 99] }, mode: 0, mtime_ns: 0 };
    assert_eq!(v.check(&Entry { path: b"m".to_vec(), ..link.clone() }), Ok(()));
    assert_eq!(v.check(&link), Err(ManifestError::Limit("path bytes")));
}

/// The record lengths docs/manifest.md gives (and the constants say) are
/// what the encoder writes.
#[test]
fn records_are_as_long_as_documented() {
    use lightpath_proto::manifest::{END_LEN, ENTRY_FIXED_LEN};
    let mut out = Vec::new();
    encode_header(&mut out);
    assert_eq!(out.len(), HEADER_LEN);
    let link =
        Entry { path: b"abc".to_vec(), kind: Kind::Symlink { target: b"de".to_vec() }, mode: 0o777, mtime_ns: 0 };
    out.clear();
    encode_entry_unchecked(&link, &mut out);
    assert_eq!(out.len(), ENTRY_FIXED_LEN + 3 + 2);
    out.clear();
    encode_end_unchecked(Summary { entries: 1, total: 0 }, &mut out);
    assert_eq!(out.len(), END_LEN);
}
