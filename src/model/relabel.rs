//! Relabelling as Prometheus does it (`relabel_configs`, `metric_relabel_configs`).
//!
//! Actions: `replace`, `keep`, `drop`, `keepequal`, `dropequal`, `hashmod`, `labelmap`,
//! `labeldrop`, `labelkeep`, `lowercase`, `uppercase`. Regexes are anchored at both ends.

use std::collections::BTreeMap;
use std::fmt;

use regex::Regex;
use serde::{Deserialize, Deserializer};

/// What a relabel rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Sets `target_label` to `replacement` (with captures) when `regex` matches.
    #[default]
    Replace,
    /// Drops the series unless `regex` matches the joined source values.
    Keep,
    /// Drops the series when `regex` matches.
    Drop,
    /// Drops the series unless the joined source values equal `target_label`'s value.
    KeepEqual,
    /// Drops the series when the joined source values equal `target_label`'s value.
    DropEqual,
    /// Sets `target_label` to the md5 of the joined values modulo `modulus`.
    HashMod,
    /// Copies labels whose names match `regex` to names given by `replacement`.
    LabelMap,
    /// Removes labels whose names match `regex`.
    LabelDrop,
    /// Removes labels whose names do not match `regex`.
    LabelKeep,
    /// Sets `target_label` to the joined values in lower case.
    Lowercase,
    /// Sets `target_label` to the joined values in upper case.
    Uppercase,
}

/// An anchored regex, deserialised from a string.
#[derive(Clone)]
pub struct AnchoredRegex {
    source: String,
    re: Regex,
}

impl AnchoredRegex {
    /// Compiles `^(?s:s)$`, `s` read as Go reads it (as Prometheus does).
    pub fn new(s: &str) -> Result<Self, inferdb_storage::re2::Re2Error> {
        Ok(AnchoredRegex {
            source: s.to_string(),
            re: inferdb_storage::re2::compile_anchored(s)?,
        })
    }
    /// The regex as written in the configuration.
    pub fn as_str(&self) -> &str {
        &self.source
    }
    /// The compiled, anchored regex.
    pub fn regex(&self) -> &Regex {
        &self.re
    }
}

impl Default for AnchoredRegex {
    fn default() -> Self {
        AnchoredRegex::new("(.*)").expect("default regex compiles")
    }
}

impl fmt::Debug for AnchoredRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.source)
    }
}

impl PartialEq for AnchoredRegex {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl<'de> Deserialize<'de> for AnchoredRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AnchoredRegex::new(&s).map_err(|e| serde::de::Error::custom(format!("invalid regex: {e}")))
    }
}

fn default_separator() -> String {
    ";".into()
}
fn default_replacement() -> String {
    "$1".into()
}

/// One relabel rule, as in Prometheus' YAML.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelabelConfig {
    /// Labels whose values are joined with `separator` and matched against `regex`.
    #[serde(default)]
    pub source_labels: Vec<String>,
    /// Separator for the joined source values (`;`).
    #[serde(default = "default_separator")]
    pub separator: String,
    /// Label written by replace/hashmod/lowercase/uppercase, compared by keepequal/dropequal.
    #[serde(default)]
    pub target_label: Option<String>,
    /// Anchored regex (`(.*)`).
    #[serde(default)]
    pub regex: AnchoredRegex,
    /// Modulus for hashmod.
    #[serde(default)]
    pub modulus: Option<u64>,
    /// Replacement with `$1`/`${name}` references (`$1`).
    #[serde(default = "default_replacement")]
    pub replacement: String,
    /// The action (`replace`).
    #[serde(default)]
    pub action: Action,
}

impl Default for RelabelConfig {
    fn default() -> Self {
        RelabelConfig {
            source_labels: vec![],
            separator: default_separator(),
            target_label: None,
            regex: AnchoredRegex::default(),
            modulus: None,
            replacement: default_replacement(),
            action: Action::Replace,
        }
    }
}

impl RelabelConfig {
    /// Checks the combination of fields as Prometheus does; the error says what is missing.
    pub fn validate(&self) -> Result<(), String> {
        let needs_target = matches!(
            self.action,
            Action::Replace
                | Action::HashMod
                | Action::Lowercase
                | Action::Uppercase
                | Action::KeepEqual
                | Action::DropEqual
        );
        if needs_target && self.target_label.as_deref().unwrap_or("").is_empty() {
            return Err(format!(
                "relabel configuration for {:?} action requires 'target_label' value",
                self.action
            ));
        }
        if self.action == Action::HashMod && self.modulus.unwrap_or(0) == 0 {
            return Err("relabel configuration for hashmod requires non-zero modulus".into());
        }
        if matches!(self.action, Action::LabelDrop | Action::LabelKeep)
            && (!self.source_labels.is_empty()
                || self.target_label.is_some()
                || self.replacement != default_replacement()
                || self.separator != default_separator())
        {
            return Err(format!(
                "{:?} action requires only 'regex', and no other fields",
                self.action
            ));
        }
        if matches!(self.action, Action::KeepEqual | Action::DropEqual)
            && self.regex != AnchoredRegex::default()
        {
            return Err(format!("{:?} action requires no 'regex'", self.action));
        }
        Ok(())
    }
}

