//! `label_replace`, `label_join`, `sort`, `sort_desc`, `sort_by_label`, `sort_by_label_desc`.

use std::cmp::Ordering;

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Label, Labels};

use crate::eval::Vector;
use crate::eval::{check_duplicates, err, EvalResult};

/// Prometheus 3 accepts any non-empty valid UTF-8 label name.
fn valid_label_name(s: &str) -> bool {
    !s.is_empty() && crate::parser::is_valid_utf8(s)
}

fn set_label(l: &Labels, name: &str, value: &str) -> Labels {
    let mut v: Vec<Label> = l.iter().filter(|x| x.name != name).cloned().collect();
    if !value.is_empty() {
        v.push(Label::new(name, value));
    }
    Labels::new(v)
}

/// The regex of `label_replace`, anchored, or Prometheus' error for it.
pub(crate) fn label_replace_regex(regex: &str) -> EvalResult<regex::Regex> {
    match inferdb_storage::re2::compile_anchored(regex) {
        Ok(r) => Ok(r),
        Err(_) => err(format!(
            "invalid regular expression in label_replace(): {}",
            String::from_utf8_lossy(&crate::parser::go_bytes(regex))
        )),
    }
}

/// Checks `label_replace`'s destination label name.
pub(crate) fn check_replace_dst(dst: &str) -> EvalResult<()> {
    if !valid_label_name(dst) {
        return err(format!(
            "invalid destination label name in label_replace(): {}",
            String::from_utf8_lossy(&crate::parser::go_bytes(dst))
        ));
    }
    Ok(())
}

/// `label_replace` on one label set: the new labels, or `None` when the regex does not
/// match (the labels stay as they are).
pub(crate) fn replace_labels(
    l: &Labels,
    re: &regex::Regex,
    dst: &str,
    repl: &str,
    src: &str,
) -> Option<Labels> {
    let caps = re.captures(l.get(src).unwrap_or(""))?;
    let mut res = String::new();
    caps.expand(repl, &mut res);
    Some(set_label(l, dst, &res))
}

/// `label_replace(v, dst, replacement, src, regex)` with the regex already compiled.
pub(crate) fn label_replace(
    mut v: Vector,
    dst: &str,
    repl: &str,
    src: &str,
    re: &regex::Regex,
) -> EvalResult<Vector> {
    check_replace_dst(dst)?;
    for s in v.iter_mut() {
        if let Some(l) = replace_labels(&s.metric, re, dst, repl, src) {
            s.metric = l.into();
            if dst == METRIC_NAME {
                s.drop_name = false;
            }
        }
    }
    check_duplicates(&v)?;
    Ok(v)
}

/// Checks `label_join`'s source and destination label names.
pub(crate) fn check_join_names(dst: &str, srcs: &[String]) -> EvalResult<()> {
    for s in srcs {
        if !valid_label_name(s) {
            return err(format!("invalid source label name in label_join(): {s}"));
        }
    }
    if !valid_label_name(dst) {
        return err(format!(
            "invalid destination label name in label_join(): {dst}"
        ));
    }
    Ok(())
}

/// `label_join` on one label set.
pub(crate) fn join_labels(l: &Labels, dst: &str, sep: &str, srcs: &[String]) -> Labels {
    let vals: Vec<&str> = srcs.iter().map(|n| l.get(n).unwrap_or("")).collect();
    set_label(l, dst, &vals.join(sep))
}

/// `label_join(v, dst, separator, src...)`.
pub(crate) fn label_join(
    mut v: Vector,
    dst: &str,
    sep: &str,
    srcs: &[String],
) -> EvalResult<Vector> {
    check_join_names(dst, srcs)?;
    for s in v.iter_mut() {
        s.metric = join_labels(&s.metric, dst, sep, srcs).into();
        if dst == METRIC_NAME {
            s.drop_name = false;
        }
    }
    check_duplicates(&v)?;
    Ok(v)
}

