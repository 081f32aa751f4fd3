//! A job's `proxy_url`, `no_proxy`, `proxy_from_environment` and `http_headers` as Prometheus
//! applies them: scrapes go through the proxy (an absolute-form request to it), hosts listed in
//! `no_proxy` are reached directly, the environment's proxy is used only with
//! `proxy_from_environment`, and the headers' `values`, `secrets` and `files` are sent (the
//! values of one header as one comma-separated field).
//! Reserved headers and contradictory proxy settings are refused when the file is loaded.

mod common;

use std::sync::Arc;

use common::PageServer;
use inferdb::config::Config;
use inferdb::model::sink::MemorySink;
use inferdb::scrape::target::{build_client, discover, Auth, ScrapeLoop, ScrapeOptions};

/// What the test's proxy (or target) answers.
const PAGE: &str = "m 1\n";

/// One scrape of the first target of the only job of `yaml`: whether it succeeded.
async fn scrape_once(yaml: &str) -> bool {
    let cfg = Config::parse(yaml).unwrap();
    let sc = &cfg.scrape_configs[0];
    let (targets, _) = discover(&cfg, sc);
    let sink = Arc::new(MemorySink::new());
    let mut l = ScrapeLoop::new(
        targets[0].clone(),
        ScrapeOptions::from_config(&cfg, sc),
        build_client(sc).unwrap(),
        Auth::None,
        sink.clone(),
    );
    let r = l.scrape_once(1_000).await;
    if r.up {
        assert_eq!(sink.find(&[("__name__", "m")]).len(), 1);
    }
    r.up
}

/// The request heads `server` saw, lower-cased.
fn heads(server: &PageServer) -> Vec<String> {
    server.heads().iter().map(|s| s.to_lowercase()).collect()
}

#[tokio::test]
async fn scrapes_go_through_the_proxy_with_the_headers() {
    let proxy = PageServer::start(PAGE);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "from-file\n").unwrap();
    let yaml = format!(
        "scrape_configs:
  - job_name: j
    proxy_url: http://{}
    http_headers:
      X-Team: {{values: [a, b]}}
      X-Key: {{secrets: [s3cret]}}
      X-File: {{files: [{}]}}
    static_configs: [{{targets: ['target.invalid:9100']}}]
",
        proxy.addr,
        dir.path().join("token").display()
    );
    assert!(scrape_once(&yaml).await, "scraped through the proxy");
    let h = heads(&proxy);
    assert_eq!(h.len(), 1, "{h:?}");
    assert!(
        h[0].starts_with("get http://target.invalid:9100/metrics http/1.1\r\n"),
        "{}",
        h[0]
    );
    for line in [
        "x-team: a, b\r\n",
        "x-key: s3cret\r\n",
        "x-file: from-file\r\n",
    ] {
        assert!(h[0].contains(line), "{line:?} missing: {}", h[0]);
    }
}

#[tokio::test]
async fn no_proxy_hosts_are_reached_directly() {
    let target = PageServer::start(PAGE);
    // the proxy's port refuses connections: only a direct scrape succeeds
    let refused = common::free_port();
    let yaml = format!(
        "scrape_configs:
  - job_name: j
    proxy_url: http://127.0.0.1:{refused}
    no_proxy: 127.0.0.1
    static_configs: [{{targets: ['{}']}}]
",
        target.addr
    );
    assert!(scrape_once(&yaml).await, "scraped directly");
    let h = heads(&target);
    assert!(h[0].starts_with("get /metrics http/1.1\r\n"), "{}", h[0]);
    // without no_proxy the same scrape goes to the (refusing) proxy and fails
    let yaml = yaml.replace("    no_proxy: 127.0.0.1\n", "");
    assert!(!scrape_once(&yaml).await);
    assert_eq!(heads(&target).len(), 1);
}

#[tokio::test]
async fn the_environments_proxy_only_with_proxy_from_environment() {
    let proxy = PageServer::start(PAGE);
    // the only test of this binary that reads the environment's proxy
    std::env::set_var("HTTP_PROXY", format!("http://{}", proxy.addr));
    let job = "scrape_configs:
  - job_name: j
    scrape_timeout: 2s
    static_configs: [{targets: ['target.invalid:9100']}]
";
    assert!(
        !scrape_once(job).await,
        "the environment's proxy is not used"
    );
    assert!(heads(&proxy).is_empty());
    let with_env = job.replace(
        "    scrape_timeout",
        "    proxy_from_environment: true\n    scrape_timeout",
    );
    assert!(scrape_once(&with_env).await, "scraped through HTTP_PROXY");
    let h = heads(&proxy);
    assert!(
        h[0].starts_with("get http://target.invalid:9100/metrics http/1.1\r\n"),
        "{}",
        h[0]
    );
}

#[test]
fn reserved_headers_and_contradictory_proxies_are_refused() {
    for (job, want) in [
        (
            "http_headers: {Authorization: {values: [x]}}",
            "setting header \"Authorization\" is not allowed",
        ),
        (
            "http_headers: {user-agent: {values: [x]}}",
            "setting header \"user-agent\" is not allowed",
        ),
        (
            "no_proxy: example.com",
            "if no_proxy is configured, proxy_url must also be configured",
        ),
        (
            "{proxy_url: 'http://p:3128', proxy_from_environment: true}",
            "if proxy_from_environment is configured, proxy_url must not be configured",
        ),
    ] {
        let job = if job.starts_with('{') {
            job.trim_matches(['{', '}']).to_string()
        } else {
            job.to_string()
        };
        let yaml = format!(
            "scrape_configs: [{{job_name: j, {job}, static_configs: [{{targets: ['a:1']}}]}}]"
        );
        let err = Config::parse(&yaml).unwrap_err().to_string();
        assert!(err.contains(want), "{yaml}: {err}");
        assert!(err.contains("job \"j\""), "{err}");
    }
}
