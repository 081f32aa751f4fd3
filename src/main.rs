//! The `inferdb` binary: parses the command line and runs one command.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use inferdb::cli::advise::AdviseArgs;
use inferdb::cli::compare::CompareArgs;
use inferdb::cli::{export::ExportArgs, import::ImportArgs, tsdb::TsdbArgs};
use inferdb::cli::{query::QueryArgs, rules::RulesArgs, serve::ServeArgs, simulate::SimulateArgs};

/// mimalloc instead of glibc's malloc: rule evaluation's many short-lived vectors and label
/// sets beside the head's long-lived series fragment glibc's heap until every allocation
/// walks it (rule evaluation CPU doubled over a few rounds; BENCHMARKS.md "Rule evaluation").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// inferdb: a time-series database and PromQL engine for LLM-inference metrics, a drop-in
/// for Prometheus behind Grafana.
#[derive(Debug, Parser)]
#[command(
    name = "inferdb",
    version,
    long_version = inferdb::build_info::LONG_VERSION,
    about,
    after_help = "Quick start:
  inferdb serve --demo          # simulated vLLM servers, scraped, API on http://127.0.0.1:9090"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: inferdb::logging::LogArgs,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
enum Command {
    /// Scrape targets into the store and serve the Prometheus-compatible HTTP API.
    Serve(ServeArgs),
    /// Run a PromQL query against a data folder or a running server.
    Query(QueryArgs),
    /// Serve simulated vLLM /metrics pages.
    Simulate(SimulateArgs),
    /// Backfill history from OpenMetrics files into blocks.
    Import(ImportArgs),
    /// Export samples to Parquet or CSV.
    Export(ExportArgs),
    /// Inspect the store (stats) or verify its checksums (check).
    Tsdb(TsdbArgs),
    /// Check rule files or run their unit tests (promtool's `check rules`, `test rules`).
    Rules(RulesArgs),
    /// Say what is wrong with a vLLM fleet over a window and what to change.
    Advise(AdviseArgs),
    /// Compare the golden signals of two windows and say which changed.
    Compare(CompareArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init(match cli.command {
        Command::Serve(_) | Command::Simulate(_) => inferdb::logging::LogLevel::Info,
        _ => inferdb::logging::LogLevel::Warn,
    });
    let res = match cli.command {
        Command::Serve(a) => a.run(),
        Command::Query(a) => a.run(),
        Command::Simulate(a) => a.run(),
        Command::Import(a) => a.run(),
        Command::Export(a) => a.run(),
        Command::Tsdb(a) => a.run(),
        Command::Rules(a) => a.run(),
        Command::Advise(a) => a.run(),
        Command::Compare(a) => a.run(),
    };
    match res {
        Ok(code) => code,
        // `inferdb query ... | head`: the reader went away; like other Unix tools, stop quietly.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("inferdb: {e:#}");
            ExitCode::FAILURE
        }
    }
}
