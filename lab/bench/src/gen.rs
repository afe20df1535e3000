//! Deterministic generators: the same seed gives the same bytes on every
//! machine and every version (SplitMix64, written out here on purpose so no
//! dependency update can change a data set).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Result;

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed ^ 0x6c69_6768_7470_6174) // "lightpat"
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Writes `size` incompressible bytes from `seed`.
pub fn random_file(path: &Path, size: u64, seed: u64) -> Result<()> {
    let mut rng = SplitMix::new(seed);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        // Ctrl-C took effect only once the whole file was written (6.6 s
        // for 3 GiB), and the file was then thrown away.
        crate::proc::check_stop()?;
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.flush()?;
    Ok(())
}

/// File sizes shaped like a source repository: log-normal (median about a
/// seventh of the mean, a long tail), no file above 2 % of the total,
/// scaled so they add up to `total` exactly.
pub fn git_like_sizes(count: u64, total: u64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix::new(seed);
    let raw: Vec<f64> = (0..count).map(|_| (2.0 * rng.next_normal()).exp()).collect();
    let cap = raw.iter().sum::<f64>() / count as f64 * (count as f64 * 0.02).max(1.0);
    let capped: Vec<f64> = raw.iter().map(|r| r.min(cap)).collect();
    let sum: f64 = capped.iter().sum();
    let mut sizes: Vec<u64> = capped.iter().map(|r| (r / sum * total as f64) as u64).collect();
    let short = total - sizes.iter().sum::<u64>();
    if let Some(first) = sizes.first_mut() {
        *first += short;
    }
    sizes
}

/// A directory path for file `i`: 1 to 4 levels, about 12 files per directory.
fn git_like_dir(i: u64, rng: &mut SplitMix) -> String {
    let depth = 1 + rng.next_u64() % 4;
    let leaf = i / 12;
    let mut parts = Vec::new();
    let mut v = leaf;
    for _ in 0..depth {
        parts.push(format!("d{:02}", v % 16));
        v /= 16;
    }
    parts.push(format!("m{leaf}"));
    parts.join("/")
}

/// A tree of `count` files adding up to `total` bytes.
pub fn git_like_tree(root: &Path, count: u64, total: u64) -> Result<()> {
    let sizes = git_like_sizes(count, total, 7);
    let mut rng = SplitMix::new(8);
    let mut dir_rng = SplitMix::new(9);
    let mut buf = Vec::new();
    let mut dir = String::new();
    for (i, &size) in sizes.iter().enumerate() {
        if i % 12 == 0 {
            dir = git_like_dir(i as u64, &mut dir_rng);
            fs::create_dir_all(root.join(&dir))?;
        }
        buf.resize(size as usize, 0);
        rng.fill(&mut buf);
        crate::dataset::write_all(&root.join(&dir).join(format!("f{i:05}.obj")), &buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_exact() {
        let mut a = SplitMix::new(1);
        let mut b = SplitMix::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        let sizes = git_like_sizes(5000, 480_000_000, 7);
        assert_eq!(sizes.len(), 5000);
        assert_eq!(sizes.iter().sum::<u64>(), 480_000_000);
        assert_eq!(sizes, git_like_sizes(5000, 480_000_000, 7));
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        let median = sorted[2500];
        assert!(median < 96_000 / 2, "median {median} should sit well below the mean");
    }
}
