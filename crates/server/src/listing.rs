//! Directory listings and facts: MLST/MLSD (RFC 3659 section 7), LIST, NLST,
//! and the `YYYYMMDDHHMMSS` UTC times of MDTM/Modify (`proto::ftptime`).

use lightpath_sys::root::{Allowed, FileType, Stat};

pub mod held;

pub use lightpath_proto::ftptime::format as ftp_time;

fn type_fact(st: &Stat, name: &[u8]) -> &'static str {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory if name == b"." => "cdir",
        FileType::Directory => "dir",
        FileType::RegularFile => "file",
        // The names globus-gridftp-server gives them.
        FileType::Fifo => "OS.unix=pipe",
        FileType::CharacterDevice => "OS.unix=chr",
        FileType::BlockDevice => "OS.unix=blk",
        _ => "OS.unix=other",
    }
}

/// What the session may do with an entry: the `Perm` fact (RFC 3659
/// 7.5.5) says only what the server's user really may.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rights {
    /// The file or directory itself.
    pub own: Allowed,
    /// The directory holding its name (`None`: the root, or unknown).
    pub parent: Option<Allowed>,
    /// The server takes writes (not `--read-only`).
    pub writable: bool,
}

impl Rights {
    /// Entries can be made and removed in a directory with these rights.
    fn changes(&self, dir: Allowed) -> bool {
        self.writable && dir.write && dir.search
    }

    /// The `Perm` letters for an entry of type `t`. A STOR replaces a file
    /// by renaming a new one over it (in its directory), once the server
    /// has shown it could write the old one (`Root::replaceable_mode`).
    fn perm(&self, t: &str) -> String {
        let (own, name) = (self.own, self.parent.is_some_and(|p| self.changes(p)));
        let letters = match t {
            "file" => {
                let write = self.writable && own.write;
                vec![('a', write), ('d', name), ('f', name), ('r', own.read), ('w', write && name)]
            }
            "dir" | "cdir" => vec![
                ('c', self.changes(own)),
                ('d', name),
                ('e', own.search),
                ('f', name),
                ('l', own.read && own.search),
                ('m', self.changes(own)),
                ('p', self.changes(own)),
            ],
            _ => vec![('d', name), ('f', name)],
        };
        letters.into_iter().filter(|l| l.1).map(|l| l.0).collect()
    }
}

/// MLST/MLSD facts for one entry (without the name).
pub fn facts(st: &Stat, name: &[u8], rights: Rights) -> String {
    let t = type_fact(st, name);
    let perm = rights.perm(t);
    format!(
        "Type={t};Size={};Modify={};Perm={perm};UNIX.mode=0{:o};Unique={:x}-{:x};",
        st.st_size,
        lightpath_proto::ftptime::format_ns(st.st_mtime, u32::try_from(st.st_mtime_nsec).unwrap_or(0)),
        st.st_mode & 0o7777,
        st.st_dev,
        st.st_ino
    )
}

/// One `ls -l` style line (LIST).
pub fn list_line(st: &Stat, name: &[u8]) -> Vec<u8> {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::Fifo => 'p',
        FileType::Socket => 's',
        FileType::CharacterDevice => 'c',
        FileType::BlockDevice => 'b',
        _ => '-',
    };
    let mut perms = String::new();
    for shift in [6, 3, 0] {
        let bits = (st.st_mode >> shift) & 7;
        perms.push(if bits & 4 != 0 { 'r' } else { '-' });
        perms.push(if bits & 2 != 0 { 'w' } else { '-' });
        perms.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    let t = ftp_time(st.st_mtime);
    let mut line = format!(
        "{kind}{perms} 1 lightpath lightpath {:>12} {}-{}-{} {}:{} ",
        st.st_size,
        &t[..4],
        &t[4..6],
        &t[6..8],
        &t[8..10],
        &t[10..12]
    )
    .into_bytes();
    line.extend_from_slice(name);
    line.extend_from_slice(b"\r\n");
    line
}
