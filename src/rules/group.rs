//! Rule evaluation with Prometheus' semantics: a group's rules run in order at one
//! timestamp; recording rules rename and relabel their result; alerting rules keep alert
//! state (inactive → pending → firing, `for`, `keep_firing_for`) and emit `ALERTS` and
//! `ALERTS_FOR_STATE`; series a rule stops producing get a staleness marker.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use inferdb_query::ast::Expr;
use inferdb_query::value::Vector;
use inferdb_storage::{Label, Labels};

use super::file::{Rule, RuleGroup};
use crate::template::{self, AlertData};

/// What rules read from and write to: an instant query at `t_ms` whose result is a vector
/// (a scalar becomes one sample without labels; anything else is an error), and the append
/// path for their output.
pub trait RuleStore {
    /// Runs `expr` at `t_ms`.
    fn query(&self, expr: &Expr, t_ms: i64) -> Result<Vector, String>;
    /// Appends one sample of a rule's output (or a staleness marker).
    fn append(&mut self, labels: &Labels, t_ms: i64, v: f64);
    /// Makes one rule's appended output visible (called after each rule, so a later rule
    /// of the group reads an earlier one's output).
    fn commit(&mut self);
}

/// Resolved alerts are kept this long so their resolution can still be sent.
const RESOLVED_RETENTION_MS: i64 = 15 * 60 * 1000;

/// An alert's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertState {
    /// Resolved.
    Inactive,
    /// Active, waiting out `for`.
    Pending,
    /// Active for at least `for`.
    Firing,
}

impl AlertState {
    /// Prometheus' name (`inactive`, `pending`, `firing`).
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
        }
    }
}

/// One alert of an alerting rule (one label set of its result).
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its labels (the sample's without `__name__`, the rule's, `alertname`).
    pub labels: Labels,
    /// Its expanded annotations, sorted by name.
    pub annotations: Vec<(String, String)>,
    /// Its state.
    pub state: AlertState,
    /// When it became active (ms).
    pub active_at: i64,
    /// When it started firing (ms), 0 if not.
    pub fired_at: i64,
    /// When it was resolved (ms), 0 if not.
    pub resolved_at: i64,
    /// Since when it has been kept firing by `keep_firing_for` (ms), 0 if not.
    pub keep_firing_since: i64,
    /// The value of the last evaluation.
    pub value: f64,
    /// When it was last sent to Alertmanager (ms), 0 if never.
    pub last_sent_at: i64,
    /// Until when the last sent notification is valid (ms).
    pub valid_until: i64,
}

/// A rule's health after its last evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not evaluated yet.
    Unknown,
    /// Last evaluation succeeded.
    Ok,
    /// Last evaluation failed.
    Err,
}

impl Health {
    /// Prometheus' name (`unknown`, `ok`, `err`).
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Ok => "ok",
            Health::Err => "err",
        }
    }
}

/// A loaded rule with its evaluation state.
#[derive(Debug)]
pub struct LoadedRule {
    /// The rule as written.
    pub def: Rule,
    /// Its parsed expression.
    pub expr: Expr,
    /// Group labels overlaid by the rule's labels (Prometheus' `FromMaps`), sorted.
    pub labels: Vec<(String, String)>,
    /// Health after the last evaluation.
    pub health: Health,
    /// The last evaluation's error.
    pub last_error: Option<String>,
    /// When it was last evaluated (ms), 0 if never.
    pub last_eval_ms: i64,
    /// How long its last evaluation took.
    pub eval_duration: Duration,
    /// Alerting rules: the active alerts by label set.
    pub active: BTreeMap<Labels, Alert>,
    /// Alerting rules: whether the `for` state was restored (until then no `ALERTS` series
    /// are written, as in Prometheus).
    pub restored: bool,
    series_prev: HashMap<Labels, ()>,
}

impl LoadedRule {
    /// Whether this is an alerting rule.
    pub fn is_alert(&self) -> bool {
        !self.def.alert.is_empty()
    }
}

/// Settings a group is evaluated with.
#[derive(Debug, Clone, Default)]
pub struct GroupOptions {
    /// Used when the group sets no interval (ms).
    pub default_interval_ms: i64,
    /// Used when the group sets no `query_offset` (ms).
    pub default_query_offset_ms: i64,
    /// `external_labels`, visible to templates as `$externalLabels`.
    pub external_labels: Vec<(String, String)>,
    /// The external URL, visible to templates as `$externalURL`.
    pub external_url: String,
}

/// A group ready to evaluate.
#[derive(Debug)]
pub struct Group {
    /// The file it was loaded from.
    pub file: String,
    /// Its name.
    pub name: String,
    /// Evaluation interval (ms).
    pub interval_ms: i64,
    /// Query offset (ms).
    pub query_offset_ms: i64,
    /// Limit on series/alerts per rule (0: none).
    pub limit: i64,
    /// Its rules in order.
    pub rules: Vec<LoadedRule>,
    /// When it was last evaluated (ms).
    pub last_eval_ms: i64,
    /// How long the last evaluation took.
    pub eval_duration: Duration,
    opts: GroupOptions,
}

