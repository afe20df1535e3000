//! File checksums as GridFTP `CKSM` computes them: lowercase hex of the
//! digest (ADLER32 and CRC32C as 8 hex digits).

use crate::io::Source;
use sha2::Digest;
use std::io;

/// Algorithms we compute, in FEAT order.
pub const ALGORITHMS: &[&str] = &["MD5", "ADLER32", "CRC32C", "SHA1", "SHA256", "SHA512"];

/// A running checksum.
pub enum Checksum {
    /// MD5.
    Md5(md5::Md5),
    /// Adler-32 (RFC 1950).
    Adler32(adler2::Adler32),
    /// CRC-32C (Castagnoli).
    Crc32c(u32),
    /// SHA-1.
    Sha1(sha1::Sha1),
    /// SHA-256.
    Sha256(sha2::Sha256),
    /// SHA-512.
    Sha512(sha2::Sha512),
}

impl Checksum {
    /// A fresh checksum for `alg` (case-insensitive), `None` if unknown.
    pub fn new(alg: &str) -> Option<Checksum> {
        Some(match alg.to_ascii_uppercase().as_str() {
            "MD5" => Checksum::Md5(md5::Md5::new()),
            "ADLER32" => Checksum::Adler32(adler2::Adler32::new()),
            "CRC32C" => Checksum::Crc32c(0),
            "SHA1" => Checksum::Sha1(sha1::Sha1::new()),
            "SHA256" => Checksum::Sha256(sha2::Sha256::new()),
            "SHA512" => Checksum::Sha512(sha2::Sha512::new()),
            _ => return None,
        })
    }

    /// Feed bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Checksum::Md5(h) => h.update(data),
            Checksum::Adler32(h) => h.write_slice(data),
            Checksum::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
            Checksum::Sha1(h) => h.update(data),
            Checksum::Sha256(h) => h.update(data),
            Checksum::Sha512(h) => h.update(data),
        }
    }

    /// Lowercase hex.
    pub fn finish(self) -> String {
        match self {
            Checksum::Md5(h) => hex(&h.finalize()),
            Checksum::Adler32(h) => format!("{:08x}", h.checksum()),
            Checksum::Crc32c(c) => format!("{c:08x}"),
            Checksum::Sha1(h) => hex(&h.finalize()),
            Checksum::Sha256(h) => hex(&h.finalize()),
            Checksum::Sha512(h) => hex(&h.finalize()),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Checksum of `[offset, offset+len)` of `src` (`len` `None`: to the end).
pub fn checksum(src: &dyn Source, alg: &str, offset: u64, len: Option<u64>) -> io::Result<String> {
    checksum_until(src, (alg, offset, len), &|_| false)
}

/// [`checksum`] that gives up (`ErrorKind::Interrupted`) once `stop` says
/// so, asked before each MiB read with the bytes read so far: a server's
/// `CKSM` of a huge file stops at an `ABOR` or when its client goes, and
/// tells its progress in `113` markers.
pub fn checksum_until(
    src: &dyn Source,
    (alg, offset, len): (&str, u64, Option<u64>),
    stop: &dyn Fn(u64) -> bool,
) -> io::Result<String> {
    let mut ck = Checksum::new(alg).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unknown algorithm"))?;
    let end = match len {
        Some(l) => offset.checked_add(l).filter(|&e| e <= src.len()),
        None => Some(src.len()),
    };
    let end = end
        .filter(|&e| offset <= e)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range beyond end of file"))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = offset;
    while pos < end {
        if stop(pos - offset) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "checksum stopped"));
        }
        let k = (end - pos).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..k], pos)?;
        ck.update(&buf[..k]);
        pos += k as u64;
    }
    Ok(ck.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::BytesSource;

    #[test]
    fn known_vectors() {
        let s = BytesSource(b"123456789".to_vec());
        assert_eq!(checksum(&s, "crc32c", 0, None).unwrap(), "e3069283");
        assert_eq!(checksum(&s, "ADLER32", 0, None).unwrap(), "091e01de");
        assert_eq!(checksum(&s, "MD5", 0, None).unwrap(), "25f9e794323b453885f5181f1b624d0b");
        assert_eq!(
            checksum(&s, "MD5", 2, Some(3)).unwrap(),
            checksum(&BytesSource(b"345".to_vec()), "MD5", 0, None).unwrap()
        );
        assert!(checksum(&s, "MD5", 5, Some(10)).is_err());
        assert!(Checksum::new("CRC99").is_none());
    }
}
