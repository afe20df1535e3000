//! Benchmark harness (being written).
use clap::Args;

/// `lightpath bench ...` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {}

/// Entry point for `lightpath bench`.
pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench: not implemented yet")
}
