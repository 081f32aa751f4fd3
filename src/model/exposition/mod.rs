//! Parser for the Prometheus text exposition format 0.0.4 and OpenMetrics 1.0 text.
//!
//! [`Parser`] walks a page line by line and yields [`Entry`] values that borrow from the input
//! buffer: metric names, label names and values are `&str` slices of the page, and a value is
//! copied only when it must be unescaped (`\\`, `\"`, `\n`) or normalised (`le`/`quantile`
//! bounds are rewritten as Prometheus 3 does, `1` -> `1.0`). Nothing is allocated per sample
//! otherwise.
//!
//! What it accepts:
//! - metric names with colons (`vllm:num_requests_running`), and Prometheus 3's quoted UTF-8
//!   names (`{"my.metric","a.b"="c"}`);
//! - label values with any UTF-8, escapes, and `}` `,` `=` inside quotes;
//! - values `NaN`, `+Inf`, `-Inf`, `Inf`, exponents (`4.833385e+06`, `1.1e+010`);
//! - optional timestamps (integer milliseconds in 0.0.4, float seconds in OpenMetrics);
//! - `# HELP`, `# TYPE`, `# UNIT` as metadata entries; other comments are skipped;
//! - exemplars (`... # {trace_id="x"} 1.0`) are skipped; `_created` samples are ordinary
//!   samples;
//! - `# EOF` ends an OpenMetrics page (required there, nothing may follow it; a final newline
//!   is optional); in 0.0.4 it is an ordinary comment;
//! - blanks as Prometheus' lexers read them: in 0.0.4 spaces and tabs may separate any two
//!   tokens of a sample line (`name {a="b"}  1 \t` is a sample), lead a line or end it, and
//!   a page need not end with a newline; OpenMetrics separates tokens by exactly one space
//!   and allows no other blank, no empty line, and no blank at a line's start or end. In both a
//!   `\r` before the newline is part of the line (so `1\r` is not a value), text 0.0.4
//!   timestamps are unsigned digits, and exemplars are read (and skipped) in OpenMetrics only.
//!
//! Errors carry the 1-based line number and the reason; the iterator goes on with the next
//! line after an error, so a caller may choose to skip bad lines.

mod fuzz;
mod lex;

use std::borrow::Cow;
use std::fmt;

pub use fuzz::fuzz_parse;
pub use lex::{format_openmetrics_float, parse_value};

/// Which text format a page is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The classic Prometheus text format (`text/plain; version=0.0.4` or `version=1.0.0`).
    PromText,
    /// OpenMetrics 1.0 text (`application/openmetrics-text`).
    OpenMetrics,
}

impl Format {
    /// The format a `Content-Type` header announces; anything not OpenMetrics is text 0.0.4,
    /// as Prometheus falls back to it.
    pub fn from_content_type(ct: &str) -> Format {
        let media = ct.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::PromText
        }
    }
}

/// A metric family's type, from its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// `counter`
    Counter,
    /// `gauge`
    Gauge,
    /// `histogram`
    Histogram,
    /// `gaugehistogram` (OpenMetrics)
    GaugeHistogram,
    /// `summary`
    Summary,
    /// `info` (OpenMetrics)
    Info,
    /// `stateset` (OpenMetrics)
    StateSet,
    /// `untyped` (0.0.4) or `unknown` (OpenMetrics)
    Unknown,
}

impl MetricType {
    /// The name Prometheus' metadata API uses for this type.
    pub fn as_str(&self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Unknown => "unknown",
        }
    }

    fn parse(s: &str, format: Format) -> Option<MetricType> {
        Some(match s {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "untyped" if format == Format::PromText => MetricType::Unknown,
            "unknown" => MetricType::Unknown,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            _ => return None,
        })
    }
}

