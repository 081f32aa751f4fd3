//! Rules under `serve`: side by side with Prometheus 2.42 scraping the same simulated vLLM
//! servers with the same rule file (same recorded series and timestamps, same alerts, the
//! same `/api/v1/rules` and `/api/v1/alerts` answers modulo times and durations); a broken
//! reload refused while the old rules keep running; a restart in the middle of a pending
//! alert keeps its `for` progress.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, now_ms, Client, Proc, BIN};
use serde_json::Value;

/// Waits up to `secs` seconds until `f` gives `Some`.
fn wait<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get_json(client: &Client, url: &str) -> Value {
    let (st, body) = client.get(url);
    assert_eq!(st, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// `data.alerts` of `/api/v1/alerts`.
fn alerts(client: &Client, base: &str) -> Vec<Value> {
    get_json(client, &format!("{base}/api/v1/alerts"))["data"]["alerts"]
        .as_array()
        .unwrap()
        .clone()
}

fn rfc3339_ms(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

const PENDING_RULES: &str = "groups:
- name: pending
  interval: 1s
  rules:
  - alert: AlwaysOn
    expr: vector(1)
    for: 1m
    labels: {severity: page}
    annotations: {summary: 'value {{ $value }}'}
";

/// A broken rule file refuses `/-/reload` (file, line and message in the answer) while the
/// old group keeps running with its alert; after a restart in the middle of the pending
/// alert, the alert keeps the time it had been pending (Prometheus' `RestoreForState`: the
/// outage is added to its active time), as Prometheus 2.42 restarted beside it does.
#[test]
fn broken_reload_keeps_old_rules_and_restart_keeps_for_progress() {
    let client = Client::new();
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules.yml");
    std::fs::write(&rules, PENDING_RULES).unwrap();
    let cfg = work.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global:\n  evaluation_interval: 1s\nrule_files: [rules.yml]\n",
    )
    .unwrap();
    let data = work.path().join("data");
    let start = |client: &Client| {
        let port = free_port();
        let mut cmd = common::serve_command(&data, port);
        cmd.arg("--config.file").arg(&cfg).args([
            "--web.enable-lifecycle",
            "--rules.alert.for-grace-period=5s",
        ]);
        let mut p = Proc::spawn("inferdb", &mut cmd, work.path().join("inferdb.log"));
        let base = format!("http://127.0.0.1:{port}");
        p.wait_ready(&base, client);
        (p, base)
    };
    // Prometheus 2.42 beside it, on its own copy of the rules, restarted at the same time
    let prom_dir = work.path().join("prom");
    std::fs::create_dir_all(&prom_dir).unwrap();
    std::fs::write(prom_dir.join("rules.yml"), PENDING_RULES).unwrap();
    let prom_yml = "global:\n  evaluation_interval: 1s\nrule_files: [rules.yml]\n";
    let start_prom = |client: &Client| {
        common::start_prometheus_with(
            &prom_dir,
            prom_yml,
            &prom_dir.join("data"),
            &["--rules.alert.for-grace-period=5s"],
            client,
        )
    };
    let with_prom = common::require_prometheus("restart during pending beside Prometheus 2.42");
    let mut prom = with_prom.then(|| start_prom(&client));
    let (p, base) = start(&client);
    let first = wait("the alert pending", 15, || {
        alerts(&client, &base)
            .into_iter()
            .find(|a| a["state"] == "pending")
    });
    let active_at = rfc3339_ms(&first["activeAt"]);
    assert_eq!(first["value"], "1e+00");
    assert_eq!(first["annotations"]["summary"], "value 1");

    // a broken file: the reload is refused, naming the file, line and column
    std::fs::write(&rules, PENDING_RULES.replace("vector(1)", "vector(1) +")).unwrap();
    let (st, body) = client.post(&format!("{base}/-/reload"), &[]);
    assert_eq!(st, 500, "{body}");
    assert!(
        body.contains("error loading rules, previous rule set restored")
            && body.contains(&format!(
                "{}: 6:11: group \"pending\", rule 1, \"AlwaysOn\": could not parse expression",
                rules.display()
            )),
        "{body}"
    );
    assert_eq!(
        client.metric(&base, "prometheus_config_last_reload_successful"),
        Some(0.0)
    );
    // the old rules run on: the same alert, still pending, evaluated again
    let before = get_json(&client, &format!("{base}/api/v1/rules"));
    let last = rfc3339_ms(&before["data"]["groups"][0]["lastEvaluation"]);
    let again = wait("another evaluation", 5, || {
        let r = get_json(&client, &format!("{base}/api/v1/rules"));
        let g = &r["data"]["groups"][0];
        (rfc3339_ms(&g["lastEvaluation"]) > last).then(|| g.clone())
    });
    let alert = &again["rules"][0]["alerts"][0];
    assert_eq!(alert["state"], "pending");
    assert_eq!(rfc3339_ms(&alert["activeAt"]), active_at);
    std::fs::write(&rules, PENDING_RULES).unwrap();

    // pending for a while, then a restart: the time spent pending is kept
    std::thread::sleep(Duration::from_secs(6));
    let pending_before = now_ms() - active_at;
    let prom_pending_before = prom.as_ref().map(|(_, pbase)| {
        let a = alerts(&client, pbase);
        assert_eq!(a.len(), 1, "Prometheus: {a:?}");
        now_ms() - rfc3339_ms(&a[0]["activeAt"])
    });
    p.terminate();
    if let Some((pp, _)) = prom.take() {
        pp.terminate();
    }
    let down_at = now_ms();
    std::thread::sleep(Duration::from_secs(3));
    let prom2 = with_prom.then(|| start_prom(&client));
    let (p2, base2) = start(&client);
    // restored after the second evaluation
    let restored = wait("the restored alert", 15, || {
        alerts(&client, &base2)
            .into_iter()
            .find(|a| now_ms() - rfc3339_ms(&a["activeAt"]) > 3_000)
    });
    let kept = now_ms() - rfc3339_ms(&restored["activeAt"]);
    let outage = now_ms() - down_at;
    assert!(
        (pending_before - 2_500..=pending_before + 2_500).contains(&kept),
        "pending {pending_before} ms before the restart, {kept} ms after it (outage {outage} ms): {restored}\n{}",
        p2.log()
    );
    // and it is not firing early: 1m minus what was spent is still ahead
    assert_eq!(restored["state"], "pending");
    // Prometheus keeps the same progress over the same outage (its pending time before
    // the restart and after the restore differ from inferdb's by when each was read)
    if let (Some((_, pbase)), Some(before)) = (&prom2, prom_pending_before) {
        let restored = wait("Prometheus' restored alert", 15, || {
            alerts(&client, pbase)
                .into_iter()
                .find(|a| now_ms() - rfc3339_ms(&a["activeAt"]) > 3_000)
        });
        let prom_kept = now_ms() - rfc3339_ms(&restored["activeAt"]);
        let kept = now_ms() - rfc3339_ms(&alerts(&client, &base2)[0]["activeAt"]);
        assert_eq!(restored["state"], "pending");
        assert!(
            (before - 2_500..=before + 2_500).contains(&prom_kept),
            "Prometheus: pending {before} ms before the restart, {prom_kept} ms after"
        );
        assert!(
            (kept - prom_kept).abs() <= 2_000,
            "kept pending: inferdb {kept} ms, Prometheus {prom_kept} ms"
        );
    }
    p2.terminate();
}

const SIDE_RULES: &str = "groups:
- name: vllm
  interval: 1s
  rules:
  - record: job:up:count
    expr: count by (job) (up)
  - record: instance:requests_running:max
    expr: max by (instance, job) (vllm:num_requests_running >= 0)
  - alert: TargetUp
    expr: up == 1
    for: 2s
    labels: {severity: info}
    annotations:
      summary: '{{ $labels.instance }} is up ({{ $value }})'
  - alert: NeverFires
    expr: up == 2
    for: 5m
";

/// Removes what differs between two servers by nature (times, durations, evaluation
/// timings) from a `/api/v1/rules` or `/api/v1/alerts` answer.
fn strip_times(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in ["evaluationTime", "lastEvaluation", "activeAt"] {
                m.remove(k);
            }
            // Prometheus 2.42 leaves empty labels out of a recording rule
            if m.get("type") == Some(&Value::String("recording".into()))
                && !m.contains_key("labels")
            {
                m.insert("labels".into(), Value::Object(Default::default()));
            }
            for x in m.values_mut() {
                strip_times(x);
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                strip_times(x);
            }
            // alerts have no defined order in Prometheus
            a.sort_by_key(|x| x.to_string());
        }
        _ => {}
    }
}