/// `sort` (ascending) or `sort_desc`; NaNs go last either way.
pub(crate) fn sort_by_value(v: &mut Vector, desc: bool) {
    v.sort_by(|a, b| match (a.f.is_nan(), b.f.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => {
            let o = a.f.partial_cmp(&b.f).unwrap_or(Ordering::Equal);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
    });
}

fn chunks(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut start = 0;
    for i in 1..=b.len() {
        if i == b.len() || b[i].is_ascii_digit() != b[start].is_ascii_digit() {
            if start < i {
                out.push(&s[start..i]);
            }
            start = i;
        }
    }
    out
}

/// Natural "less than" as the `natsort` package used by Prometheus computes it.
pub fn natural_less(a: &str, b: &str) -> bool {
    let ca = chunks(a);
    let cb = chunks(b);
    for (i, x) in ca.iter().enumerate() {
        if i >= cb.len() {
            return false;
        }
        let y = cb[i];
        let (xi, yi) = (x.parse::<i64>(), y.parse::<i64>());
        if let (Ok(xi), Ok(yi)) = (xi, yi) {
            if xi == yi {
                if i == ca.len() - 1 {
                    return true;
                } else if i == cb.len() - 1 {
                    return false;
                }
                continue;
            }
            return xi < yi;
        }
        if *x == y {
            if i == ca.len() - 1 {
                return true;
            } else if i == cb.len() - 1 {
                return false;
            }
            continue;
        }
        return *x < y;
    }
    false
}

/// `sort_by_label` / `sort_by_label_desc`: natural order of the listed labels, then all
/// labels.
pub(crate) fn sort_by_label(v: &mut Vector, labels: &[String], desc: bool) {
    v.sort_by(|a, b| {
        for l in labels {
            let x = a.metric.get(l).unwrap_or("");
            let y = b.metric.get(l).unwrap_or("");
            if x == y {
                continue;
            }
            let less = natural_less(x, y);
            return match (less, desc) {
                (true, false) | (false, true) => Ordering::Less,
                _ => Ordering::Greater,
            };
        }
        let o = a.metric.cmp(&b.metric);
        if desc {
            o.reverse()
        } else {
            o
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::Sample;

    fn s(pairs: &[(&str, &str)], f: f64) -> Sample {
        Sample {
            metric: Labels::from_pairs(pairs.iter().copied()).into(),
            t: 0,
            f,
            drop_name: false,
        }
    }

    #[test]
    fn replace_and_join() {
        let v = vec![s(&[("src", "a-1")], 1.0), s(&[("src", "b-2")], 2.0)];
        let re = |p: &str| label_replace_regex(p).unwrap();
        let out = label_replace(v.clone(), "dst", "x$1", "src", &re(".*-(.*)")).unwrap();
        assert_eq!(out[0].metric.get("dst"), Some("x1"));
        assert_eq!(out[1].metric.get("dst"), Some("x2"));
        assert!(label_replace_regex("(").is_err());
        assert!(label_replace(v.clone(), "", "", "src", &re(".*")).is_err());
        // Deleting the only distinguishing label collides.
        assert!(label_replace(v.clone(), "src", "", "src", &re(".*")).is_err());
        let j = label_join(v, "j", "+", &["src".into(), "src".into()]).unwrap();
        assert_eq!(j[0].metric.get("j"), Some("a-1+a-1"));
    }

    #[test]
    fn natural_sort() {
        assert!(natural_less("a2", "a10"));
        assert!(!natural_less("a10", "a2"));
        assert!(natural_less("abc", "abd"));
        let mut v = vec![s(&[("i", "10")], 0.0), s(&[("i", "9")], 0.0)];
        sort_by_label(&mut v, &["i".into()], false);
        assert_eq!(v[0].metric.get("i"), Some("9"));
        sort_by_value(&mut v, true);
    }
}