impl fmt::Display for MetricType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parse error: the 1-based line and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number in the page.
    pub line: usize,
    /// What was wrong with it.
    pub reason: String,
    /// Whether only the value (or timestamp) was unreadable while the series was well
    /// formed, e.g. dcgm-exporter's `ERROR - FAILED TO CONVERT TO STRING`.
    pub bad_value_only: bool,
}

/// One entry of a page.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry<'a> {
    /// `# HELP name text` (text unescaped).
    Help {
        /// The family name.
        name: Cow<'a, str>,
        /// The help text.
        help: Cow<'a, str>,
    },
    /// `# TYPE name type`.
    Type {
        /// The family name.
        name: Cow<'a, str>,
        /// The type.
        kind: MetricType,
    },
    /// `# UNIT name unit`.
    Unit {
        /// The family name.
        name: Cow<'a, str>,
        /// The unit.
        unit: &'a str,
    },
    /// A sample line.
    Sample(Sample<'a>),
}

/// One sample, borrowing from the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// The metric name (borrowed unless it was a quoted name with escapes).
    pub name: Cow<'a, str>,
    /// The labels, read lazily from the page.
    pub labels: LabelSet<'a>,
    /// The value.
    pub value: f64,
    /// The timestamp in milliseconds, when the page gave one.
    pub timestamp_ms: Option<i64>,
    /// The series text as written on the page (name and label set), a stable cache key.
    pub series_text: &'a str,
}

/// The label set of a sample, validated once and read on demand without allocating.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSet<'a> {
    raw: &'a str,
    normalise: Option<&'static str>,
}

impl<'a> LabelSet<'a> {
    /// Iterates `(name, value)` pairs in page order; values are unescaped and `le`/`quantile`
    /// normalised where the family type calls for it.
    pub fn iter(&self) -> LabelIter<'a> {
        LabelIter {
            rest: self.raw,
            normalise: self.normalise,
        }
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the sample has no labels.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<Cow<'a, str>> {
        self.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The label whose values are normalised as floats (`le` in histograms, `quantile` in
    /// summaries), as the family's type gave it.
    pub fn normalised_label(&self) -> Option<&'static str> {
        self.normalise
    }
}

/// Reads a series text as [`Sample::series_text`] gives it (a name and label set, nothing
/// after it) with the normalisation of [`LabelSet::normalised_label`]; the sample's value is
/// 0. `None` when `text` is not exactly one series.
pub fn parse_series_text<'a>(text: &'a str, normalise: Option<&'static str>) -> Option<Sample<'a>> {
    let (rest, (name, raw)) = lex::series(text, true).ok()?;
    if !rest.is_empty() {
        return None;
    }
    Some(Sample {
        name,
        labels: LabelSet { raw, normalise },
        value: 0.0,
        timestamp_ms: None,
        series_text: text,
    })
}

/// Iterator over a [`LabelSet`].
#[derive(Debug, Clone)]
pub struct LabelIter<'a> {
    rest: &'a str,
    normalise: Option<&'static str>,
}

impl<'a> Iterator for LabelIter<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (rest, item) = lex::next_label(self.rest)?;
            self.rest = rest;
            match item {
                lex::LabelItem::Pair(name, value) => {
                    let name = lex::unescape(name);
                    let mut value = lex::unescape(value);
                    if self.normalise == Some(name.as_ref()) {
                        if let Some(n) = lex::normalise_float(&value) {
                            value = Cow::Owned(n);
                        }
                    }
                    return Some((name, value));
                }
                lex::LabelItem::Name(_) => continue,
            }
        }
    }
}

/// Iterates the entries of a page. See the module docs.
#[derive(Debug, Clone)]
pub struct Parser<'a> {
    input: &'a str,
    pos: usize,
    line: usize,
    format: Format,
    mtype: MetricType,
    eof_seen: bool,
    done: bool,
    /// Whether the input ends the page (else it is a piece of a longer one, see
    /// [`Parser::resume`]).
    ends_page: bool,
    /// Start and end (line break excluded) of the line read last.
    last: (usize, usize),
}

