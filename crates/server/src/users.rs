//! The `--users FILE`: one `name:hash` per line, `#` comments. Hashes are
//! PHC argon2 strings (`$argon2id$...`, what `lightpath passwd` writes) or
//! SHA-512 crypt (`$6$...`, what `mkpasswd -m sha-512` writes). Plain-text
//! and DES hashes are refused when the file is loaded.

use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use std::collections::HashMap;
use std::path::Path;

/// Errors reading the users file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsersError {
    /// File unreadable.
    #[error("reading users file {0}: {1}")]
    Io(String, std::io::Error),
    /// A line that is not `name:hash` with a supported hash.
    #[error("users file line {0}: {1}")]
    Line(usize, String),
}

/// Users and their password hashes.
#[derive(Debug, Default, Clone)]
pub struct Users {
    hashes: HashMap<String, String>,
}

impl Users {
    /// Load and check a users file.
    pub fn load(path: &Path) -> Result<Users, UsersError> {
        let text = std::fs::read_to_string(path).map_err(|e| UsersError::Io(path.display().to_string(), e))?;
        Users::parse(&text)
    }

    /// Parse users-file text.
    pub fn parse(text: &str) -> Result<Users, UsersError> {
        let mut hashes = HashMap::new();
        // An editor's byte-order mark is no part of the first name.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, hash) =
                line.split_once(':').ok_or_else(|| UsersError::Line(i + 1, "expected name:hash".into()))?;
            if let Err(why) = name_ok(name) {
                return Err(UsersError::Line(i + 1, why));
            }
            if !(argon2_ok(hash) || sha512_crypt_ok(hash)) {
                return Err(UsersError::Line(
                    i + 1,
                    "hash must be argon2 ($argon2id$..., as `lightpath passwd` writes) or SHA-512 crypt ($6$salt$hash), whole".into(),
                ));
            }
            if hashes.insert(name.to_string(), hash.to_string()).is_some() {
                return Err(UsersError::Line(i + 1, format!("duplicate user {name}")));
            }
        }
        Ok(Users { hashes })
    }

    /// The names in the file, in no order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.hashes.keys().map(String::as_str)
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether `pass` is `user`'s password. Slow by design (argon2), and as
    /// slow for a name that is not in the file, so that the time of the
    /// answer does not tell which users exist.
    pub fn verify(&self, user: &str, pass: &str) -> bool {
        if pass.len() > MAX_PASSWORD {
            return false;
        }
        let Some(hash) = self.hashes.get(user) else {
            static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
            let decoy = DECOY.get_or_init(|| hash_password("not a password of anyone"));
            let _ = PasswordHash::new(decoy).map(|h| argon2_check(&h, pass.as_bytes()));
            return false;
        };
        if hash.starts_with("$6$") {
            return sha_crypt::sha512_check(pass, hash).is_ok();
        }
        PasswordHash::new(hash).is_ok_and(|h| argon2_check(&h, pass.as_bytes()))
    }
}

/// Why `name` cannot be a user's (a login could never give it), if it
/// cannot: such lines loaded, and their users were refused without a
/// word (a defect hunt's find). `lightpath passwd` checks names the same.
pub fn name_ok(name: &str) -> Result<(), String> {
    let bad = |c: char| c == ':' || c.is_whitespace() || c.is_control();
    if name.is_empty() || name.len() > MAX_NAME || name.contains(bad) || name.starts_with('#') {
        return Err(format!(
            "user name {name:?}: 1 to {MAX_NAME} bytes, no ':', blanks or control characters, not starting with '#'"
        ));
    }
    Ok(())
}

/// The longest user name a login may give (`USER`).
pub const MAX_NAME: usize = 256;

/// An argon2 PHC string with its salt and hash.
fn argon2_ok(hash: &str) -> bool {
    hash.starts_with("$argon2") && PasswordHash::new(hash).is_ok_and(|h| h.salt.is_some() && h.hash.is_some())
}

/// `$6$[rounds=N$]salt$hash`, the hash 86 characters of crypt's alphabet.
fn sha512_crypt_ok(hash: &str) -> bool {
    let Some(rest) = hash.strip_prefix("$6$") else { return false };
    let rest = rest.strip_prefix("rounds=").map_or(Some(rest), |r| r.split_once('$').map(|(_, t)| t));
    let crypt = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '/';
    match rest.and_then(|r| r.split_once('$')) {
        Some((salt, h)) => !salt.is_empty() && salt.len() <= 16 && h.len() == 86 && h.chars().all(crypt),
        None => false,
    }
}

/// The longest password checked. SHA-512 crypt's work grows with the
/// password's length: 8100 bytes took 375 ms of CPU a check, and 64
/// connections sending such passwords kept a real user's login waiting
/// 15 s for the checks' turns (a defect hunt's find). Longer ones are
/// refused unchecked; the session's wait after a failed login hides how.
pub const MAX_PASSWORD: usize = 1024;

