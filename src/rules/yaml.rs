//! A YAML document as a tree of nodes that remember their line and column, and a decoder
//! over it that reports errors as Go's `yaml` packages word them (`line 7: field x not found
//! in type rulefmt.RuleGroup`). Rule files need positions for Prometheus' messages
//! (`7:15: group "g", rule 1, "x": ...`), which `serde_yaml` does not give for valid input.

use std::collections::HashMap;
use std::fmt::Write as _;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where a node starts: 1-based line and column, as `yaml.v3`'s `Node.Line`/`Column`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

/// One YAML node.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A scalar; `plain` when unquoted (so `null`, `~` and empty mean null).
    Scalar {
        /// The text.
        value: String,
        /// Unquoted.
        plain: bool,
        /// Where it starts.
        pos: Pos,
    },
    /// A sequence.
    Seq(Vec<Node>, Pos),
    /// A mapping, keys in document order.
    Map(Vec<(Node, Node)>, Pos),
}

impl Node {
    /// Where the node starts.
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar { pos, .. } | Node::Seq(_, pos) | Node::Map(_, pos) => *pos,
        }
    }

    /// Whether the node is YAML's null (`~`, `null`, or nothing).
    pub fn is_null(&self) -> bool {
        matches!(self, Node::Scalar { value, plain: true, .. }
            if value.is_empty() || value == "~" || value == "null" || value == "Null" || value == "NULL")
    }

    /// The value of mapping key `key`.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries, _) => entries
                .iter()
                .find(|(k, _)| matches!(k, Node::Scalar { value, .. } if value == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    fn tag(&self) -> &'static str {
        match self {
            Node::Seq(..) => "!!seq",
            Node::Map(..) => "!!map",
            Node::Scalar { value, plain, .. } => {
                if !plain {
                    "!!str"
                } else if self.is_null() {
                    "!!null"
                } else if value.parse::<i64>().is_ok() {
                    "!!int"
                } else if parse_yaml_float(value).is_some() {
                    "!!float"
                } else if parse_yaml_bool(value).is_some() {
                    "!!bool"
                } else {
                    "!!str"
                }
            }
        }
    }

    fn short(&self) -> String {
        match self {
            Node::Scalar { value, .. } => {
                let v: String = value.chars().take(20).collect();
                if value.chars().count() > 20 {
                    format!("`{v}...`")
                } else {
                    format!("`{v}`")
                }
            }
            _ => String::new(),
        }
    }
}

/// Why a document could not be read as YAML at all (`yaml: line 2: ...`, as Go words it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("yaml: {0}")]
pub struct SyntaxError(pub String);

#[derive(Default)]
struct Builder {
    stack: Vec<(Node, Option<Node>, usize)>,
    anchors: HashMap<usize, Node>,
    docs: Vec<Node>,
    err: Option<String>,
}

fn pos_of(m: Marker) -> Pos {
    Pos {
        line: m.line(),
        col: m.col() + 1,
    }
}

