//! The PromQL lexer.
//!
//! A state machine with the same states as Prometheus' lexer (statements, inside braces,
//! duration expression inside brackets) so that tokens, lexer errors and their positions
//! match Prometheus. Identifiers are nom parsers;
//! number scanning follows Prometheus' rules for dots, exponents and underscores.

use nom::bytes::complete::{take_while, take_while1};
use nom::combinator::recognize;
use nom::sequence::pair;
use nom::IResult;

use crate::ast::AggregateOp;

/// Token kinds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Eof,
    /// A lexer error: the message; the token's start is where Prometheus reports it.
    Error(String),
    Comment,
    Comma,
    LeftParen,
    RightParen,
    LeftBrace,
    RightBrace,
    LeftBracket,
    RightBracket,
    Colon,
    /// `=` (label matching).
    Eql,
    Identifier,
    MetricIdentifier,
    Number,
    Duration,
    String,
    // Operators.
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Eqlc,
    Neq,
    Lss,
    Lte,
    Gtr,
    Gte,
    EqlRegex,
    NeqRegex,
    TrimUpper,
    TrimLower,
    At,
    Atan2,
    Land,
    Lor,
    Lunless,
    // Aggregators.
    Agg(AggregateOp),
    // Keywords.
    Bool,
    By,
    GroupLeft,
    GroupRight,
    Fill,
    FillLeft,
    FillRight,
    Ignoring,
    Offset,
    Smoothed,
    Anchored,
    On,
    Without,
    // Preprocessors.
    Start,
    End,
    Step,
    Range,
    MaxOf,
    MinOf,
}

/// A token: kind and byte range in the input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub start: usize,
    pub end: usize,
}

fn keyword(lower: &str) -> Option<Tok> {
    use AggregateOp as A;
    Some(match lower {
        "and" => Tok::Land,
        "or" => Tok::Lor,
        "unless" => Tok::Lunless,
        "atan2" => Tok::Atan2,
        "sum" => Tok::Agg(A::Sum),
        "avg" => Tok::Agg(A::Avg),
        "count" => Tok::Agg(A::Count),
        "min" => Tok::Agg(A::Min),
        "max" => Tok::Agg(A::Max),
        "group" => Tok::Agg(A::Group),
        "stddev" => Tok::Agg(A::Stddev),
        "stdvar" => Tok::Agg(A::Stdvar),
        "topk" => Tok::Agg(A::Topk),
        "bottomk" => Tok::Agg(A::Bottomk),
        "count_values" => Tok::Agg(A::CountValues),
        "quantile" => Tok::Agg(A::Quantile),
        "limitk" => Tok::Agg(A::Limitk),
        "limit_ratio" => Tok::Agg(A::LimitRatio),
        "offset" => Tok::Offset,
        "smoothed" => Tok::Smoothed,
        "anchored" => Tok::Anchored,
        "by" => Tok::By,
        "without" => Tok::Without,
        "on" => Tok::On,
        "ignoring" => Tok::Ignoring,
        "group_left" => Tok::GroupLeft,
        "group_right" => Tok::GroupRight,
        "fill" => Tok::Fill,
        "fill_left" => Tok::FillLeft,
        "fill_right" => Tok::FillRight,
        "bool" => Tok::Bool,
        "start" => Tok::Start,
        "end" => Tok::End,
        "step" => Tok::Step,
        "range" => Tok::Range,
        "max_of" => Tok::MaxOf,
        "min_of" => Tok::MinOf,
        "inf" | "nan" => Tok::Number,
        _ => return None,
    })
}

fn duration_keyword(lower: &str) -> Option<Tok> {
    Some(match lower {
        "step" => Tok::Step,
        "range" => Tok::Range,
        "max_of" => Tok::MaxOf,
        "min_of" => Tok::MinOf,
        _ => return None,
    })
}

pub(crate) fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

pub(crate) fn is_alpha(c: char) -> bool {
    c == '_' || c.is_ascii_alphabetic()
}

pub(crate) fn is_alnum(c: char) -> bool {
    is_alpha(c) || c.is_ascii_digit()
}

/// nom: a metric identifier or keyword (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
fn metric_ident(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        take_while1(|c: char| is_alpha(c) || c == ':'),
        take_while(|c: char| is_alnum(c) || c == ':'),
    ))(i)
}

