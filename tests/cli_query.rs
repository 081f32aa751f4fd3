//! `inferdb query` from the shell: a missing data folder is a plain user error.

use std::process::Command;

#[test]
fn missing_data_folder_is_a_user_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-folder");
    let out = Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["query", "instant", "up", "--data-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    assert!(err.contains("--data-dir"), "{err}");
    assert!(!err.contains("internal"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(!missing.exists(), "the query must not create the folder");
    // the range query says the same
    let out = Command::new(env!("CARGO_BIN_EXE_inferdb"))
        .args(["query", "range", "up", "--start", "-1h", "--data-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
