//! Binary operators: scalar/scalar, vector/scalar and vector/vector with label matching
//! (`on`, `ignoring`, `group_left`, `group_right`, `bool`) and the set operators.

use std::collections::{HashMap, HashSet};

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::{Label, Labels};

use super::{drop_metadata, err, EvalResult, Evaluator, Val};
use super::{Sample, Vector};
use crate::ast::{BinaryExpr, BinaryOp, Cardinality, Expr, VectorMatching};
use crate::value::go_labels_string;

pub(crate) fn eval_binary(
    ev: &mut Evaluator<'_>,
    _expr: &Expr,
    b: &BinaryExpr,
    ts: i64,
) -> EvalResult<Val> {
    let lhs = ev.eval(&b.lhs, ts)?;
    let rhs = ev.eval(&b.rhs, ts)?;
    match (lhs, rhs) {
        (Val::Scalar(l), Val::Scalar(r)) => Ok(Val::Scalar(scalar_binop(b.op, l, r))),
        (Val::Vector(l), Val::Scalar(r)) => Ok(Val::Vector(vector_scalar_binop(
            b.op,
            l,
            r,
            false,
            b.return_bool,
            ts,
        ))),
        (Val::Scalar(l), Val::Vector(r)) => Ok(Val::Vector(vector_scalar_binop(
            b.op,
            r,
            l,
            true,
            b.return_bool,
            ts,
        ))),
        (Val::Vector(l), Val::Vector(r)) => {
            let default = VectorMatching {
                card: if b.op.is_set() {
                    Cardinality::ManyToMany
                } else {
                    Cardinality::OneToOne
                },
                labels: vec![],
                on: false,
                include: vec![],
            };
            let m = b.matching.as_ref().unwrap_or(&default);
            let out = match b.op {
                BinaryOp::And => vector_and(l, r, m),
                BinaryOp::Or => vector_or(l, r, m),
                BinaryOp::Unless => vector_unless(l, r, m),
                _ => vector_binop(b.op, l, r, m, b.return_bool, ts)?,
            };
            ev.add_samples(out.len())?;
            Ok(Val::Vector(out))
        }
        (l, r) => err(format!(
            "binary expression must contain only scalar and instant vector types, got {} and {}",
            l.type_name(),
            r.type_name()
        )),
    }
}

pub(crate) fn btos(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// Go's `math.Mod`: the result has the sign of `x`.
fn go_mod(x: f64, y: f64) -> f64 {
    x % y
}

/// A binary operation between two scalars (comparisons give 0 or 1).
pub(crate) fn scalar_binop(op: BinaryOp, l: f64, r: f64) -> f64 {
    use BinaryOp::*;
    match op {
        Add => l + r,
        Sub => l - r,
        Mul => l * r,
        Div => l / r,
        Pow => l.powf(r),
        Mod => go_mod(l, r),
        Eql => btos(l == r),
        Neq => btos(l != r),
        Gtr => btos(l > r),
        Lss => btos(l < r),
        Gte => btos(l >= r),
        Lte => btos(l <= r),
        Atan2 => l.atan2(r),
        And | Or | Unless => f64::NAN,
    }
}

/// A binary operation between two vector elements: the value and whether to keep it.
pub(crate) fn elem_binop(op: BinaryOp, l: f64, r: f64) -> (f64, bool) {
    use BinaryOp::*;
    match op {
        Add => (l + r, true),
        Sub => (l - r, true),
        Mul => (l * r, true),
        Div => (l / r, true),
        Pow => (l.powf(r), true),
        Mod => (go_mod(l, r), true),
        Eql => (l, l == r),
        Neq => (l, l != r),
        Gtr => (l, l > r),
        Lss => (l, l < r),
        Gte => (l, l >= r),
        Lte => (l, l <= r),
        Atan2 => (l.atan2(r), true),
        And | Or | Unless => (l, false),
    }
}

pub(crate) fn changes_metric_schema(op: BinaryOp) -> bool {
    use BinaryOp::*;
    matches!(op, Add | Sub | Mul | Div | Pow | Mod | Atan2)
}

fn vector_scalar_binop(
    op: BinaryOp,
    vec: Vector,
    scalar: f64,
    swap: bool,
    return_bool: bool,
    ts: i64,
) -> Vector {
    let mut out = Vec::with_capacity(vec.len());
    for mut s in vec {
        let (l, r) = if swap { (scalar, s.f) } else { (s.f, scalar) };
        let (mut v, mut keep) = elem_binop(op, l, r);
        if op.is_comparison() && swap {
            v = r;
        }
        if return_bool {
            v = btos(keep);
            keep = true;
        }
        if keep {
            s.f = v;
            s.t = ts;
            if changes_metric_schema(op) || return_bool {
                s.drop_name = true;
            }
            out.push(s);
        }
    }
    out
}

/// The join signature of a label set: a hash of the `on` labels, or of all but the
/// `ignoring` labels and the metric name.
pub(crate) fn signature(l: &Labels, m: &VectorMatching) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for lab in l.iter() {
        let include = if m.on {
            m.labels.iter().any(|n| n == &lab.name)
        } else {
            lab.name != METRIC_NAME && !m.labels.iter().any(|n| n == &lab.name)
        };
        if include {
            lab.name.hash(&mut h);
            lab.value.hash(&mut h);
        }
    }
    h.finish()
}