fn from_maps(group: &[(String, String)], rule: &[(String, String)]) -> Vec<(String, String)> {
    let mut m: BTreeMap<String, String> = group.iter().cloned().collect();
    for (k, v) in rule {
        m.insert(k.clone(), v.clone());
    }
    m.into_iter().collect()
}

impl Group {
    /// Builds a group from its definition; expressions must already have been validated.
    pub fn new(file: &str, def: &RuleGroup, opts: GroupOptions) -> Result<Group, String> {
        let mut rules = Vec::with_capacity(def.rules.len());
        for r in &def.rules {
            let expr = inferdb_query::parse(&r.expr).map_err(|e| e.to_string())?;
            rules.push(LoadedRule {
                def: r.clone(),
                expr,
                labels: from_maps(&def.labels, &r.labels),
                health: Health::Unknown,
                last_error: None,
                last_eval_ms: 0,
                eval_duration: Duration::ZERO,
                active: BTreeMap::new(),
                restored: false,
                series_prev: HashMap::new(),
            });
        }
        Ok(Group {
            file: file.to_string(),
            name: def.name.clone(),
            interval_ms: if def.interval_ms > 0 {
                def.interval_ms
            } else {
                opts.default_interval_ms
            },
            query_offset_ms: def.query_offset_ms.unwrap_or(opts.default_query_offset_ms),
            limit: def.limit,
            rules,
            last_eval_ms: 0,
            eval_duration: Duration::ZERO,
            opts,
        })
    }

    /// Evaluates every rule in order at `ts_ms`; each rule's output (results, `ALERTS`,
    /// staleness markers) is appended and committed before the next rule runs. A failing
    /// rule records its error and the group goes on.
    pub fn eval(&mut self, ts_ms: i64, store: &mut dyn RuleStore) {
        let start = Instant::now();
        let eval_ts = ts_ms - self.query_offset_ms;
        for i in 0..self.rules.len() {
            let rstart = Instant::now();
            let res = if self.rules[i].is_alert() {
                eval_alert(
                    &mut self.rules[i],
                    ts_ms,
                    self.query_offset_ms,
                    self.limit,
                    &self.opts,
                    &*store,
                )
            } else {
                eval_record(&self.rules[i], eval_ts, self.limit, &*store)
            };
            let rule = &mut self.rules[i];
            rule.last_eval_ms = ts_ms;
            match res {
                Err(e) => {
                    rule.health = Health::Err;
                    rule.last_error = Some(e);
                }
                Ok(vector) => {
                    rule.health = Health::Ok;
                    rule.last_error = None;
                    let mut now: HashMap<Labels, ()> = HashMap::with_capacity(vector.len());
                    for (l, t, v) in vector {
                        store.append(&l, t, v);
                        now.insert(l, ());
                    }
                    for l in rule.series_prev.keys() {
                        if !now.contains_key(l) {
                            store.append(l, eval_ts, inferdb_storage::stale_nan());
                        }
                    }
                    store.commit();
                    rule.series_prev = now;
                }
            }
            rule.eval_duration = rstart.elapsed();
        }
        self.last_eval_ms = ts_ms;
        self.eval_duration = start.elapsed();
    }

    /// Marks every alerting rule restored (its `ALERTS` series are written from now on).
    pub fn set_restored(&mut self) {
        for r in &mut self.rules {
            r.restored = true;
        }
    }
}

fn set_label(labels: &mut Vec<Label>, name: &str, value: &str) {
    labels.retain(|l| l.name != name);
    if !value.is_empty() {
        labels.push(Label::new(name, value));
    }
}

fn eval_record(
    rule: &LoadedRule,
    t: i64,
    limit: i64,
    q: &dyn RuleStore,
) -> Result<Vec<(Labels, i64, f64)>, String> {
    let vector = q.query(&rule.expr, t)?;
    let mut out = Vec::with_capacity(vector.len());
    let mut seen = std::collections::HashSet::with_capacity(vector.len());
    for s in vector {
        let mut l = s.metric.into_vec();
        set_label(&mut l, "__name__", &rule.def.record);
        for (k, v) in &rule.labels {
            set_label(&mut l, k, v);
        }
        let l = Labels::new(l);
        if !seen.insert(l.clone()) {
            return Err(
                "vector contains metrics with the same labelset after applying rule labels".into(),
            );
        }
        out.push((l, s.t, s.f));
    }
    if limit > 0 && out.len() as i64 > limit {
        return Err(format!(
            "exceeded limit of {limit} with {} series",
            out.len()
        ));
    }
    Ok(out)
}

struct TemplateQuery<'a> {
    q: &'a dyn RuleStore,
    t: i64,
}

