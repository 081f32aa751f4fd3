//! HTTPS from `--web.config.file` (`tls_server_config`), end to end: certificates made with the
//! `openssl` command line, `inferdb serve` started with the web configuration, then queried over
//! HTTPS by reqwest (trusting the test CA) and by `promtool` (trusting it via `SSL_CERT_FILE`),
//! with basic auth on top; plain HTTP to the TLS port is answered 400 as Prometheus does; mutual
//! TLS (`RequireAndVerifyClientCert`) lets in only clients with a certificate from the CA; and
//! settings rustls cannot honour stop `serve` at start with a message.
//!
//! Without `openssl`/`promtool` on PATH the parts needing them are skipped with a message,
//! unless `CI=true`, where they fail.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{demo_command, free_port, run_ok, Proc};
use serde_json::Value;

/// Whether `tool` runs; under `INFERDB_REQUIRE_CONFORMANCE=1` a missing tool fails the test.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg(if tool == "openssl" {
            "version"
        } else {
            "--version"
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::conformance::skip("api_tls", &format!("{tool} not found"));
    }
    ok
}

fn openssl(dir: &Path, args: &[&str]) {
    run_ok(
        &format!("openssl {args:?}"),
        Command::new("openssl").args(args).current_dir(dir),
    );
}

/// A self-signed P-256 certificate valid for two days: `STEM.pem` and `STEM.key` in `dir`,
/// subject `/CN=CN`, with `extra` arguments to `openssl req`.
fn self_signed(dir: &Path, stem: &str, cn: &str, extra: &[&str]) {
    let (key, pem, subj) = (
        format!("{stem}.key"),
        format!("{stem}.pem"),
        format!("/CN={cn}"),
    );
    let mut args = vec![
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &pem,
        "-days",
        "2",
        "-subj",
        &subj,
    ];
    args.extend_from_slice(extra);
    openssl(dir, &args);
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all signed by
/// the CA: `ca.pem`, `server.pem`/`server.key`, `client.pem`/`client.key` in `dir`.
fn make_certs(dir: &Path) {
    self_signed(
        dir,
        "ca",
        "inferdb test CA",
        &[
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
        ),
        (
            "client",
            "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
        ),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }
}

/// `inferdb serve --demo` (one simulated server) with a web configuration, killed on drop.
struct Server {
    _proc: Proc,
    port: u16,
    _data: tempfile::TempDir,
}

/// The serve command with `web_config`, on a fresh data folder and a free port.
fn serve(web_config: &Path) -> (Command, u16, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = demo_command(data.path(), port, 1);
    cmd.arg("--web.config.file").arg(web_config);
    (cmd, port, data)
}

/// Starts serve and waits until it is ready.
fn start(web_config: &Path) -> Server {
    let (mut cmd, port, data) = serve(web_config);
    let mut proc = Proc::spawn("inferdb serve", &mut cmd, web_config.with_extension("log"));
    proc.wait_serving(port);
    Server {
        _proc: proc,
        port,
        _data: data,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client(dir: &Path, identity: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.pem")).unwrap()).unwrap();
    let mut b = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(30));
    if identity {
        let mut pem = std::fs::read(dir.join("client.pem")).unwrap();
        pem.extend(std::fs::read(dir.join("client.key")).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

/// (status, body) of a GET, or the transport error as text.
fn get(
    rt: &tokio::runtime::Runtime,
    c: &reqwest::Client,
    url: &str,
    user: Option<(&str, &str)>,
) -> Result<(u16, String), String> {
    rt.block_on(async {
        let mut r = c.get(url);
        if let Some((u, p)) = user {
            r = r.basic_auth(u, Some(p));
        }
        let r = r.send().await.map_err(|e| format!("{e:?}"))?;
        let st = r.status().as_u16();
        Ok((st, r.text().await.map_err(|e| e.to_string())?))
    })
}

#[test]
fn https_with_basic_auth_reqwest_promtool_and_plain_http_refused() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    // relative file names resolve against the web configuration's folder, as in Prometheus
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS12\n  \
             cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]\n\
             basic_auth_users:\n  grafana: '{hash}'\n"
        ),
    )
    .unwrap();
    let srv = start(&web);
    let rt = rt();
    let c = client(dir.path(), false);
    let https = format!("https://127.0.0.1:{}", srv.port);

    // TLS + right credentials
    let (st, body) = get(
        &rt,
        &c,
        &format!("{https}/api/v1/query?query=1%2B1&time=4"),
        Some(("grafana", "s3cret")),
    )
    .unwrap();
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["result"], serde_json::json!([4, "2"]));
    // the same name under localhost
    let (st, _) = get(
        &rt,
        &c,
        &format!("https://localhost:{}/api/v1/status/buildinfo", srv.port),
        Some(("grafana", "s3cret")),
    )
    .unwrap();
    assert_eq!(st, 200);
    // TLS without or with wrong credentials: 401
    let (st, _) = get(&rt, &c, &format!("{https}/api/v1/labels"), None).unwrap();
    assert_eq!(st, 401);
    let (st, _) = get(
        &rt,
        &c,
        &format!("{https}/api/v1/labels"),
        Some(("grafana", "nope")),
    )
    .unwrap();
    assert_eq!(st, 401);
    // a client that does not trust the CA fails the handshake
    let untrusting = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    assert!(get(&rt, &untrusting, &format!("{https}/-/healthy"), None).is_err());
    // TLS 1.3 only client
    let c13 = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(dir.path().join("ca.pem")).unwrap())
                .unwrap(),
        )
        .min_tls_version(reqwest::tls::Version::TLS_1_3)
        .build()
        .unwrap();
    let (st, _) = get(
        &rt,
        &c13,
        &format!("{https}/-/ready"),
        Some(("grafana", "s3cret")),
    )
    .unwrap();
    assert_eq!(st, 200);
    // plain HTTP to the TLS port: Go's answer, and no data
    let plain = reqwest::Client::new();
    let (st, body) = get(
        &rt,
        &plain,
        &format!("http://127.0.0.1:{}/api/v1/query?query=up", srv.port),
        Some(("grafana", "s3cret")),
    )
    .unwrap();
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("HTTP request to an HTTPS server"), "{body}");
    // still serving after that
    let (st, _) = get(
        &rt,
        &c,
        &format!("{https}/-/healthy"),
        Some(("grafana", "s3cret")),
    )
    .unwrap();
    assert_eq!(st, 200);

    // promtool (Go's TLS client, trusting the CA through SSL_CERT_FILE, credentials in the URL)
    if have("promtool") {
        let ca = dir.path().join("ca.pem");
        let promtool = |url: &str, ca_file: &Path| {
            Command::new("promtool")
                .args(["query", "instant", "--time", "4", url, "1+1"])
                .env("SSL_CERT_FILE", ca_file)
                .env_remove("SSL_CERT_DIR")
                .output()
                .unwrap()
        };
        let out = promtool(
            &format!("https://grafana:s3cret@127.0.0.1:{}", srv.port),
            &ca,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "promtool: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("scalar: 2"), "{stdout}");
        // wrong password
        let out = promtool(&format!("https://grafana:bad@127.0.0.1:{}", srv.port), &ca);
        assert!(!out.status.success());
        // a CA bundle without our CA (the system's, or an unrelated self-signed one):
        // certificate not trusted
        let mut other = std::path::PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
        if !other.exists() {
            self_signed(dir.path(), "other", "other CA", &[]);
            other = dir.path().join("other.pem");
        }
        let out = promtool(
            &format!("https://grafana:s3cret@127.0.0.1:{}", srv.port),
            &other,
        );
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("certificate"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  max_version: TLS13\n",
    )
    .unwrap();
    let srv = start(&web);
    let rt = rt();
    let url = format!("https://127.0.0.1:{}/api/v1/query?query=1&time=4", srv.port);
    let (st, body) = get(&rt, &client(dir.path(), true), &url, None).unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(get(&rt, &client(dir.path(), false), &url, None).is_err());
}

#[test]
fn settings_rustls_cannot_honour_stop_serve_with_a_message() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    for (extra, says) in [
        ("  min_version: TLS10\n", "TLS 1.2 and 1.3 only"),
        (
            "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
            "TLS_RSA_WITH_AES_128_CBC_SHA is not available",
        ),
        (
            "  client_auth_type: RequireAnyClientCert\n",
            "without verification",
        ),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "needs client_ca_file",
        ),
        ("  curve_preferences: [CurveP521]\n", "CurveP521"),
        ("  min_version: TLS13\n  max_version: TLS12\n", "above"),
    ] {
        let web = dir.path().join("bad.yml");
        std::fs::write(
            &web,
            format!("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{extra}"),
        )
        .unwrap();
        let (mut cmd, _, _data) = serve(&web);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra}: serve started");
        assert!(err.contains(says), "{extra}: {err}");
    }
}

#[test]
fn the_example_web_config_in_deploy_works() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    std::fs::copy(
        dir.path().join("server.pem"),
        dir.path().join("inferdb.crt"),
    )
    .unwrap();
    std::fs::copy(
        dir.path().join("server.key"),
        dir.path().join("inferdb.key"),
    )
    .unwrap();
    let web = dir.path().join("web-config.yml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/web-config.example.yml"),
        &web,
    )
    .unwrap();
    let srv = start(&web);
    let rt = rt();
    let url = format!("https://127.0.0.1:{}/api/v1/labels", srv.port);
    let c = client(dir.path(), false);
    let (st, body) = get(&rt, &c, &url, Some(("grafana", "grafana"))).unwrap();
    assert_eq!(st, 200, "{body}");
    let (st, _) = get(&rt, &c, &url, None).unwrap();
    assert_eq!(st, 401);
}
