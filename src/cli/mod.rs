//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`, `inferdb rules`.

pub mod advise;
pub mod compare;
pub mod export;
pub mod import;
pub mod query;
pub mod rules;
pub mod serve;
pub mod simulate;
pub mod tsdb;

/// Parses a command-line time: RFC 3339, Unix seconds (as the HTTP API takes them), `now`, or
/// `now`/nothing plus a signed Prometheus duration (`now-1h`, `-1h`, `now+5m`). Returns
/// milliseconds.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now_ms);
    }
    let rel = s.strip_prefix("now").unwrap_or(s);
    if let Some((sign, d)) = rel
        .strip_prefix('-')
        .map(|d| (-1, d))
        .or_else(|| rel.strip_prefix('+').map(|d| (1, d)))
    {
        if let Ok(ms) = inferdb_query::parser::parse_model_duration_ms(d) {
            return Ok(now_ms.saturating_add(sign * ms));
        }
    }
    let t = crate::api::params::parse_time(s).map_err(|_| {
        format!("cannot parse {s:?} as a time (RFC 3339, Unix seconds, now, -1h, now-30m)")
    })?;
    if crate::model::time::plausibly_milliseconds(t) && s.parse::<f64>().is_ok() {
        return Err(format!(
            "{s} is Unix seconds of the year 5138 or later: plausibly milliseconds; give \
             seconds ({})",
            crate::api::json::format_timestamp(t / 1000)
        ));
    }
    Ok(t)
}

/// The first port of the built-in simulator (`simulate --port`, `serve --demo.port`): clear
/// of vLLM's 8000, Prometheus' 9090, Grafana's 3000 and dcgm-exporter's 9400.
pub const SIM_PORT: u16 = 8100;

/// An error about `path` naming it once: `doing: msg` when the message names the path
/// already, `doing path: msg` otherwise.
pub fn path_error(path: &std::path::Path, doing: &str, e: impl std::fmt::Display) -> anyhow::Error {
    let msg = e.to_string();
    if msg.contains(&path.display().to_string()) {
        anyhow::anyhow!("{doing}: {msg}")
    } else {
        anyhow::anyhow!("{doing} {}: {msg}", path.display())
    }
}

/// An error opening the store in `dir`, naming the folder once.
pub fn store_error(dir: &std::path::Path, e: inferdb_storage::Error) -> anyhow::Error {
    let msg = e.to_string();
    if msg.contains(&dir.display().to_string()) {
        anyhow::anyhow!("opening the store: {msg}")
    } else {
        anyhow::anyhow!("opening the store in {}: {msg}", dir.display())
    }
}

/// Where a reading command (`query`, `advise`, `compare`) gets its data: a data folder, or
/// the HTTP API of a running inferdb or Prometheus.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// The data folder to read (read-only).
    #[arg(
        long = "data-dir",
        alias = "storage.tsdb.path",
        default_value = "data",
        value_name = "DIR"
    )]
    pub data_dir: std::path::PathBuf,
    /// Ask a running inferdb or Prometheus instead of reading a folder.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

impl SourceArgs {
    /// `Err` with what to do when the data folder is to be read and does not exist.
    pub fn check_folder(&self) -> anyhow::Result<()> {
        if self.url.is_none() && !self.data_dir.is_dir() {
            anyhow::bail!(
                "data folder {} does not exist (give --data-dir DIR, or --url URL of a running \
                 server)",
                self.data_dir.display()
            );
        }
        Ok(())
    }

    /// The PromQL source: the API at `--url`, else the engine over the folder opened
    /// read-only (with the metric-rename bridging of `aliases`).
    pub fn open(
        &self,
        timeout: std::time::Duration,
        aliases: &crate::metric_aliases::AliasArgs,
    ) -> anyhow::Result<Box<dyn crate::insight::PromSource>> {
        if let Some(u) = &self.url {
            return Ok(Box::new(crate::insight::RemoteSource {
                base: u.clone(),
                timeout,
            }));
        }
        self.check_folder()?;
        let db = open_read_only(&self.data_dir)?;
        let backend: std::sync::Arc<dyn crate::api::ApiBackend> =
            std::sync::Arc::new(crate::api::DbBackend::new(
                std::sync::Arc::new(db),
                inferdb_query::EngineOptions {
                    timeout,
                    metric_aliases: aliases.load()?,
                    ..inferdb_query::EngineOptions::default()
                },
            ));
        Ok(Box::new(crate::insight::BackendSource { backend, timeout }))
    }
}

/// Opens the store in `dir` read-only, without background work, beside a server that may be
/// writing it; the error says which folder (see [`store_error`]).
pub fn open_read_only(dir: &std::path::Path) -> anyhow::Result<inferdb_storage::Db> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{}: no such data folder (give --data-dir or --url)",
            dir.display()
        );
    }
    inferdb_storage::Db::open(
        dir,
        inferdb_storage::Options {
            read_only: true,
            background: false,
            ..inferdb_storage::Options::default()
        },
    )
    .map_err(|e| store_error(dir, e))
}

/// The simulator's start failure, saying what to do when the port is taken.
pub fn sim_start_error(e: std::io::Error, flag: &str) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        anyhow::anyhow!(
            "starting the simulator: {e} (another server, vLLM perhaps, holds the port): choose \
             another with {flag}, or {flag} 0 for any free port"
        )
    } else {
        anyhow::anyhow!("starting the simulator: {e}")
    }
}

/// Parses a duration flag (`--query.timeout 2m`, `--step 15`): a Prometheus duration or
/// seconds, as the HTTP API takes them. Returns milliseconds; the error names the flag.
pub fn duration_ms(flag: &str, s: &str) -> anyhow::Result<i64> {
    inferdb_query::parser::parse_duration_ns(s)
        .map(|ns| ns / 1_000_000)
        .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        let now = 1_754_006_437_512;
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("-1h", now), Ok(now - 3_600_000));
        assert_eq!(parse_time("now-30m", now), Ok(now - 1_800_000));
        assert_eq!(parse_time("now+5m", now), Ok(now + 300_000));
        assert_eq!(parse_time("1754006437.512", 0), Ok(now));
        assert_eq!(parse_time("2025-08-01T00:00:37.512Z", 0), Ok(now));
        assert_eq!(parse_time("1970-01-01T00:00:01Z", now), Ok(1000));
        assert!(parse_time("yesterday", now).is_err());
        // milliseconds where seconds are expected
        let e = parse_time("1754006437512", 0).unwrap_err();
        assert!(
            e.contains("plausibly milliseconds") && e.contains("1754006437.512"),
            "{e}"
        );
        assert_eq!(duration_ms("step", "15").unwrap(), 15_000);
        assert_eq!(duration_ms("step", "1m30s").unwrap(), 90_000);
        let e = duration_ms("query.timeout", "2x").unwrap_err().to_string();
        assert_eq!(
            e,
            r#"--query.timeout: cannot parse "2x" to a valid duration"#
        );
    }
}
