//! Virtual paths inside the served root. Every path from the network is
//! resolved against the session's working directory and normalised
//! lexically: `..` never climbs above `/` (the served root), so
//! `/../../etc/passwd` names `ROOT/etc/passwd`. Symlinks are the file
//! layer's business (it resolves beneath the root, see `lightpath-sys`).

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// A byte no name may hold: NUL, or a line break (CR, LF), which
    /// would also break the control channel's replies that echo it. Other
    /// control characters (a TAB...) are valid in names, and GCT serves
    /// them.
    #[error("path contains a NUL, CR or LF byte")]
    ControlBytes,
    /// Longer than the file system would accept.
    #[error("path too long")]
    TooLong,
}

/// Whether no path may hold byte `b` ([`PathError::ControlBytes`]).
pub fn is_forbidden(b: u8) -> bool {
    matches!(b, 0 | b'\r' | b'\n')
}

/// Longest virtual path accepted.
pub const MAX_PATH: usize = 4096;

/// A normalised absolute path below the served root, as raw bytes:
/// always starts with `/`, no `.`/`..`/empty components, no trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VPath(Vec<u8>);

impl Default for VPath {
    fn default() -> Self {
        VPath::root()
    }
}

impl VPath {
    /// `/`, the served root.
    pub fn root() -> VPath {
        VPath(b"/".to_vec())
    }

    /// Resolve `arg` (absolute, or relative to `self`).
    pub fn join(&self, arg: &[u8]) -> Result<VPath, PathError> {
        if arg.iter().any(|&b| is_forbidden(b)) {
            return Err(PathError::ControlBytes);
        }
        // Bound the work on the argument; the limit that matters is on the
        // result (adding the cwd length here refused valid paths, e.g.
        // `LIST` in a cwd longer than MAX_PATH / 2 or `CDUP` from a deep one).
        if arg.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        let mut parts: Vec<&[u8]> = if arg.starts_with(b"/") { Vec::new() } else { self.components().collect() };
        for c in arg.split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    parts.pop();
                }
                name => parts.push(name),
            }
        }
        let path = VPath::from_parts(&parts);
        if path.0.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        Ok(path)
    }

    fn from_parts(parts: &[&[u8]]) -> VPath {
        let mut v = Vec::new();
        for p in parts {
            v.push(b'/');
            v.extend_from_slice(p);
        }
        if v.is_empty() {
            v.push(b'/');
        }
        VPath(v)
    }

    /// Components below the root.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    /// Whether this is the root itself.
    pub fn is_root(&self) -> bool {
        self.0 == b"/"
    }

    /// The parent (root stays root).
    pub fn parent(&self) -> VPath {
        let parts: Vec<&[u8]> = self.components().collect();
        VPath::from_parts(&parts[..parts.len().saturating_sub(1)])
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &[u8] {
        self.components().last().unwrap_or(b"")
    }

    /// Raw bytes, starting with `/`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path relative to the root (no leading `/`; `.` for the root).
    pub fn relative(&self) -> &[u8] {
        if self.is_root() {
            b"."
        } else {
            &self.0[1..]
        }
    }

    /// For replies and logs.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_escapes_root() {
        let cwd = VPath::root().join(b"/data/sub").unwrap();
        assert_eq!(cwd.join(b"../../../../etc/passwd").unwrap().as_bytes(), b"/etc/passwd");
        assert_eq!(cwd.join(b"x/./y//z/..").unwrap().as_bytes(), b"/data/sub/x/y");
        assert_eq!(cwd.join(b"/").unwrap(), VPath::root());
        assert_eq!(cwd.parent().as_bytes(), b"/data");
        assert_eq!(VPath::root().relative(), b".");
        assert!(cwd.join(b"a\nb").is_err());
        assert_eq!(cwd.join(b"\xff\xfe").unwrap().file_name(), b"\xff\xfe");
    }

    #[test]
    fn length_limit_applies_to_the_result() {
        // A cwd longer than MAX_PATH / 2 used to make `cwd.join(cwd)` (LIST
        // without argument) fail, and one of MAX_PATH bytes could not CDUP.
        let deep = VPath::root().join(&[b'd'; MAX_PATH - 1]).unwrap();
        assert_eq!(deep.as_bytes().len(), MAX_PATH);
        assert_eq!(deep.join(deep.as_bytes()).unwrap(), deep);
        assert_eq!(VPath::root().join(deep.as_bytes()).unwrap(), deep);
        assert_eq!(deep.join(b"..").unwrap(), VPath::root());
        assert_eq!(deep.join(b"x"), Err(PathError::TooLong));
        assert_eq!(VPath::root().join(&[b'e'; MAX_PATH + 1]), Err(PathError::TooLong));
    }
}
