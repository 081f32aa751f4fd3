//! Scrape loops against local HTTP servers: the simulator, a garbage target, a timeout
//! target, a refused port, an oversized page, a page whose series vanish.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use inferdb::config::{Config, ScrapeConfig};
use inferdb::model::exposition::{self, Entry, Format};
use inferdb::model::sink::{MemorySink, SampleSink};
use inferdb::scrape::target::{discover, Auth, ScrapeLoop, ScrapeOptions, ACCEPT_HEADER};
use inferdb::scrape::ScrapeManager;
use inferdb::sim::{SimOptions, Simulator};
use inferdb_storage::{is_stale_nan, Labels};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A tiny HTTP server answering every request with `respond(request_head)`.
async fn serve(
    respond: impl Fn(&str) -> Option<(String, Vec<u8>)> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut n = 0;
                loop {
                    match s.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => n += k,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                match respond(&head) {
                    Some((ct, body)) => {
                        let h = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: {ct}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(h.as_bytes()).await;
                        let _ = s.write_all(&body).await;
                    }
                    None => {
                        // hang: never answer
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                }
            });
        }
    });
    addr
}

fn config(yaml: &str) -> Config {
    Config::parse(yaml).unwrap()
}

fn make_loop(cfg: &Config, sink: Arc<dyn SampleSink>) -> Vec<ScrapeLoop> {
    let mut v = vec![];
    for sc in &cfg.scrape_configs {
        let (targets, errs) = discover(cfg, sc);
        assert!(errs.is_empty(), "{errs:?}");
        let client = inferdb::scrape::target::build_client(sc).unwrap();
        for t in targets {
            v.push(ScrapeLoop::new(
                t,
                ScrapeOptions::from_config(cfg, sc),
                client.clone(),
                Auth::from_config(sc).unwrap(),
                sink.clone(),
            ));
        }
    }
    v
}

/// One sample of a page: metric name, label pairs, value.
type PageSample = (String, Vec<(String, String)>, f64);

fn page_values(page: &str) -> Vec<PageSample> {
    exposition::parse(page, Format::PromText)
        .filter_map(|e| match e.unwrap() {
            Entry::Sample(s) => Some((
                s.name.to_string(),
                s.labels
                    .iter()
                    .map(|(a, b)| (a.into_owned(), b.into_owned()))
                    .collect(),
                s.value,
            )),
            _ => None,
        })
        .collect()
}

