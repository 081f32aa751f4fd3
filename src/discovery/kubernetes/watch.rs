//! List and watch of one kind of object, as client-go's reflector does it: a paged list
//! (`limit`/`continue`) gives the objects and a `resourceVersion`; a watch from there
//! (`allowWatchBookmarks`, `timeoutSeconds`) streams changes. A watch stream that ends is
//! resumed from the last version seen; `410 Gone` (as an HTTP status or an `ERROR` event)
//! or any other watch error starts over with a list; API errors back off (1 s doubling to
//! 30 s).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::types::Object;
use super::Api;

/// Objects listed per page.
const PAGE: usize = 500;
/// How long one watch request lasts at most (client-go picks 5 to 10 minutes).
const WATCH_SECONDS: u64 = 300;
/// Longest line of a watch stream (one object) read.
const MAX_LINE: usize = 16 << 20;

/// What a list or watch tells the owner of a store.
#[derive(Debug)]
pub enum Event<T> {
    /// A fresh list: these are all the objects there are.
    Reset(Vec<T>),
    /// An object was added or changed.
    Apply(T),
    /// An object went away.
    Delete(T),
}

/// Which objects to follow: an API path (`/api/v1/pods`, `/api/v1/namespaces/ns/pods`,
/// `/apis/discovery.k8s.io/v1/endpointslices`) and selectors.
#[derive(Debug, Clone)]
pub struct Resource {
    /// The API path, below the server's URL.
    pub path: String,
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    cont: Option<String>,
}

#[derive(Deserialize)]
struct List<T> {
    metadata: ListMeta,
    #[serde(default = "Vec::new")]
    items: Vec<serde_json::Value>,
    #[serde(skip)]
    _t: std::marker::PhantomData<T>,
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

enum WatchEnd {
    /// The stream ended cleanly: watch again from the last version.
    Closed,
    /// Start over with a list (410 Gone, an ERROR event, a bad stream).
    Relist(String),
}

fn query(res: &Resource, extra: &[(&str, String)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(l) = &res.label_selector {
        q.append_pair("labelSelector", l);
    }
    if let Some(f) = &res.field_selector {
        q.append_pair("fieldSelector", f);
    }
    for (k, v) in extra {
        q.append_pair(k, v);
    }
    q.finish()
}

async fn list<T: Object>(api: &Api, res: &Resource) -> Result<(Vec<T>, String), String> {
    let mut out = vec![];
    let mut cont: Option<String> = None;
    loop {
        let mut extra = vec![("limit", PAGE.to_string())];
        if let Some(c) = &cont {
            extra.push(("continue", c.clone()));
        }
        let url = format!("{}{}?{}", api.base, res.path, query(res, &extra));
        let resp = api.get(&url).await?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("list {}: {e}", res.path))?;
        if !status.is_success() {
            return Err(format!(
                "list {}: HTTP {status}: {}",
                res.path,
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let l: List<T> =
            serde_json::from_slice(&body).map_err(|e| format!("list {}: {e}", res.path))?;
        for it in l.items {
            match serde_json::from_value::<T>(it) {
                Ok(o) => out.push(o),
                Err(e) => tracing::warn!("kubernetes SD: skipping an object of {}: {e}", res.path),
            }
        }
        match l.metadata.cont.filter(|c| !c.is_empty()) {
            Some(c) => cont = Some(c),
            None => return Ok((out, l.metadata.resource_version)),
        }
    }
}

async fn watch<T: Object>(
    api: &Api,
    res: &Resource,
    rv: &mut String,
    on: &mut (impl FnMut(Vec<Event<T>>) + Send),
) -> Result<WatchEnd, String> {
    let extra = [
        ("watch", "true".to_string()),
        ("resourceVersion", rv.clone()),
        ("allowWatchBookmarks", "true".to_string()),
        ("timeoutSeconds", WATCH_SECONDS.to_string()),
    ];
    let url = format!("{}{}?{}", api.base, res.path, query(res, &extra));
    let mut resp = api.get(&url).await?;
    if resp.status() == reqwest::StatusCode::GONE {
        return Ok(WatchEnd::Relist("410 Gone".into()));
    }
    if !resp.status().is_success() {
        return Err(format!("watch {}: HTTP {}", res.path, resp.status()));
    }
    let mut buf: Vec<u8> = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WATCH_SECONDS + 30);
    loop {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Err(_) => return Ok(WatchEnd::Closed),
            Ok(Err(e)) => return Err(format!("watch {}: {e}", res.path)),
            Ok(Ok(None)) => return Ok(WatchEnd::Closed),
            Ok(Ok(Some(c))) => c,
        };
        buf.extend_from_slice(&chunk);
        let mut events = vec![];
        let mut end = None;
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let line = line.trim_ascii();
            if line.is_empty() || end.is_some() {
                continue;
            }
            let ev: WatchEvent = match serde_json::from_slice(line) {
                Ok(e) => e,
                Err(e) => {
                    end = Some(WatchEnd::Relist(format!("bad watch event: {e}")));
                    continue;
                }
            };
            let new_rv = ev.object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match ev.kind.as_str() {
                "ADDED" | "MODIFIED" | "DELETED" => match serde_json::from_value::<T>(ev.object) {
                    Ok(o) => {
                        events.push(if ev.kind == "DELETED" {
                            Event::Delete(o)
                        } else {
                            Event::Apply(o)
                        });
                        if !new_rv.is_empty() {
                            *rv = new_rv;
                        }
                    }
                    Err(e) => end = Some(WatchEnd::Relist(format!("bad object: {e}"))),
                },
                "BOOKMARK" => {
                    if !new_rv.is_empty() {
                        *rv = new_rv;
                    }
                }
                _ => {
                    let code = ev.object["code"].as_i64().unwrap_or(0);
                    let msg = ev.object["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    end = Some(WatchEnd::Relist(format!("watch error {code}: {msg}")));
                }
            }
        }
        if !events.is_empty() {
            on(events);
        }
        if let Some(e) = end {
            return Ok(e);
        }
        if buf.len() > MAX_LINE {
            return Ok(WatchEnd::Relist("watch event too large".into()));
        }
    }
}

/// Lists and watches `res` for ever, telling `on` what changed; `up_err` hears of errors.
pub async fn reflect<T: Object>(
    api: Arc<Api>,
    res: Resource,
    mut on: impl FnMut(Vec<Event<T>>) + Send,
    up_err: impl Fn(String) + Send,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let (items, mut rv) = match list::<T>(&api, &res).await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("kubernetes SD: {e}");
                up_err(e);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        on(vec![Event::Reset(items)]);
        loop {
            match watch::<T>(&api, &res, &mut rv, &mut on).await {
                Ok(WatchEnd::Closed) => {
                    backoff = Duration::from_secs(1);
                    continue;
                }
                Ok(WatchEnd::Relist(why)) => {
                    tracing::debug!("kubernetes SD: {}: {why}; listing again", res.path);
                    break;
                }
                Err(e) => {
                    tracing::warn!("kubernetes SD: {e}");
                    up_err(e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    break;
                }
            }
        }
    }
}
