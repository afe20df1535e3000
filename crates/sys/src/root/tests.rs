//! Unit tests of the served root's confinement.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn scratch() -> (PathBuf, Root) {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("lp-root-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(p.join("root/sub")).unwrap();
    std::fs::write(p.join("secret"), b"outside").unwrap();
    let r = Root::open(&p.join("root")).unwrap();
    (p, r)
}

#[test]
fn temporary_names_carry_a_token_a_peer_cannot_guess() {
    let name = |n: &[u8]| String::from_utf8(temp_name(OsStr::from_bytes(n))).unwrap();
    let (a, b) = (name(b"x"), name(b"x"));
    let pid = std::process::id();
    let token = |s: &str| s.split('-').nth(1).map(str::to_string);
    assert!(a.starts_with(&format!(".x.lp{pid}-")) && a.ends_with(".part"), "{a}");
    assert_eq!(token(&a).map(|t| t.len()), Some(16), "{a}");
    assert_eq!(token(&a), token(&b), "one token per process");
    assert_ne!(a, b, "the counter still makes each unique");
    for made in [a.into_bytes(), name(b"a.lp1-x.part").into_bytes(), temp_name(OsStr::from_bytes(b"\xff"))] {
        assert!(is_temp_name(&made), "{}", String::from_utf8_lossy(&made));
    }
    for other in [&b".x.lp1-0123456789abcdef-2"[..], b"x.lp1-0123456789abcdef-2.part", b"..lp1-0123456789abcdef-2.part"]
    {
        assert!(!is_temp_name(other), "{}", String::from_utf8_lossy(other));
    }
    assert!(!is_temp_name(b".x.lp1-0123456789abcde-2.part") && !is_temp_name(b".x.lp-0123456789abcdef-2.part"));
}

#[test]
fn symlinks_out_of_root_are_refused() {
    let (p, r) = scratch();
    std::os::unix::fs::symlink(p.join("secret"), p.join("root/abs")).unwrap();
    std::os::unix::fs::symlink("../secret", p.join("root/rel")).unwrap();
    std::os::unix::fs::symlink("..", p.join("root/sub/up")).unwrap();
    assert!(r.open_read(b"abs").is_err());
    assert!(r.open_read(b"rel").is_err());
    assert!(r.open_read(b"../secret").is_err());
    assert!(r.open_write(b"sub/up/up/secret", WriteMode::InPlace).is_err());
    assert!(r.mkdir(b"rel/x").is_err());
    assert_eq!(std::fs::read(p.join("secret")).unwrap(), b"outside");
    std::fs::remove_dir_all(&p).unwrap();
}

