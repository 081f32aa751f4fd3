//! Rule evaluation with Prometheus' semantics: a group's rules run in order at one
//! timestamp; recording rules rename and relabel their result; alerting rules keep alert
//! state (inactive → pending → firing, `for`, `keep_firing_for`) and emit `ALERTS` and
//! `ALERTS_FOR_STATE`; series a rule stops producing get a staleness marker.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use inferdb_query::ast::Expr;
use inferdb_query::storage::Queryable;
use inferdb_query::value::Vector;
use inferdb_storage::{Label, Labels, MatchOp, Matcher};

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
    /// Called before and after each evaluation of a group: a store that keeps what the
    /// group's queries read (one view of the store per evaluation) lets it go.
    fn reset_reads(&mut self) {}
    /// Called at the start of a group's evaluation, after [`RuleStore::reset_reads`], with
    /// the expressions its rules run next, in order: a store that keeps what the queries
    /// read can keep only what more than one of them reads.
    fn plan_reads(&mut self, _exprs: &mut dyn Iterator<Item = &Expr>) {}
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
    /// The nanoseconds below the millisecond of `active_at` and `keep_firing_since`:
    /// Prometheus' evaluation timestamps carry the group's offset to the nanosecond, and the
    /// API writes them as RFC 3339 with nanoseconds (0 once restored after a restart).
    pub sub_ms_ns: u32,
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
    /// The wall clock when its last evaluation started (the API's `lastEvaluation`).
    pub last_eval_at: Option<SystemTime>,
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
    /// The wall clock when the last evaluation started (the API's `lastEvaluation`).
    pub last_eval_at: Option<SystemTime>,
    /// The nanoseconds below the millisecond of this group's evaluation timestamps
    /// ([`super::schedule::eval_sub_ms_ns`]; 0 for the unit-test runner's exact times).
    pub eval_sub_ms_ns: u32,
    /// Series of rules that are gone (a reload removed or renamed them): they get a
    /// staleness marker at the next evaluation.
    stale_series: Vec<Labels>,
    opts: GroupOptions,
}

/// What one evaluation of a group did, for the rule metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalStats {
    /// Samples the rules produced (Prometheus' `rule_group_last_evaluation_samples`).
    pub samples: usize,
    /// Rules whose evaluation failed.
    pub failures: usize,
}

/// One alert as it goes to Alertmanager (Prometheus' `sendAlerts`): `ends_at_ms` is the
/// resolve time once resolved, else the time until which the notification is valid.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertToSend {
    /// The alert's labels.
    pub labels: Labels,
    /// Its annotations, sorted by name.
    pub annotations: Vec<(String, String)>,
    /// When it started firing (ms).
    pub starts_at_ms: i64,
    /// When it ended or stops being valid (ms).
    pub ends_at_ms: i64,
    /// The rule's expression as PromQL text (for the generator URL).
    pub expr: String,
}

