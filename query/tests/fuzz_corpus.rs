//! The `promql_parse` fuzz target's checks on stable Rust: every file of
//! `fuzz/corpus/promql_parse/` goes through the parser without a panic, and whatever parses
//! prints as PromQL that parses back to the same AST. A deterministic mutation pass over the
//! corpus (token insertions, deletions, splices) exercises the same property further.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use inferdb_query::parser::{parse, parse_duration, parse_matchers};

fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/promql_parse");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.expect("dir entry").path();
        let bytes = std::fs::read(&path).expect("read corpus file");
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        out.push((name, String::from_utf8_lossy(&bytes).into_owned()));
    }
    out.sort();
    out
}

/// The fuzz target's property; `Err` describes a violation (panic or round-trip mismatch).
fn check(input: &str) -> Result<bool, String> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let parsed = match parse(input) {
            Ok(expr) => {
                let printed = expr.to_string();
                match parse(&printed) {
                    Ok(again) if again == expr => true,
                    Ok(again) => {
                        return Err(format!(
                            "printed as {printed:?}, re-parsed differently: {again:?} vs {expr:?}"
                        ))
                    }
                    Err(e) => return Err(format!("printed as {printed:?}, fails: {e}")),
                }
            }
            Err(e) => {
                // Errors must point inside the input.
                if e.position > input.len() || e.line == 0 || e.column == 0 {
                    return Err(format!("bad error position: {e:?}"));
                }
                false
            }
        };
        let _ = parse_matchers(input);
        let _ = parse_duration(input);
        Ok(parsed)
    }));
    match r {
        Ok(v) => v,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

#[test]
fn corpus_replays_without_panics_and_round_trips() {
    let corpus = corpus();
    assert!(
        corpus.len() >= 100,
        "corpus has only {} files",
        corpus.len()
    );
    let mut failures = Vec::new();
    let mut parsed = 0;
    for (name, input) in &corpus {
        match check(input) {
            Ok(true) => parsed += 1,
            Ok(false) => {}
            Err(e) => failures.push(format!("{name} ({input:?}): {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        parsed * 2 > corpus.len(),
        "only {parsed} of {} parse",
        corpus.len()
    );
}

/// xorshift64*: a small deterministic generator for the mutation pass.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "!=",
    "=~",
    "!~",
    "==",
    "<",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "^",
    "@",
    " ",
    "\n",
    "#",
    "\"",
    "'",
    "`",
    "\\",
    "0x",
    "1",
    "0",
    ".5",
    "1e3",
    "Inf",
    "NaN",
    "5m",
    "1h30m",
    "0s",
    "-",
    "offset",
    "bool",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "by",
    "without",
    "sum",
    "topk",
    "count_values",
    "and",
    "or",
    "unless",
    "atan2",
    "rate",
    "foo",
    "__name__",
    "le",
    "step()",
    "range()",
    "start()",
    "end()",
    "min_of(",
    "max_of(",
    "histogram_quantile(",
    "label_replace(",
    "\"a\"",
    "'\\x80'",
    "\"\\u00e9\"",
    "[5m:]",
    "[1m:30s]",
    "é",
    "fill(",
    "anchored",
];

fn mutate(rng: &mut Rng, corpus: &[(String, String)], s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(chars.len() + 1);
        match rng.below(5) {
            0 | 1 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                chars.splice(at..at, t.chars());
            }
            2 => {
                let end = (at + 1 + rng.below(8)).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            3 => {
                let other: Vec<char> = corpus[rng.below(corpus.len())].1.chars().collect();
                let from = rng.below(other.len() + 1);
                let to = (from + rng.below(24)).min(other.len());
                chars.splice(at..at, other[from..to].iter().copied());
            }
            _ => {
                if at < chars.len() {
                    let from = at;
                    let to = (from + 1 + rng.below(16)).min(chars.len());
                    let dup: Vec<char> = chars[from..to].to_vec();
                    chars.splice(to..to, dup);
                }
            }
        }
    }
    chars.into_iter().collect()
}

#[test]
fn mutated_corpus_never_panics_and_round_trips() {
    let corpus = corpus();
    // PROMQL_FUZZ_ITERATIONS / PROMQL_FUZZ_SEED run a longer or different pass by hand.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let mut rng = Rng(env("PROMQL_FUZZ_SEED").unwrap_or(0x9E37_79B9_7F4A_7C15) | 1);
    let mut failures = Vec::new();
    let mut parsed = 0;
    let iterations = env("PROMQL_FUZZ_ITERATIONS").unwrap_or(4000) as usize;
    for _ in 0..iterations {
        let base = &corpus[rng.below(corpus.len())].1;
        let input = mutate(&mut rng, &corpus, base);
        match check(&input) {
            Ok(true) => parsed += 1,
            Ok(false) => {}
            Err(e) => failures.push(format!("{input:?}: {e}")),
        }
        if failures.len() >= 20 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The mutations keep a fair share of inputs valid, so the round trip is exercised.
    assert!(
        parsed > iterations / 20,
        "only {parsed} mutated inputs parsed"
    );
}
