//! `inferdb rules check` and `inferdb rules test`: promtool's `check rules` and
//! `test rules`, with its output and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::rules::check::{check_files, CheckOptions};
use crate::rules::unittest::{run_files, TestOptions};

/// Arguments of `inferdb rules`.
#[derive(Debug, Clone, clap::Args)]
pub struct RulesArgs {
    #[command(subcommand)]
    command: RulesCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum RulesCommand {
    /// Check that rule files are valid (standard input when no file is given), as
    /// `promtool check rules` does.
    #[command(after_help = "Exit codes: 0 valid, 1 invalid, 3 lint problems with --lint-fatal.")]
    Check {
        /// Linting checks to apply: all, duplicate-rules, none (comma-separated).
        #[arg(long, default_value = "duplicate-rules")]
        lint: String,
        /// Make lint errors exit with exit code 3.
        #[arg(long)]
        lint_fatal: bool,
        /// Ignore unknown fields in the rule files.
        #[arg(long)]
        ignore_unknown_fields: bool,
        /// The rule files to check.
        files: Vec<PathBuf>,
    },
    /// Run rule unit tests in promtool's format, as `promtool test rules` does.
    #[command(after_help = "Exit codes: 0 all tests passed, 1 otherwise.")]
    Test {
        /// Only run test groups whose names match this regular expression (repeatable).
        #[arg(long)]
        run: Vec<String>,
        /// Ignore unknown fields in the rule files.
        #[arg(long)]
        ignore_unknown_fields: bool,
        /// File path to store JUnit XML test results.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// The unit-test files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

impl RulesArgs {
    /// Runs the subcommand; the exit code is promtool's.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let code = match self.command {
            RulesCommand::Check {
                lint,
                lint_fatal,
                ignore_unknown_fields,
                files,
            } => check_files(
                &files,
                &CheckOptions {
                    lint,
                    lint_fatal,
                    ignore_unknown_fields,
                },
            ),
            RulesCommand::Test {
                run,
                ignore_unknown_fields,
                junit,
                files,
            } => run_files(
                &files,
                &TestOptions {
                    run,
                    ignore_unknown_fields,
                    junit,
                },
            ),
        };
        Ok(ExitCode::from(code as u8))
    }
}
