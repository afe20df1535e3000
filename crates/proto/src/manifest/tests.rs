use super::*;

fn file(path: &[u8], size: u64, offset: u64) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::File { size, offset }, mode: 0o644, mtime_ns: 1 }
}

fn dir(path: &[u8]) -> Entry {
    Entry { path: path.to_vec(), kind: Kind::Dir, mode: 0o755, mtime_ns: -5 }
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Entry>, ManifestError> {
    let mut d = Decoder::new(Limits::default());
    d.handle_bytes(bytes);
    let mut out = Vec::new();
    while let Some(e) = d.poll_entry()? {
        out.push(e);
    }
    d.finish()?;
    Ok(out)
}

#[test]
fn small_manifest_round_trips_byte_by_byte() {
    let entries = vec![dir(b"d"), file(b"d/a b\n\xff", 3, 0), file(b"e", 0, 3), file(b"f", 5, 3)];
    let mut enc = Encoder::new(Limits::default());
    let mut out = Vec::new();
    for e in &entries {
        enc.entry(e, &mut out).unwrap();
    }
    assert_eq!(enc.finish(&mut out).unwrap(), Summary { entries: 4, total: 8 });
    let mut d = Decoder::new(Limits::default());
    let mut got = Vec::new();
    for b in &out {
        d.handle_bytes(std::slice::from_ref(b));
        while let Some(e) = d.poll_entry().unwrap() {
            got.push(e);
        }
    }
    assert_eq!(got, entries);
    assert_eq!(d.finish().unwrap().total, 8);
}

#[test]
fn paths_checked() {
    assert_eq!(check_path(b""), Err(PathProblem::Empty));
    assert_eq!(check_path(b"/a"), Err(PathProblem::Absolute));
    assert_eq!(check_path(b"a//b"), Err(PathProblem::EmptyComponent));
    assert_eq!(check_path(b"a/"), Err(PathProblem::EmptyComponent));
    assert_eq!(check_path(b"a/../b"), Err(PathProblem::DotComponent));
    assert_eq!(check_path(b"./b"), Err(PathProblem::DotComponent));
    assert_eq!(check_path(b"a\0b"), Err(PathProblem::Nul));
    assert_eq!(check_path(&[b'x'; 256]), Err(PathProblem::NameTooLong));
    assert_eq!(check_path(&[b'x'; 255]), Ok(()));
    assert_eq!(check_path(b"...x/ a\n/\xfe"), Ok(()));
}

#[test]
fn bad_headers_refused() {
    assert_eq!(decode_all(b"LPVX"), Err(ManifestError::BadMagic));
    assert_eq!(decode_all(b"LPVF\x02\0\0\0"), Err(ManifestError::UnsupportedVersion(2)));
    assert_eq!(decode_all(b"LPVF\x01\0\0\x01"), Err(ManifestError::BadFlags(1)));
    assert_eq!(decode_all(b"LPVF\x01\0\0"), Err(ManifestError::Truncated));
    assert_eq!(decode_all(b"LPVF\x01\0\0\0\x07"), Err(ManifestError::UnknownRecord(7)));
}

#[test]
fn end_record_and_trailing_bytes_checked() {
    let mut out = Vec::new();
    encode_header(&mut out);
    encode_entry_unchecked(&file(b"a", 4, 0), &mut out);
    let mut wrong = out.clone();
    encode_end_unchecked(Summary { entries: 1, total: 5 }, &mut wrong);
    assert!(matches!(decode_all(&wrong), Err(ManifestError::EndMismatch { .. })));
    encode_end_unchecked(Summary { entries: 1, total: 4 }, &mut out);
    assert_eq!(decode_all(&out).unwrap().len(), 1);
    out.push(0);
    assert_eq!(decode_all(&out), Err(ManifestError::TrailingData));
}

#[test]
fn malformed_kinds_refused() {
    let mut out = Vec::new();
    encode_header(&mut out);
    encode_entry_unchecked(&file(b"a", 4, 0), &mut out);
    out[HEADER_LEN + 1] = 2; // a "directory" with a size
    assert!(matches!(decode_all(&out), Err(ManifestError::Malformed { kind: "directory", .. })));
    out[HEADER_LEN + 1] = 9;
    assert!(matches!(decode_all(&out), Err(ManifestError::UnknownKind { kind: 9, .. })));
}

#[test]
fn limits_enforced() {
    let limits = Limits { max_entries: 2, max_path_bytes: 100, max_total: 10 };
    let mut v = Validator::new(limits);
    v.check(&file(b"a", 10, 0)).unwrap();
    assert!(matches!(v.check(&file(b"b", 1, 10)), Err(ManifestError::TooLarge(_))));
    v.check(&dir(b"c")).unwrap();
    assert_eq!(v.check(&dir(b"d")), Err(ManifestError::Limit("entries")));
    let mut v = Validator::new(limits);
    assert_eq!(v.check(&dir(&[b'x'; 101])), Err(ManifestError::Limit("path bytes")));
}
