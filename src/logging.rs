//! Log output as Prometheus 3 writes it: one line per event, `logfmt` or JSON, with the keys
//! `time`, `level`, `source`, `msg` first and the event's fields after them; never ANSI colour
//! (Prometheus writes none, and logs usually end up in files or journald).
//!
//! `--log.level` and `--log.format` are taken by every command (see [`LogArgs`]).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log.level`: the least severe events written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    /// Everything, including what helps debugging.
    Debug,
    /// Normal operation (the default).
    Info,
    /// Things an operator should look at.
    Warn,
    /// Failures only.
    Error,
}

/// `--log.format`: Prometheus' two formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `key=value` pairs, values quoted when needed (the default).
    Logfmt,
    /// One JSON object per line.
    Json,
}

/// The logging flags every command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Only log messages with the given severity or above (default: info for `serve`, warn
    /// for the one-shot commands, whose output is their answer).
    #[arg(long = "log.level", value_enum, global = true)]
    pub log_level: Option<LogLevel>,
    /// Output format of log messages.
    #[arg(
        long = "log.format",
        value_enum,
        default_value = "logfmt",
        global = true
    )]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Installs the process-wide subscriber writing to standard error. inferdb's own crates log
    /// at `level`; dependencies at `warn` or above (their debug output is not inferdb's).
    /// `RUST_LOG`, when set, replaces this filter (for debugging a dependency). `default` is
    /// the level without `--log.level`.
    pub fn init(&self, default: LogLevel) {
        let level = self.log_level.unwrap_or(default);
        let lvl = match level {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        };
        let deps = if level == LogLevel::Error {
            "error"
        } else {
            "warn"
        };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                "{deps},inferdb={lvl},inferdb_storage={lvl},inferdb_query={lvl}"
            ))
        });
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .event_format(PromFormat(self.log_format))
            .try_init();
    }
}

/// The event formatter: Prometheus 3's keys in its order, then the event's own fields.
#[derive(Debug, Clone, Copy)]
pub struct PromFormat(pub LogFormat);

/// An event's fields as (name, value, whether the value is a JSON number or boolean).
#[derive(Default)]
struct Fields {
    msg: String,
    kv: Vec<(&'static str, String, bool)>,
}

impl Visit for Fields {
    fn record_str(&mut self, f: &Field, v: &str) {
        if f.name() == "message" {
            self.msg = v.to_string();
        } else {
            self.kv.push((f.name(), v.to_string(), false));
        }
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.kv.push((f.name(), v.to_string(), true));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.kv.push((f.name(), v.to_string(), true));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.kv.push((f.name(), v.to_string(), true));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.kv.push((f.name(), v.to_string(), v.is_finite()));
    }
    fn record_error(&mut self, f: &Field, v: &(dyn std::error::Error + 'static)) {
        self.kv.push((f.name(), v.to_string(), false));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn fmt::Debug) {
        if f.name() == "message" {
            self.msg = format!("{v:?}");
        } else {
            self.kv.push((f.name(), format!("{v:?}"), false));
        }
    }
}

fn level_name(l: &Level) -> &'static str {
    match *l {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        _ => "DEBUG",
    }
}

/// A logfmt value: bare when it is a non-empty run of characters needing no quotes, else
/// quoted with `\`, `"` and control characters escaped.
fn logfmt_value(out: &mut String, v: &str) {
    let bare = !v.is_empty()
        && !v
            .chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control());
    if bare {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_string(out: &mut String, v: &str) {
    out.push_str(&serde_json::Value::String(v.to_string()).to_string());
}

/// Formats one event as a line (without the newline).
pub fn format_line(
    format: LogFormat,
    time: &str,
    level: &Level,
    source: &str,
    msg: &str,
    kv: &[(&str, String, bool)],
) -> String {
    let mut s = String::with_capacity(128);
    match format {
        LogFormat::Logfmt => {
            let _ = write!(s, "time={time} level={} source=", level_name(level));
            logfmt_value(&mut s, source);
            s.push_str(" msg=");
            logfmt_value(&mut s, msg);
            for (k, v, _) in kv {
                s.push(' ');
                s.push_str(k);
                s.push('=');
                logfmt_value(&mut s, v);
            }
        }
        LogFormat::Json => {
            s.push_str("{\"time\":");
            json_string(&mut s, time);
            s.push_str(",\"level\":");
            json_string(&mut s, level_name(level));
            s.push_str(",\"source\":");
            json_string(&mut s, source);
            s.push_str(",\"msg\":");
            json_string(&mut s, msg);
            for (k, v, raw) in kv {
                s.push(',');
                json_string(&mut s, k);
                s.push(':');
                if *raw {
                    s.push_str(v);
                } else {
                    json_string(&mut s, v);
                }
            }
            s.push('}');
        }
    }
    s
}

impl<S, N> FormatEvent<S, N> for PromFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let file = meta
            .file()
            .map(|f| f.rsplit('/').next().unwrap_or(f))
            .unwrap_or("");
        let source = match meta.line() {
            Some(l) => format!("{file}:{l}"),
            None => meta.target().to_string(),
        };
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let line = format_line(
            self.0,
            &time,
            meta.level(),
            &source,
            &fields.msg,
            &fields.kv,
        );
        writeln!(w, "{line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logfmt_quotes_what_needs_it() {
        let l = format_line(
            LogFormat::Logfmt,
            "2026-01-01T00:00:00.000Z",
            &Level::WARN,
            "serve.rs:10",
            "Unknown option for --enable-feature",
            &[("option", "x y".into(), false), ("n", "3".into(), true)],
        );
        assert_eq!(
            l,
            "time=2026-01-01T00:00:00.000Z level=WARN source=serve.rs:10 \
             msg=\"Unknown option for --enable-feature\" option=\"x y\" n=3"
        );
    }

    #[test]
    fn json_keeps_numbers_and_escapes_strings() {
        let l = format_line(
            LogFormat::Json,
            "t",
            &Level::INFO,
            "s:1",
            "a \"b\"\n",
            &[("n", "3".into(), true), ("p", "/x".into(), false)],
        );
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["msg"], "a \"b\"\n");
        assert_eq!(v["n"], 3);
        assert_eq!(v["p"], "/x");
        let keys: Vec<&str> = l
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(|kv| kv.split(':').next().unwrap().trim_matches('"'))
            .collect();
        assert_eq!(&keys[..4], ["time", "level", "source", "msg"]);
    }
}