fn samples(
    client: &Client,
    base: &str,
    query: &str,
    t: i64,
) -> BTreeMap<String, Vec<(i64, String)>> {
    let v = client.query(
        base,
        "/api/v1/query",
        &[("query", query.into()), ("time", common::secs(t))],
    );
    let mut out = BTreeMap::new();
    for s in v["data"]["result"].as_array().unwrap() {
        let pts = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    (p[0].as_f64().unwrap() * 1000.0).round() as i64,
                    p[1].as_str().unwrap().to_string(),
                )
            })
            .collect();
        out.insert(s["metric"].to_string(), pts);
    }
    out
}

/// The same rule file (the same path, so both place the group at the same point of its
/// interval) evaluated by inferdb and Prometheus 2.42 over the same simulated vLLM servers.
#[test]
fn same_rules_side_by_side_with_prometheus() {
    if !common::require_prometheus("rules side by side with Prometheus 2.42") {
        return;
    }
    let client = Client::new();
    let work = tempfile::tempdir().unwrap();
    let mut sims = Vec::new();
    let mut targets = Vec::new();
    for i in 0..2 {
        let port = free_port();
        sims.push(Proc::spawn(
            "simulate",
            Command::new(BIN).args([
                "simulate",
                "--port",
                &port.to_string(),
                "--seed",
                &(i + 1).to_string(),
            ]),
            work.path().join(format!("sim{i}.log")),
        ));
        targets.push(format!("'127.0.0.1:{port}'"));
    }
    for (i, s) in sims.iter_mut().enumerate() {
        let port: u16 = targets[i][11..targets[i].len() - 1].parse().unwrap();
        s.wait_listening(port);
    }
    let rules = work.path().join("rules.yml");
    std::fs::write(&rules, SIDE_RULES).unwrap();
    let yml = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{}']\nscrape_configs:\n- job_name: vllm\n  static_configs:\n  - targets: [{}]\n",
        rules.display(),
        targets.join(", ")
    );
    let pdir = work.path().join("prom");
    std::fs::create_dir_all(&pdir).unwrap();
    let (_prom, pbase) =
        common::start_prometheus_with(&pdir, &yml, &pdir.join("data"), &[], &client);
    let idir = work.path().join("inferdb");
    std::fs::create_dir_all(&idir).unwrap();
    std::fs::write(idir.join("prometheus.yml"), &yml).unwrap();
    let cfg = idir.join("prometheus.yml").display().to_string();
    let (_inf, ibase) =
        common::start_inferdb_with(&idir, &idir.join("data"), &["--config.file", &cfg], &client);

    // both fire TargetUp for both targets after `for: 2s`
    for base in [&pbase, &ibase] {
        wait("TargetUp firing on both targets", 20, || {
            let firing = alerts(&client, base)
                .iter()
                .filter(|a| a["state"] == "firing")
                .count();
            (firing == 2).then_some(())
        });
    }
    // one more evaluation on both, so the answers are of the same state
    std::thread::sleep(Duration::from_millis(1500));
    let mut answers = Vec::new();
    for base in [&pbase, &ibase] {
        let mut r = get_json(&client, &format!("{base}/api/v1/rules"));
        let mut a = get_json(&client, &format!("{base}/api/v1/alerts"));
        strip_times(&mut r);
        strip_times(&mut a);
        answers.push((r, a));
    }
    assert_eq!(
        answers[0].0, answers[1].0,
        "/api/v1/rules: Prometheus, then inferdb"
    );
    assert_eq!(
        answers[0].1, answers[1].1,
        "/api/v1/alerts: Prometheus, then inferdb"
    );
    // `type` as Prometheus 2.42 has it; the filters 2.42 lacks (Prometheus 2.45+) on
    // inferdb alone
    for q in ["type=record", "type=alert"] {
        let mut p = get_json(&client, &format!("{pbase}/api/v1/rules?{q}"));
        let mut i = get_json(&client, &format!("{ibase}/api/v1/rules?{q}"));
        strip_times(&mut p);
        strip_times(&mut i);
        assert_eq!(p, i, "{q}");
    }
    let names = |q: &str| -> Vec<String> {
        let v = get_json(&client, &format!("{ibase}/api/v1/rules?{q}"));
        v["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names("rule_name[]=TargetUp&rule_name[]=job:up:count"),
        ["job:up:count", "TargetUp"]
    );
    assert_eq!(names("rule_group[]=vllm&type=record").len(), 2);
    assert!(names("rule_group[]=other").is_empty());
    assert_eq!(names(&format!("file[]={}", rules.display())).len(), 4);
    assert_eq!(names("match[]={severity=\"info\"}"), ["TargetUp"]);
    let (st, body) = client.get(&format!("{ibase}/api/v1/rules?type=x"));
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("not supported value"), "{body}");
    // recorded series: the same label sets, samples at the same timestamps with the same
    // values where the value does not depend on when each server scraped
    let t = now_ms();
    let window = |base: &str, q: &str| samples(&client, base, &format!("{q}[6s]"), t - 1000);
    let (p, i) = (
        window(&pbase, "job:up:count"),
        window(&ibase, "job:up:count"),
    );
    assert_eq!(p.keys().collect::<Vec<_>>(), i.keys().collect::<Vec<_>>());
    for (k, pts) in &p {
        let ipts = &i[k];
        let common_pts: Vec<_> = ipts.iter().filter(|x| pts.contains(x)).collect();
        assert!(
            common_pts.len() >= 3 && common_pts.len() + 1 >= ipts.len().min(pts.len()),
            "{k}: Prometheus {pts:?}, inferdb {ipts:?}"
        );
    }
    let (p, i) = (
        window(&pbase, "instance:requests_running:max"),
        window(&ibase, "instance:requests_running:max"),
    );
    assert_eq!(p.keys().collect::<Vec<_>>(), i.keys().collect::<Vec<_>>());
    assert_eq!(p.len(), 2);
    for (k, pts) in &p {
        let pt: Vec<i64> = pts.iter().map(|x| x.0).collect();
        let same_t = i[k].iter().filter(|x| pt.contains(&x.0)).count();
        assert!(same_t >= 3, "{k}: timestamps {pt:?} vs {:?}", i[k]);
    }
    // alert transitions as ALERTS series: pending, then firing, for each target
    let states = |base: &str| {
        let v = client.query(
            base,
            "/api/v1/query",
            &[(
                "query",
                "count by (alertstate, instance) (count_over_time(ALERTS[1m]))".into(),
            )],
        );
        let mut s: Vec<String> = v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{}/{}", r["metric"]["instance"], r["metric"]["alertstate"]))
            .collect();
        s.sort();
        s
    };
    // Both gate ALERTS until the `for` state is restored after the second evaluation, so
    // whether the pending state was written depends on when the first scrape landed; the
    // firing state is written by both for both targets.
    let firing = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .filter(|s| s.ends_with("/\"firing\""))
            .collect()
    };
    let (p, i) = (firing(states(&pbase)), firing(states(&ibase)));
    assert_eq!(p, i);
    assert_eq!(i.len(), 2, "firing for 2 targets: {i:?}");
}