/// nom: a label name inside braces (`[a-zA-Z_][a-zA-Z0-9_]*`).
fn label_ident(i: &str) -> IResult<&str, &str> {
    recognize(pair(take_while1(is_alpha), take_while(is_alnum)))(i)
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Statements,
    InsideBraces,
    DurationExpr,
    Done,
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    paren_depth: i64,
    brace_open: bool,
    bracket_open: bool,
    got_colon: bool,
    got_duration: bool,
    string_open: char,
    tokens: Vec<Token>,
}

/// Splits `input` into tokens. The last token is `Eof` or `Error`; comments are dropped.
pub(crate) fn lex(input: &str) -> Vec<Token> {
    let mut l = Lexer {
        input,
        pos: 0,
        start: 0,
        width: 0,
        paren_depth: 0,
        brace_open: false,
        bracket_open: false,
        got_colon: false,
        got_duration: false,
        string_open: '"',
        tokens: Vec::new(),
    };
    let mut state = State::Statements;
    while state != State::Done {
        state = match state {
            State::Statements => l.statements(),
            State::InsideBraces => l.inside_braces(),
            State::DurationExpr => l.duration_expr(),
            State::Done => State::Done,
        };
    }
    l.tokens.retain(|t| t.kind != Tok::Comment);
    l.tokens
}

const EOF: char = '\u{10FFFF}';

impl<'a> Lexer<'a> {
    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn next(&mut self) -> Option<char> {
        match self.rest().chars().next() {
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
            None => {
                self.width = 0;
                None
            }
        }
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn backup(&mut self) {
        self.pos -= self.width;
        self.width = 0;
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.peek() {
            Some(c) if valid.contains(c) => {
                self.next();
                true
            }
            _ => false,
        }
    }

    fn is(&self, valid: &str) -> bool {
        matches!(self.peek(), Some(c) if valid.contains(c))
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn emit(&mut self, kind: Tok) {
        self.tokens.push(Token {
            kind,
            start: self.start,
            end: self.pos,
        });
        self.start = self.pos;
    }

    fn ignore(&mut self) {
        self.start = self.pos;
    }

    fn error(&mut self, msg: String) -> State {
        self.tokens.push(Token {
            kind: Tok::Error(msg),
            start: self.start,
            end: self.input.len(),
        });
        State::Done
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(c) if is_space(c)) {
            self.next();
        }
        self.ignore();
    }

    fn line_comment(&mut self) {
        self.pos += 1;
        while let Some(c) = self.peek() {
            if c == '\n' || c == '\r' {
                break;
            }
            self.next();
        }
        self.emit(Tok::Comment);
    }

    fn statements(&mut self) -> State {
        if self.brace_open {
            return State::InsideBraces;
        }
        if self.rest().starts_with('#') {
            self.line_comment();
            return State::Statements;
        }
        let Some(r) = self.next() else {
            if self.paren_depth != 0 {
                return self.error("unclosed left parenthesis".into());
            } else if self.bracket_open {
                return self.error("unclosed left bracket".into());
            }
            self.emit(Tok::Eof);
            return State::Done;
        };
        match r {
            ',' => self.emit(Tok::Comma),
            c if is_space(c) => self.skip_spaces(),
            '*' => self.emit(Tok::Mul),
            '/' => self.emit(Tok::Div),
            '%' => self.emit(Tok::Mod),
            '+' => self.emit(Tok::Add),
            '-' => self.emit(Tok::Sub),
            '^' => self.emit(Tok::Pow),
            '=' => match self.peek() {
                Some('=') => {
                    self.next();
                    self.emit(Tok::Eqlc)
                }
                Some('~') => {
                    return self.error("unexpected character after '=': '~'".into());
                }
                _ => self.emit(Tok::Eql),
            },
            '!' => {
                let t = self.next();
                if t != Some('=') {
                    return self.error(format!(
                        "unexpected character after '!': {}",
                        go_quote_rune(t.unwrap_or(EOF))
                    ));
                }
                self.emit(Tok::Neq)
            }
            '<' => match self.peek() {
                Some('=') => {
                    self.next();
                    self.emit(Tok::Lte)
                }
                Some('/') => {
                    self.next();
                    self.emit(Tok::TrimUpper)
                }
                _ => self.emit(Tok::Lss),
            },
            '>' => match self.peek() {
                Some('=') => {
                    self.next();
                    self.emit(Tok::Gte)
                }
                Some('/') => {
                    self.next();
                    self.emit(Tok::TrimLower)
                }
                _ => self.emit(Tok::Gtr),
            },
            c if c.is_ascii_digit()
                || (c == '.' && matches!(self.peek(), Some(d) if d.is_ascii_digit())) =>
            {
                self.backup();
                return self.number_or_duration();
            }
            '"' | '\'' => {
                self.string_open = r;
                return self.string();
            }
            '`' => {
                self.string_open = r;
                return self.raw_string();
            }
            c if is_alpha(c) || c == ':' => {
                if !self.bracket_open {
                    self.backup();
                    return self.keyword_or_identifier();
                }
                if c == ':' {
                    if self.got_colon {
                        return self.error("unexpected colon ':'".into());
                    }
                    self.emit(Tok::Colon);
                    self.got_colon = true;
                    return State::Statements;
                }
                if is_duration_keyword_start(c) && self.scan_duration_keyword() {
                    return State::Statements;
                }
                return self.error(format!(
                    "unexpected character: {}, expected ':'",
                    go_quote_rune(c)
                ));
            }
            '(' => {
                self.emit(Tok::LeftParen);
                self.paren_depth += 1;
            }
            ')' => {
                self.emit(Tok::RightParen);
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    self.tokens.pop();
                    return self.error("unexpected right parenthesis ')'".into());
                }
            }
            '{' => {
                self.emit(Tok::LeftBrace);
                self.brace_open = true;
                return State::InsideBraces;
            }
            '[' => {
                if self.bracket_open {
                    return self.error("unexpected left bracket '['".into());
                }
                self.got_colon = false;
                self.emit(Tok::LeftBracket);
                if matches!(self.peek(), Some(c) if is_space(c)) {
                    self.skip_spaces();
                }
                self.bracket_open = true;
                return State::DurationExpr;
            }
            ']' => {
                if !self.bracket_open {
                    return self.error("unexpected right bracket ']'".into());
                }
                self.emit(Tok::RightBracket);
                self.bracket_open = false;
            }
            '@' => self.emit(Tok::At),
            c => return self.error(format!("unexpected character: {}", go_quote_rune(c))),
        }
        State::Statements
    }

