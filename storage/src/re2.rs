//! Go's RE2 regex syntax, in which Prometheus' regexes (PromQL `=~`/`!~` matchers,
//! `label_replace`, relabelling) are written: checked as Go's `regexp/syntax` parser checks
//! it, and rewritten for the `regex` crate where the two read the same text differently.
//!
//! Refused with Go's message (`invalid repeat count: `{1001}``, ...): repeat counts over 1000,
//! also nested ones whose product along a chain of counted repetitions exceeds 1000
//! (`(a{100}){100}`); stacked repetition operators (`a**`, `a{2}*`); a repetition with
//! nothing to repeat; unknown escapes (`\Z`, `\C`, `\1`); flags other than `i`, `m`, `s`, `U`
//! and lookaround (`(?x)`, `(?=`); unbalanced parentheses; unclosed classes; unknown POSIX
//! classes.
//!
//! Rewritten to mean what Go means: `\d \s \w` and their negations, `\b \B` (ASCII in Go,
//! Unicode in the regex crate); `\Q...\E` quoting; octal escapes; a `{` that does not start a
//! valid repetition (`a{`, `a{,5}`, `a{01}`, `a{ 2 }`), which Go reads as a literal;
//! escaped punctuation the regex crate reads as something else (`\<`, `\>`); class items the
//! regex crate reads as set operations (`&&`, `--`, `~~`) or nested classes (`[`);
//! `\p{^Greek}`; a repeated capture group name (allowed by Go).
//!
//! Not emulated: Go's limits on nesting depth and program size (the regex crate is given
//! limits at least as large, see [`compile_anchored`]), and the exact set of Unicode class
//! names Go knows (the regex crate knows more).

use std::collections::HashSet;
use std::fmt::Write as _;

use regex::{Regex, RegexBuilder};

/// A regex Go's parser refuses, with Go's message (without the `error parsing regexp: `
/// prefix), e.g. ``invalid repeat count: `{1001}` ``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: `{expr}`")]
pub struct Re2Error {
    /// What is wrong, in Go's words (`invalid repeat count`).
    pub code: &'static str,
    /// The part of the regex Go names.
    pub expr: String,
}

const INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const MISSING_REPEAT_ARGUMENT: &str = "missing argument to repetition operator";
const INVALID_ESCAPE: &str = "invalid escape sequence";
const INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const INVALID_NAMED_CAPTURE: &str = "invalid named capture";
const MISSING_PAREN: &str = "missing closing )";
const UNEXPECTED_PAREN: &str = "unexpected )";
const MISSING_BRACKET: &str = "missing closing ]";
const INVALID_CHAR_RANGE: &str = "invalid character class range";
const TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";
const TOO_LARGE: &str = "expression too large";

/// The most a counted repetition may repeat, alone or nested (Go's limit).
const MAX_REPEAT: u64 = 1000;

/// Compiled-program size limit for the regex crate. Go accepts far larger
/// programs than the regex crate's 10 MiB default: Prometheus takes an alternation of 100,000
/// pod names (5 MB of regex), which needs some hundreds of MiB here.
const SIZE_LIMIT: usize = 1 << 30;
/// Nesting the regex crate allows (its default of 250 refuses what Go takes).
const NEST_LIMIT: u32 = 4000;

/// Compiles `pattern` as Prometheus compiles a regex matcher: checked as Go's parser checks
/// it, then anchored and with `.` matching newlines (`^(?s:pattern)$`).
pub fn compile_anchored(pattern: &str) -> Result<Regex, Re2Error> {
    let t = translate(pattern)?;
    RegexBuilder::new(&format!("^(?s:{t})$"))
        .size_limit(SIZE_LIMIT)
        .nest_limit(NEST_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => Re2Error {
                code: TOO_LARGE,
                expr: pattern.to_string(),
            },
            // not expected for a checked pattern: the regex crate's own words
            other => Re2Error {
                code: "unsupported by inferdb's regex engine",
                expr: other
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim_start_matches("error: ")
                    .to_string(),
            },
        })
}

/// Checks `pattern` as Go's `regexp/syntax` parser (Perl flags) does and gives the same
/// regex in the regex crate's syntax.
pub fn translate(pattern: &str) -> Result<String, Re2Error> {
    Translator {
        src: pattern,
        pos: 0,
        out: String::with_capacity(pattern.len() + 8),
        frames: vec![Frame::default()],
        names: HashSet::new(),
    }
    .run()
}