/// A subquery without a step uses `global.evaluation_interval`, for `/api/v1/query` as for
/// rules, and follows it across `/-/reload`, as Prometheus' `SetDefaultEvaluationInterval`.
#[test]
fn default_subquery_step_follows_the_evaluation_interval() {
    let client = Client::new();
    let work = tempfile::tempdir().unwrap();
    let cfg = |interval: &str| format!("global:\n  evaluation_interval: {interval}\n");
    let idb_work = work.path().join("inferdb");
    let prom_work = work.path().join("prometheus");
    std::fs::create_dir_all(&idb_work).unwrap();
    std::fs::create_dir_all(&prom_work).unwrap();
    let idb_cfg = idb_work.join("inferdb.yml");
    std::fs::write(&idb_cfg, cfg("10s")).unwrap();
    let idb_cfg_arg = idb_cfg.display().to_string();
    let (idb, idb_base) = common::start_inferdb_with(
        &idb_work,
        &idb_work.join("data"),
        &["--config.file", &idb_cfg_arg, "--web.enable-lifecycle"],
        &client,
    );
    let (prom, prom_base) = common::start_prometheus_with(
        &prom_work,
        &cfg("10s"),
        &prom_work.join("data"),
        &["--web.enable-lifecycle"],
        &client,
    );
    // steps at multiples of the interval in (t - 1m, t], t off every multiple
    let count = |base: &str| -> String {
        let url =
            format!("{base}/api/v1/query?query=count_over_time(vector(1)%5B1m:%5D)&time=1000005");
        let (code, body) = client.get(&url);
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"][0]["value"][1]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(count(&idb_base), "6");
    assert_eq!(count(&prom_base), "6");
    std::fs::write(&idb_cfg, cfg("30s")).unwrap();
    std::fs::write(prom_work.join("prometheus.yml"), cfg("30s")).unwrap();
    for base in [&idb_base, &prom_base] {
        let (code, body) = client.post(&format!("{base}/-/reload"), &[]);
        assert_eq!(code, 200, "{base}: {body}");
    }
    assert_eq!(count(&idb_base), "2");
    assert_eq!(count(&prom_base), "2");
    idb.terminate();
    prom.terminate();
}

/// Alerts driven by the evaluation time alone, so two servers evaluating the group at the
/// same timestamps see the same input: `Upper` is active 5 s of every 10 (pending 3 s, then
/// firing), `Held` 2 s of every 10 (pending 1 s, then firing, then kept firing for 2 s).
const STATE_RULES: &str = "groups:
- name: states
  interval: 1s
  rules:
  - alert: Upper
    expr: vector(time() % 10) > 4
    for: 3s
    labels: {severity: page}
    annotations: {summary: 'phase {{ $value }}'}
  - alert: Held
    expr: vector(time() % 10) > 7
    for: 1s
    keep_firing_for: 2s
";

/// `(alertname, alertstate or value, timestamp)` of every sample of `series[10s]` at `t`.
fn alert_samples(client: &Client, base: &str, series: &str, t: i64) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = samples(client, base, &format!("{series}[10s]"), t)
        .into_iter()
        .flat_map(|(metric, pts)| {
            let m: Value = serde_json::from_str(&metric).unwrap();
            let name = format!(
                "{}/{}",
                m["alertname"].as_str().unwrap(),
                m["alertstate"].as_str().unwrap_or("for_state")
            );
            pts.into_iter()
                .map(move |(ts, v)| (format!("{name}={v}"), ts))
        })
        .collect();
    out.sort_by_key(|(s, t)| (*t, s.clone()));
    out
}

