//! Label matchers: `=`, `!=`, `=~`, `!~`, the four ways PromQL selects series.

use std::fmt;

use regex::Regex;

use crate::error::Error;

/// How a matcher compares a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`
    Equal,
    /// `!=`
    NotEqual,
    /// `=~`, fully anchored
    RegexMatch,
    /// `!~`, fully anchored
    RegexNoMatch,
}

impl fmt::Display for MatchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::RegexMatch => "=~",
            MatchOp::RegexNoMatch => "!~",
        })
    }
}

/// One label matcher. An absent label matches as the empty string, as in Prometheus.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// Label name.
    pub name: String,
    /// Comparison.
    pub op: MatchOp,
    /// The literal value or the regex source as written.
    pub value: String,
    re: Option<Regex>,
}

impl PartialEq for Matcher {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && self.op == o.op && self.value == o.value
    }
}
impl Eq for Matcher {}

impl Matcher {
    /// Builds a matcher; regexes are read as Go reads them ([`crate::re2`]) and compiled fully
    /// anchored (`^(?s:...)$`) as Prometheus does.
    pub fn new(
        op: MatchOp,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, Error> {
        let value = value.into();
        let re = match op {
            // matches every value: nothing to compile (dashboards' "All" sends it in every
            // selector of every query)
            MatchOp::RegexMatch | MatchOp::RegexNoMatch if value == ".*" => None,
            MatchOp::RegexMatch | MatchOp::RegexNoMatch => Some(
                crate::re2::compile_anchored(&value)
                    .map_err(|e| Error::InvalidRegex(e.to_string()))?,
            ),
            _ => None,
        };
        Ok(Matcher {
            name: name.into(),
            op,
            value,
            re,
        })
    }

    /// Shorthand for an `=` matcher, which cannot fail.
    pub fn equal(name: impl Into<String>, value: impl Into<String>) -> Self {
        Matcher {
            name: name.into(),
            op: MatchOp::Equal,
            value: value.into(),
            re: None,
        }
    }

    /// Whether `value` (the empty string for an absent label) satisfies the matcher.
    pub fn matches(&self, value: &str) -> bool {
        match self.op {
            MatchOp::Equal => self.value == value,
            MatchOp::NotEqual => self.value != value,
            MatchOp::RegexMatch => match &self.re {
                Some(r) => r.is_match(value),
                None => self.value == ".*",
            },
            MatchOp::RegexNoMatch => match &self.re {
                Some(r) => !r.is_match(value),
                None => self.value != ".*",
            },
        }
    }

    /// Whether the matcher matches the empty string (and so series without the label).
    pub fn matches_empty(&self) -> bool {
        self.matches("")
    }

    /// Whether the matcher accepts every label set (e.g. `=~".*"`).
    pub fn is_match_all(&self) -> bool {
        self.op == MatchOp::RegexMatch && (self.value == ".*")
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}\"", self.name, self.op)?;
        for c in self.value.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_all_needs_no_regex() {
        let all = Matcher::new(MatchOp::RegexMatch, "job", ".*").unwrap();
        let none = Matcher::new(MatchOp::RegexNoMatch, "job", ".*").unwrap();
        for v in ["", "vllm", "a\nb", "é"] {
            assert!(all.matches(v) && !none.matches(v), "{v:?}");
        }
        assert!(all.is_match_all() && !none.is_match_all());
    }

    #[test]
    fn regex_is_anchored() {
        let m = Matcher::new(MatchOp::RegexMatch, "job", "vllm").unwrap();
        assert!(m.matches("vllm"));
        assert!(!m.matches("vllm-2"));
        let m = Matcher::new(MatchOp::RegexNoMatch, "job", "a|b").unwrap();
        assert!(m.matches("c"));
        assert!(!m.matches("a"));
        assert!(Matcher::new(MatchOp::RegexMatch, "x", "(").is_err());
        // Go's limit on repeat counts, with Go's message
        match Matcher::new(MatchOp::RegexMatch, "x", "a{1001}") {
            Err(Error::InvalidRegex(m)) => assert_eq!(m, "invalid repeat count: `{1001}`"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn empty_matches_absent() {
        assert!(Matcher::equal("x", "").matches_empty());
        assert!(!Matcher::equal("x", "y").matches_empty());
    }
}
