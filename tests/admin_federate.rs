//! `/federate`, `/api/v1/targets/metadata` and the TSDB admin API next to a live Prometheus
//! 2.42 on the same data:
//!
//! - both scrape the same page every second (plus a job that drops `instance`); their
//!   `/federate` answers for several `match[]` agree line by line (timestamps and the
//!   `cluster` external label aside), as do their `targets/metadata` answers and their errors;
//! - an inferdb and a Prometheus federate from both (`honor_labels: true`) and hold the same
//!   series;
//! - without `--web.enable-admin-api` both refuse the admin endpoints with the same status and
//!   JSON; with it, on the same imported history, snapshots have names of the same form and
//!   inferdb's opens (`tsdb check`, then served) with the live store's answers;
//!   `delete_series` and `clean_tombstones` leave both with the same answers.
//!
//! Without `prometheus`/`promtool` the test is skipped with a message, unless `CI=true`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::diff::compare;
use common::{Client, Proc};
use serde_json::Value;

const PAGE: &str = "\
# HELP demo_temp_celsius Temperature of a room.
# TYPE demo_temp_celsius gauge
demo_temp_celsius{room=\"a\"} 21.5
demo_temp_celsius{room=\"b\"} -3
# HELP demo_requests_total Requests served.
# TYPE demo_requests_total counter
demo_requests_total{code=\"200\"} 1027
demo_requests_total{code=\"500\",path=\"/x \\\"y\\\"\"} 3
# HELP demo_latency_seconds Request latency.
# TYPE demo_latency_seconds histogram
demo_latency_seconds_bucket{le=\"0.1\"} 5
demo_latency_seconds_bucket{le=\"+Inf\"} 7
demo_latency_seconds_sum 1.25
demo_latency_seconds_count 7
# TYPE demo_big untyped
demo_big 1e+30
";

/// Serves [`PAGE`] to every request on a free port; returns the address.
fn serve_page() -> String {
    common::PageServer::start(PAGE).addr
}

fn scrape_yml(cluster: &str, page: &str) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  external_labels:\n    cluster: {cluster}\n\
         scrape_configs:\n\
         \x20 - job_name: page\n    static_configs: [{{targets: ['{page}']}}]\n\
         \x20 - job_name: noinst\n    static_configs: [{{targets: ['{page}']}}]\n    metric_relabel_configs:\n\
         \x20     - {{source_labels: [__name__], regex: demo_temp_celsius, action: keep}}\n\
         \x20     - {{regex: instance, action: labeldrop}}\n"
    )
}

fn federation_yml(sources: &[&str]) -> String {
    let targets: Vec<String> = sources.iter().map(|s| format!("'{s}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: fed\n    honor_labels: true\n    metrics_path: /federate\n\
         \x20   params:\n      'match[]': ['{{__name__=~\"demo_.*\"}}', 'up']\n\
         \x20   static_configs: [{{targets: [{}]}}]\n",
        targets.join(", ")
    )
}

fn start_inferdb_cfg(work: &Path, yml: &str, extra: &[&str], client: &Client) -> (Proc, String) {
    std::fs::create_dir_all(work).unwrap();
    let cfg = work.join("inferdb.yml");
    std::fs::write(&cfg, yml).unwrap();
    let mut args = vec!["--config.file", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    common::start_inferdb_with(work, &work.join("data"), &args, client)
}

fn start_prometheus_cfg(work: &Path, yml: &str, extra: &[&str], client: &Client) -> (Proc, String) {
    std::fs::create_dir_all(work).unwrap();
    common::start_prometheus_with(work, yml, &work.join("data"), extra, client)
}

/// Waits (30 s at most) until `query` gives `n` series at `base`.
fn wait_series(client: &Client, base: &str, query: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = client.query(base, "/api/v1/query", &[("query", query.to_string())]);
        let got = v["data"]["result"].as_array().map_or(0, |r| r.len());
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{base}: {query} has {got} series, want {n}: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A federation answer without timestamps and with the `cluster` value blanked, lines
/// sorted within each family (Prometheus sorts families by name only, unstably).
fn normalise(body: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in body.lines() {
        if let Some(name) = line.strip_prefix("# TYPE ") {
            out.push((name.to_string(), Vec::new()));
            continue;
        }
        let (series, _ts) = line.rsplit_once(' ').expect("value and timestamp");
        let series = ["prom", "ia", "ib"]
            .iter()
            .fold(series.to_string(), |s, c| {
                s.replace(&format!("cluster=\"{c}\""), "cluster=\"X\"")
            });
        out.last_mut()
            .unwrap_or_else(|| panic!("sample before any TYPE line: {line}"))
            .1
            .push(series);
    }
    for f in &mut out {
        f.1.sort();
    }
    out
}

/// `targets/metadata` entries as sorted JSON strings (Go's map order is random), the
/// target's instance blanked where it names the server itself.
fn metadata_set(v: &Value) -> Vec<String> {
    assert_eq!(v["status"], "success", "{v}");
    let mut out: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn federate_and_targets_metadata_match_prometheus() {
    if !common::require_prometheus("federate_and_targets_metadata_match_prometheus") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::new();
    let page = serve_page();
    let (_a, ia) = start_inferdb_cfg(
        &tmp.path().join("a"),
        &scrape_yml("ia", &page),
        &[],
        &client,
    );
    let (_p, prom) = start_prometheus_cfg(
        &tmp.path().join("p"),
        &scrape_yml("prom", &page),
        &[],
        &client,
    );
    for base in [&ia, &prom] {
        wait_series(&client, base, "demo_temp_celsius", 4);
        wait_series(&client, base, "demo_requests_total", 2);
    }

    // /federate, several match[]
    let cases: &[&[&str]] = &[
        &["{__name__=~\"demo_.*\"}"],
        &["up"],
        &["demo_temp_celsius", "demo_requests_total{code=\"200\"}"],
        &[
            "{job=\"noinst\",__name__=~\"demo_.*|up\"}",
            "demo_temp_celsius{room=\"a\"}",
        ],
        &[
            "demo_latency_seconds_bucket",
            "{__name__=~\"demo_latency.*\",le!=\"0.1\"}",
        ],
        &["nothing_here"],
        &[],
    ];
    for ms in cases {
        let q: Vec<(&str, &str)> = ms.iter().map(|m| ("match[]", *m)).collect();
        let get = |base: &str| {
            client.send_with_headers(client.http.get(format!("{base}/federate")).query(&q))
        };
        let (sa, ba, ha) = get(&ia);
        let (sp, bp, hp) = get(&prom);
        assert_eq!((sa, sp), (200, 200), "{ms:?}: {ba} / {bp}");
        let ct = |h: &[(String, String)]| {
            h.iter()
                .find(|(k, _)| k == "content-type")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(ct(&ha), ct(&hp), "{ms:?}");
        assert_eq!(normalise(&ba), normalise(&bp), "{ms:?}:\n{ba}\n---\n{bp}");
        if ms.len() == 1 && ms[0].starts_with("{__name__") {
            assert!(
                ba.contains(
                    "demo_temp_celsius{job=\"noinst\",room=\"a\",cluster=\"ia\",instance=\"\"}"
                ),
                "{ba}"
            );
            assert!(
                ba.contains("# TYPE demo_big untyped\ndemo_big{instance=\""),
                "{ba}"
            );
        }
    }
    for bad in ["up{", "{}", "up{job=}", "1 + up"] {
        let url = |base: &str| format!("{base}/federate");
        let a = client.send_with_headers(client.http.get(url(&ia)).query(&[("match[]", bad)]));
        let p = client.send_with_headers(client.http.get(url(&prom)).query(&[("match[]", bad)]));
        assert_eq!((a.0, &a.1), (p.0, &p.1), "match[]={bad}");
    }
    let (st, _) = client.post(&format!("{ia}/federate"), &[("match[]", "up".into())]);
    assert_eq!(st, 405);

    // /api/v1/targets/metadata
    for q in [
        vec![],
        vec![("metric", "demo_temp_celsius")],
        vec![("match_target", "{job=\"noinst\"}")],
        vec![
            ("match_target", "{job=\"page\"}"),
            ("metric", "demo_latency_seconds"),
        ],
        vec![("metric", "nothing")],
    ] {
        let get = |base: &str| {
            let (st, body) = client.send(
                client
                    .http
                    .get(format!("{base}/api/v1/targets/metadata"))
                    .query(&q),
            );
            assert_eq!(st, 200, "{q:?}: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            metadata_set(&v)
        };
        let (a, p) = (get(&ia), get(&prom));
        assert!(!a.is_empty() || q.iter().any(|x| x.1 == "nothing"), "{q:?}");
        assert_eq!(a, p, "{q:?}");
    }
    // limit: counted before each target, so one target's entries may pass it
    for limit in ["1", "0", "-1"] {
        let n = |base: &str| {
            let (_, body) = client.get(&format!(
                "{base}/api/v1/targets/metadata?match_target=%7Bjob%3D%22page%22%7D&limit={limit}"
            ));
            let v: Value = serde_json::from_str(&body).unwrap();
            v["data"].as_array().unwrap().len()
        };
        assert_eq!(n(&ia), n(&prom), "limit={limit}");
    }
    for q in ["limit=x", "match_target=%7B", "match_target=up%7Ba%3D"] {
        let a = client.get(&format!("{ia}/api/v1/targets/metadata?{q}"));
        let p = client.get(&format!("{prom}/api/v1/targets/metadata?{q}"));
        assert_eq!(a, p, "{q}");
    }

    // the admin API is off by default, refused as Prometheus refuses it
    for path in ["snapshot", "delete_series?match[]=up", "clean_tombstones"] {
        for put in [false, true] {
            let req = |base: &str| {
                let url = format!("{base}/api/v1/admin/tsdb/{path}");
                if put {
                    client.http.put(url)
                } else {
                    client.http.post(url)
                }
            };
            let a = client.send(req(&ia));
            let p = client.send(req(&prom));
            assert_eq!(a, p, "{path}");
            assert!(a.1.contains("admin APIs disabled"), "{a:?}");
        }
        let a = client.get(&format!("{ia}/api/v1/admin/tsdb/{path}")).0;
        let p = client.get(&format!("{prom}/api/v1/admin/tsdb/{path}")).0;
        assert_eq!((a, p), (405, 405), "GET {path}");
    }

    // federating from both, honor_labels: true, as an inferdb and as a Prometheus
    let src: Vec<&str> = [&ia, &prom]
        .iter()
        .map(|b| b.trim_start_matches("http://"))
        .collect();
    let fed = federation_yml(&src);
    let (_b, ib) = start_inferdb_cfg(&tmp.path().join("b"), &fed, &[], &client);
    let (_q, pq) = start_prometheus_cfg(&tmp.path().join("q"), &fed, &[], &client);
    for base in [&ib, &pq] {
        // rooms a, b from job page and noinst, from two sources
        wait_series(&client, base, "demo_temp_celsius", 8);
    }
    for q in [
        "demo_temp_celsius",
        "demo_requests_total",
        "demo_latency_seconds_bucket",
        "demo_big",
        "up{job!=\"fed\"}",
    ] {
        let set = |base: &str| {
            let v = client.query(base, "/api/v1/query", &[("query", q.to_string())]);
            let mut m: Vec<(String, String)> = v["data"]["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["metric"].to_string(), r["value"][1].to_string()))
                .collect();
            m.sort();
            m
        };
        let (b, q2) = (set(&ib), set(&pq));
        assert!(!b.is_empty(), "{q}");
        assert_eq!(b, q2, "{q}");
        if q == "demo_temp_celsius" {
            // the page's labels are kept (job, instance), the noinst series get none
            let page_inst = format!("\"instance\":\"{page}\"");
            assert_eq!(b.iter().filter(|x| x.0.contains(&page_inst)).count(), 4);
            assert_eq!(
                b.iter().filter(|x| !x.0.contains("\"instance\"")).count(),
                4
            );
            assert!(b.iter().all(|x| !x.0.contains("\"job\":\"fed\"")), "{b:?}");
        }
    }
}

/// 2023-11-14T22:00:00Z.
const T0: i64 = 1_699_999_200_000;

/// 5 h of two gauges and a counter for three instances, every 15 s (+125 ms).
fn history() -> String {
    let mut om = String::new();
    let fam = |om: &mut String, name: &str, typ: &str, f: &dyn Fn(usize, usize) -> f64| {
        om.push_str(&format!("# TYPE {name} {typ}\n"));
        for inst in 0..3 {
            for i in 0..1200 {
                let t = T0 + i as i64 * 15_000 + 125;
                let sample = if typ == "counter" {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                om.push_str(&format!(
                    "{sample}{{instance=\"10.0.0.{inst}:8000\",job=\"vllm\"}} {} {}.{:03}\n",
                    f(inst, i),
                    t / 1000,
                    t % 1000
                ));
            }
        }
    };
    fam(&mut om, "kv_usage", "gauge", &|inst, i| {
        ((i * 7 + inst * 3) % 100) as f64 / 100.0
    });
    fam(&mut om, "queue", "gauge", &|inst, i| {
        ((i / 10 + inst) % 5) as f64
    });
    fam(&mut om, "tokens", "counter", &|inst, i| {
        (i * (inst + 1) * 11) as f64
    });
    om.push_str("# EOF\n");
    om
}

/// Same answers from both for a few range and instant queries over the history.
fn same_answers(client: &Client, a: &str, b: &str, what: &str) {
    let end = T0 + 5 * 3600 * 1000;
    let range = |q: &str| {
        vec![
            ("query", q.to_string()),
            ("start", common::secs(T0 + 37_000)),
            ("end", common::secs(end - 23_000)),
            ("step", "97".to_string()),
        ]
    };
    for q in [
        "kv_usage",
        "queue",
        "rate(tokens_total[5m])",
        "sum by (instance) (kv_usage)",
    ] {
        let f = range(q);
        let post = |base: &str| client.post(&format!("{base}/api/v1/query_range"), &f);
        let (va, vb) = (post(a), post(b));
        assert_eq!((va.0, vb.0), (200, 200), "{what}: {q}: {} / {}", va.1, vb.1);
        if let Err(e) = compare(q, true, &va, &vb) {
            panic!("{what}: {q}: {e}");
        }
    }
    for (lo, hi) in [(T0, end), (T0 + 3_600_000, T0 + 7_200_000)] {
        let f = vec![
            ("match[]", "{job=\"vllm\"}".to_string()),
            ("start", common::secs(lo)),
            ("end", common::secs(hi)),
        ];
        let va = client.query(a, "/api/v1/series", &f);
        let vb = client.query(b, "/api/v1/series", &f);
        let set = |v: &Value| {
            let mut s: Vec<String> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.to_string())
                .collect();
            s.sort();
            s
        };
        assert_eq!(set(&va), set(&vb), "{what}: series in [{lo}, {hi}]");
    }
}

#[test]
fn admin_api_matches_prometheus() {
    if !common::require_prometheus("admin_api_matches_prometheus") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::new();
    let om = tmp.path().join("history.om");
    std::fs::write(&om, history()).unwrap();
    let (idata, pdata) = (tmp.path().join("i/data"), tmp.path().join("p/data"));
    common::inferdb_import(&om, &idata);
    common::promtool_create_blocks(&om, &pdata);
    let yml = "global:\n  scrape_interval: 15s\nscrape_configs: []\n";
    let (_i, ib) = start_inferdb_cfg(
        &tmp.path().join("i"),
        yml,
        &["--web.enable-admin-api", "--query.lookback-delta", "5m"],
        &client,
    );
    let (_p, pb) = start_prometheus_cfg(
        &tmp.path().join("p"),
        yml,
        &[
            "--web.enable-admin-api",
            "--storage.tsdb.retention.time=100y",
            "--query.lookback-delta=5m",
        ],
        &client,
    );
    same_answers(&client, &ib, &pb, "before any change");

    // snapshot: the same name form; inferdb's folder checks clean and answers the same
    let name_re = regex::Regex::new(r"^\d{8}T\d{6}Z-[0-9a-f]{16}$").unwrap();
    let mut names = BTreeMap::new();
    for (who, base, data) in [("inferdb", &ib, &idata), ("prometheus", &pb, &pdata)] {
        let (st, body) = client.post(
            &format!("{base}/api/v1/admin/tsdb/snapshot"),
            &[("skip_head", "true".into())],
        );
        assert_eq!(st, 200, "{who}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success");
        let name = v["data"]["name"].as_str().unwrap().to_string();
        assert!(name_re.is_match(&name), "{who}: {name}");
        assert!(data.join("snapshots").join(&name).is_dir(), "{who}");
        names.insert(who, name);
    }
    let a = client.post(
        &format!("{ib}/api/v1/admin/tsdb/snapshot"),
        &[("skip_head", "yes".into())],
    );
    let p = client.post(
        &format!("{pb}/api/v1/admin/tsdb/snapshot"),
        &[("skip_head", "yes".into())],
    );
    assert_eq!(a, p);
    let snap = idata.join("snapshots").join(&names["inferdb"]);
    common::run_ok(
        "inferdb tsdb check",
        std::process::Command::new(common::BIN)
            .args(["tsdb", "check", "--data-dir"])
            .arg(&snap),
    );

    // delete_series in a range, on both
    let del = [
        (
            "match[]",
            "kv_usage{instance=\"10.0.0.1:8000\"}".to_string(),
        ),
        (
            "match[]",
            "{__name__=\"queue\",instance=~\"10.0.0.[02]:8000\"}".to_string(),
        ),
        ("start", common::secs(T0 + 3_600_000 + 500)),
        ("end", common::secs(T0 + 3 * 3_600_000 + 1_000)),
    ];
    for base in [&ib, &pb] {
        let (st, body) = client.post(&format!("{base}/api/v1/admin/tsdb/delete_series"), &del);
        assert_eq!((st, body.as_str()), (204, ""), "{base}");
    }
    same_answers(&client, &ib, &pb, "after delete_series");
    let v = client.query(
        &ib,
        "/api/v1/query",
        &[
            ("query", "count_over_time(kv_usage[1h])".into()),
            ("time", common::secs(T0 + 3 * 3_600_000 - 23_000)),
        ],
    );
    let counts: Vec<&str> = v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["value"][1].as_str().unwrap())
        .collect();
    assert_eq!(
        counts.len(),
        2,
        "10.0.0.1 has no samples in the window: {v}"
    );
    // errors as Prometheus words them
    for form in [vec![], vec![("match[]", "up{".to_string())]] {
        let a = client.post(&format!("{ib}/api/v1/admin/tsdb/delete_series"), &form);
        let p = client.post(&format!("{pb}/api/v1/admin/tsdb/delete_series"), &form);
        assert_eq!(a, p, "{form:?}");
    }
    // a bad time: the same status and errorType (2.42 words the message "Invalid time value
    // for 'start': ...", Prometheus 3 in lower case, inferdb's time parameters without it)
    let form = [("match[]", "up".to_string()), ("start", "x".to_string())];
    let a = client.post(&format!("{ib}/api/v1/admin/tsdb/delete_series"), &form);
    let p = client.post(&format!("{pb}/api/v1/admin/tsdb/delete_series"), &form);
    let typ = |b: &str| serde_json::from_str::<Value>(b).unwrap()["errorType"].clone();
    assert_eq!((a.0, typ(&a.1)), (p.0, typ(&p.1)), "{a:?} / {p:?}");

    // clean_tombstones keeps the answers
    for base in [&ib, &pb] {
        let (st, body) = client.post(&format!("{base}/api/v1/admin/tsdb/clean_tombstones"), &[]);
        assert_eq!((st, body.as_str()), (204, ""), "{base}");
    }
    same_answers(&client, &ib, &pb, "after clean_tombstones");
    let has_stones = std::fs::read_dir(&idata)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.path().join("tombstones").exists());
    assert!(!has_stones, "tombstones left after clean_tombstones");

    // the snapshot, served, answers as the store did before the delete
    let (_s, sb) = common::start_inferdb_with(
        &tmp.path().join("i"),
        &snap,
        &["--query.lookback-delta", "5m"],
        &client,
    );
    let orig = tmp.path().join("orig");
    common::inferdb_import(&om, &orig);
    std::fs::create_dir_all(tmp.path().join("r")).unwrap();
    let (_r, rb) = common::start_inferdb_with(&tmp.path().join("r"), &orig, &[], &client);
    same_answers(&client, &sb, &rb, "snapshot vs the original data");
}