/// A label set being relabelled: names to values, sorted.
pub type LabelMap = BTreeMap<String, String>;

/// Applies `rules` in order to `labels`. Returns `false` when the series (or target) is
/// dropped. Empty values mean "absent" and are removed at the end.
pub fn relabel(labels: &mut LabelMap, rules: &[RelabelConfig]) -> bool {
    for r in rules {
        if !apply(labels, r) {
            return false;
        }
    }
    labels.retain(|_, v| !v.is_empty());
    true
}

fn joined(labels: &LabelMap, r: &RelabelConfig) -> String {
    let mut out = String::new();
    for (i, n) in r.source_labels.iter().enumerate() {
        if i > 0 {
            out.push_str(&r.separator);
        }
        if let Some(v) = labels.get(n) {
            out.push_str(v);
        }
    }
    out
}

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn set(labels: &mut LabelMap, name: &str, value: String) {
    if value.is_empty() {
        labels.remove(name);
    } else {
        labels.insert(name.to_string(), value);
    }
}

fn apply(labels: &mut LabelMap, r: &RelabelConfig) -> bool {
    let target = r.target_label.as_deref().unwrap_or("");
    match r.action {
        Action::Drop => !r.regex.regex().is_match(&joined(labels, r)),
        Action::Keep => r.regex.regex().is_match(&joined(labels, r)),
        Action::DropEqual => {
            joined(labels, r) != labels.get(target).map(String::as_str).unwrap_or("")
        }
        Action::KeepEqual => {
            joined(labels, r) == labels.get(target).map(String::as_str).unwrap_or("")
        }
        Action::Replace => {
            let val = joined(labels, r);
            let Some(caps) = r.regex.regex().captures(&val) else {
                return true;
            };
            let mut t = String::new();
            caps.expand(target, &mut t);
            if !valid_label_name(&t) {
                return true;
            }
            let mut res = String::new();
            caps.expand(&r.replacement, &mut res);
            set(labels, &t, res);
            true
        }
        Action::Lowercase => {
            let v = joined(labels, r).to_lowercase();
            set(labels, target, v);
            true
        }
        Action::Uppercase => {
            let v = joined(labels, r).to_uppercase();
            set(labels, target, v);
            true
        }
        Action::HashMod => {
            let val = joined(labels, r);
            let d = md5::compute(val.as_bytes());
            let mut b = [0u8; 8];
            b.copy_from_slice(&d.0[8..16]);
            let m = u64::from_be_bytes(b) % r.modulus.unwrap_or(1).max(1);
            set(labels, target, m.to_string());
            true
        }
        Action::LabelMap => {
            let adds: Vec<(String, String)> = labels
                .iter()
                .filter(|(n, _)| r.regex.regex().is_match(n))
                .map(|(n, v)| {
                    let name = r
                        .regex
                        .regex()
                        .replace_all(n, r.replacement.as_str())
                        .into_owned();
                    (name, v.clone())
                })
                .collect();
            for (n, v) in adds {
                set(labels, &n, v);
            }
            true
        }
        Action::LabelDrop => {
            labels.retain(|n, _| !r.regex.regex().is_match(n));
            true
        }
        Action::LabelKeep => {
            labels.retain(|n, _| r.regex.regex().is_match(n));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lm(pairs: &[(&str, &str)]) -> LabelMap {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn rule(yaml: &str) -> RelabelConfig {
        let r: RelabelConfig = serde_yaml::from_str(yaml).unwrap();
        r.validate().unwrap();
        r
    }

    #[test]
    fn replace_with_captures() {
        let mut l = lm(&[("__address__", "host1:8000"), ("job", "vllm")]);
        let r = rule("source_labels: [__address__]\nregex: '([^:]+):(\\d+)'\ntarget_label: host\nreplacement: '${1}-$2'");
        assert!(relabel(&mut l, &[r]));
        assert_eq!(l.get("host").unwrap(), "host1-8000");
    }

    #[test]
    fn replace_no_match_leaves_labels_and_empty_result_deletes() {
        let mut l = lm(&[("a", "x")]);
        let r = rule("source_labels: [a]\nregex: 'y'\ntarget_label: b\nreplacement: z");
        assert!(relabel(&mut l, &[r]));
        assert_eq!(l, lm(&[("a", "x")]));
        let r = rule("source_labels: [b]\ntarget_label: a\nreplacement: '$1'");
        assert!(relabel(&mut l, &[r]));
        assert!(l.is_empty(), "{l:?}");
    }

    #[test]
    fn keep_and_drop() {
        let keep = rule("source_labels: [__name__]\nregex: 'vllm:.*'\naction: keep");
        let drop = rule("source_labels: [__name__, engine]\nregex: 'vllm:x;1'\naction: drop");
        let mut a = lm(&[("__name__", "vllm:x"), ("engine", "0")]);
        assert!(relabel(&mut a, &[keep.clone(), drop.clone()]));
        let mut b = lm(&[("__name__", "vllm:x"), ("engine", "1")]);
        assert!(!relabel(&mut b, &[keep.clone(), drop]));
        let mut c = lm(&[("__name__", "python_info")]);
        assert!(!relabel(&mut c, &[keep]));
    }

    #[test]
    fn regex_is_anchored() {
        let keep = rule("source_labels: [a]\nregex: 'b'\naction: keep");
        let mut l = lm(&[("a", "abc")]);
        assert!(!relabel(&mut l, &[keep]));
    }

    #[test]
    fn keepequal_dropequal() {
        let ke = rule("source_labels: [a]\ntarget_label: b\naction: keepequal");
        let de = rule("source_labels: [a]\ntarget_label: b\naction: dropequal");
        let mut eq = lm(&[("a", "1"), ("b", "1")]);
        let mut ne = lm(&[("a", "1"), ("b", "2")]);
        assert!(relabel(&mut eq.clone(), std::slice::from_ref(&ke)));
        assert!(!relabel(&mut ne.clone(), std::slice::from_ref(&ke)));
        assert!(!relabel(&mut eq, std::slice::from_ref(&de)));
        assert!(relabel(&mut ne, &[de]));
    }

    #[test]
    fn labelmap_labeldrop_labelkeep() {
        let mut l = lm(&[
            ("__meta_x_team", "infra"),
            ("__meta_x_zone", "a"),
            ("job", "j"),
        ]);
        let m = rule("regex: '__meta_x_(.+)'\naction: labelmap");
        assert!(relabel(&mut l, &[m]));
        assert_eq!(l.get("team").unwrap(), "infra");
        assert_eq!(l.get("zone").unwrap(), "a");
        let d = rule("regex: '__meta_.*'\naction: labeldrop");
        assert!(relabel(&mut l, &[d]));
        assert_eq!(l, lm(&[("job", "j"), ("team", "infra"), ("zone", "a")]));
        let k = rule("regex: 'job|zone'\naction: labelkeep");
        assert!(relabel(&mut l, &[k]));
        assert_eq!(l, lm(&[("job", "j"), ("zone", "a")]));
    }

    #[test]
    fn hashmod_matches_prometheus() {
        // md5("foo") = acbd18db4cc2f85cedef654fccc4a4d8; last 8 bytes 0xedef654fccc4a4d8.
        let r = rule("source_labels: [a]\nmodulus: 1000\ntarget_label: h\naction: hashmod");
        let mut l = lm(&[("a", "foo")]);
        assert!(relabel(&mut l, &[r]));
        let expect = 0xedef654fccc4a4d8u64 % 1000;
        assert_eq!(l.get("h").unwrap(), &expect.to_string());
    }

    #[test]
    fn lower_upper() {
        let lo = rule("source_labels: [a]\ntarget_label: lo\naction: lowercase");
        let up = rule("source_labels: [a]\ntarget_label: up\naction: uppercase");
        let mut l = lm(&[("a", "MiXed")]);
        assert!(relabel(&mut l, &[lo, up]));
        assert_eq!(l.get("lo").unwrap(), "mixed");
        assert_eq!(l.get("up").unwrap(), "MIXED");
    }

    #[test]
    fn validation_and_unknown_fields() {
        let r: RelabelConfig = serde_yaml::from_str("action: hashmod\ntarget_label: x").unwrap();
        assert!(r.validate().unwrap_err().contains("modulus"));
        let r: RelabelConfig = serde_yaml::from_str("action: replace").unwrap();
        assert!(r.validate().unwrap_err().contains("target_label"));
        let e = serde_yaml::from_str::<RelabelConfig>("action: keep\nregexp: x").unwrap_err();
        assert!(e.to_string().contains("regexp"), "{e}");
        let e = serde_yaml::from_str::<RelabelConfig>("action: frobnicate").unwrap_err();
        assert!(e.to_string().contains("frobnicate"), "{e}");
        let e = serde_yaml::from_str::<RelabelConfig>("regex: '('").unwrap_err();
        assert!(e.to_string().contains("invalid regex"), "{e}");
        // Go's syntax, as Prometheus reads relabelling regexes
        let e = serde_yaml::from_str::<RelabelConfig>("regex: 'a{1001}'").unwrap_err();
        assert!(e.to_string().contains("invalid repeat count"), "{e}");
        let r: RelabelConfig = serde_yaml::from_str("regex: 'a{,5}'").unwrap();
        assert!(r.regex.regex().is_match("a{,5}"));
    }
}