impl Builder {
    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some((Node::Seq(items, _), _, _)) => items.push(node),
            Some((Node::Map(entries, _), pending, _)) => match pending.take() {
                None => *pending = Some(node),
                Some(k) => entries.push((k, node)),
            },
            Some(_) => {}
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = pos_of(mark);
        match ev {
            Event::Scalar(value, style, anchor, _) => {
                let plain = matches!(style, TScalarStyle::Plain);
                self.push_value(Node::Scalar { value, plain, pos }, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                self.stack.push((Node::Seq(vec![], pos), None, anchor))
            }
            Event::MappingStart(anchor, _) => {
                self.stack.push((Node::Map(vec![], pos), None, anchor))
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((mut node, _, anchor)) = self.stack.pop() {
                    // A block mapping starts at its first key (yaml.v3's position for it);
                    // the parser marks it after that key.
                    if let Node::Map(entries, pos) = &mut node {
                        if let Some((k, _)) = entries.first() {
                            let kp = k.pos();
                            if (kp.line, kp.col) < (pos.line, pos.col) {
                                *pos = kp;
                            }
                        }
                    }
                    self.push_value(node, anchor);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(n) => self.push_value(n, 0),
                None => self.err = Some("unknown anchor referenced".into()),
            },
            _ => {}
        }
    }
}

/// Parses every document of `text`; an empty text gives no documents.
pub fn parse(text: &str) -> Result<Vec<Node>, SyntaxError> {
    // YAML's printable set, checked up front as Go's reader does.
    let printable = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{85}')
            || ('\u{20}'..='\u{7E}').contains(&c)
            || ('\u{A0}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    };
    if !text.chars().all(printable) {
        return Err(SyntaxError("control characters are not allowed".into()));
    }
    let mut b = Builder::default();
    let mut p = Parser::new_from_str(text);
    p.load(&mut b, true)
        .map_err(|e| SyntaxError(format!("line {}: {}", e.marker().line(), e.info())))?;
    if let Some(msg) = b.err {
        return Err(SyntaxError(msg));
    }
    Ok(b.docs)
}

fn parse_yaml_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// A YAML float as Go's decoders read one (`1.5`, `1e3`, `.inf`, `-.Inf`, `.nan`).
pub fn parse_yaml_float(s: &str) -> Option<f64> {
    match s {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Some(f64::NAN),
        _ => {
            let t = s.replace('_', "");
            if t.is_empty() || t.contains(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
            {
                return None;
            }
            t.parse::<f64>().ok()
        }
    }
}

/// Decodes nodes into values, collecting errors the way `yaml.Unmarshal` does: type errors
/// and unknown fields are gathered (`yaml: unmarshal errors:` then one `line N: ...` each),
/// other problems are reported at once.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Refuse fields a type does not have (`KnownFields(true)`, `UnmarshalStrict`).
    pub strict: bool,
    errors: Vec<String>,
    fatal: Option<String>,
}

impl Decoder {
    /// A decoder; `strict` refuses unknown fields.
    pub fn new(strict: bool) -> Self {
        Decoder {
            strict,
            errors: vec![],
            fatal: None,
        }
    }

    /// The collected errors as Go prints them, if any.
    pub fn finish(self) -> Result<(), String> {
        if let Some(f) = self.fatal {
            return Err(f);
        }
        if self.errors.is_empty() {
            return Ok(());
        }
        let mut s = String::from("yaml: unmarshal errors:");
        for e in &self.errors {
            let _ = write!(s, "\n  {e}");
        }
        Err(s)
    }

    /// Records an error at `node`'s line.
    pub fn error(&mut self, node: &Node, msg: impl std::fmt::Display) {
        self.errors.push(format!("line {}: {msg}", node.pos().line));
    }

    fn type_error(&mut self, node: &Node, go_type: &str) {
        let short = node.short();
        let what = if short.is_empty() {
            node.tag().to_string()
        } else {
            format!("{} {short}", node.tag())
        };
        self.error(node, format!("cannot unmarshal {what} into {go_type}"));
    }

    /// The fields of a mapping node decoding into Go type `type_name`; fields not in `known`
    /// are errors when strict. A null node has no fields.
    pub fn fields<'n>(
        &mut self,
        node: &'n Node,
        type_name: &str,
        known: &[&str],
    ) -> Vec<(&'n str, &'n Node)> {
        let mut out = Vec::new();
        match node {
            Node::Map(entries, _) => {
                for (k, v) in entries {
                    let Node::Scalar { value: key, .. } = k else {
                        continue;
                    };
                    if known.contains(&key.as_str()) {
                        if out.iter().any(|(n, _)| *n == key.as_str()) {
                            self.error(k, format!("field {key} already set in type {type_name}"));
                            continue;
                        }
                        out.push((key.as_str(), v));
                    } else if self.strict {
                        self.error(k, format!("field {key} not found in type {type_name}"));
                    }
                }
            }
            n if n.is_null() => {}
            n => self.type_error(n, type_name),
        }
        out
    }

    /// A string (any scalar reads as its text; null as empty).
    pub fn string(&mut self, node: &Node) -> String {
        match node {
            n if n.is_null() => String::new(),
            Node::Scalar { value, .. } => value.clone(),
            n => {
                self.type_error(n, "string");
                String::new()
            }
        }
    }

    /// An integer.
    pub fn int(&mut self, node: &Node) -> i64 {
        match node {
            n if n.is_null() => 0,
            Node::Scalar { value, .. } => match value.parse::<i64>() {
                Ok(v) => v,
                Err(_) => {
                    self.type_error(node, "int");
                    0
                }
            },
            n => {
                self.type_error(n, "int");
                0
            }
        }
    }

    /// A float.
    pub fn float(&mut self, node: &Node) -> f64 {
        match node {
            n if n.is_null() => 0.0,
            Node::Scalar { value, .. } => match parse_yaml_float(value) {
                Some(v) => v,
                None => {
                    self.type_error(node, "float64");
                    0.0
                }
            },
            n => {
                self.type_error(n, "float64");
                0.0
            }
        }
    }

    /// A Prometheus duration (`model.Duration`) in milliseconds; a bad one stops decoding
    /// with Go's message (`not a valid duration string: "x"`, `unknown unit ...`), as Go's custom unmarshaler does.
    pub fn duration(&mut self, node: &Node) -> i64 {
        let s = self.string(node);
        if s.is_empty() {
            if !node.is_null() && self.fatal.is_none() {
                self.fatal = Some("empty duration string".into());
            }
            return 0;
        }
        match crate::config::parse_duration(&s) {
            Ok(d) => d.as_millis() as i64,
            Err(e) => {
                if self.fatal.is_none() {
                    self.fatal = Some(e);
                }
                0
            }
        }
    }

    /// A boolean.
    pub fn bool(&mut self, node: &Node) -> bool {
        match node {
            n if n.is_null() => false,
            Node::Scalar { value, .. } => match parse_yaml_bool(value) {
                Some(b) => b,
                None => {
                    self.type_error(node, "bool");
                    false
                }
            },
            n => {
                self.type_error(n, "bool");
                false
            }
        }
    }

    /// A sequence's items (null is empty).
    pub fn seq<'n>(&mut self, node: &'n Node, go_type: &str) -> &'n [Node] {
        match node {
            Node::Seq(items, _) => items,
            n if n.is_null() => &[],
            n => {
                self.type_error(n, go_type);
                &[]
            }
        }
    }

    /// A `map[string]string`, keys in document order.
    pub fn string_map(&mut self, node: &Node) -> Vec<(String, String)> {
        match node {
            Node::Map(entries, _) => entries
                .iter()
                .map(|(k, v)| (self.string(k), self.string(v)))
                .collect(),
            n if n.is_null() => vec![],
            n => {
                self.type_error(n, "map[string]string");
                vec![]
            }
        }
    }
}