impl TemplateQuery<'_> {
    fn run(&self, text: &str) -> template::QueryResult {
        let expr = inferdb_query::parse(text).map_err(|e| e.to_string())?;
        let v = self.q.query(&expr, self.t)?;
        Ok(v.into_iter()
            .map(|s| {
                (
                    s.metric
                        .iter()
                        .map(|l| (l.name.to_string(), l.value.to_string()))
                        .collect(),
                    s.f,
                )
            })
            .collect())
    }
}

fn eval_alert(
    rule: &mut LoadedRule,
    ts: i64,
    offset: i64,
    limit: i64,
    opts: &GroupOptions,
    q: &dyn RuleStore,
) -> Result<Vec<(Labels, i64, f64)>, String> {
    let res = q.query(&rule.expr, ts - offset)?;
    let name = format!("__alert_{}", rule.def.alert);
    let tq = TemplateQuery { q, t: ts - offset };
    let tq_fn = |text: &str| tq.run(text);
    let mut fresh: BTreeMap<Labels, Alert> = BTreeMap::new();
    for s in res {
        let data = AlertData {
            labels: s
                .metric
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect(),
            external_labels: opts.external_labels.clone(),
            external_url: opts.external_url.clone(),
            value: s.f,
        };
        let expand = |text: &str| match template::expand_alert(&name, text, &data, Some(&tq_fn)) {
            Ok(s) => s,
            Err(e) => format!("<error expanding template: {e}>"),
        };
        let mut l = s.metric.into_vec();
        l.retain(|l| l.name != "__name__");
        for (k, v) in &rule.labels {
            let v = expand(v);
            set_label(&mut l, k, &v);
        }
        set_label(&mut l, "alertname", &rule.def.alert);
        let mut annotations: Vec<(String, String)> = rule
            .def
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), expand(v)))
            .collect();
        annotations.sort();
        let labels = Labels::new(l);
        if fresh.contains_key(&labels) {
            return Err(
                "vector contains metrics with the same labelset after applying alert labels".into(),
            );
        }
        fresh.insert(
            labels.clone(),
            Alert {
                labels,
                annotations,
                state: AlertState::Pending,
                active_at: ts,
                fired_at: 0,
                resolved_at: 0,
                keep_firing_since: 0,
                value: s.f,
                last_sent_at: 0,
                valid_until: 0,
            },
        );
    }
    let hold = rule.def.for_ms;
    let keep_for = rule.def.keep_firing_for_ms;
    for (l, a) in &fresh {
        match rule.active.get_mut(l) {
            Some(old) if old.state != AlertState::Inactive => {
                old.value = a.value;
                old.annotations = a.annotations.clone();
            }
            _ => {
                rule.active.insert(l.clone(), a.clone());
            }
        }
    }
    let mut vec = Vec::new();
    let mut num_active = 0i64;
    let mut remove = Vec::new();
    for (l, a) in rule.active.iter_mut() {
        if !fresh.contains_key(l) {
            let mut keep_firing = false;
            if a.state == AlertState::Firing && keep_for > 0 {
                if a.keep_firing_since == 0 {
                    a.keep_firing_since = ts;
                }
                if ts - a.keep_firing_since < keep_for {
                    keep_firing = true;
                }
            }
            if a.state == AlertState::Pending
                || (a.resolved_at != 0 && ts - a.resolved_at > RESOLVED_RETENTION_MS)
            {
                remove.push(l.clone());
            }
            if a.state != AlertState::Inactive && !keep_firing {
                a.state = AlertState::Inactive;
                a.resolved_at = ts;
            }
            if !keep_firing {
                continue;
            }
        } else {
            a.keep_firing_since = 0;
        }
        num_active += 1;
        if a.state == AlertState::Pending && ts - a.active_at >= hold {
            a.state = AlertState::Firing;
            a.fired_at = ts;
        }
        if a.state == AlertState::Firing && ts - a.active_at < hold {
            a.state = AlertState::Pending;
            a.fired_at = 0;
            a.last_sent_at = 0;
            a.keep_firing_since = 0;
        }
        if rule.restored {
            let mut s = a.labels.as_slice().to_vec();
            set_label(&mut s, "__name__", "ALERTS");
            set_label(&mut s, "alertstate", a.state.as_str());
            vec.push((Labels::new(s), ts - offset, 1.0));
            let mut f = a.labels.as_slice().to_vec();
            set_label(&mut f, "__name__", "ALERTS_FOR_STATE");
            vec.push((
                Labels::new(f),
                ts - offset,
                (a.active_at.div_euclid(1000)) as f64,
            ));
        }
    }
    for l in remove {
        rule.active.remove(&l);
    }
    if limit > 0 && num_active > limit {
        rule.active.clear();
        return Err(format!(
            "exceeded limit of {limit} with {num_active} alerts"
        ));
    }
    Ok(vec)
}