fn up(sink: &MemorySink, instance: &str) -> Vec<(i64, f64)> {
    sink.find(&[("__name__", "up"), ("instance", instance)])
        .into_iter()
        .next()
        .map(|(_, s)| s)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_and_bad_targets() {
    let sim = Simulator::start(
        "127.0.0.1",
        0,
        SimOptions {
            servers: 3,
            gzip: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let garbage = serve(|_| {
        Some((
            "text/plain".into(),
            b"\x00\x01 this is { not a metrics page\n".to_vec(),
        ))
    })
    .await;
    let hang = serve(|_| None).await;
    let big = serve(|_| {
        let line = "big_metric{a=\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"} 1\n";
        Some((
            "text/plain".into(),
            line.repeat(50 * 1024 * 1024 / line.len()).into_bytes(),
        ))
    })
    .await;
    // a port that refuses: bind, note the port, close
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let sims: Vec<String> = sim.addrs().iter().map(|a| format!("'{a}'")).collect();
    let yaml = format!(
        "global: {{scrape_interval: 2s}}\nscrape_configs:\n  - job_name: vllm\n    static_configs: [{{targets: [{}]}}]\n  - job_name: bad\n    scrape_timeout: 500ms\n    static_configs: [{{targets: ['{garbage}', '{hang}', '{refused}', '{big}']}}]\n",
        sims.join(", ")
    );
    let cfg = config(&yaml);
    let sink = Arc::new(MemorySink::new());
    let mut loops = make_loop(&cfg, sink.clone());
    assert_eq!(loops.len(), 7);
    let t = 1_900_000_000_000i64;
    let mut reports = vec![];
    for lp in &mut loops {
        reports.push((lp.target().clone(), lp.scrape_once(t).await));
    }
    for (target, r) in &reports {
        let inst = target.labels.get("instance").unwrap().to_string();
        if target.job == "vllm" {
            assert!(r.up, "{inst}: {:?}", r.error);
            assert!(r.samples_scraped > 500);
            assert_eq!(r.samples_scraped, r.samples_post_relabel);
            assert_eq!(r.series_added, r.samples_scraped);
            assert_eq!(up(&sink, &inst), vec![(t, 1.0)]);
        } else {
            assert!(!r.up, "{inst} should be down");
            assert_eq!(up(&sink, &inst), vec![(t, 0.0)]);
            let err = r.error.clone().unwrap();
            if inst == garbage.to_string() {
                assert!(err.contains("line 1"), "{err}");
            } else if inst == hang.to_string() {
                assert!(err.contains("timed out"), "{err}");
            } else if inst == big.to_string() {
                assert!(err.contains("body size limit"), "{err}");
            } else {
                assert_eq!(inst, refused.to_string());
                assert!(err.to_lowercase().contains("connect"), "{err}");
            }
            // synthetic series are there for a failed target too
            let d = sink.find(&[("__name__", "scrape_samples_scraped"), ("instance", &inst)]);
            assert_eq!(d[0].1, vec![(t, 0.0)]);
        }
    }
    // the good targets' values arrived exactly as served
    for (i, lp) in loops.iter().take(3).enumerate() {
        let inst = lp.target().labels.get("instance").unwrap().to_string();
        let page = sim.server(i).unwrap().last_page().unwrap();
        let vals = page_values(&page.body);
        for (name, labels, v) in &vals {
            let mut l: Vec<(String, String)> = labels.clone();
            l.push(("__name__".into(), name.clone()));
            l.push(("job".into(), "vllm".into()));
            l.push(("instance".into(), inst.clone()));
            let got = sink.get(&Labels::from_pairs(l));
            assert_eq!(got.len(), 1, "{name} {labels:?}");
            assert_eq!(got[0].0, t);
            assert_eq!(got[0].1.to_bits(), v.to_bits(), "{name} {labels:?}");
        }
        let state = lp.state();
        assert_eq!(state.lock().health.as_str(), "up");
        assert!(!state.lock().metadata.is_empty());
        assert_eq!(
            state.lock().metadata["vllm:num_requests_running"].kind,
            "gauge"
        );
    }
    // a second round: counters keep going, no staleness for the good targets
    let t2 = t + 2000;
    for lp in &mut loops {
        let r = lp.scrape_once(t2).await;
        if lp.target().job == "vllm" {
            assert!(r.up);
            assert_eq!(r.stale_markers, 0);
            assert_eq!(r.series_added, 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_when_a_series_vanishes_and_when_target_goes_down() {
    let page = Arc::new(Mutex::new(String::from("a 1\nb{x=\"1\"} 2\n")));
    let p2 = page.clone();
    let addr = serve(move |head| {
        assert!(head.contains(ACCEPT_HEADER), "{head}");
        let p = p2.lock().clone();
        if p == "DOWN" {
            return Some(("text/plain".into(), b"}}}\n".to_vec()));
        }
        Some(("text/plain; version=0.0.4".into(), p.into_bytes()))
    })
    .await;
    let cfg = config(&format!(
        "scrape_configs: [{{job_name: j, scrape_interval: 1s, static_configs: [{{targets: ['{addr}']}}]}}]"
    ));
    let sink = Arc::new(MemorySink::new());
    let mut lp = make_loop(&cfg, sink.clone()).remove(0);
    let r = lp.scrape_once(1000).await;
    assert!(r.up);
    *page.lock() = "a 3\n".into();
    let r = lp.scrape_once(2000).await;
    assert!(r.up);
    assert_eq!(r.stale_markers, 1);
    let b = sink.find(&[("__name__", "b")]);
    assert_eq!(b[0].1.len(), 2);
    assert_eq!(b[0].1[0], (1000, 2.0));
    assert_eq!(b[0].1[1].0, 2000);
    assert!(is_stale_nan(b[0].1[1].1));
    // the series comes back: an ordinary sample, counted as added
    *page.lock() = "a 4\nb{x=\"1\"} 5\n".into();
    let r = lp.scrape_once(3000).await;
    assert_eq!(r.series_added, 1);
    // the target goes down: every series ends
    *page.lock() = "DOWN".into();
    let r = lp.scrape_once(4000).await;
    assert!(!r.up);
    assert_eq!(r.stale_markers, 2);
    let a = sink.find(&[("__name__", "a")]);
    let last = *a[0].1.last().unwrap();
    assert_eq!(last.0, 4000);
    assert!(is_stale_nan(last.1));
    assert_eq!(up(&sink, &addr.to_string()).last().unwrap(), &(4000, 0.0));
    // still down: no second marker
    let r = lp.scrape_once(5000).await;
    assert_eq!(r.stale_markers, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_limits_relabel_and_timestamps() {
    let addr = serve(|_| {
        Some((
            "application/openmetrics-text; version=1.0.0; charset=utf-8".into(),
            b"# TYPE m gauge\nm{job=\"page\",instance=\"p\",k=\"v\"} 1 100.5\ndropme 2\n# EOF\n"
                .to_vec(),
        ))
    })
    .await;
    let base = format!("static_configs: [{{targets: ['{addr}'], labels: {{team: infra}}}}]");
    for (extra, check) in [
        ("honor_labels: false", 0),
        ("honor_labels: true", 1),
        ("honor_timestamps: false", 2),
        ("sample_limit: 1", 3),
        (
            "metric_relabel_configs: [{source_labels: [__name__], regex: dropme, action: drop}]",
            4,
        ),
    ] {
        let cfg = config(&format!(
            "scrape_configs: [{{job_name: j, {extra}, {base}}}]"
        ));
        let sink = Arc::new(MemorySink::new());
        let mut lp = make_loop(&cfg, sink.clone()).remove(0);
        let r = lp.scrape_once(5000).await;
        let m = sink.find(&[("__name__", "m")]);
        match check {
            0 => {
                assert!(r.up);
                let l = &m[0].0;
                assert_eq!(l.get("job"), Some("j"));
                assert_eq!(l.get("exported_job"), Some("page"));
                assert_eq!(l.get("exported_instance"), Some("p"));
                assert_eq!(l.get("team"), Some("infra"));
                assert_eq!(m[0].1, vec![(100_500, 1.0)]);
            }
            1 => {
                let l = &m[0].0;
                assert_eq!(l.get("job"), Some("page"));
                assert_eq!(l.get("instance"), Some("p"));
                assert_eq!(l.get("exported_job"), None);
            }
            2 => assert_eq!(m[0].1, vec![(5000, 1.0)]),
            3 => {
                assert!(!r.up);
                assert!(r.error.unwrap().contains("sample limit"));
                assert!(m.is_empty());
            }
            _ => {
                assert!(r.up);
                assert_eq!(r.samples_scraped, 2);
                assert_eq!(r.samples_post_relabel, 1);
                assert!(sink.find(&[("__name__", "dropme")]).is_empty());
                let post = sink.find(&[("__name__", "scrape_samples_post_metric_relabeling")]);
                assert_eq!(post[0].1, vec![(5000, 1.0)]);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_runs_loops_and_survives_bad_targets() {
    let sim = Simulator::start("127.0.0.1", 0, SimOptions::default())
        .await
        .unwrap();
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cfg = config(&format!(
        "scrape_configs: [{{job_name: v, scrape_interval: 100ms, static_configs: [{{targets: ['{}', '{refused}']}}]}}]",
        sim.addrs()[0]
    ));
    let sink = Arc::new(MemorySink::new());
    let mgr = ScrapeManager::new(sink.clone());
    assert_eq!(mgr.apply_config(&cfg), 2);
    // wait (bounded) until both targets were scraped a few times
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ok = up(&sink, &sim.addrs()[0].to_string()).len() >= 3
            && up(&sink, &refused.to_string()).len() >= 3;
        if ok || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let good = up(&sink, &sim.addrs()[0].to_string());
    assert!(
        good.len() >= 3 && good.iter().all(|s| s.1 == 1.0),
        "{good:?}"
    );
    let bad = up(&sink, &refused.to_string());
    assert!(bad.len() >= 3 && bad.iter().all(|s| s.1 == 0.0), "{bad:?}");
    let targets = mgr.targets();
    assert_eq!(targets.len(), 2);
    let down = targets
        .iter()
        .find(|t| t.state.health.as_str() == "down")
        .unwrap();
    assert!(down.state.last_error.is_some());
    assert!(mgr.metadata().contains_key("vllm:kv_cache_usage_perc"));
    // reload without the good target: its series get staleness markers
    let cfg2 = config(&format!(
        "scrape_configs: [{{job_name: v, scrape_interval: 100ms, static_configs: [{{targets: ['{refused}']}}]}}]"
    ));
    assert_eq!(mgr.apply_config(&cfg2), 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = sink.find(&[("__name__", "vllm:num_requests_running")]);
        if s.first()
            .is_some_and(|(_, v)| v.last().is_some_and(|x| is_stale_nan(x.1)))
            || std::time::Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = sink.find(&[("__name__", "vllm:num_requests_running")]);
    assert!(is_stale_nan(s[0].1.last().unwrap().1));
    mgr.stop().await;
}

#[test]
fn quick_start_urls() {
    let c = ScrapeConfig::from_urls("vllm", &["http://localhost:8000/metrics".into()]).unwrap();
    let mut cfg = Config::parse("{}").unwrap();
    cfg.scrape_configs = c;
    let (t, _) = discover(&cfg, &cfg.scrape_configs[0]);
    assert_eq!(t[0].url, "http://localhost:8000/metrics");
    assert_eq!(t[0].labels.get("instance"), Some("localhost:8000"));
    assert_eq!(t[0].labels.get("job"), Some("vllm"));
}

/// A raw HTTP server: for each request on each connection, `respond(head, connection
/// number, request number on it)` gives the bytes to write and whether to close after them.
/// Gives the address and the request heads received.
async fn serve_raw(
    respond: impl Fn(&str, usize, usize) -> (Vec<u8>, bool) + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let respond = Arc::new(respond);
    let heads = Arc::new(Mutex::new(vec![]));
    let seen = heads.clone();
    tokio::spawn(async move {
        let mut conn = 0;
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            conn += 1;
            let (respond, seen) = (respond.clone(), seen.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for req in 1.. {
                    let end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p + 4;
                        }
                        let mut tmp = [0u8; 4096];
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&tmp[..k]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    seen.lock().push(head.clone());
                    let (bytes, close) = respond(&head, conn, req);
                    // in two writes, so the client sees the response arrive in pieces
                    let half = bytes.len() / 2;
                    let _ = s.write_all(&bytes[..half]).await;
                    let _ = s.flush().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = s.write_all(&bytes[half..]).await;
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (addr, heads)
}

fn response(extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n{extra_headers}\r\n"
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The plain-HTTP path: a kept-alive connection reused, the request headers Prometheus
/// sends, chunked and close-delimited bodies, a server that closes the kept connection,
/// redirects (left to the general client), error statuses, and pages split across reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_client_framing_reuse_and_redirects() {
    let page = b"# TYPE a counter\na_total 1\nb{x=\"1\"} 2.5\n";
    let p = page.to_vec();
    let (keep, keep_heads) = serve_raw(move |_, _, _| {
        (
            response(&format!("content-length: {}\r\n", p.len()), &p),
            false,
        )
    })
    .await;
    let p = page.to_vec();
    let (chunked, _) = serve_raw(move |_, _, _| {
        let mut body = Vec::new();
        for part in p.chunks(7) {
            body.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
            body.extend_from_slice(part);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
        (response("transfer-encoding: chunked\r\n", &body), false)
    })
    .await;
    let p = page.to_vec();
    // closes after every response without saying so (an idle timeout on the server)
    let (closing, _) = serve_raw(move |_, _, _| {
        (
            response(&format!("content-length: {}\r\n", p.len()), &p),
            true,
        )
    })
    .await;
    let p = page.to_vec();
    let (eof, _) = serve_raw(move |_, _, _| (response("connection: close\r\n", &p), true)).await;
    let (redirect, _) = serve_raw(move |_, _, _| {
        let r = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://{keep}/metrics\r\ncontent-length: 0\r\n\r\n"
        );
        (r.into_bytes(), false)
    })
    .await;
    let (missing, _) = serve_raw(|_, _, _| {
        (
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found".to_vec(),
            false,
        )
    })
    .await;
    let cfg = config(&format!(
        "scrape_configs:\n  - job_name: j\n    scrape_interval: 1s\n    basic_auth: {{username: u, password: p}}\n    static_configs: [{{targets: ['{keep}', '{chunked}', '{closing}', '{eof}', '{redirect}', '{missing}']}}]\n"
    ));
    let sink = Arc::new(MemorySink::new());
    let mut loops = make_loop(&cfg, sink.clone());
    for round in 0..3i64 {
        for lp in &mut loops {
            let inst = lp.target().labels.get("instance").unwrap().to_string();
            let r = lp.scrape_once(1000 * (round + 1)).await;
            if inst == missing.to_string() {
                assert!(!r.up);
                assert_eq!(
                    r.error.as_deref(),
                    Some("server returned HTTP status 404 Not Found")
                );
            } else {
                assert!(r.up, "{inst} round {round}: {:?}", r.error);
                assert_eq!(r.samples_scraped, 2, "{inst}");
            }
        }
    }
    for inst in [keep, chunked, closing, eof, redirect] {
        let b = sink.find(&[("__name__", "b"), ("instance", &inst.to_string())]);
        assert_eq!(
            b[0].1,
            vec![(1000, 2.5), (2000, 2.5), (3000, 2.5)],
            "{inst}"
        );
    }
    // three scrapes of `keep` plus three through the redirect: one connection from the
    // lean client, the redirected requests from the general client
    let heads = keep_heads.lock().clone();
    assert_eq!(heads.len(), 6);
    let lean: Vec<&String> = heads
        .iter()
        .filter(|h| h.contains("User-Agent: inferdb/"))
        .collect();
    assert_eq!(lean.len(), 3, "{heads:?}");
    for h in lean {
        assert!(h.starts_with("GET /metrics HTTP/1.1\r\n"), "{h}");
        assert!(h.contains(&format!("Host: {keep}\r\n")), "{h}");
        assert!(h.contains(&format!("Accept: {ACCEPT_HEADER}\r\n")), "{h}");
        assert!(h.contains("Accept-Encoding: gzip\r\n"), "{h}");
        assert!(h.contains("Authorization: Basic dTpw\r\n"), "{h}");
        assert!(
            h.contains("X-Prometheus-Scrape-Timeout-Seconds: 1\r\n"),
            "{h}"
        );
    }
}

/// A reused connection is kept across scrapes (one accepted connection for many scrapes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_connection_is_kept_alive() {
    let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = conns.clone();
    let (addr, _) = serve_raw(move |_, conn, _| {
        c.fetch_max(conn, std::sync::atomic::Ordering::Relaxed);
        (response("content-length: 4\r\n", b"a 1\n"), false)
    })
    .await;
    let cfg = config(&format!(
        "scrape_configs: [{{job_name: j, scrape_interval: 1s, static_configs: [{{targets: ['{addr}']}}]}}]"
    ));
    let sink = Arc::new(MemorySink::new());
    let mut lp = make_loop(&cfg, sink.clone()).remove(0);
    for t in 1..=5 {
        assert!(lp.scrape_once(t * 1000).await.up);
    }
    assert_eq!(conns.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// Issue 13: a target with 1 M series (refused by `sample_limit: 50000`) beside four 1 s
/// targets, on the scrape thread `serve` uses: the four keep at least 90 % of their scrapes,
/// and the large one is down with the page's sample count, as Prometheus reports it.
#[test]
fn a_huge_target_does_not_delay_the_others() {
    const SERIES: usize = 1_000_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut page = String::with_capacity(SERIES * 28);
    page.push_str("# TYPE huge gauge\n");
    for i in 0..SERIES {
        writeln!(page, "huge{{i=\"{i}\"}} 1").unwrap();
    }
    let page = Arc::new(page.into_bytes());
    let (big, small) = rt.block_on(async {
        let big = serve(move |_| Some(("text/plain; version=0.0.4".into(), page.to_vec()))).await;
        let mut small = vec![];
        for _ in 0..4 {
            small.push(serve(|_| Some(("text/plain".into(), b"small 1\n".to_vec()))).await);
        }
        (big, small)
    });
    let small: Vec<String> = small.iter().map(|a| format!("'{a}'")).collect();
    let cfg = config(&format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
- {{job_name: big, sample_limit: 50000, static_configs: [{{targets: ['{big}']}}]}}
- {{job_name: small, static_configs: [{{targets: [{}]}}]}}",
        small.join(", ")
    ));
    let sink = Arc::new(MemorySink::new());
    let mgr = Arc::new(ScrapeManager::new(sink.clone()));
    let (_cfg_tx, cfg_rx) = tokio::sync::watch::channel(cfg);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let done = {
        let _g = rt.enter();
        inferdb::scrape::manager::spawn_on_own_thread(mgr.clone(), cfg_rx, async {
            let _ = stop_rx.await;
        })
        .unwrap()
    };
    // the window: from the large target's 2nd scrape to its 7th (bounded wait)
    let big_up = |sink: &MemorySink| up(sink, &big.to_string());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while big_up(&sink).len() < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let scrapes = big_up(&sink);
    assert!(
        scrapes.len() >= 7,
        "large target scraped {} times",
        scrapes.len()
    );
    assert!(scrapes.iter().all(|s| s.1 == 0.0), "{scrapes:?}");
    let (from, to) = (scrapes[1].0, scrapes[6].0);
    let expected = (to - from) as f64 / 1000.0;
    for t in &small {
        let inst = t.trim_matches('\'');
        let n = up(&sink, inst)
            .iter()
            .filter(|s| s.0 >= from && s.0 <= to && s.1 == 1.0)
            .count();
        assert!(
            n as f64 >= (0.9 * expected).floor(),
            "{inst}: {n} scrapes in {expected} s beside the large target"
        );
    }
    let info = mgr.targets();
    let big_info = info.iter().find(|t| t.target.job == "big").unwrap();
    let err = big_info.state.last_error.clone().unwrap_or_default();
    assert!(err.contains("sample limit exceeded"), "{err}");
    let scraped = sink.find(&[("__name__", "scrape_samples_scraped"), ("job", "big")]);
    assert_eq!(scraped[0].1.last().unwrap().1, SERIES as f64);
    let _ = stop_tx.send(());
    rt.block_on(done).unwrap();
}

/// A simulator on a warped clock (`simulate --start now-4h --time-warp 15`): the scraper
/// stores the pages' sample time, not the scrape's, and a connection scraping every second
/// gets timestamps a multiple of 15 s apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warped_simulator_is_stored_at_sample_time() {
    let now = inferdb::model::time::now_ms();
    let start = now - 4 * 3_600_000;
    let sim = Simulator::start(
        "127.0.0.1",
        0,
        SimOptions {
            clock: inferdb::sim::SimClock {
                start: Some(start as f64 / 1000.0),
                warp: 15.0,
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let cfg = config(&format!(
        "scrape_configs: [{{job_name: j, scrape_interval: 1s, static_configs: [{{targets: ['{}']}}]}}]",
        sim.addrs()[0]
    ));
    let sink = Arc::new(MemorySink::new());
    let mut lp = make_loop(&cfg, sink.clone()).remove(0);
    let t1 = inferdb::model::time::now_ms();
    assert!(lp.scrape_once(t1).await.up);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let t2 = inferdb::model::time::now_ms();
    assert!(lp.scrape_once(t2).await.up);
    let running = sink.find(&[("__name__", "vllm:num_requests_running")]);
    assert_eq!(running.len(), 1);
    let ts: Vec<i64> = running[0].1.iter().map(|s| s.0).collect();
    assert_eq!(ts.len(), 2, "{ts:?}");
    // sample time, four hours back (the test took a few wall seconds, 15 sample s each)
    assert!(
        ts[0] >= start && ts[0] < start + 120_000,
        "{ts:?} vs {start}"
    );
    let d = ts[1] - ts[0];
    assert!(d >= 15_000 && d % 15_000 == 0, "{ts:?}");
    // every sample of a page has the page's timestamp; `up` has the scrape's
    let page = sim.server(0).unwrap().last_page().unwrap();
    assert_eq!((page.at * 1000.0).round() as i64, ts[1]);
    let counters = sink.find(&[("__name__", "vllm:prompt_tokens_total")]);
    assert_eq!(counters[0].1.last().unwrap().0, ts[1]);
    assert_eq!(
        up(&sink, &sim.addrs()[0].to_string()),
        vec![(t1, 1.0), (t2, 1.0)]
    );
}
