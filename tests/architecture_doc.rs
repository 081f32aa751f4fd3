//! ARCHITECTURE.md names every module that exists: each source file of the three crates is named
//! in the document, a file inside a folder on a line that also names that folder.

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `root`, as a path relative to it with `/` separators.
fn sources(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(root)];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read source folder") {
            let path = entry.expect("folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("under root");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

/// Whether `doc` names the source file `rel` (relative to its crate's `src/`).
fn named(doc: &str, rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let file = parts[parts.len() - 1];
    let stem = file.trim_end_matches(".rs");
    if doc.contains(rel) {
        return true;
    }
    if parts.len() == 1 {
        return doc.contains(&format!("`{file}`")) || doc.contains(&format!("`{stem}`"));
    }
    let folder = parts[parts.len() - 2];
    let folder_mark = format!("{folder}/");
    if file == "mod.rs" {
        return doc.contains(&folder_mark);
    }
    doc.lines().any(|line| {
        line.contains(&folder_mark)
            && (line.contains(&format!("`{file}`"))
                || line.contains(&format!("`{stem}`"))
                || line.contains(&format!("{folder}/{file}"))
                || line.contains(&format!(" {file}"))
                || line.contains(&format!("({file}")))
    })
}

#[test]
fn architecture_names_every_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut missing = Vec::new();
    for crate_src in ["src", "query/src", "storage/src"] {
        for rel in sources(&root.join(crate_src)) {
            // Unit tests kept in a file of their own belong to the module beside them.
            if rel == "lib.rs" || rel.ends_with("tests.rs") {
                continue;
            }
            if !named(&doc, &rel) {
                missing.push(format!("{crate_src}/{rel}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name these modules (add a line or a mention on their folder's line):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_file_on_another_folders_line_does_not_count() {
    let doc = "| `scrape/` | `manager.rs` the loops |\n| `api/` | `query.rs` |";
    assert!(named(doc, "scrape/manager.rs"));
    assert!(!named(doc, "api/manager.rs"));
    assert!(!named(doc, "scrape/cache.rs"));
    assert!(named(doc, "api/mod.rs"));
    assert!(!named(doc, "ui/mod.rs"));
}