/// Whether `pass` hashes to `hash` (argon2, its parameters from the PHC
/// string), in memory kept for the next check ([`with_scratch`]).
/// `verify_password` allocated its 19 MiB afresh for every check, and
/// glibc kept what it freed: a server's memory grew by hundreds of MB
/// with logins (1.3 GB after 800 failed ones) and never came back (a
/// defect hunt's find).
fn argon2_check(hash: &PasswordHash, pass: &[u8]) -> bool {
    use argon2::{Algorithm, Params, Version};
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else { return false };
    let (Ok(params), Ok(alg)) = (Params::try_from(hash), Algorithm::try_from(hash.algorithm)) else { return false };
    let Ok(version) = hash.version.map(Version::try_from).transpose() else { return false };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else { return false };
    let mut out = vec![0u8; expected.len()];
    let blocks = params.block_count();
    let a = argon2::Argon2::new(alg, version.unwrap_or_default(), params);
    let hashed = with_scratch(blocks, |mem| a.hash_password_into_with_memory(pass, salt, &mut out, mem).is_ok());
    // `Output`'s comparison takes the same time wherever the bytes differ.
    hashed && argon2::password_hash::Output::new(&out).is_ok_and(|o| o == expected)
}

/// Run `f` on `blocks` argon2 blocks of memory kept between checks: one
/// set for each check at once (the server runs one per CPU at once), so
/// the memory is taken once and stays the same.
fn with_scratch<T>(blocks: usize, f: impl FnOnce(&mut [argon2::Block]) -> T) -> T {
    static SCRATCH: std::sync::Mutex<Vec<Vec<argon2::Block>>> = std::sync::Mutex::new(Vec::new());
    let lock = || SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    let mut mem = lock().pop().unwrap_or_default();
    if mem.len() < blocks {
        mem.resize(blocks, argon2::Block::new());
    }
    let r = f(&mut mem[..blocks]);
    lock().push(mem);
    r
}

/// An argon2id PHC string for `pass` (for `lightpath passwd`).
pub fn hash_password(pass: &str) -> String {
    let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
    argon2::Argon2::default().hash_password(pass.as_bytes(), &salt).map(|h| h.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password past [`MAX_PASSWORD`] is refused unchecked, right or not.
    #[test]
    fn a_password_too_long_is_refused_unchecked() {
        let long = "p".repeat(MAX_PASSWORD + 1);
        let users = Users::parse(&format!("u:{}\nv:{}\n", hash_password(&long), hash_password("short"))).unwrap();
        assert!(!users.verify("u", &long));
        assert!(users.verify("v", "short"));
    }

    /// Lines that loaded though no login could ever match them.
    #[test]
    fn lines_no_login_could_match_are_refused() {
        let good = hash_password("x");
        for bad in [
            "bob:$6$".to_string(),
            "dave:$argon2id$garbage".into(),
            format!("bob :{good}"),
            format!(":{good}"),
            format!("{}:{good}", "n".repeat(MAX_NAME + 1)),
        ] {
            assert!(Users::parse(&bad).is_err(), "{bad}");
        }
        let users = Users::parse(&format!("\u{feff}alice:{good}\n")).unwrap();
        assert!(users.verify("alice", "x"), "a byte-order mark is not part of the name");
    }

    /// Hashes made with other argon2 parameters check as they did.
    #[test]
    fn argon2_hashes_of_other_parameters() {
        use argon2::{Algorithm, Argon2, Params, Version};
        for (alg, m, t) in
            [(Algorithm::Argon2id, 8192, 2), (Algorithm::Argon2i, 4096, 3), (Algorithm::Argon2d, 1024, 1)]
        {
            let a = Argon2::new(alg, Version::V0x13, Params::new(m, t, 1, Some(24)).unwrap());
            let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
            let hash = a.hash_password(b"pw", &salt).unwrap().to_string();
            let users = Users::parse(&format!("u:{hash}\n")).unwrap();
            assert!(users.verify("u", "pw"), "{hash}");
            assert!(!users.verify("u", "pW"), "{hash}");
        }
    }

    #[test]
    fn argon2_and_sha512_crypt() {
        let a = hash_password("s3cret");
        // mkpasswd -m sha-512 -S saltsalt s3cret
        let six = "$6$saltsalt$As4wrv0kZlfch1du9WeH7qhskyLriQWySXrZzynnvi46nFnNxjdpl6ksRegrrKexvhIa/Iny8S8uF3fVWTMuC1";
        let u = Users::parse(&format!("# users\nalice:{a}\nbob:{six}\n")).unwrap();
        assert!(u.verify("alice", "s3cret") && !u.verify("alice", "wrong"));
        assert!(!u.verify("carol", "s3cret"));
        assert!(Users::parse("eve:abQ9Xkq3bjvR.").is_err(), "DES refused");
        assert!(Users::parse("eve:plain").is_err());
        assert!(u.verify("bob", "s3cret") && !u.verify("bob", "s3cret "));
    }
}
