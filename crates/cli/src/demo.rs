//! `lightpath demo` (being written).
use clap::Args;
/// Options of `lightpath demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {}
pub fn run(_a: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
