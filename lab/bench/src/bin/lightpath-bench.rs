//! Stand-alone runner, the same as `lightpath bench` (handy before the CLI
//! is built, and for CI jobs that only need the harness).
use clap::Parser;

/// Benchmark lightpath, globus-url-copy and iperf3 over loopback and the WAN emulator.
#[derive(Parser)]
#[command(name = "lightpath-bench", version)]
struct Cli {
    #[command(flatten)]
    args: lightpath_bench::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = lightpath_bench::run(cli.args) {
        eprintln!("lightpath-bench: {e:#}");
        let code = if e.is::<lightpath_bench::Interrupted>() { 130 } else { 1 };
        std::process::exit(code);
    }
}