    fn inside_braces(&mut self) -> State {
        if self.rest().starts_with('#') {
            self.line_comment();
            return State::InsideBraces;
        }
        let Some(r) = self.next() else {
            return self.error("unexpected end of input inside braces".into());
        };
        match r {
            c if is_space(c) => self.skip_spaces(),
            c if is_alpha(c) => {
                self.backup();
                if let Ok((rest, _)) = label_ident(self.rest()) {
                    self.pos = self.input.len() - rest.len();
                }
                self.emit(Tok::Identifier);
                return State::Statements;
            }
            ',' => self.emit(Tok::Comma),
            '"' | '\'' => {
                self.string_open = r;
                return self.string();
            }
            '`' => {
                self.string_open = r;
                return self.raw_string();
            }
            '=' => {
                if self.peek() == Some('~') {
                    self.next();
                    self.emit(Tok::EqlRegex);
                } else {
                    self.emit(Tok::Eql);
                }
            }
            '!' => match self.next() {
                Some('~') => self.emit(Tok::NeqRegex),
                Some('=') => self.emit(Tok::Neq),
                nr => {
                    return self.error(format!(
                        "unexpected character after '!' inside braces: {}",
                        go_quote_rune(nr.unwrap_or(EOF))
                    ))
                }
            },
            '{' => return self.error("unexpected left brace '{'".into()),
            '}' => {
                self.emit(Tok::RightBrace);
                self.brace_open = false;
                return State::Statements;
            }
            c => {
                return self.error(format!(
                    "unexpected character inside braces: {}",
                    go_quote_rune(c)
                ))
            }
        }
        State::InsideBraces
    }

