//! Recording and alerting rules: the rule-file format (`file.rs`, read through the
//! positioned YAML tree of `yaml.rs`), evaluation and alert state (`group.rs`), promtool's
//! `check rules` (`check.rs`) and rule unit tests (`unittest.rs`, with the input-series
//! notation of `series.rs`); evaluation timestamps and the store over `Db` (`schedule.rs`);
//! the vLLM rule pack built into the binary (`pack.rs`); the manager `serve` runs
//! (`manager.rs`).

pub mod check;
pub mod file;
pub mod group;
pub mod manager;
pub mod pack;
pub mod schedule;
pub mod series;
pub mod unittest;
pub mod yaml;

use std::path::{Path, PathBuf};

/// Expands a file pattern as Go's `filepath.Glob` does (`*`, `?`, `[...]` in any path
/// element; a pattern without them is returned only if the file exists), sorted.
pub fn glob(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let s = pattern.to_string_lossy();
    if !s.contains(['*', '?', '[']) {
        return Ok(if pattern.exists() {
            vec![pattern.to_path_buf()]
        } else {
            vec![]
        });
    }
    let mut current: Vec<PathBuf> = vec![if pattern.is_absolute() {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    }];
    for comp in pattern.components() {
        let part = comp.as_os_str().to_string_lossy().to_string();
        if matches!(comp, std::path::Component::RootDir) {
            continue;
        }
        if !part.contains(['*', '?', '[']) {
            current = current.into_iter().map(|p| p.join(&part)).collect();
            continue;
        }
        let re = glob_regex(&part).map_err(|_| "syntax error in pattern".to_string())?;
        let mut next = Vec::new();
        for dir in &current {
            let read = if dir.as_os_str().is_empty() {
                std::fs::read_dir(".")
            } else {
                std::fs::read_dir(dir)
            };
            let Ok(rd) = read else { continue };
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| re.is_match(n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        current = next;
    }
    current.retain(|p| p.exists());
    Ok(current)
}

fn glob_regex(part: &str) -> Result<regex::Regex, regex::Error> {
    let mut re = String::from("^");
    let mut chars = part.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            '[' => {
                re.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    re.push('^');
                }
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                    if c == '\\' || c == '[' {
                        re.push('\\');
                    }
                    re.push(c);
                }
                re.push(']');
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    re.push_str(&regex::escape(&n.to_string()));
                }
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re)
}

/// The fuzz target's body (`fuzz/fuzz_targets/rules_parse.rs`): the rule-file reader, the
/// unit-test file reader and the input-series notation must refuse bad input with an error,
/// never panic; an accepted rule file's expressions must all parse.
pub fn fuzz_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(f) = file::parse(&text, false) {
        for g in &f.groups {
            for r in &g.rules {
                assert!(
                    inferdb_query::parse(&r.expr).is_ok(),
                    "accepted bad expr {:?}",
                    r.expr
                );
            }
        }
    }
    let _ = file::parse(&text, true);
    unittest::fuzz_decode(&text);
    if let Some((series, values)) = text.split_once('\n') {
        let _ = series::parse_series_desc(series, values);
    }
}