/// What the last item of a group (since its start or its last `|`) was.
#[derive(Debug, Clone, Copy, Default)]
enum Last {
    /// Nothing: a repetition here has no argument.
    #[default]
    None,
    /// Something repeatable of this weight (see [`Frame::weight`]).
    Atom(u64),
    /// A repetition (of this weight) whose operator starts at this byte: another
    /// repetition operator right after it is a stacked one.
    Repeat(u64, usize),
}

impl Last {
    fn weight(self) -> u64 {
        match self {
            Last::None => 0,
            Last::Atom(w) | Last::Repeat(w, _) => w,
        }
    }
}

/// An open group.
#[derive(Debug, Clone, Copy, Default)]
struct Frame {
    /// The largest product of counted repetitions along a chain of nested repetitions among
    /// the group's items before `last` (a "weight"; 1 for an item without repetitions): Go
    /// refuses a repetition that takes a weight over 1000.
    before: u64,
    last: Last,
}

struct Translator<'a> {
    src: &'a str,
    pos: usize,
    out: String,
    frames: Vec<Frame>,
    names: HashSet<&'a str>,
}

fn err(code: &'static str, expr: &str) -> Re2Error {
    Re2Error {
        code,
        expr: expr.to_string(),
    }
}

/// Writes `c` as a literal outside a class.
fn push_literal(out: &mut String, c: char) {
    match c {
        '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
        | '#' | '&' | '-' | '~' => {
            out.push('\\');
            out.push(c);
        }
        c if c.is_control() => {
            let _ = write!(out, "\\x{{{:X}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Writes `c` as a literal inside a class.
fn push_class_literal(out: &mut String, c: char) {
    match c {
        '\\' | '[' | ']' | '^' | '-' | '&' | '~' => {
            out.push('\\');
            out.push(c);
        }
        c if c.is_control() => {
            let _ = write!(out, "\\x{{{:X}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Go's Perl classes, in ASCII: (class body, negated).
fn perl_class(c: char) -> Option<(&'static str, bool)> {
    Some(match c {
        'd' => ("0-9", false),
        'D' => ("0-9", true),
        's' => ("\\t\\n\\x0C\\r ", false),
        'S' => ("\\t\\n\\x0C\\r ", true),
        'w' => ("0-9A-Za-z_", false),
        'W' => ("0-9A-Za-z_", true),
        _ => return None,
    })
}

const POSIX_CLASSES: [&str; 14] = [
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

impl<'a> Translator<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn frame(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("the root frame is never popped")
    }

    /// Records a repeatable item of weight `w`.
    fn atom(&mut self, w: u64) {
        let f = self.frame();
        f.before = f.before.max(f.last.weight());
        f.last = Last::Atom(w);
    }

    fn run(mut self) -> Result<String, Re2Error> {
        while let Some(c) = self.peek() {
            match c {
                '(' => self.open_group()?,
                ')' => {
                    if self.frames.len() == 1 {
                        return Err(err(UNEXPECTED_PAREN, self.src));
                    }
                    self.pos += 1;
                    self.out.push(')');
                    let inner = self.frames.pop().expect("checked above");
                    self.atom(inner.before.max(inner.last.weight()).max(1));
                }
                '|' => {
                    self.pos += 1;
                    self.out.push('|');
                    let f = self.frame();
                    f.before = f.before.max(f.last.weight());
                    f.last = Last::None;
                }
                '*' | '+' | '?' => {
                    let start = self.pos;
                    self.pos += 1;
                    self.repeat(start, None)?;
                }
                '{' => match self.counted() {
                    Some((counts, end)) => {
                        let start = self.pos;
                        let counts = counts.filter(|&(min, max)| {
                            min <= MAX_REPEAT
                                && max.is_none_or(|max| max <= MAX_REPEAT && min <= max)
                        });
                        let Some(counts) = counts else {
                            return Err(err(INVALID_REPEAT_SIZE, &self.src[start..end]));
                        };
                        self.pos = end;
                        self.repeat(start, Some(counts))?;
                    }
                    None => {
                        // not a repetition: Go reads a literal '{'
                        self.pos += 1;
                        self.out.push_str("\\{");
                        self.atom(1);
                    }
                },
                '[' => {
                    self.class()?;
                    self.atom(1);
                }
                '\\' => self.escape()?,
                '.' | '^' | '$' => {
                    self.pos += 1;
                    self.out.push(c);
                    self.atom(1);
                }
                c => {
                    self.pos += c.len_utf8();
                    push_literal(&mut self.out, c);
                    self.atom(1);
                }
            }
        }
        if self.frames.len() > 1 {
            return Err(err(MISSING_PAREN, self.src));
        }
        Ok(self.out)
    }

    /// A `{...}` at the current position as Go's `parseRepeat` reads it: `{n}`, `{n,}` or
    /// `{n,m}` with decimal numbers without leading zeros. Gives `(min, max)` (`max`: `None`
    /// when unbounded; the whole `None` when a number is too big to count) and the end;
    /// `None` when it is a literal `{`.
    #[allow(clippy::type_complexity)]
    fn counted(&self) -> Option<(Option<(u64, Option<u64>)>, usize)> {
        let b = self.rest().as_bytes();
        // a number at i: its value (None: too big) and its end
        let int = |i: usize| -> Option<(Option<u64>, usize)> {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j == i || (j - i >= 2 && b[i] == b'0') {
                return None;
            }
            // Go stops counting at 1e8 (then the count is invalid)
            let n = std::str::from_utf8(&b[i..j]).ok()?.parse::<u64>().ok();
            Some((n.filter(|&n| n < 100_000_000), j))
        };
        let (min, mut i) = int(1)?;
        let max = match b.get(i)? {
            b'}' => Some(min),
            b',' => {
                i += 1;
                if *b.get(i)? == b'}' {
                    None
                } else {
                    let (m, j) = int(i)?;
                    i = j;
                    Some(m)
                }
            }
            _ => return None,
        };
        if b.get(i) != Some(&b'}') {
            return None;
        }
        let counts = match (min, max) {
            (Some(min), None) => Some((min, None)),
            (Some(min), Some(Some(max))) => Some((min, Some(max))),
            _ => None,
        };
        Some((counts, self.pos + i + 1))
    }

    /// Applies a repetition operator that started at `start` (the current position is right
    /// after it, before a lazy `?`). `counts`: those of `{min,max}` (`max`: `None` for
    /// `{min,}`).
    fn repeat(&mut self, start: usize, counts: Option<(u64, Option<u64>)>) -> Result<(), Re2Error> {
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        let op = &self.src[start..self.pos];
        let last = self.frame().last;
        let w = match last {
            Last::Repeat(_, prev) => {
                return Err(err(INVALID_REPEAT_OP, &self.src[prev..self.pos]));
            }
            Last::None => return Err(err(MISSING_REPEAT_ARGUMENT, op)),
            Last::Atom(w) => w,
        };
        let w = match counts {
            None => w,
            Some((min, max)) => {
                // Go: the maximum, or the minimum when unbounded; 0 repeats nothing
                let m = max.unwrap_or(min);
                let nw = if m == 0 { 1 } else { m.saturating_mul(w) };
                if (min >= 2 || max.is_some_and(|m| m >= 2)) && nw > MAX_REPEAT {
                    return Err(err(INVALID_REPEAT_SIZE, op));
                }
                nw
            }
        };
        self.out.push_str(op);
        self.frame().last = Last::Repeat(w, start);
        Ok(())
    }

    fn open_group(&mut self) -> Result<(), Re2Error> {
        let rest = self.rest();
        if !rest.starts_with("(?") {
            self.pos += 1;
            self.out.push('(');
            self.frames.push(Frame::default());
            return Ok(());
        }
        // named capture: (?P<name>re) or (?<name>re)
        let begin = if rest.starts_with("(?P<") {
            Some(4)
        } else if rest.starts_with("(?<") {
            Some(3)
        } else {
            None
        };
        if let Some(begin) = begin {
            let Some(end) = rest.find('>') else {
                return Err(err(INVALID_NAMED_CAPTURE, rest));
            };
            let name = &rest[begin..end];
            if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
                return Err(err(INVALID_NAMED_CAPTURE, &rest[..end + 1]));
            }
            // Go allows a name twice; the regex crate does not (then the group is unnamed)
            if self.names.insert(name) {
                let _ = write!(self.out, "(?P<{name}>");
            } else {
                self.out.push('(');
            }
            self.pos += end + 1;
            self.frames.push(Frame::default());
            return Ok(());
        }
        // flags: (?flags) or (?flags:re), flags from "imsU" with one optional '-'
        let mut negated = false;
        let mut saw_flag = false;
        for (i, c) in rest[2..].char_indices() {
            let here = 2 + i + c.len_utf8();
            match c {
                'i' | 'm' | 's' | 'U' => saw_flag = true,
                '-' if !negated => {
                    negated = true;
                    saw_flag = false;
                }
                ':' | ')' => {
                    if negated && !saw_flag {
                        return Err(err(INVALID_PERL_OP, &rest[..here]));
                    }
                    let flags = &rest[2..2 + i];
                    if c == ':' {
                        let _ = write!(self.out, "(?{flags}:");
                        self.frames.push(Frame::default());
                    } else if !flags.is_empty() {
                        let _ = write!(self.out, "(?{flags})");
                    }
                    self.pos += here;
                    return Ok(());
                }
                _ => return Err(err(INVALID_PERL_OP, &rest[..here])),
            }
        }
        Err(err(INVALID_PERL_OP, rest))
    }

    /// An escape outside a class.
    fn escape(&mut self) -> Result<(), Re2Error> {
        let rest = self.rest();
        let Some(c) = rest[1..].chars().next() else {
            return Err(err(TRAILING_BACKSLASH, ""));
        };
        match c {
            'A' | 'z' => {
                self.pos += 2;
                let _ = write!(self.out, "\\{c}");
                self.atom(1);
            }
            'b' | 'B' => {
                self.pos += 2;
                let _ = write!(self.out, "(?-u:\\{c})");
                self.atom(1);
            }
            'C' => return Err(err(INVALID_ESCAPE, &rest[..2])),
            'Q' => {
                let body = &rest[2..];
                let (lit, used) = match body.find("\\E") {
                    Some(e) => (&body[..e], 2 + e + 2),
                    None => (body, rest.len()),
                };
                for ch in lit.chars() {
                    push_literal(&mut self.out, ch);
                    self.atom(1);
                }
                self.pos += used;
            }
            'p' | 'P' => {
                let n = self.unicode_class(rest, c)?;
                self.pos += n;
                self.atom(1);
            }
            _ if perl_class(c).is_some() => {
                let (body, neg) = perl_class(c).expect("checked");
                let _ = write!(self.out, "[{}{body}]", if neg { "^" } else { "" });
                self.pos += 2;
                self.atom(1);
            }
            _ => {
                let (ch, n) = parse_escape(rest)?;
                self.pos += n;
                push_literal(&mut self.out, ch);
                self.atom(1);
            }
        }
        Ok(())
    }

    /// `\pL`, `\p{Name}`, `\PL`, `\P{^Name}` at the start of `s`: writes it, gives its length.
    fn unicode_class(&mut self, s: &str, c: char) -> Result<usize, Re2Error> {
        let mut neg = c == 'P';
        let (name, len) = match s[2..].chars().next() {
            None => return Err(err(INVALID_CHAR_RANGE, s)),
            Some('{') => match s.find('}') {
                Some(e) => (&s[3..e], e + 1),
                None => return Err(err(INVALID_CHAR_RANGE, s)),
            },
            Some(ch) => (&s[2..2 + ch.len_utf8()], 2 + ch.len_utf8()),
        };
        let name = match name.strip_prefix('^') {
            Some(n) => {
                neg = !neg;
                n
            }
            None => name,
        };
        // Go knows `Any` and its Unicode tables' category and script names, all of them
        // capitalised and matched case-sensitively; a name the regex crate does not know
        // either is refused here with Go's message rather than later with ours.
        if !name.starts_with(|c: char| c.is_ascii_uppercase())
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            || Regex::new(&format!("\\p{{{name}}}")).is_err()
        {
            return Err(err(INVALID_CHAR_RANGE, &s[..len]));
        }
        let _ = write!(self.out, "\\{}{{{name}}}", if neg { 'P' } else { 'p' });
        Ok(len)
    }

    /// A bracketed class at the current position.
    fn class(&mut self) -> Result<(), Re2Error> {
        let whole = self.rest();
        let mut i = 1;
        self.out.push('[');
        if whole[i..].starts_with('^') {
            self.out.push('^');
            i += 1;
        }
        let mut first = true;
        loop {
            let t = &whole[i..];
            if t.is_empty() {
                return Err(err(MISSING_BRACKET, whole));
            }
            if t.starts_with(']') && !first {
                i += 1;
                break;
            }
            first = false;
            // POSIX class [:name:] or [:^name:]
            if let Some(body) = t.strip_prefix("[:") {
                if let Some(e) = body.find(":]") {
                    let spec = &t[..2 + e + 2];
                    let name = &body[..e];
                    let bare = name.strip_prefix('^').unwrap_or(name);
                    if !POSIX_CLASSES.contains(&bare) {
                        return Err(err(INVALID_CHAR_RANGE, spec));
                    }
                    self.out.push_str(spec);
                    i += spec.len();
                    continue;
                }
            }
            if t.starts_with("\\p") || t.starts_with("\\P") {
                let c = t.as_bytes()[1] as char;
                i += self.unicode_class(t, c)?;
                continue;
            }
            if let Some((body, neg)) = t
                .strip_prefix('\\')
                .and_then(|r| r.chars().next())
                .and_then(perl_class)
            {
                if neg {
                    let _ = write!(self.out, "[^{body}]");
                } else {
                    self.out.push_str(body);
                }
                i += 2;
                continue;
            }
            let (lo, n) = class_char(t)?;
            i += n;
            let t = &whole[i..];
            if t.len() >= 2 && t.starts_with('-') && !t[1..].starts_with(']') {
                let (hi, m) = class_char(&t[1..])?;
                if hi < lo {
                    return Err(err(INVALID_CHAR_RANGE, &whole[i - n..i + 1 + m]));
                }
                i += 1 + m;
                push_class_literal(&mut self.out, lo);
                self.out.push('-');
                push_class_literal(&mut self.out, hi);
            } else {
                push_class_literal(&mut self.out, lo);
            }
        }
        self.out.push(']');
        self.pos += i;
        Ok(())
    }
}

/// One character of a class (a literal or an escape): the character and its length.
fn class_char(t: &str) -> Result<(char, usize), Re2Error> {
    if t.starts_with('\\') {
        return parse_escape(t);
    }
    let c = t.chars().next().expect("caller checks for the end");
    Ok((c, c.len_utf8()))
}

/// Go's `parseEscape`: an escape standing for one character (`s` starts with the
/// backslash): the character and the escape's length.
fn parse_escape(s: &str) -> Result<(char, usize), Re2Error> {
    let t = &s[1..];
    let Some(c) = t.chars().next() else {
        return Err(err(TRAILING_BACKSLASH, ""));
    };
    let after = 1 + c.len_utf8();
    let bad = |end: usize| Err(err(INVALID_ESCAPE, &s[..end]));
    let b = s.as_bytes();
    let octal = |i: usize| b.get(i).is_some_and(|d| (b'0'..=b'7').contains(d));
    match c {
        // escaped punctuation is itself
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok((c, after)),
        '1'..='7' if !octal(2) => bad(after),
        '0'..='7' => {
            let mut v = c as u32 - '0' as u32;
            let mut i = 2;
            while i < 4 && octal(i) {
                v = v * 8 + (b[i] - b'0') as u32;
                i += 1;
            }
            Ok((
                char::from_u32(v).expect("octal escapes stay below 0o777"),
                i,
            ))
        }
        'x' => {
            if b.get(2) == Some(&b'{') {
                let mut v: u32 = 0;
                let mut i = 3;
                loop {
                    let Some(&d) = b.get(i) else { return bad(i) };
                    i += 1;
                    if d == b'}' {
                        break;
                    }
                    let Some(h) = (d as char).to_digit(16) else {
                        return bad(i);
                    };
                    v = v * 16 + h;
                    if v > 0x10FFFF {
                        return bad(i);
                    }
                }
                match char::from_u32(v) {
                    Some(ch) if i > 4 => Ok((ch, i)),
                    _ => bad(i),
                }
            } else {
                let hex = |i: usize| b.get(i).and_then(|d| (*d as char).to_digit(16));
                match (hex(2), hex(3)) {
                    (Some(x), Some(y)) => Ok((char::from_u32(x * 16 + y).expect("< 256"), 4)),
                    _ => bad((4).min(s.len())),
                }
            }
        }
        'a' => Ok(('\x07', 2)),
        'f' => Ok(('\x0C', 2)),
        'n' => Ok(('\n', 2)),
        'r' => Ok(('\r', 2)),
        't' => Ok(('\t', 2)),
        'v' => Ok(('\x0B', 2)),
        _ => bad(after),
    }
}

/// The `re2_translate` fuzz target's property, also replayed on stable Rust over the corpus
/// (`storage/tests/fuzz_corpus.rs`): arbitrary text never panics the checker, and a pattern
/// it accepts is rewritten into text the regex crate parses (it may only be refused as too
/// big), so a regex Go accepts is never refused for a syntax reason of ours.
pub fn fuzz_translate(data: &[u8]) {
    let Ok(pattern) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = translate(pattern) else {
        return;
    };
    match RegexBuilder::new(&format!("^(?s:{t})$"))
        .size_limit(1 << 20)
        .nest_limit(NEST_LIMIT)
        .build()
    {
        Ok(_) | Err(regex::Error::CompiledTooBig(_)) => {}
        Err(e) => {
            panic!("{pattern:?} passed Go's checks but its rewrite {t:?} does not parse: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go_err(p: &str) -> String {
        translate(p).unwrap_err().to_string()
    }

    /// Messages as Prometheus (Go's regexp/syntax) gives them; the cases were checked
    /// against Prometheus 2.42's query API (`error parsing regexp: ...`).
    #[test]
    fn refuses_what_go_refuses_with_its_message() {
        for (p, want) in [
            ("a{1001}", "invalid repeat count: `{1001}`"),
            ("a{2,1001}", "invalid repeat count: `{2,1001}`"),
            ("a{1001,}", "invalid repeat count: `{1001,}`"),
            ("a{3,2}", "invalid repeat count: `{3,2}`"),
            ("a{99999999999}", "invalid repeat count: `{99999999999}`"),
            ("(a{100}){100}", "invalid repeat count: `{100}`"),
            ("((a{10}){10}){11}", "invalid repeat count: `{11}`"),
            ("(a{100}){100}?", "invalid repeat count: `{100}?`"),
            (
                "x{1000}{1000}",
                "invalid nested repetition operator: `{1000}{1000}`",
            ),
            ("a**", "invalid nested repetition operator: `**`"),
            ("a{2}*", "invalid nested repetition operator: `{2}*`"),
            ("a*{2}", "invalid nested repetition operator: `*{2}`"),
            ("a*?+", "invalid nested repetition operator: `*?+`"),
            ("*a", "missing argument to repetition operator: `*`"),
            ("(?i)*", "missing argument to repetition operator: `*`"),
            ("a|+", "missing argument to repetition operator: `+`"),
            ("(", "missing closing ): `(`"),
            ("a)|(b", "unexpected ): `a)|(b`"),
            ("[a", "missing closing ]: `[a`"),
            ("[]", "missing closing ]: `[]`"),
            ("[[:foo:]]", "invalid character class range: `[:foo:]`"),
            ("[z-a]", "invalid character class range: `z-a`"),
            ("[a--b]", "invalid character class range: `a--`"),
            ("\\Z", "invalid escape sequence: `\\Z`"),
            ("\\C", "invalid escape sequence: `\\C`"),
            ("\\8", "invalid escape sequence: `\\8`"),
            ("\\1", "invalid escape sequence: `\\1`"),
            ("[\\b]", "invalid escape sequence: `\\b`"),
            ("[a-\\d]", "invalid escape sequence: `\\d`"),
            ("\\x{110000}", "invalid escape sequence: `\\x{110000`"),
            ("a\\", "trailing backslash at end of expression: ``"),
            ("(?x)a", "invalid or unsupported Perl syntax: `(?x`"),
            ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
            ("(?i-)a", "invalid or unsupported Perl syntax: `(?i-)`"),
            ("(?P<>a)", "invalid named capture: `(?P<>`"),
            // unknown or lower-case Unicode class names (found by the re2_translate fuzz pass)
            ("\\p{^reek}", "invalid character class range: `\\p{^reek}`"),
            ("\\p{greek}", "invalid character class range: `\\p{greek}`"),
            ("[\\pq]", "invalid character class range: `\\pq`"),
        ] {
            assert_eq!(go_err(p), want, "{p}");
            assert!(compile_anchored(p).is_err(), "{p}");
        }
    }

    #[test]
    fn accepts_what_go_accepts() {
        for p in [
            "a{1000}",
            "(a{10}){100}",
            "(a{1000}){1}",
            "(a{1000}){0,1}",
            "((a{10}){0}){200}",
            "a{1000}b{1000}c{1000}",
            "(a{1000})*",
            "a*?",
            "a{2}?",
            "^*",
            "(?)a",
            "(?i)a(?-i:b)",
            "(?U)a+",
            "(?P<n>a)(?P<n>b)",
            "(?<n>a)",
            "(|a)",
            "()",
            "\\pN\\p{Greek}\\p{^Greek}\\PL",
            "[[:alpha:][:^digit:]]",
            "[]a]",
            "[^]a]",
            "[a-]",
            "\\12\\0\\x41\\x{1F600}",
            "\\Qa.b\\E",
            "\\Qa.b",
            "\\.\\-\\<\\>\\!",
            "\\w{1000}",
            "a\\Bb\\b",
            "vllm:.*|dcgm_.+",
        ] {
            translate(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            compile_anchored(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
    }

    /// Where the two syntaxes read the same text differently, the compiled regex matches as
    /// Go's does.
    #[test]
    fn matches_as_go_does() {
        for (p, yes, no) in [
            ("a{,5}", &["a{,5}"][..], &["", "aa"][..]),
            ("a{", &["a{"], &["a"]),
            ("a{01}", &["a{01}"], &["a"]),
            ("a{ 2 }", &["a{ 2 }"], &["aa"]),
            ("x{a}", &["x{a}"], &["x"]),
            ("a}", &["a}"], &[]),
            ("a]", &["a]"], &[]),
            ("\\d+", &["0123"], &["٣", "1٣"]),
            ("\\w+", &["a_1"], &["é"]),
            ("\\s", &[" ", "\t"], &["\u{a0}"]),
            ("[\\D]", &["x", "٣"], &["1"]),
            ("[\\w-]+", &["a-b"], &["é"]),
            ("\\bx", &["x"], &[]),
            ("\\Qa.b\\E", &["a.b"], &["axb"]),
            ("\\Qa.b", &["a.b"], &["axb"]),
            ("[a&&b]", &["a", "&", "b"], &["c"]),
            ("[--a]", &["-", "0", "a"], &["b"]),
            ("[a~~b]", &["~"], &["c"]),
            ("[[a]", &["[", "a"], &["]"]),
            ("\\<a\\>", &["<a>"], &["a"]),
            ("\\101\\x41", &["AA"], &[]),
            ("\\p{^Greek}", &["a"], &["α"]),
            ("a.b", &["a\nb"], &[]),
            ("(?i)abc", &["ABC"], &[]),
            ("a|b", &["a", "b"], &["ab", ""]),
        ] {
            let re = compile_anchored(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            for y in yes {
                assert!(re.is_match(y), "{p} should match {y:?}");
            }
            for n in no {
                assert!(!re.is_match(n), "{p} should not match {n:?}");
            }
        }
        // Go's \b: 'é' is not a word character, so "é" has no boundary after it
        assert!(!compile_anchored("é\\b").unwrap().is_match("é"));
        assert!(compile_anchored("a\\b").unwrap().is_match("a"));
    }

    /// Alternations of many names (a dashboard variable with every pod selected) are taken,
    /// as Prometheus takes them, beyond the regex crate's default size limit.
    #[test]
    fn large_alternations_compile() {
        let alts: Vec<String> = (0..10_000)
            .map(|i| format!("pod-name-of-some-deployment-{i:08}-abcdefghijklm"))
            .collect();
        let re = compile_anchored(&alts.join("|")).unwrap();
        assert!(re.is_match(&alts[9_999]));
        assert!(!re.is_match("pod"));
    }
}
