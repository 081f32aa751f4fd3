//! What this binary is: its version, the git revision and date it was built from and the
//! compiler (set by `build.rs`), and the Prometheus API version it implements. Shown by
//! `inferdb --version`, `/api/v1/status/buildinfo` and `prometheus_build_info`.

/// inferdb's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git revision built (`unknown` outside a git checkout).
pub const REVISION: &str = env!("INFERDB_GIT_REVISION");
/// When it was built, as Prometheus writes it (`20261203-17:30:00`, UTC).
pub const BUILD_DATE: &str = env!("INFERDB_BUILD_DATE");
/// `rustc --version` of the compiler that built it.
pub const TOOLCHAIN: &str = env!("INFERDB_TOOLCHAIN");
/// The build profile: `debug` with debug assertions on, else `release`.
pub const PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};
/// The Prometheus version whose HTTP API and PromQL semantics inferdb implements: what
/// `/api/v1/status/buildinfo` answers (Grafana picks features by it) and what the provisioned
/// Grafana datasource declares as `prometheusVersion`.
pub const PROMETHEUS_API_VERSION: &str = "3.0.0";

/// The text after `inferdb ` in `inferdb --version`, laid out as Prometheus' `--version`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision: ",
    env!("INFERDB_GIT_REVISION"),
    ")\n  build date:       ",
    env!("INFERDB_BUILD_DATE"),
    "\n  toolchain:        ",
    env!("INFERDB_TOOLCHAIN"),
    "\n  platform:         ",
    env!("INFERDB_PLATFORM"),
    "\n  Prometheus API:   3.0.0",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_names_the_api_version_and_the_build() {
        assert!(LONG_VERSION.ends_with(PROMETHEUS_API_VERSION));
        assert!(LONG_VERSION.contains(REVISION) && LONG_VERSION.contains(TOOLCHAIN));
        assert!(TOOLCHAIN.starts_with("rustc "), "{TOOLCHAIN}");
    }
}