/// Where a [`Parser`] stands at the end of one piece of a page, for [`Parser::resume`] to go
/// on with the next piece: the line count, the current family's type, whether OpenMetrics'
/// `# EOF` was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParserState {
    line: usize,
    mtype: MetricType,
    eof_seen: bool,
}

impl ParserState {
    /// The state at a page's start.
    pub fn start() -> Self {
        ParserState {
            line: 0,
            mtype: MetricType::Unknown,
            eof_seen: false,
        }
    }

    /// Counts a line the caller read itself (one it could not hand to the parser, e.g. bytes
    /// that are not UTF-8).
    pub fn skip_line(&mut self) {
        self.line += 1;
    }

    /// The number of lines read so far.
    pub fn line(&self) -> usize {
        self.line
    }

    /// Whether OpenMetrics' `# EOF` was read (whatever follows is an error that ends the
    /// page).
    pub fn after_eof(&self) -> bool {
        self.eof_seen
    }
}

/// Parses `input` in `format`; a shorthand for [`Parser::new`].
pub fn parse(input: &str, format: Format) -> Parser<'_> {
    Parser::new(input, format)
}

impl<'a> Parser<'a> {
    /// A parser over a whole page.
    pub fn new(input: &'a str, format: Format) -> Self {
        Self::resume(input, format, ParserState::start(), true)
    }

    /// A parser over `input`, a piece of a longer page cut after a line break, going on from
    /// `state` ([`Parser::state`] at the end of the piece before, or [`ParserState::start`]).
    /// `ends_page`: whether the page ends with this piece (only then does OpenMetrics' missing
    /// `# EOF` count). Lets a reader parse a page larger than it wants in memory at once.
    pub fn resume(input: &'a str, format: Format, state: ParserState, ends_page: bool) -> Self {
        Parser {
            input,
            pos: 0,
            line: state.line,
            format,
            mtype: state.mtype,
            eof_seen: state.eof_seen,
            done: false,
            ends_page,
            last: (0, 0),
        }
    }

    /// Where the parser stands, for [`Parser::resume`].
    pub fn state(&self) -> ParserState {
        ParserState {
            line: self.line,
            mtype: self.mtype,
            eof_seen: self.eof_seen,
        }
    }

    /// The 1-based number of the line read last (0 before the first).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The format being parsed.
    pub fn format(&self) -> Format {
        self.format
    }

