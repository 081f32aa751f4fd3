//! The web UI in a real browser: Debian's `chromium` driven by `chromedriver` over WebDriver
//! (fantoccini) against `serve --demo` (two simulated vLLM models) plus a target that refuses
//! connections. Every page loads with no console error (read through `goog:loggingPrefs`);
//! the query page draws one line per model, autocompletes `vllm:` names, and restores its
//! panels from a shared URL; the targets page shows the refused target's error; the fleet
//! page's numbers equal the API's answers for the same expressions at the same time; the
//! explain tab shows the expression's tree with each node's series count as the API answers
//! it; the simulated servers restart early, and the insights page and the fleet page show
//! that finding. A second case runs every page under `--web.route-prefix /prom` and
//! `--web.external-url`. Screenshots of every page at 1280x800 go to
//! `target/tmp/ui-screenshots/`.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{demo_command, free_port, Proc};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const PAGES: &[&str] = &[
    "fleet",
    "insights",
    "query",
    "targets",
    "service-discovery",
    "rules",
    "alerts",
    "tsdb-status",
    "config",
    "flags",
    "status",
];

const GEN_BY_MODEL: &str = "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))";
const MODELS: &[&str] = &[
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
];

/// A fleet table row: model, row key, cells of (expression, raw API value, shown text).
type FleetRow = (String, String, Vec<(String, String, String)>);