#[test]
fn fifos_are_refused_without_waiting_for_a_partner() {
    let (p, r) = scratch();
    let fifo = p.join("root/sub/fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
    let kind = |e: io::Error| e.kind();
    assert_eq!(r.open_read(b"sub/fifo").map_err(kind).err(), Some(io::ErrorKind::InvalidInput));
    assert!(r.open_write(b"sub/fifo", WriteMode::Append).is_err(), "no reader: refused at once");
    assert_eq!(r.chmod(b"sub/fifo", 0o600).map_err(kind).err(), Some(io::ErrorKind::InvalidInput));
    assert_eq!(r.open_read(b"sub").map_err(kind).err(), Some(io::ErrorKind::IsADirectory));
    r.chmod(b"sub", 0o750).unwrap();
    std::fs::write(p.join("root/f"), b"x").unwrap();
    let f = r.open_read(b"f").unwrap();
    let fl = rustix::fs::fcntl_getfl(&f).unwrap();
    assert!(!fl.contains(OFlags::NONBLOCK), "a regular file is handed over blocking");
    std::fs::remove_dir_all(&p).unwrap();
}

/// A special file is refused without being opened (an open of a device
/// node acts on the device); inotify sees every open but `O_PATH`'s.
#[test]
fn special_files_are_refused_unopened() {
    use rustix::fs::inotify;
    let (p, r) = scratch();
    let fifo = p.join("root/sub/fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
    let ino = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&ino, &fifo, inotify::WatchFlags::OPEN).unwrap();
    assert!(r.open_read(b"sub/fifo").is_err());
    assert!(r.open_write(b"sub/fifo", WriteMode::InPlace).is_err());
    assert!(r.open_write_strict(b"sub/fifo", 0o644).is_err());
    assert!(r.chmod(b"sub/fifo", 0o600).is_err());
    let mut buf = [std::mem::MaybeUninit::uninit(); 1024];
    let mut events = inotify::Reader::new(&ino, &mut buf);
    assert_eq!(events.next().err(), Some(rustix::io::Errno::AGAIN), "the FIFO was opened");
    // The watch works: an open of our own is seen.
    drop(File::from(rustix::fs::open(&fifo, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).unwrap()));
    assert!(events.next().unwrap().events().contains(inotify::ReadFlags::OPEN));
    std::fs::remove_dir_all(&p).unwrap();
}

#[test]
fn temp_file_commit_and_drop() {
    let (p, r) = scratch();
    let t = r.create_temp(b"sub/f").unwrap();
    std::io::Write::write_all(&mut t.file(), b"data").unwrap();
    drop(t);
    assert_eq!(std::fs::read_dir(p.join("root/sub")).unwrap().count(), 0, "dropped temp removed");
    let t = r.create_temp(b"sub/f").unwrap();
    std::io::Write::write_all(&mut t.file(), b"data").unwrap();
    t.commit().unwrap();
    assert_eq!(std::fs::read(p.join("root/sub/f")).unwrap(), b"data");
    assert_eq!(r.read_dir(b"sub").unwrap().len(), 1);
    std::fs::remove_dir_all(&p).unwrap();
}

#[test]
fn a_replacement_keeps_the_old_permission_bits() {
    let (p, r) = scratch();
    std::fs::write(p.join("root/f"), b"old").unwrap();
    std::fs::set_permissions(p.join("root/f"), std::fs::Permissions::from_mode(0o4640)).unwrap();
    assert_eq!(r.replaceable_mode(b"f").unwrap(), Some(0o640), "setuid is not carried over");
    assert_eq!(r.replaceable_mode(b"new").unwrap(), None);
    let fifo = p.join("root/fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    assert_eq!(r.replaceable_mode(b"fifo").unwrap(), None, "no writer opened, no wait");
    let e = r.replaceable_mode(b"sub").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
    let t = r.create_temp_replacing(b"f", Some(0o600)).unwrap();
    t.file().set_len(3).unwrap();
    t.commit().unwrap();
    let mode = std::fs::metadata(p.join("root/f")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o640);
    let t = r.create_temp_replacing(b"new", None).unwrap();
    t.commit().unwrap();
    let mode = std::fs::metadata(p.join("root/new")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644 & !umask().unwrap_or(0o022), "a new file gets the default mode");
    let t = r.create_temp_replacing(b"private", Some(0o600)).unwrap();
    t.commit().unwrap();
    let mode = std::fs::metadata(p.join("root/private")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "a new file gets the mode asked for; a replaced one kept its own");
    std::fs::remove_dir_all(&p).unwrap();
}

/// A file that cannot be written in place is not replaced either. As
/// root (CI) permission bits do not stop us, but a running program does
/// (`ETXTBSY`), for root too.
#[test]
fn a_file_that_cannot_be_written_in_place_is_not_replaced() {
    let (p, r) = scratch();
    let e = while_running(&p.join("root/prog"), || r.create_temp_replacing(b"prog", None).unwrap_err());
    assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::TXTBSY.raw_os_error()), "{e}");
    let names: Vec<_> = r.read_dir(b"").unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(names, [&b"prog"[..], b"sub"], "no temporary file left");
    std::fs::remove_dir_all(&p).unwrap();
}

