//! Secrets in `/api/v1/status/config` (which the UI's configuration page shows) and in the
//! log, against Prometheus 2.42 on the same file: every secret field of jobs, their HTTP
//! service discovery, remote write and Alertmanagers prints as `<secret>` at the same place
//! as in Prometheus' answer, `bearer_token`/`bearer_token_file` show as the same
//! `authorization`, and no secret value appears anywhere in inferdb's answers or log.

mod common;

use std::collections::BTreeMap;

use common::{free_port, require_prometheus, serve_command, spawn_prometheus, Client, Proc};
use serde_yaml::Value;

/// Every secret value of the file below; none may show.
const SECRETS: [&str; 12] = [
    "pw-job-s1",
    "cred-job-s2",
    "tok-job-s3",
    "pw-sd-s4",
    "tok-sd-s5",
    "pw-rw-s6",
    "cred-rw-s7",
    "tok-rw-s8",
    "pw-am-s9",
    "tok-am-s10",
    "cred-am-s11",
    "tok-file-s12",
];

fn config(dir: &std::path::Path) -> String {
    let tok = dir.join("token.txt");
    std::fs::write(&tok, "tok-file-s12\n").unwrap();
    format!(
        r#"global: {{scrape_interval: 1m, evaluation_interval: 1m}}
scrape_configs:
  - job_name: basic
    basic_auth: {{username: u1, password: pw-job-s1}}
    static_configs: [{{targets: ['127.0.0.1:9'], labels: {{password: not-a-secret}}}}]
  - job_name: authz
    authorization: {{type: Token, credentials: cred-job-s2}}
    static_configs: [{{targets: ['127.0.0.1:9']}}]
  - job_name: bearer
    bearer_token: tok-job-s3
    static_configs: [{{targets: ['127.0.0.1:9']}}]
  - job_name: bearer-file
    bearer_token_file: {tok}
    static_configs: [{{targets: ['127.0.0.1:9']}}]
  - job_name: sd
    http_sd_configs:
      - url: http://127.0.0.1:9/sd
        refresh_interval: 1h
        basic_auth: {{username: u2, password: pw-sd-s4}}
      - url: http://127.0.0.1:9/sd2
        refresh_interval: 1h
        bearer_token: tok-sd-s5
remote_write:
  - url: http://127.0.0.1:9/w1
    basic_auth: {{username: u3, password: pw-rw-s6}}
  - url: http://127.0.0.1:9/w2
    authorization: {{credentials: cred-rw-s7}}
  - url: http://127.0.0.1:9/w3
    bearer_token: tok-rw-s8
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['127.0.0.1:9']}}]
      basic_auth: {{username: u4, password: pw-am-s9}}
    - static_configs: [{{targets: ['127.0.0.1:9']}}]
      bearer_token: tok-am-s10
    - static_configs: [{{targets: ['127.0.0.1:9']}}]
      authorization: {{type: Bearer, credentials: cred-am-s11}}
"#,
        tok = tok.display()
    )
}

/// The path (`a/0/b`) of every leaf under `v`, with its value.
fn leaves(v: &Value, path: String, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                let k = k.as_str().unwrap_or("?");
                leaves(v, format!("{path}/{k}"), out);
            }
        }
        Value::Sequence(s) => {
            for (i, v) in s.iter().enumerate() {
                leaves(v, format!("{path}/{i}"), out);
            }
        }
        v => {
            out.insert(path, v.clone());
        }
    }
}

fn config_answer(client: &Client, base: &str) -> (String, BTreeMap<String, Value>) {
    let (st, body) = client.get(&format!("{base}/api/v1/status/config"));
    assert_eq!(st, 200, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    let yaml = j["data"]["yaml"].as_str().unwrap().to_string();
    let v: Value = serde_yaml::from_str(&yaml).unwrap();
    let mut m = BTreeMap::new();
    leaves(&v, String::new(), &mut m);
    (yaml, m)
}

#[test]
fn secrets_print_as_prometheus_prints_them() {
    if !require_prometheus("secrets_print_as_prometheus_prints_them") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let yml = config(d.path());
    let client = Client::new();

    let pport = free_port();
    let mut prom = spawn_prometheus(d.path(), &yml, &d.path().join("prom"), pport, &[]);
    let pbase = format!("http://127.0.0.1:{pport}");
    let cfg = d.path().join("inferdb.yml");
    std::fs::write(&cfg, &yml).unwrap();
    let iport = free_port();
    let mut cmd = serve_command(&d.path().join("data"), iport);
    cmd.arg("--config.file")
        .arg(&cfg)
        .args(["--log.level", "debug"]);
    let mut inferdb = Proc::spawn("inferdb", &mut cmd, d.path().join("inferdb.log"));
    let ibase = format!("http://127.0.0.1:{iport}");
    prom.wait_ready(&pbase, &client);
    inferdb.wait_ready(&ibase, &client);

    let (_, want) = config_answer(&client, &pbase);
    let (text, got) = config_answer(&client, &ibase);
    // every place Prometheus masks, inferdb masks, and no other
    let masked = |m: &BTreeMap<String, Value>| -> Vec<String> {
        m.iter()
            .filter(|(_, v)| v.as_str() == Some("<secret>"))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let want_masked = masked(&want);
    assert_eq!(want_masked.len(), 11, "Prometheus masked {want_masked:?}");
    assert_eq!(masked(&got), want_masked, "inferdb's answer:\n{text}");
    // authorization (from bearer_token[_file] too) as Prometheus shows it
    for (k, v) in want.iter().filter(|(k, _)| k.contains("/authorization/")) {
        assert_eq!(got.get(k), Some(v), "{k}; inferdb's answer:\n{text}");
    }
    // bearer_token shows as it does in Prometheus 2.42: as authorization, except in a service
    // discovery's own settings
    let bearer = |m: &BTreeMap<String, Value>| -> Vec<String> {
        m.keys()
            .filter(|k| k.contains("bearer_token"))
            .cloned()
            .collect()
    };
    assert_eq!(bearer(&got), bearer(&want), "inferdb's answer:\n{text}");
    assert_eq!(
        got["/scrape_configs/0/static_configs/0/labels/password"],
        "not-a-secret"
    );

    // nothing shows a secret: the API, the UI's configuration page, the log
    let (_, page) = client.get(&format!("{ibase}/config"));
    let (_, metrics) = client.get(&format!("{ibase}/metrics"));
    let (_, targets) = client.get(&format!("{ibase}/api/v1/targets"));
    inferdb.terminate();
    let log = std::fs::read_to_string(d.path().join("inferdb.log")).unwrap();
    for s in SECRETS {
        for (what, t) in [
            ("config", &text),
            ("UI page", &page),
            ("metrics", &metrics),
            ("targets", &targets),
            ("log", &log),
        ] {
            assert!(!t.contains(s), "{s} in inferdb's {what}:\n{t}");
        }
    }
}
