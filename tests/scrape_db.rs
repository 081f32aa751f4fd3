//! The scraper writing into the real storage engine: a simulated vLLM server scraped into
//! `inferdb_storage::Db`, values read back exactly; a restart of the server shows up as a
//! counter reset; a vanished series gets a staleness marker in the database.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use inferdb::config::Config;
use inferdb::model::exposition::{parse, Entry, Format};
use inferdb::model::sink::SampleSink;
use inferdb::scrape::target::{discover, Auth, ScrapeLoop, ScrapeOptions};
use inferdb::sim::{SimOptions, Simulator};
use inferdb_storage::{is_stale_nan, Db, Matcher};

fn select(db: &Db, ms: &[Matcher]) -> Vec<(inferdb_storage::Labels, Vec<(i64, f64)>)> {
    let q = db.querier(i64::MIN / 2, i64::MAX / 2).unwrap();
    q.select(ms)
        .unwrap()
        .into_iter()
        .map(|s| (s.labels().clone(), s.iter().collect()))
        .collect()
}

/// A database in `dir` without background work.
fn open_db(dir: &Path) -> Arc<Db> {
    Arc::new(common::open_db(dir))
}

/// A scrape loop of job `job` (instance `x`, every `interval_s` with a `timeout_s` timeout)
/// writing into `db`, fed pages by the test rather than over HTTP.
fn page_loop(db: &Arc<Db>, job: &str, interval_s: u64, timeout_s: u64) -> ScrapeLoop {
    let target = inferdb::scrape::target::Target {
        job: job.into(),
        url: "http://127.0.0.1:1/metrics".into(),
        labels: inferdb_storage::Labels::from_pairs([("job", job), ("instance", "x")]),
        discovered_labels: Default::default(),
        interval: Duration::from_secs(interval_s),
        timeout: Duration::from_secs(timeout_s),
    };
    ScrapeLoop::new(
        target,
        ScrapeOptions::default(),
        reqwest::Client::new(),
        Auth::None,
        db.clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulator_into_db_exact_values_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let sim = Simulator::start("127.0.0.1", 0, SimOptions::default())
        .await
        .unwrap();
    let addr = sim.addrs()[0];
    let cfg = Config::parse(&format!(
        "scrape_configs: [{{job_name: vllm, scrape_interval: 1s, static_configs: [{{targets: ['{addr}']}}]}}]"
    ))
    .unwrap();
    let sc = &cfg.scrape_configs[0];
    let (targets, _) = discover(&cfg, sc);
    let sink: Arc<dyn SampleSink> = db.clone();
    let mut lp = ScrapeLoop::new(
        targets[0].clone(),
        ScrapeOptions::from_config(&cfg, sc),
        inferdb::scrape::target::build_client(sc).unwrap(),
        Auth::None,
        sink,
    );
    let t0 = 1_900_000_000_000i64;
    let mut served = vec![];
    for i in 0..3 {
        let t = t0 + i * 1000;
        if i == 2 {
            sim.server(0).unwrap().restart();
        }
        let r = lp.scrape_once(t).await;
        assert!(r.up, "{:?}", r.error);
        assert_eq!(r.rejected, 0);
        served.push(sim.server(0).unwrap().last_page().unwrap().body);
    }
    // every served value is in the database at its scrape's timestamp, bit for bit
    let running = Matcher::equal("__name__", "vllm:prompt_tokens_total");
    let got = select(&db, &[running]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.get("instance"), Some(addr.to_string().as_str()));
    assert_eq!(got[0].0.get("job"), Some("vllm"));
    for (i, page) in served.iter().enumerate() {
        for e in parse(page, Format::PromText) {
            let Ok(Entry::Sample(s)) = e else { continue };
            let mut ms = vec![Matcher::equal("__name__", s.name.as_ref())];
            for (k, v) in s.labels.iter() {
                ms.push(Matcher::equal(k.as_ref(), v.as_ref()));
            }
            let series = select(&db, &ms);
            let exact: Vec<_> = series
                .iter()
                .filter(|(l, _)| l.len() == s.labels.len() + 3)
                .collect();
            assert_eq!(exact.len(), 1, "{}", s.series_text);
            let t = t0 + i as i64 * 1000;
            let v = exact[0].1.iter().find(|(ts, _)| *ts == t).map(|x| x.1);
            assert_eq!(
                v.map(f64::to_bits),
                Some(s.value.to_bits()),
                "{} at {t}",
                s.series_text
            );
        }
    }
    // the restart: the process start time moved forward (counters restarted from zero)
    let q = select(
        &db,
        &[Matcher::equal("__name__", "process_start_time_seconds")],
    );
    assert!(q[0].1[2].1 > q[0].1[1].1);
    let up = select(&db, &[Matcher::equal("__name__", "up")]);
    assert_eq!(up[0].1, vec![(t0, 1.0), (t0 + 1000, 1.0), (t0 + 2000, 1.0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_marker_reaches_the_db() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let mut lp = page_loop(&db, "j", 1, 1);
    assert!(lp.scrape_page("a 1\nb 2\n", Format::PromText, 1000).up);
    let r = lp.scrape_page("a 2\n", Format::PromText, 2000);
    assert_eq!(r.stale_markers, 1);
    let b = select(&db, &[Matcher::equal("__name__", "b")]);
    assert_eq!(b[0].1[0], (1000, 2.0));
    assert_eq!(b[0].1[1].0, 2000);
    assert!(is_stale_nan(b[0].1[1].1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_reset_from_a_restart_is_handled_by_rate() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let mut lp = page_loop(&db, "vllm", 15, 10);
    let t0 = 1_900_000_000_000i64;
    // 100, 200, restart, 50, 150: the reset-corrected increase is 250 over 45 s
    for (i, v) in [100.0, 200.0, 50.0, 150.0].iter().enumerate() {
        let page = format!("# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine=\"0\"}} {v}\n");
        assert!(
            lp.scrape_page(&page, Format::PromText, t0 + i as i64 * 15_000)
                .up
        );
    }
    let engine = inferdb_query::Engine::new(Default::default());
    let r = engine
        .instant(
            &*db,
            "increase(vllm:generation_tokens_total[1m])",
            t0 + 45_000,
        )
        .unwrap();
    let inferdb_query::Value::Vector(v) = r.value else {
        panic!("not a vector: {:?}", r.value)
    };
    assert_eq!(v.len(), 1);
    // extrapolated over the 15 s before the first sample: 250 * 60 / 45
    assert!((v[0].f - 1000.0 / 3.0).abs() < 1e-6, "{}", v[0].f);
}
