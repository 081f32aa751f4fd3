//! `inferdb simulate`: serves realistic vLLM `/metrics` pages from the built-in simulator.

use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `inferdb simulate`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:
  inferdb simulate --port 8100
  inferdb simulate --port 8100 --servers 3   # ports 8100, 8101, 8102; also /servers/<i>/metrics on 8100
  inferdb simulate --servers 4 --scenario kv-pressure --scenario healthy   # server 0 under KV pressure
  inferdb simulate --scenario healthy,cache-kick@10m,healthy@40m
  curl -s localhost:8100/metrics | head")]
pub struct SimulateArgs {
    /// First port; server i listens on port+i (0: any free ports).
    #[arg(long, default_value_t = super::SIM_PORT)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Number of simulated vLLM servers.
    #[arg(long, default_value_t = 1)]
    pub servers: usize,
    /// Seconds of one workload cycle (steady load, KV-cache saturation, restart).
    #[arg(long = "cycle", default_value_t = 600.0, value_name = "SECONDS")]
    pub cycle_s: f64,
    /// Seed of the first server's workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Answer gzip when asked (real vLLM does not).
    #[arg(long)]
    pub gzip: bool,
    /// Server state with known ground truth instead of the demo cycle: healthy, kv-pressure,
    /// cache-kick, queueing, underutilized, restart, slow-prefill (TTFT 20 % up at the same
    /// load), load-sweep (concurrency swept past the server's capacity); switch at times after the start with
    /// NAME@OFFSET (`healthy,kv-pressure@30m,healthy@1h`). Repeat the flag for server 1, 2,
    /// ...; the last one applies to the servers after it.
    #[arg(long = "scenario", value_name = "PLAN", value_parser = parse_plan)]
    pub scenario: Vec<crate::sim::ScenarioPlan>,
}

/// Parses a `--scenario` value.
pub fn parse_plan(s: &str) -> Result<crate::sim::ScenarioPlan, String> {
    crate::sim::ScenarioPlan::parse(s)
}

impl SimulateArgs {
    /// Serves until SIGINT/SIGTERM.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        rt.block_on(async move {
            let opts = crate::sim::SimOptions {
                servers: self.servers.max(1),
                cycle_s: if self.cycle_s > 0.0 {
                    self.cycle_s
                } else {
                    600.0
                },
                gzip: self.gzip,
                seed: self.seed,
                keep_pages: 0,
                scenarios: self.scenario.clone(),
                ..Default::default()
            };
            let sim = crate::sim::Simulator::start(&self.host, self.port, opts)
                .await
                .map_err(|e| super::sim_start_error(e, "--port"))?;
            for a in sim.addrs() {
                println!("simulated vLLM server on http://{a}/metrics");
            }
            super::serve::shutdown_signal().await;
            sim.stop();
            anyhow::Ok(())
        })?;
        Ok(ExitCode::SUCCESS)
    }
}