/// How `for` state is restored after a restart (Prometheus' `--rules.alert.*` flags).
#[derive(Debug, Clone, Copy)]
pub struct RestoreOptions {
    /// How far back `ALERTS_FOR_STATE` is looked for (`--rules.alert.for-outage-tolerance`).
    pub outage_tolerance_ms: i64,
    /// The least time left before a restored alert may fire (`--rules.alert.for-grace-period`).
    pub for_grace_period_ms: i64,
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
                last_eval_at: None,
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
            last_eval_at: None,
            eval_sub_ms_ns: 0,
            stale_series: Vec::new(),
            opts,
        })
    }

    /// Evaluates every rule in order at `ts_ms`; each rule's output (results, `ALERTS`,
    /// staleness markers) is appended and committed before the next rule runs. A failing
    /// rule records its error and the group goes on.
    pub fn eval(&mut self, ts_ms: i64, store: &mut dyn RuleStore) -> EvalStats {
        let start = Instant::now();
        self.last_eval_at = Some(SystemTime::now());
        let mut stats = EvalStats::default();
        let eval_ts = ts_ms - self.query_offset_ms;
        store.reset_reads();
        store.plan_reads(&mut self.rules.iter().map(|r| &r.expr));
        for i in 0..self.rules.len() {
            let rstart = Instant::now();
            self.rules[i].last_eval_at = Some(SystemTime::now());
            let res = if self.rules[i].is_alert() {
                eval_alert(
                    &mut self.rules[i],
                    ts_ms,
                    self.query_offset_ms,
                    self.limit,
                    self.eval_sub_ms_ns,
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
                    stats.failures += 1;
                }
                Ok(vector) => {
                    rule.health = Health::Ok;
                    rule.last_error = None;
                    stats.samples += vector.len();
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
        if !self.stale_series.is_empty() {
            for l in std::mem::take(&mut self.stale_series) {
                store.append(&l, eval_ts, inferdb_storage::stale_nan());
            }
            store.commit();
        }
        store.reset_reads();
        self.last_eval_ms = ts_ms;
        self.eval_duration = start.elapsed();
        stats
    }

    /// Whether `other` is the same group as loaded (file, name, interval, limit, query
    /// offset, and every rule as written with its labels): a reload keeps such a group
    /// running untouched, as Prometheus' `Group.Equals` does.
    pub fn same_definition(&self, other: &Group) -> bool {
        self.file == other.file
            && self.name == other.name
            && self.interval_ms == other.interval_ms
            && self.limit == other.limit
            && self.query_offset_ms == other.query_offset_ms
            && self.rules.len() == other.rules.len()
            && self
                .rules
                .iter()
                .zip(&other.rules)
                .all(|(a, b)| a.def == b.def && a.labels == b.labels)
    }

    /// Takes over the state of `from`, the group this one replaces on a reload (Prometheus'
    /// `CopyState`): rules are matched by name and labels, in order; a matched rule keeps
    /// its series (for staleness) and, if alerting, its active alerts; the series of rules
    /// left unmatched get a staleness marker at this group's first evaluation.
    pub fn copy_state(&mut self, from: &mut Group) {
        self.eval_duration = from.eval_duration;
        self.last_eval_at = from.last_eval_at;
        self.last_eval_ms = from.last_eval_ms;
        // Prometheus keys rules by name and labels as text
        let key = |r: &LoadedRule| format!("{}{:?}", r.def.name(), r.labels);
        let mut by_key: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (i, r) in from.rules.iter().enumerate() {
            by_key.entry(key(r)).or_default().push_back(i);
        }
        for r in &mut self.rules {
            let Some(fi) = by_key.get_mut(&key(r)).and_then(|q| q.pop_front()) else {
                continue;
            };
            let old = &mut from.rules[fi];
            r.series_prev = std::mem::take(&mut old.series_prev);
            if r.is_alert() && old.is_alert() {
                r.active = std::mem::take(&mut old.active);
            }
        }
        self.stale_series = std::mem::take(&mut from.stale_series);
        for idx in by_key.into_values() {
            for fi in idx {
                self.stale_series
                    .extend(std::mem::take(&mut from.rules[fi].series_prev).into_keys());
            }
        }
    }

    /// Every series the group wrote at its last evaluation (and those still waiting for a
    /// staleness marker), taken out: for the markers written when the group is removed.
    pub fn take_series(&mut self) -> Vec<Labels> {
        let mut out = std::mem::take(&mut self.stale_series);
        for r in &mut self.rules {
            out.extend(std::mem::take(&mut r.series_prev).into_keys());
        }
        out
    }

    /// Restores the `for` state of active alerts from the `ALERTS_FOR_STATE` series in `q`
    /// as Prometheus' `RestoreForState` does at `now_ms`, then marks every alerting rule
    /// restored. An alert found active before the outage keeps the time it spent pending,
    /// the outage added; one that would fire within the grace period is moved to fire
    /// exactly then; rules whose `for` is shorter than the grace period are not restored.
    pub fn restore_for_state(&mut self, now_ms: i64, q: &dyn Queryable, o: RestoreOptions) {
        let mint = now_ms - o.outage_tolerance_ms;
        for rule in &mut self.rules {
            if !rule.is_alert() {
                continue;
            }
            let hold = rule.def.for_ms;
            if hold < o.for_grace_period_ms {
                rule.restored = true;
                continue;
            }
            let mut matchers = vec![
                Matcher::new(MatchOp::Equal, "__name__", "ALERTS_FOR_STATE"),
                Matcher::new(MatchOp::Equal, "alertname", &rule.def.alert),
            ];
            for (k, v) in &rule.labels {
                if k != "alertname" && !v.contains("{{") {
                    matchers.push(Matcher::new(MatchOp::Equal, k, v));
                }
            }
            let matchers: Vec<Matcher> = matchers.into_iter().flatten().collect();
            let series = match q.select(&matchers, mint, now_ms) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(alertname = %rule.def.alert, stage = "Select", err = %e,
                        "Failed to restore 'for' state");
                    rule.restored = true;
                    continue;
                }
            };
            let mut last: HashMap<Labels, (i64, f64)> = HashMap::new();
            for s in series {
                let mut l = s.labels.as_slice().to_vec();
                l.retain(|l| l.name != "__name__");
                let mut end = None;
                for (t, v) in s.samples {
                    if t < mint {
                        continue;
                    }
                    if t > now_ms {
                        break;
                    }
                    end = Some((t, v));
                }
                if let Some(p) = end {
                    last.insert(Labels::new(l), p);
                }
            }
            for a in rule.active.values_mut() {
                let Some(&(t, v)) = last.get(&a.labels) else {
                    continue;
                };
                if inferdb_storage::is_stale_nan(v) {
                    continue;
                }
                let down_at = t.div_euclid(1000) * 1000;
                let mut active_at = (v as i64) * 1000;
                let remaining = hold - (down_at - active_at);
                if remaining <= 0 {
                    // it was firing when the server went down: the next evaluation decides
                } else if remaining < o.for_grace_period_ms {
                    active_at = now_ms + o.for_grace_period_ms - hold;
                } else {
                    active_at += now_ms - down_at;
                }
                a.active_at = active_at;
                a.sub_ms_ns = 0;
                tracing::debug!(alertname = %rule.def.alert, labels = %a.labels,
                    restored_active_at = active_at, "'for' state restored");
            }
            rule.restored = true;
        }
    }

    /// The alerts to send to Alertmanager after an evaluation at `ts_ms` (Prometheus'
    /// `sendAlerts`): firing alerts not sent within `resend_delay_ms`, and alerts resolved
    /// since they were last sent; each sent one is valid for four times the larger of the
    /// resend delay and the group interval.
    pub fn alerts_to_send(&mut self, ts_ms: i64, resend_delay_ms: i64) -> Vec<AlertToSend> {
        let mut out = Vec::new();
        let delta = resend_delay_ms.max(self.interval_ms);
        for rule in &mut self.rules {
            if !rule.is_alert() {
                continue;
            }
            let mut expr: Option<String> = None;
            for a in rule.active.values_mut() {
                let needs = a.state != AlertState::Pending
                    && (a.resolved_at > a.last_sent_at || a.last_sent_at + resend_delay_ms < ts_ms);
                if !needs {
                    continue;
                }
                a.last_sent_at = ts_ms;
                a.valid_until = ts_ms + 4 * delta;
                let expr = expr.get_or_insert_with(|| rule.expr.to_string()).clone();
                out.push(AlertToSend {
                    labels: a.labels.clone(),
                    annotations: a.annotations.clone(),
                    starts_at_ms: a.fired_at,
                    ends_at_ms: if a.resolved_at != 0 {
                        a.resolved_at
                    } else {
                        a.valid_until
                    },
                    expr,
                });
            }
        }
        out
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
    sub_ms_ns: u32,
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
                sub_ms_ns,
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