/// A tree's file (the unpacker's `StrictDir::create_temp`) replaces an
/// old one only where a single file's upload may: not a running
/// program (`ETXTBSY`, root too), nor, for others, a read-only file.
#[test]
fn a_tree_replaces_only_what_a_single_upload_may() {
    let (p, r) = scratch();
    let d = r.strict_dir(b"").unwrap();
    let e = while_running(&p.join("root/prog"), || d.create_temp(b"prog", 0o644).unwrap_err());
    assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::TXTBSY.raw_os_error()), "{e}");
    std::fs::write(p.join("root/f"), b"old").unwrap();
    d.create_temp(b"f", 0o600).unwrap().commit().unwrap();
    assert_eq!(std::fs::read(p.join("root/f")).unwrap(), b"", "a writable file is replaced");
    let names: Vec<_> = r.read_dir(b"").unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(names, [&b"f"[..], b"prog", b"sub"], "no temporary file left");
    std::fs::remove_dir_all(&p).unwrap();
}

/// `f()` while a copy of `sleep` at `prog` runs.
fn while_running<T>(prog: &Path, f: impl FnOnce() -> T) -> T {
    std::fs::copy("/bin/sleep", prog).unwrap();
    std::fs::set_permissions(prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = spawn_retrying(prog);
    let out = f();
    let _ = child.kill();
    let _ = child.wait();
    out
}

/// Run `prog 30`; another test thread's fork may briefly hold the copy
/// open for writing (`ETXTBSY` on exec).
fn spawn_retrying(prog: &Path) -> std::process::Child {
    for _ in 0..50 {
        match std::process::Command::new(prog).arg("30").spawn() {
            Ok(c) => return c,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("{}: {e}", prog.display()),
        }
    }
    panic!("{}: still busy", prog.display())
}

/// A file of a run whose name is taken by another file that run named
/// (here a hard link stands for a file system that holds `A` and `a` for
/// one name) is refused and replaces nothing, named from the start or
/// not; a file the run did not write is replaced as ever.
#[test]
fn a_file_of_a_run_does_not_replace_another_of_the_same_run() {
    let (p, r) = scratch();
    let d = r.strict_dir(b"").unwrap();
    let run = RunFiles::default();
    let t = d.create_temp(b"A", 0o644).unwrap();
    std::os::unix::fs::FileExt::write_all_at(t.file(), b"upper", 0).unwrap();
    t.commit_in(&run, b"A").unwrap();
    std::fs::hard_link(p.join("root/A"), p.join("root/a")).unwrap();
    let t = d.create_temp(b"a", 0o644).unwrap();
    let e = t.commit_in(&run, b"a").unwrap_err();
    assert!(is_entry_refused(&e), "{e}");
    let dir = Arc::new(rustix::fs::open(p.join("root"), OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap());
    let e = TempFile::create_named(dir, OsStr::new("a"), 0o644).unwrap().commit_in(&run, b"a").unwrap_err();
    assert!(is_entry_refused(&e), "{e}");
    assert_eq!(std::fs::read(p.join("root/A")).unwrap(), b"upper");
    let t = d.create_temp(b"A", 0o644).unwrap();
    std::os::unix::fs::FileExt::write_all_at(t.file(), b"again", 0).unwrap();
    t.commit_in(&run, b"A").unwrap();
    assert_eq!(std::fs::read(p.join("root/A")).unwrap(), b"again", "the same name goes again (a retry)");
    // `D/A` where `d` is `D`: the same final name, another file of the run.
    let e = d.create_temp(b"A", 0o644).unwrap().commit_in(&run, b"d/A").unwrap_err();
    assert!(is_entry_refused(&e), "{e}");
    std::fs::write(p.join("root/b"), b"old").unwrap();
    d.create_temp(b"b", 0o644).unwrap().commit_in(&run, b"b").unwrap();
    assert_eq!(std::fs::read(p.join("root/b")).unwrap(), b"", "not the run's: replaced");
    let names: Vec<_> = r.read_dir(b"").unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(names, [&b"A"[..], b"a", b"b", b"sub"], "no temporary file left");
    std::fs::remove_dir_all(&p).unwrap();
}

/// A file of the run that was removed gives its inode number to a later
/// file: that one is not the run's, and replacing it is no collision
/// (ext4 gives a freed number again at once; a CI run failed on it). Its
/// birth time is the same too where both fall in one clock tick (a
/// defect hunt's find). Only the inode number is asked for here: asking
/// for a time (`std::fs::metadata`) made the kernel (6.13 and later) stamp
/// the next change finely, and the two birth times then differed.
#[test]
fn a_removed_file_of_a_run_does_not_make_its_inode_number_taken() {
    let (p, r) = scratch();
    let d = r.strict_dir(b"").unwrap();
    let run = RunFiles::default();
    let ino = |n: &str| {
        let flags = AtFlags::SYMLINK_NOFOLLOW;
        rustix::fs::statx(rustix::fs::CWD, p.join("root").join(n), flags, rustix::fs::StatxFlags::INO).unwrap().stx_ino
    };
    let mut reused = 0;
    for _ in 0..50 {
        d.create_temp(b"x", 0o644).unwrap().commit_in(&run, b"x").unwrap();
        let x = ino("x");
        rustix::fs::unlink(p.join("root/x")).unwrap();
        drop(rustix::fs::open(p.join("root/y"), OFlags::CREATE | OFlags::WRONLY, Mode::from_raw_mode(0o644)).unwrap());
        reused += usize::from(ino("y") == x);
        d.create_temp(b"y", 0o644).unwrap().commit_in(&run, b"y").expect("another file, not the run's");
        rustix::fs::unlink(p.join("root/y")).unwrap();
    }
    // ext4 (this CI's) gives a freed number again at once; tmpfs and
    // Btrfs never do, and there this shows only that commits go through.
    let ext4 = rustix::fs::statfs(&p).unwrap().f_type == 0xEF53;
    assert!(reused > 0 || !ext4, "ext4 never gave the number again: nothing was tested");
    std::fs::remove_dir_all(&p).unwrap();
}

/// A long name's temporary name is cut before a character, not inside it.
#[test]
fn a_long_names_temporary_name_is_cut_between_characters() {
    for name in [format!("a{}", "ü".repeat(100)), "ü".repeat(100), format!("ab{}", "€".repeat(80)), "x".repeat(250)]
    {
        let tmp = temp_name(OsStr::new(&name));
        let tmp = std::str::from_utf8(&tmp).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(tmp.len() <= 1 + 180 + 40 && is_temp_name(tmp.as_bytes()), "{tmp}");
    }
    let raw = temp_name(OsStr::from_bytes(&[0xff; 250]));
    assert_eq!(raw.iter().filter(|&&b| b == 0xff).count(), 180, "other bytes are cut at 180");
    let tails: Vec<u8> = std::iter::once(b'a').chain([0x80; 200]).collect();
    let raw = temp_name(OsStr::from_bytes(&tails));
    assert!(is_temp_name(&raw) && raw.iter().filter(|&&b| b == 0x80).count() == 179, "not cut back to nothing");
}

#[test]
fn a_file_written_in_place_loses_its_setuid_and_setgid_bits() {
    let (p, r) = scratch();
    for (mode, left) in [(0o6755, 0o755), (0o4644, 0o644), (0o3775, 0o1775), (0o750, 0o750)] {
        std::fs::write(p.join("root/prog"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p.join("root/prog"), std::fs::Permissions::from_mode(mode)).unwrap();
        for how in [WriteMode::InPlace, WriteMode::Append] {
            drop(r.open_write(b"prog", how).unwrap());
            let now = std::fs::metadata(p.join("root/prog")).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, left, "{mode:o} written {how:?}");
        }
    }
    std::fs::remove_dir_all(&p).unwrap();
}
