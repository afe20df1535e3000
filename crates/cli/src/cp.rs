//! `lightpath cp`, `ls`, `sum` (being written).
use clap::Args;
use std::process::ExitCode;

/// Options of `lightpath cp`.
#[derive(Debug, Args)]
pub struct CpArgs {}
/// Options of `lightpath ls`.
#[derive(Debug, Args)]
pub struct LsArgs {}
/// Options of `lightpath sum`.
#[derive(Debug, Args)]
pub struct SumArgs {}

pub fn run(_a: CpArgs) -> ExitCode {
    ExitCode::FAILURE
}
pub fn ls(_a: LsArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
pub fn sum(_a: SumArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
