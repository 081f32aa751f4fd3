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
  inferdb simulate --servers 50 --start now-4h --time-warp 15   # 4 h of workload in 16 min
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
    /// Sample time at the start: RFC 3339, Unix seconds, `now`, or relative like `now-4h`.
    /// Pages then carry explicit timestamps (scrapers honouring them store sample time).
    #[arg(long, allow_hyphen_values = true, value_name = "TIME")]
    pub start: Option<String>,
    /// Sample seconds per wall second: the workload runs this many times as fast, and pages
    /// carry explicit timestamps. A connection that asks every N whole seconds gets
    /// timestamps exactly N × FACTOR seconds apart (its jitter is not warped).
    #[arg(long = "time-warp", default_value_t = 1.0, value_name = "FACTOR",
        value_parser = parse_warp)]
    pub time_warp: f64,
}

/// Parses a `--time-warp` value: a finite factor above 0.
pub fn parse_warp(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "{s:?} is not a time-warp factor (a number above 0, e.g. 15)"
        )),
    }
}

/// Parses a `--scenario` value.
pub fn parse_plan(s: &str) -> Result<crate::sim::ScenarioPlan, String> {
    crate::sim::ScenarioPlan::parse(s)
}

impl SimulateArgs {
    /// Serves until SIGINT/SIGTERM.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let now_ms = crate::model::time::now_ms();
        let start = match &self.start {
            Some(s) => {
                Some(super::parse_time(s, now_ms).map_err(|e| anyhow::anyhow!("--start: {e}"))?)
            }
            None => None,
        };
        let clock = crate::sim::SimClock {
            start: start.map(|ms| ms as f64 / 1000.0),
            warp: self.time_warp,
        };
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
                clock,
                ..Default::default()
            };
            let sim = crate::sim::Simulator::start(&self.host, self.port, opts)
                .await
                .map_err(|e| super::sim_start_error(e, "--port"))?;
            for a in sim.addrs() {
                println!("simulated vLLM server on http://{a}/metrics");
            }
            if !clock.is_wall() {
                let t0 = start.unwrap_or(now_ms);
                let mut line = format!(
                    "sample time starts at Unix {} s and runs {}x the wall clock; pages carry timestamps",
                    crate::api::json::format_timestamp(t0),
                    clock.warp
                );
                if t0 < now_ms && clock.warp > 1.0 {
                    let wall_s = (now_ms - t0) as f64 / 1000.0 / (clock.warp - 1.0);
                    line.push_str(&format!("; it meets the wall clock after {wall_s:.0} s"));
                }
                println!("{line}");
            }
            super::serve::shutdown_signal().await;
            sim.stop();
            anyhow::Ok(())
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_warp_takes_a_positive_factor_only() {
        assert_eq!(parse_warp("15"), Ok(15.0));
        assert_eq!(parse_warp("0.5"), Ok(0.5));
        for bad in ["0", "-2", "inf", "NaN", "fast", ""] {
            let e = parse_warp(bad).unwrap_err();
            assert!(e.contains("time-warp"), "{bad}: {e}");
        }
    }
}
