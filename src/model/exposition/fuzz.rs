//! The `exposition_parse` fuzz target's body: the full parser never panics, and the fast
//! paths a series cache takes ([`Parser::next_known`], [`Parser::next_known_meta`]) read every
//! line exactly as the full parser does.

use super::{Entry, Format, ParseError, Parser};

/// What one step of a parser gave, owned, for comparison.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// A sample: its series text, the value's bits, the timestamp.
    Sample(String, u64, Option<i64>),
    /// A `HELP`, `TYPE` or `UNIT` line, as written.
    Meta(String),
    /// An error.
    Err(ParseError),
}

/// Fuzzes the exposition parser on `data` in both formats. Asserts that the full parser never
/// panics, that each error names a line within the input and each sample's series text is a
/// part of it, and that the fast paths agree with the full parser on every line of the input:
/// at each step, offered the series text (or metadata line) the full parser read there and
/// another one read elsewhere in the input, they either decline, or consume the same line and
/// give the same value and timestamp, or the same error, and leave the parser where
/// [`Parser::next`] leaves it. The walk goes on through the fast path where it applies, as a
/// scrape does, and must end with the full parser's outcomes. Returns the number of lines the
/// fast paths read (for the corpus replay to check that they were exercised).
pub fn fuzz_parse(data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    [Format::PromText, Format::OpenMetrics]
        .into_iter()
        .map(|f| agree(text, f))
        .sum()
}

fn outcome(p: &Parser<'_>, r: Result<Entry<'_>, ParseError>) -> Outcome {
    match r {
        Ok(Entry::Sample(s)) => {
            Outcome::Sample(s.series_text.to_string(), s.value.to_bits(), s.timestamp_ms)
        }
        Ok(_) => {
            let (a, b) = p.last_line_span();
            Outcome::Meta(p.input[a..b].to_string())
        }
        Err(e) => Outcome::Err(e),
    }
}

fn agree(text: &str, format: Format) -> usize {
    let lines = text.split('\n').count();
    // the reference: the full parser alone, with the position after each step
    let mut full: Vec<(Outcome, usize, Option<super::MetricType>)> = Vec::new();
    let mut p = Parser::new(text, format);
    while let Some(r) = p.next() {
        match &r {
            Ok(Entry::Sample(s)) => {
                assert!(text.contains(s.series_text));
                for (k, v) in s.labels.iter() {
                    std::hint::black_box((k, v));
                }
            }
            Err(e) => assert!(e.line <= lines + 1, "line {} of {}", e.line, lines),
            Ok(_) => {}
        }
        let kind = match &r {
            Ok(Entry::Type { kind, .. }) => Some(*kind),
            _ => None,
        };
        full.push((outcome(&p, r), p.position(), kind));
    }
    let series: Vec<&str> = full
        .iter()
        .filter_map(|(o, _, _)| match o {
            Outcome::Sample(t, _, _) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let metas: Vec<(&str, Option<super::MetricType>)> = full
        .iter()
        .filter_map(|(o, _, k)| match o {
            Outcome::Meta(l) => Some((l.as_str(), *k)),
            _ => None,
        })
        .collect();

    // the walk: fast paths first, as a scrape with a warm cache takes them
    let mut p = Parser::new(text, format);
    let mut hits = 0;
    for (j, (want, want_pos, _)) in full.iter().enumerate() {
        let mut taken: Option<Parser<'_>> = None;
        let own = match want {
            Outcome::Sample(t, _, _) => Some(t.as_str()),
            _ => None,
        };
        let other = (!series.is_empty()).then(|| series[j.wrapping_mul(7) % series.len()]);
        for cand in own.into_iter().chain(other) {
            let mut q = p.clone();
            let Some(r) = q.next_known(cand) else {
                continue;
            };
            let got = match r {
                Ok((v, ts)) => Outcome::Sample(cand.to_string(), v.to_bits(), ts),
                Err(e) => Outcome::Err(e),
            };
            assert_eq!(
                &got, want,
                "fast path for {cand:?} at step {j} ({format:?})"
            );
            assert_eq!(
                q.position(),
                *want_pos,
                "fast path for {cand:?} ends elsewhere"
            );
            assert_eq!(q.state(), {
                let mut f = p.clone();
                f.next();
                f.state()
            });
            taken.get_or_insert(q);
        }
        let own_meta = match want {
            Outcome::Meta(l) => metas.iter().find(|(m, _)| m == l).copied(),
            _ => None,
        };
        let other_meta = (!metas.is_empty()).then(|| metas[j.wrapping_mul(5) % metas.len()]);
        for (line, kind) in own_meta.into_iter().chain(other_meta) {
            let mut q = p.clone();
            if !q.next_known_meta(line, kind) {
                continue;
            }
            assert_eq!(
                &Outcome::Meta(line.to_string()),
                want,
                "metadata fast path for {line:?} at step {j} ({format:?})"
            );
            assert_eq!(q.position(), *want_pos);
            let mut f = p.clone();
            f.next();
            assert_eq!(q.state(), f.state());
            taken.get_or_insert(q);
        }
        match taken {
            Some(q) => {
                hits += 1;
                p = q;
            }
            None => {
                let r = p.next();
                let got = r.map(|r| outcome(&p, r));
                assert_eq!(got.as_ref(), Some(want), "step {j} ({format:?})");
                assert_eq!(p.position(), *want_pos);
            }
        }
    }
    assert!(
        p.next().is_none(),
        "the walk reads more than the full parser"
    );
    hits
}