/// Go's `Labels.MatchLabels(on, names...)`.
fn match_labels(l: &Labels, m: &VectorMatching) -> Labels {
    let v: Vec<Label> = l
        .iter()
        .filter(|lab| {
            if m.on {
                m.labels.iter().any(|n| n == &lab.name)
            } else {
                lab.name != METRIC_NAME && !m.labels.iter().any(|n| n == &lab.name)
            }
        })
        .cloned()
        .collect();
    Labels::from_sorted_unchecked(v)
}

fn vector_and(lhs: Vector, rhs: Vector, m: &VectorMatching) -> Vector {
    if lhs.is_empty() || rhs.is_empty() {
        return vec![];
    }
    let right: HashSet<u64> = rhs.iter().map(|s| signature(&s.metric, m)).collect();
    lhs.into_iter()
        .filter(|s| right.contains(&signature(&s.metric, m)))
        .collect()
}

fn vector_or(lhs: Vector, rhs: Vector, m: &VectorMatching) -> Vector {
    if lhs.is_empty() {
        return rhs;
    }
    if rhs.is_empty() {
        return lhs;
    }
    let left: HashSet<u64> = lhs.iter().map(|s| signature(&s.metric, m)).collect();
    let mut out = lhs;
    out.extend(
        rhs.into_iter()
            .filter(|s| !left.contains(&signature(&s.metric, m))),
    );
    out
}

fn vector_unless(lhs: Vector, rhs: Vector, m: &VectorMatching) -> Vector {
    if lhs.is_empty() || rhs.is_empty() {
        return lhs;
    }
    let right: HashSet<u64> = rhs.iter().map(|s| signature(&s.metric, m)).collect();
    lhs.into_iter()
        .filter(|s| !right.contains(&signature(&s.metric, m)))
        .collect()
}

pub(crate) fn result_metric(
    lhs: &Labels,
    rhs: &Labels,
    op: BinaryOp,
    m: &VectorMatching,
) -> Labels {
    let base = if changes_metric_schema(op) {
        drop_metadata(lhs)
    } else {
        lhs.clone()
    };
    let mut v: Vec<Label> = if m.card == Cardinality::OneToOne {
        base.into_vec()
            .into_iter()
            .filter(|lab| {
                let listed = m.labels.iter().any(|n| n == &lab.name);
                if m.on {
                    listed
                } else {
                    !listed
                }
            })
            .collect()
    } else {
        base.into_vec()
    };
    for name in &m.include {
        v.retain(|l| &l.name != name);
        if let Some(val) = rhs.get(name) {
            v.push(Label::new(name.clone(), val));
        }
    }
    Labels::new(v)
}

fn vector_binop(
    op: BinaryOp,
    lhs: Vector,
    rhs: Vector,
    m: &VectorMatching,
    return_bool: bool,
    ts: i64,
) -> EvalResult<Vector> {
    if lhs.is_empty() || rhs.is_empty() {
        return Ok(vec![]);
    }
    let swapped = m.card == Cardinality::OneToMany;
    let (lhs, rhs) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let mut right: HashMap<u64, usize> = HashMap::with_capacity(rhs.len());
    for (i, rs) in rhs.iter().enumerate() {
        let sig = signature(&rs.metric, m);
        if let Some(&j) = right.get(&sig) {
            let one_side = if swapped { "left" } else { "right" };
            let matched = match_labels(&rs.metric, m);
            let mut d1 = go_labels_string(&rs.metric);
            let mut d2 = go_labels_string(&rhs[j].metric);
            if d1 > d2 {
                std::mem::swap(&mut d1, &mut d2);
            }
            return err(format!(
                "found duplicate series for the match group {} on the {} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                go_labels_string(&matched),
                one_side,
                d1,
                d2
            ));
        }
        right.insert(sig, i);
    }
    let mut matched_one: HashSet<u64> = HashSet::new();
    let mut matched_many: HashMap<u64, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    for ls in &lhs {
        let sig = signature(&ls.metric, m);
        let Some(&ri) = right.get(&sig) else {
            continue;
        };
        let rs = &rhs[ri];
        let (fl, fr) = if swapped { (rs.f, ls.f) } else { (ls.f, rs.f) };
        let (mut v, keep) = elem_binop(op, fl, fr);
        if return_bool {
            v = btos(keep);
        }
        let metric = result_metric(&ls.metric, &rs.metric, op, m);
        if m.card == Cardinality::OneToOne {
            if !matched_one.insert(sig) {
                return err("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)");
            }
        } else {
            let set = matched_many.entry(sig).or_default();
            if !set.insert(metric.clone()) {
                return err(
                    "multiple matches for labels: grouping labels must ensure unique matches",
                );
            }
        }
        if !keep && !return_bool {
            continue;
        }
        out.push(Sample {
            metric: metric.into(),
            t: ts,
            f: v,
            drop_name: return_bool,
        });
    }
    Ok(out)
}