/// The same alerting rules evaluated by inferdb and Prometheus 2.42 at the same timestamps
/// (same file path and group name, so the same offset within the interval): the same
/// `ALERTS` samples, pending and firing, and the same `ALERTS_FOR_STATE` values at every
/// evaluation over a whole 10 s cycle, and the same `/api/v1/alerts` answers between
/// evaluations, `activeAt` and `keepFiringSince` to the nanosecond included.
#[test]
fn alert_states_side_by_side_with_prometheus() {
    if !common::require_prometheus("alert states side by side with Prometheus 2.42") {
        return;
    }
    let client = Client::new();
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("rules.yml");
    std::fs::write(&rules, STATE_RULES).unwrap();
    let yml = format!(
        "global:\n  evaluation_interval: 1s\nrule_files: ['{}']\n",
        rules.display()
    );
    let pdir = work.path().join("prom");
    std::fs::create_dir_all(&pdir).unwrap();
    let (_prom, pbase) =
        common::start_prometheus_with(&pdir, &yml, &pdir.join("data"), &[], &client);
    let idir = work.path().join("inferdb");
    std::fs::create_dir_all(&idir).unwrap();
    std::fs::write(idir.join("prometheus.yml"), &yml).unwrap();
    let cfg = idir.join("prometheus.yml").display().to_string();
    let (_inf, ibase) =
        common::start_inferdb_with(&idir, &idir.join("data"), &["--config.file", &cfg], &client);
    // Both write ALERTS once the `for` state is restored (after the second evaluation), and
    // alerts that became active before one server started differ; from a point of the cycle
    // where both alerts are inactive on both servers, their histories are the same.
    let file = rules.display().to_string();
    let eval_at = |t: i64| inferdb::rules::schedule::eval_timestamp_ms(&file, "states", 1000, t);
    let ready = now_ms() + 3_000;
    let from = (ready.div_euclid(10_000) + 1) * 10_000 + 3_000;
    let to = from + 10_000;

    // `/api/v1/alerts` half-way between evaluations, on each server twice, compared where
    // neither evaluated meanwhile
    let sorted = |base: &str| {
        let mut a = alerts(&client, base);
        a.sort_by_key(|x| x.to_string());
        Value::Array(a)
    };
    let mut compared = 0;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let now = now_ms();
        let mid = eval_at(now) + 500;
        let mid = if mid <= now { mid + 1000 } else { mid };
        if mid > to + 1_000 {
            break;
        }
        std::thread::sleep(Duration::from_millis((mid - now) as u64));
        if mid < from {
            continue;
        }
        let (p1, i1, p2, i2) = (
            sorted(&pbase),
            sorted(&ibase),
            sorted(&pbase),
            sorted(&ibase),
        );
        if p1 != p2 || i1 != i2 {
            continue;
        }
        assert_eq!(p1, i1, "/api/v1/alerts at {mid}: Prometheus, then inferdb");
        compared += 1;
        for a in p1.as_array().unwrap() {
            seen.insert(format!(
                "{}/{}{}",
                a["labels"]["alertname"].as_str().unwrap(),
                a["state"].as_str().unwrap(),
                if a.get("keepFiringSince").is_some() {
                    "/kept"
                } else {
                    ""
                }
            ));
        }
    }
    assert!(compared >= 7, "only {compared} answers compared");
    for s in [
        "Upper/pending",
        "Upper/firing",
        "Held/pending",
        "Held/firing",
        "Held/firing/kept",
    ] {
        assert!(seen.contains(s), "{s} never seen: {seen:?}");
    }

    // the stored transitions at every evaluation of the window
    let end = eval_at(to);
    for series in ["ALERTS", "ALERTS_FOR_STATE"] {
        let keep = |v: Vec<(String, i64)>| -> Vec<(String, i64)> {
            v.into_iter().filter(|(_, t)| *t > end - 10_000).collect()
        };
        let p = keep(alert_samples(&client, &pbase, series, end));
        let i = keep(alert_samples(&client, &ibase, series, end));
        assert_eq!(p, i, "{series}: Prometheus, then inferdb");
        if series == "ALERTS" {
            for s in [
                "Upper/pending=1",
                "Upper/firing=1",
                "Held/pending=1",
                "Held/firing=1",
            ] {
                assert!(i.iter().any(|(x, _)| x == s), "no {s} in {i:?}");
            }
        }
    }
}