    fn err(&self, reason: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            reason: reason.into(),
            bad_value_only: false,
        }
    }

    fn next_line(&mut self) -> Option<&'a str> {
        if self.pos >= self.input.len() {
            return None;
        }
        let rest = &self.input[self.pos..];
        let (line, adv) = match rest.find('\n') {
            Some(i) => (&rest[..i], i + 1),
            None => (rest, rest.len()),
        };
        self.last = (self.pos, self.pos + line.len());
        self.pos += adv;
        self.line += 1;
        // a '\r' stays part of the line, as in Prometheus (so `1\r` is not a value)
        Some(line)
    }

    /// Where the line of the entry [`Parser::next`] gave last lies in the input (its line
    /// break excluded): `start..end`.
    pub fn last_line_span(&self) -> (usize, usize) {
        self.last
    }

    /// Where in the input the next line starts (the input's length at the end).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// If the next line is exactly `line` (a `# HELP`, `# TYPE` or `# UNIT` line of an
    /// earlier page, as [`Parser::last_line_span`] gave it), consumes it and returns true;
    /// `kind` is the type such a `TYPE` line declared, which the parser takes on as
    /// [`Parser::next`] would. Anything else: false, nothing consumed.
    #[inline]
    pub fn next_known_meta(&mut self, line: &str, kind: Option<MetricType>) -> bool {
        if self.done || self.eof_seen {
            return false;
        }
        let b = &self.input.as_bytes()[self.pos..];
        let n = line.len();
        if n == 0 || b.len() < n || b[..n] != *line.as_bytes() {
            return false;
        }
        let adv = match b.get(n) {
            None => n,
            Some(b'\n') => n + 1,
            _ => return false,
        };
        self.last = (self.pos, self.pos + n);
        self.pos += adv;
        self.line += 1;
        if let Some(k) = kind {
            self.mtype = k;
        }
        true
    }

    /// A line starting with `#`. Text 0.0.4 (as Prometheus' lexer): `#`, blanks, `HELP` or
    /// `TYPE` (or `UNIT`), blanks, the name, one separator, then the text; any other comment
    /// (`# EOF` included) is skipped. OpenMetrics: exactly `# HELP name text`,
    /// `# TYPE name type`, `# UNIT name unit` or `# EOF`, single spaces.
    fn comment(&mut self, line: &'a str) -> Option<Result<Entry<'a>, ParseError>> {
        let body = &line[1..];
        let open_metrics = self.format == Format::OpenMetrics;
        let (kw, rest) = if open_metrics {
            if body == " EOF" {
                self.eof_seen = true;
                return None;
            }
            let kw = body
                .strip_prefix(' ')
                .and_then(|b| b.split_once(' '))
                .filter(|(kw, _)| matches!(*kw, "HELP" | "TYPE" | "UNIT"));
            match kw {
                Some(x) => x,
                None => {
                    return Some(Err(
                        self.err(format!("invalid comment line {:?}", trunc(line)))
                    ))
                }
            }
        } else {
            let b = body.trim_start_matches([' ', '\t']);
            if b.len() == body.len() {
                return None; // `#word`: an ordinary comment
            }
            let i = b.find([' ', '\t']).unwrap_or(b.len());
            if i == b.len() || !matches!(&b[..i], "HELP" | "TYPE" | "UNIT") {
                return None; // ordinary comment
            }
            (&b[..i], b[i..].trim_start_matches([' ', '\t']))
        };
        let (name, after) = match lex::metric_name_or_quoted(rest) {
            Some(x) => x,
            None => {
                return Some(Err(self.err(format!(
                    "invalid metric name in {kw} line: {:?}",
                    trunc(rest)
                ))))
            }
        };
        // one separator, then the text as written (Prometheus keeps further blanks)
        let arg = match after.strip_prefix(if open_metrics {
            &[' '][..]
        } else {
            &[' ', '\t'][..]
        }) {
            Some(a) => a,
            None if after.is_empty() && !open_metrics => after,
            None => {
                return Some(Err(self.err(format!(
                    "invalid metric name in {kw} line: {:?}",
                    trunc(rest)
                ))))
            }
        };
        match kw {
            "HELP" => Some(Ok(Entry::Help {
                name,
                help: lex::unescape_help(arg, self.format),
            })),
            "TYPE" => match MetricType::parse(arg, self.format) {
                Some(kind) => {
                    self.mtype = kind;
                    Some(Ok(Entry::Type { name, kind }))
                }
                None => Some(Err(self.err(format!("invalid metric type {arg:?}")))),
            },
            _ => Some(Ok(Entry::Unit { name, unit: arg })),
        }
    }

    fn sample(&mut self, line: &'a str) -> Result<Entry<'a>, ParseError> {
        let (rest, name_part) = lex::series(line, self.format == Format::PromText)
            .map_err(|reason| self.err(reason))?;
        let (name, raw) = name_part;
        let series_text = &line[..line.len() - rest.len()];
        let (value, timestamp_ms) = self.value_part(rest, series_text)?;
        Ok(Entry::Sample(Sample {
            name,
            labels: LabelSet {
                raw,
                normalise: self.normalise(),
            },
            value,
            timestamp_ms,
            series_text,
        }))
    }

    /// The label whose values are normalised in the current family (`le` in histograms,
    /// `quantile` in summaries): what [`LabelSet::normalised_label`] of a sample read now
    /// would say.
    pub fn normalise(&self) -> Option<&'static str> {
        match self.mtype {
            MetricType::Histogram | MetricType::GaugeHistogram => Some("le"),
            MetricType::Summary => Some("quantile"),
            _ => None,
        }
    }

    /// The value and optional timestamp after the series part of a sample line (`rest`
    /// starts right after the series text).
    fn value_part(&self, rest: &str, series_text: &str) -> Result<(f64, Option<i64>), ParseError> {
        let open_metrics = self.format == Format::OpenMetrics;
        if open_metrics && !rest.starts_with(' ') {
            return Err(self.err("expected a space before the value"));
        }
        let b = rest.as_bytes();
        let mut i = 0usize;
        // The next token. Text 0.0.4: after any blanks (spaces, tabs), up to the next blank.
        // OpenMetrics: after exactly one space, up to the next space (a tab is part of it);
        // `Err` for a second space or a space ending the line.
        let mut tok = || -> Result<Option<&str>, ()> {
            if i == b.len() {
                return Ok(None);
            }
            if open_metrics {
                i += 1; // the one space (every token ends at a space or the line's end)
            } else {
                while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                    i += 1;
                }
            }
            let start = i;
            while i < b.len() && b[i] != b' ' && (open_metrics || b[i] != b'\t') {
                i += 1;
            }
            match (i > start, open_metrics) {
                (true, _) => Ok(Some(&rest[start..i])),
                (false, false) => Ok(None),
                (false, true) => Err(()),
            }
        };
        let blank = || self.err(format!("unexpected blank after {:?}", trunc(series_text)));
        let vtok = tok()
            .map_err(|_| blank())?
            .ok_or_else(|| self.err(format!("missing value after {:?}", trunc(series_text))))?;
        let value = lex::parse_value(vtok).ok_or_else(|| ParseError {
            line: self.line,
            reason: format!("invalid value {:?}", trunc(vtok)),
            bad_value_only: vtok.chars().all(|c| !c.is_control()),
        })?;
        let mut timestamp_ms = None;
        match tok().map_err(|_| blank())? {
            None => {}
            // "#" starts an exemplar (OpenMetrics only), which is skipped
            Some("#") if open_metrics => {}
            Some("#") => return Err(self.err("exemplars are only read in OpenMetrics")),
            Some(t) => {
                timestamp_ms = Some(self.timestamp(t)?);
                match tok().map_err(|_| blank())? {
                    None => {}
                    Some("#") if open_metrics => {}
                    Some(x) => {
                        return Err(self.err(format!("unexpected {:?} after timestamp", trunc(x))))
                    }
                }
            }
        }
        Ok((value, timestamp_ms))
    }

    /// The fast path of a scrape cache. When the next line is a sample line that starts with
    /// `series_text` (the [`Sample::series_text`] of an earlier page) followed by a blank,
    /// consumes it and gives its value and timestamp exactly as [`Parser::next`] would (the
    /// series part of such a line reads the same as it did then); `None`, with nothing
    /// consumed, for any other line (the caller then uses [`Parser::next`]).
    #[inline]
    pub fn next_known(
        &mut self,
        series_text: &str,
    ) -> Option<Result<(f64, Option<i64>), ParseError>> {
        if self.done || self.eof_seen {
            return None;
        }
        let input: &'a str = self.input;
        let rest = &input[self.pos..];
        let n = series_text.len();
        let b = rest.as_bytes();
        if n == 0 || b.len() <= n || b[..n] != *series_text.as_bytes() {
            return None;
        }
        let text = self.format == Format::PromText;
        if b[n] != b' ' && !(text && b[n] == b'\t') {
            return None;
        }
        // `name {...}`: not this series but one with a label set (a value never starts with
        // '{'); the full parser reads it (or refuses it, in OpenMetrics)
        let mut k = n + 1;
        while k < b.len() && (b[k] == b' ' || b[k] == b'\t') {
            k += 1;
        }
        if b.get(k) == Some(&b'{') {
            return None;
        }
        if !text {
            // OpenMetrics: the value starts right after the one space
            k = n + 1;
        }
        // the common lines: a plain decimal, then the line's end, or one space and a plain
        // timestamp (text: digits; OpenMetrics: decimal seconds) and the line's end
        if let Some((v, len)) = lex::plain_decimal(&b[k..]) {
            self.pos += k + len;
            self.line += 1;
            return Some(Ok((v, None)));
        }
        if let Some((v, vlen)) = lex::plain_decimal_token(&b[k..]) {
            let t0 = k + vlen + 1;
            if b.get(t0 - 1) == Some(&b' ') {
                let ts = match self.format {
                    Format::PromText => lex::plain_digits(&b[t0..]),
                    Format::OpenMetrics => lex::plain_decimal_token(&b[t0..])
                        .map(|(s, n)| ((s * 1000.0).round() as i64, n)),
                };
                if let Some((ts, tlen)) = ts {
                    let end = t0 + tlen;
                    let adv = match b.get(end) {
                        None => Some(end),
                        Some(b'\n') => Some(end + 1),
                        _ => None,
                    };
                    if let Some(adv) = adv {
                        self.pos += adv;
                        self.line += 1;
                        return Some(Ok((v, Some(ts))));
                    }
                }
            }
        }
        let (line, adv) = match rest[n..].find('\n') {
            Some(i) => (&rest[..n + i], n + i + 1),
            None => (rest, rest.len()),
        };
        self.pos += adv;
        self.line += 1;
        Some(self.value_part(&line[n..], series_text))
    }

    fn timestamp(&self, t: &str) -> Result<i64, ParseError> {
        let bad = || ParseError {
            line: self.line,
            reason: format!("invalid timestamp {:?}", trunc(t)),
            bad_value_only: true,
        };
        match self.format {
            // Prometheus' lexer takes digits only (no sign)
            Format::PromText if t.bytes().all(|c| c.is_ascii_digit()) => {
                t.parse::<i64>().map_err(|_| bad())
            }
            Format::PromText => Err(bad()),
            Format::OpenMetrics => {
                let f = lex::parse_value(t).ok_or_else(bad)?;
                if !f.is_finite() {
                    return Err(bad());
                }
                Ok((f * 1000.0).round() as i64)
            }
        }
    }
}