    fn duration_expr(&mut self) -> State {
        let Some(r) = self.next() else {
            return self.error("unexpected end of input in duration expression".into());
        };
        match r {
            ']' => {
                self.emit(Tok::RightBracket);
                self.bracket_open = false;
                self.got_colon = false;
                return State::Statements;
            }
            ':' => {
                self.emit(Tok::Colon);
                if !self.got_duration {
                    self.tokens.pop();
                    return self
                        .error("unexpected colon before duration in duration expression".into());
                }
                if self.got_colon {
                    self.tokens.pop();
                    return self.error("unexpected repeated colon in duration expression".into());
                }
                self.got_colon = true;
            }
            '(' => {
                self.emit(Tok::LeftParen);
                self.paren_depth += 1;
            }
            ')' => {
                self.emit(Tok::RightParen);
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    self.tokens.pop();
                    return self.error("unexpected right parenthesis ')'".into());
                }
            }
            c if is_space(c) => self.skip_spaces(),
            '+' => self.emit(Tok::Add),
            '-' => self.emit(Tok::Sub),
            '*' => self.emit(Tok::Mul),
            '/' => self.emit(Tok::Div),
            '%' => self.emit(Tok::Mod),
            '^' => self.emit(Tok::Pow),
            ',' => self.emit(Tok::Comma),
            c if is_duration_keyword_start(c) => {
                if !self.scan_duration_keyword() {
                    return self.error(format!(
                        "unexpected character in duration expression: {}",
                        go_quote_rune(c)
                    ));
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && matches!(self.peek(), Some(d) if d.is_ascii_digit())) =>
            {
                self.backup();
                self.got_duration = true;
                return self.number_or_duration();
            }
            c => {
                return self.error(format!(
                    "unexpected character in duration expression: {}",
                    go_quote_rune(c)
                ))
            }
        }
        State::DurationExpr
    }

    fn scan_duration_keyword(&mut self) -> bool {
        while matches!(self.peek(), Some(c) if is_alpha(c)) {
            self.next();
        }
        let word = self.input[self.start..self.pos].to_ascii_lowercase();
        match duration_keyword(&word) {
            Some(t) => {
                self.emit(t);
                true
            }
            None => false,
        }
    }

    fn keyword_or_identifier(&mut self) -> State {
        if let Ok((rest, _)) = metric_ident(self.rest()) {
            self.pos = self.input.len() - rest.len();
        }
        let word = &self.input[self.start..self.pos];
        match keyword(&word.to_ascii_lowercase()) {
            Some(kw) => {
                if matches!(kw, Tok::Fill | Tok::FillLeft | Tok::FillRight)
                    && !self.rest().trim_start_matches(is_space).starts_with('(')
                {
                    self.emit(Tok::Identifier);
                } else {
                    self.emit(kw);
                }
            }
            None if !word.contains(':') => self.emit(Tok::Identifier),
            None => self.emit(Tok::MetricIdentifier),
        }
        State::Statements
    }

    fn number_or_duration(&mut self) -> State {
        if self.scan_number() {
            self.emit(Tok::Number);
            return State::Statements;
        }
        // The rest of a duration: units and further digit-unit pairs, then a non-alphanumeric.
        let ok = self.accept_remaining_duration();
        if ok {
            self.backup();
        }
        if ok {
            self.emit(Tok::Duration);
            return State::Statements;
        }
        let text = self.input[self.start..self.pos].to_string();
        self.error(format!(
            "bad number or duration syntax: {}",
            go_quote(&text)
        ))
    }

    /// Accepts a duration's unit and further digit-unit pairs; true when followed by a
    /// non-alphanumeric character (which has been consumed, as Prometheus does).
    fn accept_remaining_duration(&mut self) -> bool {
        if !self.accept("smhdwy") {
            return false;
        }
        self.accept("s");
        while self.accept("0123456789") {
            self.accept_run("0123456789");
            if !self.accept("smhdw") {
                return false;
            }
            self.accept("s");
        }
        !matches!(self.next(), Some(c) if is_alnum(c))
    }

