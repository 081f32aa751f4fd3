//! `GET /api/v1/alertmanagers`: the Alertmanagers the notifier sends to and those its
//! `relabel_configs` dropped, by URL, in Prometheus' JSON
//! (`{"activeAlertmanagers":[{"url":...}],"droppedAlertmanagers":[...]}`).

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;

use super::router::{success, ApiState};

#[derive(Serialize)]
struct Target {
    url: String,
}

#[derive(Serialize)]
struct Discovery {
    #[serde(rename = "activeAlertmanagers")]
    active: Vec<Target>,
    #[serde(rename = "droppedAlertmanagers")]
    dropped: Vec<Target>,
}

/// Handles GET `/api/v1/alertmanagers` (empty lists without a notifier).
pub(crate) async fn handle(State(state): State<ApiState>) -> Response {
    let (active, dropped) = state
        .notifier()
        .map(|n| n.alertmanagers())
        .unwrap_or_default();
    let wrap = |v: Vec<String>| v.into_iter().map(|url| Target { url }).collect();
    let body = Discovery {
        active: wrap(active),
        dropped: wrap(dropped),
    };
    success(&serde_json::to_string(&body).unwrap_or_default(), &[], &[])
}
