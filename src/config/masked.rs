//! The configuration as `/api/v1/status/config` (and the UI's configuration page, which reads
//! it) shows it: the loaded file with every secret printed as `<secret>` and the older
//! `bearer_token`/`bearer_token_file` of jobs, remote write and Alertmanagers shown as the
//! `authorization` they become, as Prometheus' marshalled configuration shows them.

use serde_yaml::{Mapping, Value};

use super::http::Secret;

/// `text` (a configuration file that loaded) with its secrets masked (`basic_auth.password`,
/// `authorization.credentials`, `bearer_token`, `oauth2.client_secret`, `tls_config.key`,
/// `sigv4.secret_key` and the `secrets` of `http_headers` entries, wherever they appear (jobs,
/// service discoveries, remote write, Alertmanagers) and, outside service discoveries (as in
/// Prometheus 2.42's answer), `bearer_token[_file]` shown as `authorization`. Comments are
/// dropped, as from Prometheus' answer. Text that does not parse gives an empty string, never
/// the raw text.
pub fn masked_yaml(text: &str) -> String {
    let Ok(mut v) = serde_yaml::from_str::<Value>(text) else {
        return String::new();
    };
    mask(&mut v, &[]);
    match v {
        Value::Null => String::new(),
        v => serde_yaml::to_string(&v).unwrap_or_default(),
    }
}

/// Whether the value at `key` under the mapping keys `path` (outermost first) is a secret.
fn is_secret(path: &[&str], key: &str) -> bool {
    let parent = path.last().copied();
    match key {
        "bearer_token" | "client_secret" | "secret_key" => true,
        "password" => parent == Some("basic_auth"),
        "credentials" => parent == Some("authorization"),
        "key" => parent == Some("tls_config"),
        "secrets" => path.len() >= 2 && path[path.len() - 2] == "http_headers",
        _ => false,
    }
}

/// Replaces a secret's value by the mask: a scalar by `<secret>`, each item of a list by it;
/// empty values stay (Prometheus omits them), nothing else is kept.
fn mask_value(v: &mut Value) {
    match v {
        Value::Null => {}
        Value::String(s) if s.is_empty() => {}
        Value::Sequence(items) => items.iter_mut().for_each(mask_value),
        other => *other = Value::String(Secret::MASK.into()),
    }
}

fn mask(v: &mut Value, path: &[&str]) {
    match v {
        Value::Mapping(m) => {
            if path.last() == Some(&"authorization") && !m.contains_key("type") {
                insert_first(m, "type", Value::String("Bearer".into()));
            }
            // Prometheus 2.42 shows the service discoveries' own settings as given
            if !path.iter().any(|k| k.ends_with("_sd_configs")) {
                bearer_as_authorization(m);
            }
            for (k, val) in m.iter_mut() {
                let Some(key) = k.as_str() else {
                    continue;
                };
                if is_secret(path, key) {
                    mask_value(val);
                    continue;
                }
                let mut p = path.to_vec();
                p.push(key);
                mask(val, &p);
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(|i| mask(i, path)),
        Value::Tagged(t) => mask(&mut t.value, path),
        _ => {}
    }
}

/// `bearer_token: T` becomes `authorization: {type: Bearer, credentials: T}` and
/// `bearer_token_file: F` `authorization: {type: Bearer, credentials_file: F}`, as Prometheus
/// converts them at load (a mapping that has `authorization` too was refused at load).
fn bearer_as_authorization(m: &mut Mapping) {
    if m.contains_key("authorization") {
        return;
    }
    let non_empty = |v: &Option<Value>| {
        v.as_ref()
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
    };
    let (token, file) = (
        m.get("bearer_token").cloned(),
        m.get("bearer_token_file").cloned(),
    );
    let (key, val) = if non_empty(&token) {
        ("credentials", token)
    } else if non_empty(&file) {
        ("credentials_file", file)
    } else {
        return;
    };
    m.remove("bearer_token");
    m.remove("bearer_token_file");
    let mut a = Mapping::new();
    a.insert("type".into(), "Bearer".into());
    a.insert(key.into(), val.unwrap_or_default());
    m.insert("authorization".into(), Value::Mapping(a));
}

fn insert_first(m: &mut Mapping, key: &str, v: Value) {
    let rest = std::mem::take(m);
    m.insert(key.into(), v);
    m.extend(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_secret_and_keeps_the_rest() {
        let y = r#"
scrape_configs:
  - job_name: a
    basic_auth: {username: u, password: pw1}
    static_configs: [{targets: [h:1], labels: {key: keep, password: keep2}}]
  - job_name: b
    bearer_token: tok2
    http_sd_configs:
      - url: http://sd/
        authorization: {credentials: cred3}
        bearer_token: tokx
        http_headers: {X-Key: {values: [v], secrets: [hs4, hs5]}}
  - job_name: c
    bearer_token_file: /run/tok
    oauth2: {client_id: id, client_secret: cs6}
    tls_config: {key: k7, key_file: /k}
remote_write:
  - url: http://r/
    sigv4: {access_key: ak, secret_key: sk8}
    password_file: untouched
"#;
        let out = masked_yaml(y);
        for s in [
            "pw1", "tok2", "cred3", "tokx", "hs4", "hs5", "cs6", "k7", "sk8",
        ] {
            assert!(!out.contains(s), "{s} shown:\n{out}");
        }
        let v: Value = serde_yaml::from_str(&out).unwrap();
        let sc = &v["scrape_configs"];
        assert_eq!(sc[0]["basic_auth"]["password"], "<secret>");
        assert_eq!(sc[0]["static_configs"][0]["labels"]["key"], "keep");
        assert_eq!(sc[0]["static_configs"][0]["labels"]["password"], "keep2");
        assert_eq!(sc[1]["authorization"]["type"], "Bearer");
        assert_eq!(sc[1]["authorization"]["credentials"], "<secret>");
        assert!(sc[1].get("bearer_token").is_none());
        let sd = &sc[1]["http_sd_configs"][0];
        assert_eq!(sd["authorization"]["type"], "Bearer");
        assert_eq!(sd["authorization"]["credentials"], "<secret>");
        assert_eq!(sd["bearer_token"], "<secret>");
        assert_eq!(sd["http_headers"]["X-Key"]["values"][0], "v");
        assert_eq!(sd["http_headers"]["X-Key"]["secrets"][1], "<secret>");
        assert_eq!(sc[2]["authorization"]["credentials_file"], "/run/tok");
        assert_eq!(sc[2]["oauth2"]["client_id"], "id");
        assert_eq!(sc[2]["tls_config"]["key_file"], "/k");
        assert_eq!(v["remote_write"][0]["sigv4"]["access_key"], "ak");
        assert_eq!(v["remote_write"][0]["password_file"], "untouched");
    }

    #[test]
    fn numbers_are_secrets_too_and_bad_text_shows_nothing() {
        let out = masked_yaml(
            "scrape_configs: [{job_name: a, basic_auth: {username: u, password: 12345}}]",
        );
        assert!(!out.contains("12345") && out.contains("<secret>"), "{out}");
        assert_eq!(masked_yaml("a: [unclosed password: x"), "");
        assert_eq!(masked_yaml(""), "");
    }
}
