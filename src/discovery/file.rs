//! `file_sd_configs`: JSON or YAML files of target groups, re-read every
//! `refresh_interval` (30 s when unset; Prometheus watches the files and re-reads them every
//! 5 m). A file that cannot be read or parsed keeps the groups it had.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{GroupDoc, TargetGroup, Updater};
use crate::config::{glob_match, FileSdConfig};

/// The files a pattern names (a pattern is allowed in the last path element only).
fn expand(f: &str, errs: &mut Vec<String>) -> Vec<PathBuf> {
    let path = Path::new(f);
    match path.file_name().and_then(|n| n.to_str()) {
        Some(name) if name.contains(['*', '?']) => {
            let dir = path.parent().unwrap_or(Path::new("."));
            match std::fs::read_dir(dir) {
                Ok(rd) => {
                    let mut v: Vec<_> = rd
                        .filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| glob_match(name, n))
                        })
                        .collect();
                    v.sort();
                    v
                }
                Err(e) => {
                    errs.push(format!("{}: {e}", dir.display()));
                    vec![]
                }
            }
        }
        _ => vec![path.to_path_buf()],
    }
}

/// Reads one file's groups; sources are `<file>:<index>` as in Prometheus.
fn read_one(p: &Path) -> Result<Vec<TargetGroup>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let is_json = p.extension().is_some_and(|e| e == "json");
    let docs: Vec<GroupDoc> = if is_json {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_yaml::from_str::<Option<Vec<GroupDoc>>>(&text)
            .map(Option::unwrap_or_default)
            .map_err(|e| e.to_string())
    }
    .map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            TargetGroup::from_addresses(
                format!("{}:{i}", p.display()),
                &d.targets,
                d.labels.unwrap_or_default(),
            )
        })
        .collect())
}

/// Reads the target groups of file service discovery files (patterns allowed in the last
/// path element). Unreadable files are reported in the returned errors and skipped.
pub fn read_file_sd(files: &[String]) -> (Vec<TargetGroup>, Vec<String>) {
    let (mut groups, mut errs) = (vec![], vec![]);
    for f in files {
        for p in expand(f, &mut errs) {
            match read_one(&p) {
                Ok(g) => groups.extend(g),
                Err(e) => errs.push(e),
            }
        }
    }
    (groups, errs)
}

fn refresh(c: &FileSdConfig, up: &Updater) {
    let mut errs = vec![];
    let mut groups = vec![];
    for f in &c.files {
        for p in expand(f, &mut errs) {
            match read_one(&p) {
                Ok(g) => groups.extend(g),
                Err(e) => {
                    // keep what this file gave before
                    let prefix = format!("{}:", p.display());
                    groups.extend(
                        up.groups()
                            .into_iter()
                            .filter(|g| g.source.starts_with(&prefix)),
                    );
                    errs.push(e);
                }
            }
        }
    }
    up.replace(groups);
    if !errs.is_empty() {
        up.error(errs.join("; "));
    }
}

/// Reads the files now (so a configuration's file targets start with it) and again every
/// refresh interval on a task.
pub(crate) fn start(c: FileSdConfig, up: Updater) -> tokio::task::AbortHandle {
    refresh(&c, &up);
    let every = c
        .refresh_interval
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(30))
        .max(Duration::from_millis(100));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            refresh(&c, &up);
        }
    })
    .abort_handle()
}
