//! `cargo run -p lightpath-wan --example lab -- up --rate 1G --rtt 95ms`:
//! the `lightpath lab` command without the rest of the binary.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lightpath_wan::LabArgs,
}

fn main() -> anyhow::Result<()> {
    lightpath_wan::run(Cli::parse().args)
}