fn shots_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Browser {
    c: Client,
    driver: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    /// The browser's console messages since the last call, as (level, message).
    async fn console(&self) -> Vec<(String, String)> {
        let r: Value = self
            .http
            .post(format!("{}/session/{}/se/log", self.driver, self.session))
            .header("Content-Type", "application/json")
            .body(json!({"type": "browser"}).to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap();
        r["value"]
            .as_array()
            .unwrap_or_else(|| panic!("no log entries in {r}"))
            .iter()
            .map(|e| {
                (
                    e["level"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    async fn assert_no_console_errors(&self, page: &str) {
        let errors: Vec<_> = self
            .console()
            .await
            .into_iter()
            .filter(|(l, _)| l == "SEVERE")
            .collect();
        assert!(errors.is_empty(), "{page}: console errors {errors:?}");
    }

    async fn js(&self, script: &str) -> Value {
        self.c.execute(script, vec![]).await.unwrap()
    }

    /// Waits (20 s at most) until `script` returns true.
    async fn wait_js(&self, script: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.js("return document.body.innerText").await;
                panic!("timed out waiting for {what}; page text:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let png = self.c.screenshot().await.unwrap();
        // PNG header: width and height, big-endian, at bytes 16..24
        let size = |i: usize| u32::from_be_bytes(png[i..i + 4].try_into().unwrap());
        assert_eq!((size(16), size(20)), (1280, 800), "{name} screenshot size");
        std::fs::write(shots_dir().join(format!("{name}.png")), png).unwrap();
    }
}

/// Value of the API for `expr` at `time`, by the values of `labels` (in order).
async fn api_values(
    http: &reqwest::Client,
    base: &str,
    expr: &str,
    time: &str,
    labels: &[&str],
) -> Vec<(Vec<String>, String)> {
    let r: Value = http
        .post(format!("{base}/api/v1/query"))
        .form(&[("query", expr), ("time", time)])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    assert_eq!(r["status"], "success", "{expr}: {r}");
    r["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let key = labels
                .iter()
                .map(|l| s["metric"][l].as_str().unwrap_or("").to_string())
                .collect();
            (key, s["value"][1].as_str().unwrap().to_string())
        })
        .collect()
}

/// Waits (30 s at most) until `ready` (the server's `/-/ready`) answers 200: the server binds
/// before its store is open and answers 503 until then.
async fn wait_ready(http: &reqwest::Client, ready: &str, server: &Proc) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(ready).send().await {
            if r.status() == 200 {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{ready} never ready\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The number a fleet cell shows ('1,234', '111 ms', '6.15 %', '9.19 s'), in the API's unit.
fn shown_number(text: &str) -> Option<f64> {
    let t = text.replace(',', "");
    let (num, unit) = t.split_once(' ').unwrap_or((&t, ""));
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "ms" => v / 1e3,
        "µs" => v / 1e6,
        "%" => v / 100.0,
        _ => v,
    })
}

async fn start_browser(work: &std::path::Path) -> (Proc, Browser) {
    let port = free_port();
    let mut driver = Proc::spawn(
        "chromedriver",
        std::process::Command::new("chromedriver").arg(format!("--port={port}")),
        work.join("chromedriver.log"),
    );
    driver.wait_listening(port);
    let profile = work.join("chromium-profile");
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,800", "--hide-scrollbars",
                format!("--user-data-dir={}", profile.display()),
            ],
        },
        "goog:loggingPrefs": {"browser": "ALL"},
    });
    let url = format!("http://127.0.0.1:{port}");
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps.as_object().unwrap().clone())
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("chromedriver session: {e}\n{}", driver.log()));
    let session = c.session_id().await.unwrap().unwrap();
    // a 1280x800 viewport: the window plus whatever the browser's frame takes
    let frame = c
        .execute(
            "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]",
            vec![],
        )
        .await
        .unwrap();
    let frame: (u32, u32) = serde_json::from_value(frame).unwrap();
    c.set_window_size(1280 + frame.0, 800 + frame.1)
        .await
        .unwrap();
    (
        driver,
        Browser {
            c,
            driver: url,
            session,
            http: reqwest::Client::new(),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_ui_in_chromium() {
    if !common::require_tools(&["chromium", "chromedriver"], "the web UI browser test") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let refused = free_port();
    let yml = work.path().join("prometheus.yml");
    std::fs::write(
        &yml,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\n\
             scrape_configs:\n  - job_name: refused\n    static_configs: [{{targets: ['127.0.0.1:{refused}']}}]\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut cmd = demo_command(&work.path().join("data"), port, 2);
    // both servers restart 5 s in: a finding for the insights and fleet pages
    cmd.arg("--config.file")
        .arg(&yml)
        .args(["--demo.scenario", "healthy,restart@5s"]);
    let mut server = Proc::spawn("inferdb", &mut cmd, work.path().join("inferdb.log"));
    server.wait_listening(port);
    let http = reqwest::Client::new();
    wait_ready(&http, &format!("{base}/-/ready"), &server).await;

    // data for both models, with rates (three scrapes at least)
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = format!("{:.3}", common::now_ms() as f64 / 1000.0);
        let got = api_values(&http, &base, GEN_BY_MODEL, &now, &["model_name"]).await;
        if got.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no rates of 2 models: {got:?}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // the served UI log line names the URL to open
    assert!(
        server
            .log()
            .lines()
            .any(|l| l.contains("url") && l.contains(&format!("{base}/"))),
        "no URL log line:\n{}",
        server.log()
    );

    let (_driver, b) = start_browser(work.path()).await;

    // every page loads without console errors; a screenshot of each
    for page in PAGES {
        b.c.goto(&format!("{base}/{page}")).await.unwrap();
        b.wait_js(
            "return document.querySelector('nav.top a.active') !== null && \
             document.body.dataset.ready === '1' && !document.body.innerText.includes('Loading…')",
            page,
        )
        .await;
        if *page == "fleet" {
            b.wait_js(
                "return document.querySelector('table.summary') !== null && \
                 document.querySelectorAll('.chart-panel .chart[data-series]').length === \
                 document.querySelectorAll('.chart-panel').length",
                "fleet panels",
            )
            .await;
        }
        b.screenshot(page).await;
        b.assert_no_console_errors(page).await;
    }

    // `/` opens the fleet page once vLLM series exist; `/graph` keeps its query string
    b.c.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(b.c.current_url().await.unwrap().path(), "/fleet");
    b.c.goto(&format!(
        "{base}/graph?g0.expr=up&g0.tab=0&g0.range_input=5m"
    ))
    .await
    .unwrap();
    let u = b.c.current_url().await.unwrap();
    assert_eq!(u.path(), "/query");
    b.wait_js(
        "return document.querySelector('.panel .tab.active')?.dataset.tab === 'graph' && \
         document.querySelector('textarea.expr').value === 'up'",
        "/graph panel restored",
    )
    .await;

    // the query page draws one line per simulated model
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("g0.expr", GEN_BY_MODEL)
        .append_pair("g0.tab", "graph")
        .append_pair("g0.range_input", "5m")
        .finish();
    b.c.goto(&format!("{base}/query?{q}")).await.unwrap();
    b.wait_js(
        "return document.querySelector('.panel .chart[data-series]') !== null",
        "the graph",
    )
    .await;
    let lines = b
        .js("return document.querySelector('.panel .chart').dataset.series")
        .await;
    assert_eq!(lines, "2");
    let legend = b
        .js("return document.querySelector('.u-legend').innerText")
        .await;
    for m in MODELS {
        assert!(
            legend.as_str().unwrap().contains(m),
            "legend {legend} lacks {m}"
        );
    }
    assert_eq!(
        b.js("return document.querySelectorAll('.panel canvas').length")
            .await,
        1
    );
    b.screenshot("query-graph").await;
    b.assert_no_console_errors("query graph").await;

    // hiding a series by its legend entry
    b.c.find(Locator::Css(".u-legend .u-series:nth-child(2)"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(
        b.js("return document.querySelectorAll('.u-legend .u-series.u-off').length")
            .await,
        1
    );

    // autocomplete offers vllm: names after typing `vllm`
    b.c.goto(&format!("{base}/query")).await.unwrap();
    let input =
        b.c.wait()
            .for_element(Locator::Css("textarea.expr"))
            .await
            .unwrap();
    input.send_keys("vllm").await.unwrap();
    b.wait_js(
        "return document.querySelectorAll('ul.autocomplete li').length > 0",
        "autocomplete",
    )
    .await;
    let offered = b
        .js("return [...document.querySelectorAll('ul.autocomplete li .ac-text')].map(e => e.textContent)")
        .await;
    let offered: Vec<String> = serde_json::from_value(offered).unwrap();
    assert!(
        offered.iter().any(|n| n.starts_with("vllm:"))
            && offered.iter().all(|n| n.contains("vllm")),
        "offered {offered:?}"
    );
    b.screenshot("query-autocomplete").await;

    // a shared URL restores the same panels: build two, reload the URL in a fresh page
    input.send_keys(":num_requests_running").await.unwrap();
    b.js("document.querySelector('textarea.expr').dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
        .await;
    b.c.find(Locator::Css("button.add"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let second = b.c.find_all(Locator::Css("textarea.expr")).await.unwrap();
    assert_eq!(second.len(), 2);
    second[1].send_keys(GEN_BY_MODEL).await.unwrap();
    b.js("document.querySelectorAll('ul.autocomplete').forEach(u => u.hidden = true)")
        .await;
    b.js("document.querySelectorAll('.panel')[1].querySelector('[data-tab=graph]').click()")
        .await;
    b.wait_js(
        "return document.querySelectorAll('.panel')[1].querySelector('select.mode') !== null",
        "graph controls",
    )
    .await;
    b.js(
        "const s = document.querySelectorAll('.panel')[1].querySelector('select.mode'); \
          s.value = 'stacked'; s.dispatchEvent(new Event('change'))",
    )
    .await;
    b.js("document.querySelectorAll('.panel')[0].querySelector('button.execute').click()")
        .await;
    let shared = b.c.current_url().await.unwrap().to_string();
    assert!(shared.contains("g1.display_mode=stacked"), "{shared}");
    b.c.goto("about:blank").await.unwrap();
    b.c.goto(&shared).await.unwrap();
    b.wait_js(
        "return document.querySelectorAll('.panel').length === 2 && \
         document.querySelectorAll('.panel')[1].querySelector('.chart[data-series]') !== null",
        "restored panels",
    )
    .await;
    let state = b
        .js("return [...document.querySelectorAll('.panel')].map(p => [p.querySelector('textarea').value, \
             p.querySelector('.tab.active').dataset.tab, p.querySelector('select.mode')?.value ?? ''])")
        .await;
    assert_eq!(
        state,
        json!([
            ["vllm:num_requests_running", "table", ""],
            [GEN_BY_MODEL, "graph", "stacked"]
        ])
    );
    b.assert_no_console_errors("restored query").await;

    // the refused target's error, as the API reports it, on the targets page
    let targets: Value = http
        .get(format!("{base}/api/v1/targets"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    let err = targets["data"]["activeTargets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["scrapePool"] == "refused")
        .map(|t| t["lastError"].as_str().unwrap().to_string())
        .unwrap();
    assert!(!err.is_empty());
    b.c.goto(&format!("{base}/targets")).await.unwrap();
    b.wait_js(
        "return document.querySelector('details[data-pool=refused] .scrape-error') !== null",
        "refused target's error",
    )
    .await;
    let shown = b
        .js("return document.querySelector('details[data-pool=refused]').innerText")
        .await;
    let shown = shown.as_str().unwrap();
    assert!(
        shown.contains(&err) && shown.contains("DOWN"),
        "{shown} lacks {err}"
    );
    // the filter hides the other jobs
    b.c.find(Locator::Css("input.filter"))
        .await
        .unwrap()
        .send_keys("refused")
        .await
        .unwrap();
    assert_eq!(
        b.js("return [...document.querySelectorAll('details.pool')].map(d => d.dataset.pool)")
            .await,
        json!(["refused"])
    );

    // the fleet page at a fixed moment: each number equals the API's answer. The moment is
    // taken once the rates have had values for 12 s, so that the page's range charts (which
    // end there, at steps of a few seconds) hold points on a fast machine too.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let then = format!("{:.3}", (common::now_ms() - 12_000) as f64 / 1000.0);
        if api_values(&http, &base, GEN_BY_MODEL, &then, &["model_name"])
            .await
            .len()
            == 2
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rates of 2 models never 12 s old"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let t = format!("{:.3}", (common::now_ms() - 3000) as f64 / 1000.0);
    b.c.goto(&format!("{base}/fleet?range=15m&by=model&time={t}"))
        .await
        .unwrap();
    b.wait_js(
        "return document.querySelectorAll('table.summary tbody tr').length === 2",
        "fleet table",
    )
    .await;
    let rows = b
        .js("return [...document.querySelectorAll('table.summary tbody tr')].map(r => \
             [r.querySelector('th.model').textContent, r.dataset.key, [...r.querySelectorAll('td.num')].map(c => \
             [c.dataset.expr, c.dataset.raw, c.textContent])])")
        .await;
    let page_time = b
        .js("return document.querySelector('table.summary').dataset.time")
        .await;
    assert_eq!(
        page_time.as_str().unwrap().parse::<f64>().unwrap(),
        t.parse::<f64>().unwrap()
    );
    let rows: Vec<FleetRow> = serde_json::from_value(rows).unwrap();
    let mut names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    names.sort();
    let mut want = MODELS.to_vec();
    want.sort();
    assert_eq!(names, want);
    let mut compared = 0;
    let mut numbers = 0;
    for (model, key, cells) in &rows {
        assert_eq!(key, &json!([model]).to_string());
        for (expr, raw, text) in cells {
            let api = api_values(&http, &base, expr, &t, &["model_name"]).await;
            let want = api
                .iter()
                .find(|(k, _)| k[0] == *model)
                .map(|(_, v)| v.clone());
            assert_eq!(
                Some(raw.clone()).filter(|r| !r.is_empty()),
                want,
                "{model} {expr}"
            );
            compared += 1;
            let v: f64 = match raw.parse() {
                Ok(v) => v,
                Err(_) => {
                    assert_eq!(text, "–", "{model} {expr}");
                    continue;
                }
            };
            if !v.is_finite() {
                assert!(
                    text == "–" || text.contains("Inf"),
                    "{model} {expr}: {text}"
                );
                continue;
            }
            let s = shown_number(text).unwrap_or_else(|| panic!("{model} {expr}: {text:?}"));
            assert!(
                (s - v).abs() <= 0.006 * v.abs() + 1e-9,
                "{model} {expr}: shows {text}, API {raw}"
            );
            numbers += 1;
        }
    }
    assert_eq!(compared, 2 * 13);
    assert!(numbers >= 2 * 10, "only {numbers} numbers shown");
    // every panel links to its expressions on the query page; an empty one says why
    let panels = b
        .js("return [...document.querySelectorAll('.chart-panel')].map(p => [p.dataset.panel, \
             p.querySelector('a.to-query').getAttribute('href'), p.querySelector('.chart').dataset.series, \
             p.querySelector('.empty')?.textContent ?? ''])")
        .await;
    let panels: Vec<(String, String, String, String)> = serde_json::from_value(panels).unwrap();
    assert_eq!(panels.len(), 15);
    for (id, href, series, why) in &panels {
        assert!(href.starts_with("query?g0.expr="), "{id}: {href}");
        if series == "0" {
            assert!(why.len() > 40, "{id} is empty without a reason: {why:?}");
        }
        if id.starts_with("gpu") {
            assert!(why.contains("NVML"), "{id}: {why}");
        } else {
            assert_ne!(series, "0", "{id} is empty: {why}");
        }
    }
    b.screenshot("fleet-at-time").await;
    b.assert_no_console_errors("fleet").await;

    explain_tab(&b, &http, &base).await;
    findings(&b, &http, &base).await;
    rules_and_alerts(&b, &http, &base).await;

    b.c.close().await.unwrap();
    server.terminate();
}

/// The explain tab: the tree of the expression from api/v1/parse_query, each node's PromQL
/// text evaluating without error, and the series counts equal to the API's.
async fn explain_tab(b: &Browser, http: &reqwest::Client, base: &str) {
    let expr = "sum by (model_name) (rate(vllm:generation_tokens_total[1m])) / on (model_name) group_left () \
                count by (model_name) (vllm:num_requests_running offset 1s) > bool 0 \
                or max_over_time(sum(vllm:num_requests_running{job=\"vllm\"})[1m:10s]) * -1";
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("g0.expr", expr)
        .append_pair("g0.tab", "explain")
        .finish();
    b.c.goto(&format!("{base}/query?{q}")).await.unwrap();
    b.wait_js(
        "const r = [...document.querySelectorAll('li.ast-node:not([data-type$=Literal]) > .ast-line > .ast-result')]; \
         return r.length > 0 && r.every(x => x.textContent !== '')",
        "every node of the tree evaluated",
    )
    .await;
    let nodes = b
        .js(
            "return [...document.querySelectorAll('li.ast-node')].map(n => [n.dataset.type, \
             n.querySelector(':scope > .ast-line > code.ast-text').textContent, \
             n.querySelector(':scope > .ast-line > .ast-result').textContent, \
             n.querySelector(':scope > .ast-line > .ast-result').dataset.series ?? ''])",
        )
        .await;
    let nodes: Vec<(String, String, String, String)> = serde_json::from_value(nodes).unwrap();
    let types: Vec<&str> = nodes.iter().map(|n| n.0.as_str()).collect();
    assert_eq!(
        types,
        [
            "binaryExpr",
            "binaryExpr",
            "binaryExpr",
            "aggregation",
            "call",
            "matrixSelector",
            "aggregation",
            "vectorSelector",
            "numberLiteral",
            "binaryExpr",
            "call",
            "subquery",
            "aggregation",
            "vectorSelector",
            "numberLiteral",
        ],
        "{nodes:?}"
    );
    let now = format!("{:.3}", common::now_ms() as f64 / 1000.0);
    for (kind, text, result, series) in &nodes {
        assert!(!result.starts_with("error"), "{kind} {text}: {result}");
        // a range vector cannot be counted: its series count is checked through its parent
        if kind == "numberLiteral" || kind == "matrixSelector" || kind == "subquery" {
            continue;
        }
        // the node's text is valid PromQL that the API answers with as many series
        let n = api_values(
            http,
            base,
            &format!("count({text}) or vector(0)"),
            &now,
            &[],
        )
        .await
        .first()
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
        assert_eq!(series, &n, "{kind} {text}: {result}");
    }
    // the selector's matchers are page text, the root is the whole expression
    let page = b
        .js("return document.querySelector('.output').innerText")
        .await;
    let page = page.as_str().unwrap();
    assert!(
        page.contains("__name__=\"vllm:num_requests_running\""),
        "{page}"
    );
    assert!(page.contains("job=\"vllm\""), "{page}");
    assert_eq!(nodes[6].2.split(' ').next(), Some("2"), "{nodes:?}");
    b.screenshot("query-explain").await;
    b.assert_no_console_errors("explain").await;
}

/// The servers' restart (5 s in) as a finding: on the insights page with its scope, span,
/// summary, evidence, recommendation and query links, and on the fleet page as text and as a
/// shaded span on the panels it concerns.
async fn findings(b: &Browser, http: &reqwest::Client, base: &str) {
    let report: Value = http
        .get(format!("{base}/inferdb/v1/insights"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    let restarts: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "restart")
        .collect();
    assert_eq!(restarts.len(), 2, "{report}");
    b.c.goto(&format!("{base}/insights?range=15m"))
        .await
        .unwrap();
    b.wait_js(
        "return document.querySelectorAll('article.finding[data-kind=restart]').length === 2",
        "restart findings on the insights page",
    )
    .await;
    let cards = b
        .js("return [...document.querySelectorAll('article.finding[data-kind=restart]')].map(a => [a.innerText, \
             [...a.querySelectorAll('a.finding-query')].map(l => l.getAttribute('href'))])")
        .await;
    let cards: Vec<(String, Vec<String>)> = serde_json::from_value(cards).unwrap();
    for f in &restarts {
        let inst = f["scope"]["instance"].as_str().unwrap();
        let (text, links) = cards
            .iter()
            .find(|(t, _)| t.contains(inst))
            .unwrap_or_else(|| panic!("no card for {inst}: {cards:?}"));
        for part in [
            "INFO",
            "Restart",
            f["summary"].as_str().unwrap(),
            f["recommendation"].as_str().unwrap(),
            "UTC",
        ] {
            assert!(text.contains(part), "{inst}: {part:?} not in {text}");
        }
        for k in f["evidence"].as_object().unwrap().keys() {
            assert!(
                text.contains(k.as_str()),
                "{inst}: evidence {k} not in {text}"
            );
        }
        assert_eq!(links.len(), f["queries"].as_array().unwrap().len());
        for (l, q) in links.iter().zip(f["queries"].as_array().unwrap()) {
            let u = reqwest::Url::parse(&format!("{base}/{l}")).unwrap();
            let params: std::collections::HashMap<_, _> = u.query_pairs().into_owned().collect();
            assert_eq!(u.path(), "/query");
            assert_eq!(params["g0.expr"], q.as_str().unwrap());
            assert_eq!(params["g0.tab"], "graph");
            assert!(params.contains_key("g0.end_input"), "{l}");
        }
    }
    b.screenshot("insights").await;
    b.assert_no_console_errors("insights").await;

    b.c.goto(&format!("{base}/fleet?range=15m")).await.unwrap();
    b.wait_js(
        "return document.querySelector('.fleet')?.dataset.findings !== undefined",
        "findings on the fleet page",
    )
    .await;
    let listed = b
        .js("return [...document.querySelectorAll('ul.fleet-findings li[data-kind=restart]')].map(l => l.innerText)")
        .await;
    let listed: Vec<String> = serde_json::from_value(listed).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|l| l.contains("Restart")), "{listed:?}");
    let marked = b
        .js(
            "return [...document.querySelectorAll('.chart-panel')].filter(p => \
             p.querySelector('.chart-marks .mark[data-kind=restart]')).map(p => p.dataset.panel)",
        )
        .await;
    assert_eq!(marked, json!(["gen", "prompt", "running"]));
    b.screenshot("fleet-findings").await;
    b.assert_no_console_errors("fleet findings").await;
}

/// The demo's vLLM rule pack on the rules page (groups, rules with health and last
/// evaluation, the filter) and its alerting rules on the alerts page, as the API lists them.
async fn rules_and_alerts(b: &Browser, http: &reqwest::Client, base: &str) {
    let api: Value = http
        .get(format!("{base}/api/v1/rules"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    let groups = api["data"]["groups"].as_array().unwrap();
    assert!(!groups.is_empty(), "{api}");
    let rule = "instance_model_name:vllm_generation_tokens:rate5m";
    b.c.goto(&format!("{base}/rules")).await.unwrap();
    b.wait_js(
        "return document.querySelector('details[data-group=\"vllm-throughput\"]') !== null",
        "the demo's rule groups",
    )
    .await;
    let shown = b
        .js("return [...document.querySelectorAll('details[data-group]')].map(d => d.dataset.group)")
        .await;
    let want: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(shown, json!(want));
    let row = b
        .js(&format!(
            "return document.querySelector('[data-rule=\"{rule}\"]').closest('tr').innerText"
        ))
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains(&format!("record: {rule}")), "{row}");
    assert!(
        ["OK", "UNKNOWN", "ERR"].iter().any(|h| row.contains(h)),
        "no health in {row}"
    );
    b.screenshot("rules").await;
    // the filter keeps the rules that match, in their groups
    b.c.find(Locator::Css("input.filter"))
        .await
        .unwrap()
        .send_keys("kv_cache")
        .await
        .unwrap();
    let names = b
        .js("return [...document.querySelectorAll('[data-rule]')].map(r => r.dataset.rule)")
        .await;
    let names: Vec<String> = serde_json::from_value(names).unwrap();
    assert!(!names.is_empty() && names.len() < 20, "{names:?}");
    for g in groups {
        for r in g["rules"].as_array().unwrap() {
            let n = r["name"].as_str().unwrap();
            let q = r["query"].as_str().unwrap();
            let hit = format!("{n}\n{q}").to_lowercase().contains("kv_cache")
                || r["labels"].to_string().contains("kv_cache")
                || r["annotations"]
                    .to_string()
                    .to_lowercase()
                    .contains("kv_cache");
            if n.contains("kv_cache") {
                assert!(names.iter().any(|x| x == n), "{n} filtered out: {names:?}");
            }
            if !hit && !g["name"].as_str().unwrap().contains("kv_cache") {
                assert!(!names.iter().any(|x| x == n), "{n} kept: {names:?}");
            }
        }
    }
    b.assert_no_console_errors("rules").await;

    b.c.goto(&format!("{base}/alerts")).await.unwrap();
    b.wait_js(
        "return document.querySelector('details[data-alert=VllmKvCachePressure]') !== null",
        "the demo's alerting rules",
    )
    .await;
    let alerting: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r["type"] == "alerting")
        .collect();
    let listed = b
        .js("return document.querySelectorAll('details[data-alert]').length")
        .await;
    assert_eq!(listed, json!(alerting.len()));
    let kv = alerting
        .iter()
        .find(|r| r["name"] == "VllmKvCachePressure")
        .unwrap();
    let text = b
        .js("return document.querySelector('details[data-alert=VllmKvCachePressure]').textContent")
        .await;
    let text = text.as_str().unwrap();
    for (k, v) in kv["annotations"].as_object().unwrap() {
        assert!(text.contains(k.as_str()), "{k} not in {text}");
        let v = v.as_str().unwrap();
        assert!(text.contains(v), "{v} not in {text}");
    }
    b.screenshot("alerts").await;
    b.assert_no_console_errors("alerts").await;
}

/// Every page under `--web.route-prefix /prom` and `--web.external-url .../prom`: no console
/// error, every resource the page loads and every link it shows stays under the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_ui_under_a_route_prefix_in_chromium() {
    if !common::require_tools(&["chromium", "chromedriver"], "the web UI browser test") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut cmd = demo_command(&work.path().join("data"), port, 2);
    cmd.arg("--web.route-prefix=/prom")
        .arg(format!("--web.external-url={base}/prom"));
    let mut server = Proc::spawn("inferdb", &mut cmd, work.path().join("inferdb.log"));
    server.wait_listening(port);
    wait_ready(
        &reqwest::Client::new(),
        &format!("{base}/prom/-/ready"),
        &server,
    )
    .await;
    let (_driver, b) = start_browser(work.path()).await;
    // `/prom/` leads to a page under the prefix
    b.c.goto(&format!("{base}/prom/")).await.unwrap();
    let landed = b.c.current_url().await.unwrap();
    assert!(
        landed.path() == "/prom/fleet" || landed.path() == "/prom/query",
        "{landed}"
    );
    for page in PAGES {
        b.c.goto(&format!("{base}/prom/{page}")).await.unwrap();
        b.wait_js(
            "return document.querySelector('nav.top a.active') !== null && \
             document.body.dataset.ready === '1' && !document.body.innerText.includes('Loading…')",
            page,
        )
        .await;
        let urls = b
            .js(
                "return performance.getEntriesByType('resource').map(e => e.name) \
                 .concat([...document.querySelectorAll('a[href]')].map(a => a.href) \
                 .filter(h => h.startsWith(location.origin)))",
            )
            .await;
        let urls: Vec<String> = serde_json::from_value(urls).unwrap();
        assert!(urls.len() > 10, "{page}: {urls:?}");
        for u in &urls {
            assert!(
                u.starts_with(&format!("{base}/prom/")),
                "{page}: {u} is outside the prefix"
            );
        }
        b.assert_no_console_errors(&format!("{page} under /prom"))
            .await;
    }
    b.screenshot("prefix-targets").await;
    b.c.close().await.unwrap();
    server.terminate();
}

/// The UI sits behind the same basic authentication as the API: pages, assets and the `/`
/// redirect answer 401 without credentials, and are served with them.
#[test]
fn ui_requires_the_apis_basic_auth() {
    let work = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = work.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  admin: '{hash}'\n")).unwrap();
    let port = free_port();
    let mut cmd = common::serve_command(&work.path().join("data"), port);
    cmd.arg("--web.config.file").arg(&web);
    let mut server = Proc::spawn("inferdb", &mut cmd, work.path().join("inferdb.log"));
    server.wait_listening(port);
    let client = common::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    // the server binds before its store is open and answers 503 until then
    let deadline = Instant::now() + Duration::from_secs(30);
    let html = loop {
        let (status, html) = client.send(
            client
                .http
                .get(format!("{base}/query"))
                .basic_auth("admin", Some("s3cret")),
        );
        if status == 200 {
            break html;
        }
        assert!(Instant::now() < deadline, "not ready: {status} {html}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let asset = html
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("no script in {html}"))
        .to_string();
    for path in ["/", "/query", "/fleet", "/targets", &format!("/{asset}")] {
        let url = format!("{base}{path}");
        assert_eq!(client.status(&url), Some(401), "{path} without credentials");
        let req = client.http.get(&url).basic_auth("admin", Some("s3cret"));
        let (status, _) = client.send(req);
        // `/` redirects to the query page (no vLLM series here), followed with the same header
        assert_eq!(status, 200, "{path} with credentials");
    }
    server.terminate();
}

/// Under `--web.route-prefix /prom`: `/` leads to `/prom/query` (no vLLM series here) through
/// `/prom/`, and the page's relative asset URLs resolve under the prefix.
#[test]
fn ui_under_a_route_prefix() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = common::serve_command(&work.path().join("data"), port);
    cmd.args(["--web.route-prefix", "/prom"]);
    let mut server = Proc::spawn("inferdb", &mut cmd, work.path().join("inferdb.log"));
    server.wait_listening(port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    rt.block_on(wait_ready(
        &http,
        &format!("http://127.0.0.1:{port}/prom/-/ready"),
        &server,
    ));
    let get = |u: &reqwest::Url| {
        rt.block_on(async {
            let r = http.get(u.clone()).send().await.unwrap();
            let to = r
                .headers()
                .get("location")
                .map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), to, r.text().await.unwrap())
        })
    };
    let base = reqwest::Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
    for start in ["/", "/prom", "/prom/"] {
        let mut url = base.join(start).unwrap();
        let mut hops = vec![];
        let html = loop {
            let (status, to, body) = get(&url);
            match to {
                Some(to) if hops.len() < 4 => {
                    hops.push(to.clone());
                    url = url.join(&to).unwrap();
                }
                _ => {
                    assert_eq!(status, 200, "{start} via {hops:?}");
                    break body;
                }
            }
        };
        assert_eq!(url.path(), "/prom/query", "{start} via {hops:?}");
        for part in html
            .split("src=\"")
            .skip(1)
            .chain(html.split("href=\"").skip(1))
        {
            let asset = url.join(part.split('"').next().unwrap()).unwrap();
            assert!(asset.path().starts_with("/prom/static/"), "{asset}");
            assert_eq!(get(&asset).0, 200, "{asset}");
        }
    }
    server.terminate();
}