    /// Prometheus' number scanner: digits, one dot, one exponent, underscores between digits,
    /// hexadecimal with `0x`. True when a number was scanned and is not followed by an
    /// alphanumeric character.
    fn scan_number(&mut self) -> bool {
        const DEC: &str = "0123456789";
        const HEX: &str = "0123456789abcdefABCDEF";
        let initial = self.pos;
        let mut digits = DEC;
        if self.accept("0") && self.accept("xX") {
            self.accept("_");
            digits = HEX;
        }
        let hex = digits.len() > 10;
        self.accept(".");
        self.accept(digits);
        let mut dot = false;
        let mut exp = false;
        loop {
            let is_any = match self.peek() {
                Some(c) => digits.contains(c) || c == '.' || c == '_' || c == 'e' || c == 'E',
                None => false,
            };
            if !is_any {
                break;
            }
            if self.is(".") && dot {
                self.accept(".");
                return false;
            }
            if self.is("eE") && exp {
                self.accept("eE");
                return false;
            }
            if self.accept(".") {
                dot = true;
                if self.accept("_.") {
                    return false;
                }
                if hex {
                    return false;
                }
                continue;
            }
            if self.accept("eE") {
                exp = true;
                self.accept("+-");
                if self.accept("._eE") || self.peek().is_none() {
                    return false;
                }
                continue;
            }
            if self.accept("_") {
                if self.accept("._eE") || self.peek().is_none() {
                    return false;
                }
                continue;
            }
            self.accept_run(digits);
        }
        if self.pos == initial {
            return false;
        }
        !matches!(self.peek(), Some(c) if is_alnum(c))
    }

    fn string(&mut self) -> State {
        loop {
            match self.next() {
                Some('\\') => {
                    if let Some(msg) = self.escape() {
                        return self.error(msg);
                    }
                }
                Some('\u{FFFD}') => return self.error("invalid UTF-8 rune".into()),
                None | Some('\n') => return self.error("unterminated quoted string".into()),
                Some(c) if c == self.string_open => break,
                Some(_) => {}
            }
        }
        self.emit(Tok::String);
        State::Statements
    }

    /// Validates one escape sequence after a backslash; returns an error message if invalid.
    fn escape(&mut self) -> Option<String> {
        let Some(mut ch) = self.next() else {
            return Some("escape sequence not terminated".into());
        };
        let (mut n, base, max): (u32, u32, u32) = match ch {
            'a' | 'b' | 'f' | 'n' | 'r' | 't' | 'v' | '\\' => return None,
            c if c == self.string_open => return None,
            '0'..='7' => (3, 8, 255),
            'x' => {
                ch = self.next().unwrap_or(EOF);
                (2, 16, 255)
            }
            'u' => {
                ch = self.next().unwrap_or(EOF);
                (4, 16, 0x10FFFF)
            }
            'U' => {
                ch = self.next().unwrap_or(EOF);
                (8, 16, 0x10FFFF)
            }
            c => return Some(format!("unknown escape sequence {}", go_sharp_u(c))),
        };
        let mut x: u64 = 0;
        while n > 0 {
            let d = ch.to_digit(16).unwrap_or(16);
            if d >= base {
                if ch == EOF {
                    return Some("escape sequence not terminated".into());
                }
                return Some(format!(
                    "illegal character {} in escape sequence",
                    go_sharp_u(ch)
                ));
            }
            x = x * u64::from(base) + u64::from(d);
            n -= 1;
            if n > 0 {
                ch = self.next().unwrap_or(EOF);
            }
        }
        if x > u64::from(max) || (0xD800..0xE000).contains(&x) {
            return Some("escape sequence is an invalid Unicode code point".into());
        }
        None
    }

    fn raw_string(&mut self) -> State {
        loop {
            match self.next() {
                Some('\u{FFFD}') => return self.error("invalid UTF-8 rune".into()),
                None => return self.error("unterminated raw string".into()),
                Some(c) if c == self.string_open => break,
                Some(_) => {}
            }
        }
        self.emit(Tok::String);
        State::Statements
    }
}

fn is_duration_keyword_start(c: char) -> bool {
    matches!(c.to_ascii_lowercase(), 's' | 'r' | 'm')
}

/// Go's `%q` for a rune (`'a'`, `'\n'`, `'\x00'`).
pub(crate) fn go_quote_rune(c: char) -> String {
    if c == EOF {
        return "'\u{FFFD}'".into();
    }
    if c == '\'' {
        return "'\\''".into();
    }
    if c == '"' {
        return "'\"'".into();
    }
    let mut s = String::from("'");
    push_go_escaped(&mut s, c);
    s.push('\'');
    s
}

