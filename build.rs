//! Build information for `inferdb --version` and `/api/v1/status/buildinfo`: the git revision,
//! the build date (`SOURCE_DATE_EPOCH` when set, for reproducible builds) and the compiler.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let revision =
        run("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => run("date", &["-u", "-d", &format!("@{s}"), "+%Y%m%d-%H:%M:%S"]),
        Err(_) => run("date", &["-u", "+%Y%m%d-%H:%M:%S"]),
    }
    .unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let toolchain = run(&rustc, &["--version"]).unwrap_or_else(|| "rustc (unknown)".into());
    println!("cargo:rustc-env=INFERDB_GIT_REVISION={revision}");
    println!("cargo:rustc-env=INFERDB_BUILD_DATE={date}");
    println!("cargo:rustc-env=INFERDB_TOOLCHAIN={toolchain}");
    let target = |k: &str| std::env::var(k).unwrap_or_default();
    println!(
        "cargo:rustc-env=INFERDB_PLATFORM={}/{}",
        target("CARGO_CFG_TARGET_OS"),
        target("CARGO_CFG_TARGET_ARCH")
    );
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // a new commit gives a new revision
    if let Some(head) = run("git", &["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(refs) = run("git", &["rev-parse", "--git-common-dir"]) {
        println!("cargo:rerun-if-changed={refs}/refs/heads");
    }
}