fn trunc(s: &str) -> &str {
    if s.len() <= 64 {
        return s;
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl<'a> Iterator for Parser<'a> {
    type Item = Result<Entry<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let Some(line) = self.next_line() else {
                self.done = true;
                if self.format == Format::OpenMetrics && !self.eof_seen && self.ends_page {
                    return Some(Err(self.err("data does not end with # EOF")));
                }
                return None;
            };
            if self.eof_seen {
                self.done = true;
                return Some(Err(self.err("unexpected data after # EOF")));
            }
            let body = match self.format {
                // blank lines and blanks before a line's first token are skipped
                Format::PromText => line.trim_start_matches([' ', '\t']),
                Format::OpenMetrics if line.is_empty() => {
                    return Some(Err(self.err("empty line")));
                }
                Format::OpenMetrics if line.starts_with([' ', '\t']) => {
                    return Some(Err(
                        self.err(format!("line starts with a blank: {:?}", trunc(line)))
                    ));
                }
                Format::OpenMetrics => line,
            };
            if body.is_empty() {
                continue;
            }
            if body.starts_with('#') {
                match self.comment(body) {
                    Some(r) => return Some(r),
                    None => continue,
                }
            }
            return Some(self.sample(body));
        }
    }
}

/// Escapes a label value for the text formats (`\\`, `\"`, `\n`), as Prometheus writes them.
pub fn escape_label_value(v: &str) -> Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(v);
    }
    let mut o = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    Cow::Owned(o)
}

#[cfg(test)]
mod tests;