/// Go's `%#U` for a rune (`U+002E '.'`).
pub(crate) fn go_sharp_u(c: char) -> String {
    if c == EOF {
        return "U+FFFFFFFFFFFFFFFF".into();
    }
    if c.is_control() {
        format!("U+{:04X}", c as u32)
    } else {
        format!("U+{:04X} '{}'", c as u32, c)
    }
}

/// Go's `%q` for a string: double-quoted with Go escapes. Characters standing for raw bytes
/// (see [`crate::parser::raw_byte`]) print as `\xNN`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' {
            out.push_str("\\\"");
        } else {
            push_go_escaped(&mut out, c);
        }
    }
    out.push('"');
    out
}

fn push_go_escaped(out: &mut String, c: char) {
    use std::fmt::Write;
    if let Some(b) = super::raw_byte(c) {
        let _ = write!(out, "\\x{b:02x}");
        return;
    }
    match c {
        '\\' => out.push_str("\\\\"),
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        c if (c as u32) < 0x20 || c == '\x7f' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if c.is_control() || is_unprintable(c) => {
            if (c as u32) < 0x10000 {
                let _ = write!(out, "\\u{:04x}", c as u32);
            } else {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
        c => out.push(c),
    }
}

fn is_unprintable(c: char) -> bool {
    let u = c as u32;
    // Format characters, separators and private-use/unassigned planes Go does not print.
    matches!(u, 0xAD | 0x2028 | 0x2029 | 0xFEFF | 0xFFF9..=0xFFFB)
        || (0x200B..=0x200F).contains(&u)
        || (0x202A..=0x202E).contains(&u)
        || (0x2060..=0x206F).contains(&u)
        || (0xE000..=0xF8FF).contains(&u)
        || u >= 0xF0000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        lex(s).into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn numbers_and_durations() {
        assert_eq!(kinds("1"), vec![Tok::Number, Tok::Eof]);
        assert_eq!(kinds("0x1f"), vec![Tok::Number, Tok::Eof]);
        assert_eq!(kinds("1_000.5_0"), vec![Tok::Number, Tok::Eof]);
        assert_eq!(kinds("5m"), vec![Tok::Duration, Tok::Eof]);
        assert_eq!(kinds("1h30m"), vec![Tok::Duration, Tok::Eof]);
        assert_eq!(kinds("500ms"), vec![Tok::Duration, Tok::Eof]);
        assert_eq!(kinds("NaN123"), vec![Tok::Identifier, Tok::Eof]);
        assert_eq!(kinds("iNf"), vec![Tok::Number, Tok::Eof]);
        for bad in [
            "1..2",
            "1.2.",
            "1_e2",
            "1e",
            "1e+",
            "12_",
            "1ee2",
            "0x1_2__34",
        ] {
            assert!(
                matches!(kinds(bad)[0], Tok::Error(_)),
                "{bad} should fail: {:?}",
                kinds(bad)
            );
        }
        assert_eq!(
            kinds("0deadbeef")[0],
            Tok::Error("bad number or duration syntax: \"0de\"".into())
        );
    }

    #[test]
    fn identifiers_and_keywords() {
        assert_eq!(kinds("foo:bar"), vec![Tok::MetricIdentifier, Tok::Eof]);
        assert_eq!(
            kinds("sum by"),
            vec![Tok::Agg(AggregateOp::Sum), Tok::By, Tok::Eof]
        );
        assert_eq!(kinds("fill"), vec![Tok::Identifier, Tok::Eof]);
        assert_eq!(kinds("fill (")[0], Tok::Fill);
    }

    #[test]
    fn duration_expr_mode() {
        assert_eq!(
            kinds("a[5m:1m]"),
            vec![
                Tok::Identifier,
                Tok::LeftBracket,
                Tok::Duration,
                Tok::Colon,
                Tok::Duration,
                Tok::RightBracket,
                Tok::Eof
            ]
        );
        assert_eq!(
            kinds("a[STep()]"),
            vec![
                Tok::Identifier,
                Tok::LeftBracket,
                Tok::Step,
                Tok::LeftParen,
                Tok::RightParen,
                Tok::RightBracket,
                Tok::Eof
            ]
        );
    }
}
