//! `kubernetes_sd_configs`: Prometheus' Kubernetes service discovery, roles `pod`,
//! `service`, `endpoints`, `endpointslice` and `node`.
//!
//! The API server is `api_server` (with the entry's HTTP client settings), the cluster of a
//! `kubeconfig_file`'s current context, or, with neither, the cluster inferdb runs in
//! (`KUBERNETES_SERVICE_HOST`/`_PORT`, the service account's token and CA under
//! `/var/run/secrets/kubernetes.io/serviceaccount`). Each kind a role needs is listed and
//! watched ([`watch`]) in every namespace asked for, with the role's selectors; once every
//! kind has been listed, the role's target groups are built from the stores, one group per
//! object with the `__meta_kubernetes_*` labels Prometheus gives it (one file per role);
//! after that each change re-builds only the groups it touches ([`discoverer`]). Objects
//! that go away take their targets with them.

pub mod discoverer;
pub mod endpoints;
pub mod endpointslice;
pub mod node;
pub mod pod;
pub mod service;
pub mod types;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer};

use super::client::{with_http_config, HttpClientConfig};
use super::{LabelSet, TargetGroup, Updater};
use crate::config::http::{Secret, TlsConfig};
use discoverer::{Discoverer, Emit, WatchState};
use types::{EndpointSlice, Endpoints, Namespace, Node, Object, ObjectMeta, Pod, Service};
use watch::{reflect, Resource};

/// Where a pod's service account files are.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One target per pod container port.
    Pod,
    /// One target per service port.
    Service,
    /// One target per Endpoints address and port.
    Endpoints,
    /// One target per EndpointSlice endpoint address and port.
    #[serde(rename = "endpointslice")]
    EndpointSlice,
    /// One target per node (its kubelet).
    Node,
    /// Ingresses: not implemented, refused at load.
    Ingress,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Pod => "pod",
            Role::Service => "service",
            Role::Endpoints => "endpoints",
            Role::EndpointSlice => "endpointslice",
            Role::Node => "node",
            Role::Ingress => "ingress",
        }
    }
}

/// `namespaces:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceDiscovery {
    /// Also the namespace inferdb runs in.
    #[serde(default)]
    pub own_namespace: bool,
    /// These namespaces (all when empty and not `own_namespace`).
    #[serde(default)]
    pub names: Vec<String>,
}

/// One `selectors:` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// The kind it filters.
    pub role: Role,
    /// A label selector (`app=vllm,tier!=cache`).
    #[serde(default)]
    pub label: Option<String>,
    /// A field selector (`spec.nodeName=n1`).
    #[serde(default)]
    pub field: Option<String>,
}

/// `attach_metadata:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachMetadata {
    /// Node labels on pod and endpoint targets.
    #[serde(default)]
    pub node: bool,
    /// Namespace labels on every target.
    #[serde(default)]
    pub namespace: bool,
    /// Deployment names of pods (through their ReplicaSet): not implemented, refused.
    #[serde(default)]
    pub deployment: bool,
    /// Job names of pods: not implemented, refused.
    #[serde(default)]
    pub job: bool,
    /// CronJob names of pods: not implemented, refused.
    #[serde(default)]
    pub cronjob: bool,
}

/// One `kubernetes_sd_configs` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesSdConfig {
    /// The API server URL (else kubeconfig or in-cluster).
    pub api_server: Option<String>,
    /// The role.
    pub role: Role,
    /// A kubeconfig file.
    pub kubeconfig_file: Option<String>,
    /// Namespaces.
    pub namespaces: NamespaceDiscovery,
    /// Selectors per kind.
    pub selectors: Vec<Selector>,
    /// Metadata of other objects on the targets.
    pub attach_metadata: AttachMetadata,
    /// Client settings.
    pub http: HttpClientConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Own {
    #[serde(default)]
    api_server: Option<String>,
    #[serde(default)]
    role: Option<Role>,
    #[serde(default)]
    kubeconfig_file: Option<String>,
    #[serde(default)]
    namespaces: NamespaceDiscovery,
    #[serde(default)]
    selectors: Vec<Selector>,
    #[serde(default)]
    attach_metadata: AttachMetadata,
}

impl<'de> Deserialize<'de> for KubernetesSdConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (o, http): (Own, HttpClientConfig) = with_http_config(
            d,
            &[
                "api_server",
                "role",
                "kubeconfig_file",
                "namespaces",
                "selectors",
                "attach_metadata",
            ],
        )?;
        let c = KubernetesSdConfig {
            role: o.role.ok_or_else(|| {
                D::Error::custom(
                    "role missing (one of: pod, service, endpoints, endpointslice, node, ingress)",
                )
            })?,
            api_server: o.api_server.filter(|s| !s.is_empty()),
            kubeconfig_file: o.kubeconfig_file.filter(|s| !s.is_empty()),
            namespaces: o.namespaces,
            selectors: o.selectors,
            attach_metadata: o.attach_metadata,
            http,
        };
        c.check().map_err(D::Error::custom)?;
        Ok(c)
    }
}

impl KubernetesSdConfig {
    /// Prometheus' checks, and refusals of what inferdb does not implement.
    fn check(&self) -> Result<(), String> {
        let default_http = self.http == HttpClientConfig::default_settings();
        if self.api_server.is_some() && self.kubeconfig_file.is_some() {
            return Err("cannot use 'kubeconfig_file' and 'api_server' simultaneously".into());
        }
        if self.kubeconfig_file.is_some() && !default_http {
            return Err(
                "cannot use a custom HTTP client configuration together with 'kubeconfig_file'"
                    .into(),
            );
        }
        if self.api_server.is_none() && !default_http {
            return Err("to use custom HTTP client configuration please provide the 'api_server' URL explicitly".into());
        }
        if self.api_server.is_some() && self.namespaces.own_namespace {
            return Err(
                "cannot use 'api_server' and 'namespaces.own_namespace' simultaneously".into(),
            );
        }
        if self.kubeconfig_file.is_some() && self.namespaces.own_namespace {
            return Err(
                "cannot use 'kubeconfig_file' and 'namespaces.own_namespace' simultaneously".into(),
            );
        }
        if let Some(u) = &self.api_server {
            reqwest::Url::parse(u).map_err(|e| format!("api_server {u:?}: {e}"))?;
        }
        let allowed: &[Role] = match self.role {
            Role::Pod => &[Role::Pod, Role::Node],
            Role::Service => &[Role::Service],
            Role::EndpointSlice => &[Role::Pod, Role::Service, Role::EndpointSlice],
            Role::Endpoints => &[Role::Pod, Role::Service, Role::Endpoints],
            Role::Node => &[Role::Node],
            Role::Ingress => &[Role::Ingress],
        };
        let mut seen = vec![];
        for s in &self.selectors {
            if seen.contains(&s.role) {
                return Err(format!("duplicated selector role: {}", s.role.name()));
            }
            seen.push(s.role);
            if !allowed.contains(&s.role) {
                let names: Vec<&str> = allowed.iter().map(|r| r.name()).collect();
                return Err(format!(
                    "{} role supports only {} selectors",
                    self.role.name(),
                    names.join(", ")
                ));
            }
        }
        if self.role == Role::Ingress {
            return Err("kubernetes_sd_configs role ingress is not supported by inferdb".into());
        }
        let a = &self.attach_metadata;
        if a.deployment || a.job || a.cronjob {
            return Err("kubernetes_sd_configs attach_metadata deployment, job and cronjob are not supported by inferdb".into());
        }
        Ok(())
    }

    /// Makes relative file names relative to `dir`.
    pub fn set_directory(&mut self, dir: &Path) {
        if let Some(f) = &mut self.kubeconfig_file {
            crate::config::http::join_dir(dir, f);
        }
        self.http.set_directory(dir);
    }

    fn selector(&self, r: Role) -> (Option<String>, Option<String>) {
        self.selectors
            .iter()
            .find(|s| s.role == r)
            .map(|s| (s.label.clone(), s.field.clone()))
            .unwrap_or_default()
    }
}

/// How to reach the API server.
pub struct Api {
    client: reqwest::Client,
    /// `https://host:port`, no final slash.
    base: String,
    http: HttpClientConfig,
}

impl Api {
    async fn get(&self, url: &str) -> Result<reqwest::Response, String> {
        let mut req = self.client.get(url).header("Accept", "application/json");
        if let Some(h) = self.http.authorization_header()? {
            req = req.header("Authorization", h);
        }
        req.send()
            .await
            .map_err(|e| format!("GET {url}: {}", super::client::error_chain(&e)))
    }

    /// The API of a configuration entry, and the namespace inferdb runs in (in-cluster).
    fn new(c: &KubernetesSdConfig, sa_dir: &Path) -> Result<(Api, Option<String>), String> {
        if let Some(u) = &c.api_server {
            return Ok((
                Api {
                    client: c.http.client()?,
                    base: u.trim_end_matches('/').to_string(),
                    http: c.http.clone(),
                },
                None,
            ));
        }
        if let Some(f) = &c.kubeconfig_file {
            return Ok((kubeconfig(Path::new(f))?, None));
        }
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
            "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined".to_string()
        })?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").map_err(|_| {
            "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined".to_string()
        })?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let http = HttpClientConfig {
            bearer_token_file: Some(sa_dir.join("token").to_string_lossy().into_owned()),
            tls_config: Some(TlsConfig {
                ca_file: Some(sa_dir.join("ca.crt").to_string_lossy().into_owned()),
                ..Default::default()
            }),
            ..HttpClientConfig::default_settings()
        };
        let ns = std::fs::read_to_string(sa_dir.join("namespace"))
            .ok()
            .map(|s| s.trim().to_string());
        Ok((
            Api {
                client: http.client()?,
                base: format!("https://{host}:{port}"),
                http,
            },
            ns,
        ))
    }
}

/// The API of a kubeconfig file's current context (server, CA, client certificate or token
/// or basic auth; data inline or in files).
fn kubeconfig(path: &Path) -> Result<Api, String> {
    use base64::Engine as _;
    let err = |e: String| format!("kubeconfig {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let y: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let cur = y["current-context"].as_str().unwrap_or_default();
    let named = |list: &str, name: &str, field: &str| -> Option<serde_yaml::Value> {
        y[list]
            .as_sequence()?
            .iter()
            .find(|e| e["name"].as_str() == Some(name))
            .map(|e| e[field].clone())
    };
    let ctx = named("contexts", cur, "context")
        .ok_or_else(|| err(format!("context {cur:?} not found")))?;
    let cluster_name = ctx["cluster"].as_str().unwrap_or_default();
    let cluster = named("clusters", cluster_name, "cluster")
        .ok_or_else(|| err(format!("cluster {cluster_name:?} not found")))?;
    let user = ctx["user"]
        .as_str()
        .and_then(|u| named("users", u, "user"))
        .unwrap_or_default();
    let server = cluster["server"]
        .as_str()
        .ok_or_else(|| err("cluster has no server".into()))?;
    let file_or_data =
        |v: &serde_yaml::Value, file: &str, data: &str| -> Result<Option<Vec<u8>>, String> {
            if let Some(d) = v[data].as_str() {
                return base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .map(Some)
                    .map_err(|e| err(format!("{data}: {e}")));
            }
            if let Some(f) = v[file].as_str() {
                let p = if Path::new(f).is_relative() {
                    dir.join(f)
                } else {
                    PathBuf::from(f)
                };
                return std::fs::read(&p)
                    .map(Some)
                    .map_err(|e| err(format!("{}: {e}", p.display())));
            }
            Ok(None)
        };
    let mut b = reqwest::Client::builder().no_proxy();
    if cluster["insecure-skip-tls-verify"].as_bool() == Some(true) {
        b = b.danger_accept_invalid_certs(true);
    }
    if let Some(ca) = file_or_data(
        &cluster,
        "certificate-authority",
        "certificate-authority-data",
    )? {
        for c in reqwest::Certificate::from_pem_bundle(&ca).map_err(|e| err(e.to_string()))? {
            b = b.add_root_certificate(c);
        }
    }
    if let (Some(mut cert), Some(key)) = (
        file_or_data(&user, "client-certificate", "client-certificate-data")?,
        file_or_data(&user, "client-key", "client-key-data")?,
    ) {
        cert.extend(key);
        b = b.identity(reqwest::Identity::from_pem(&cert).map_err(|e| err(e.to_string()))?);
    }
    let mut http = HttpClientConfig::default_settings();
    if let Some(t) = user["token"].as_str() {
        http.bearer_token = Some(Secret::new(t));
    } else if let Some(f) = user["tokenFile"].as_str() {
        http.bearer_token_file = Some(dir.join(f).to_string_lossy().into_owned());
    } else if let Some(u) = user["username"].as_str() {
        http.basic_auth = Some(crate::config::http::BasicAuth {
            username: u.to_string(),
            password: user["password"].as_str().map(Secret::new),
            password_file: None,
        });
    }
    Ok(Api {
        client: b.build().map_err(|e| err(e.to_string()))?,
        base: server.trim_end_matches('/').to_string(),
        http,
    })
}

/// The objects a role's targets are built from.
#[derive(Default)]
pub struct Stores {
    /// Pods by `namespace/name`.
    pub pods: BTreeMap<String, Pod>,
    /// Services by `namespace/name`.
    pub services: BTreeMap<String, Service>,
    /// Endpoints by `namespace/name`.
    pub endpoints: BTreeMap<String, Endpoints>,
    /// EndpointSlices by `namespace/name`.
    pub slices: BTreeMap<String, EndpointSlice>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, Namespace>,
    /// Whether a pod resolves only for objects of its own namespace (Prometheus runs one
    /// discoverer per namespace when namespaces are named).
    pub pods_per_namespace: bool,
}

/// `strutil.SanitizeLabelName`: every character outside `[a-zA-Z0-9_]` becomes `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

const PREFIX: &str = "__meta_kubernetes_";

/// `__meta_kubernetes_<resource>_label_<name>` / `_labelpresent_` and the same for
/// annotations.
pub fn add_labels_and_annotations(ls: &mut LabelSet, m: &ObjectMeta, resource: &str) {
    for (k, v) in &m.labels {
        let n = sanitize(k);
        ls.insert(format!("{PREFIX}{resource}_label_{n}"), v.clone());
        ls.insert(
            format!("{PREFIX}{resource}_labelpresent_{n}"),
            "true".into(),
        );
    }
    for (k, v) in &m.annotations {
        let n = sanitize(k);
        ls.insert(format!("{PREFIX}{resource}_annotation_{n}"), v.clone());
        ls.insert(
            format!("{PREFIX}{resource}_annotationpresent_{n}"),
            "true".into(),
        );
    }
}

/// `__meta_kubernetes_<role>_name` and the object's labels and annotations.
pub fn add_object_meta(ls: &mut LabelSet, m: &ObjectMeta, role: &str) {
    ls.insert(format!("{PREFIX}{role}_name"), m.name.clone());
    add_labels_and_annotations(ls, m, role);
}

/// The node's labels on a target (`attach_metadata: {node: true}`).
pub fn add_node_labels(ls: &mut LabelSet, s: &Stores, node: Option<&str>) {
    if let Some(n) = node.and_then(|n| s.nodes.get(n)) {
        add_object_meta(ls, &n.metadata, "node");
    }
}

/// The namespace's labels on a group (`attach_metadata: {namespace: true}`).
pub fn add_namespace_labels(ls: &mut LabelSet, s: &Stores, ns: &str) {
    if let Some(n) = s.namespaces.get(ns) {
        add_labels_and_annotations(ls, &n.metadata, "namespace");
    }
}

/// `host:port`, IPv6 bracketed.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The groups of a role from the stores.
pub fn build(c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    match c.role {
        Role::Pod => pod::groups(c, s),
        Role::Service => service::groups(c, s),
        Role::Endpoints => endpoints::groups(c, s),
        Role::EndpointSlice => endpointslice::groups(c, s),
        Role::Node => node::groups(c, s),
        Role::Ingress => vec![],
    }
}

/// The group of the role's object stored under `key` (`namespace/name`, or the name of a
/// node), as it is now: a group with no targets when it went away.
pub fn build_one(c: &KubernetesSdConfig, s: &Stores, key: &str) -> TargetGroup {
    let (prefix, g) = match c.role {
        Role::Pod => ("pod", s.pods.get(key).map(|p| pod::build_pod(c, s, p))),
        Role::Service => ("svc", s.services.get(key).map(|v| service::build(c, s, v))),
        Role::Endpoints => (
            "endpoints",
            s.endpoints.get(key).map(|e| endpoints::build(c, s, e)),
        ),
        Role::EndpointSlice => (
            "endpointslice",
            s.slices.get(key).map(|e| endpointslice::build(c, s, e)),
        ),
        Role::Node => ("node", s.nodes.get(key).and_then(node::build)),
        Role::Ingress => ("ingress", None),
    };
    g.unwrap_or_else(|| TargetGroup {
        source: format!("{prefix}/{key}"),
        ..Default::default()
    })
}

/// The kinds of object discovery watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pods.
    Pod,
    /// Services.
    Service,
    /// Endpoints.
    Endpoints,
    /// EndpointSlices.
    EndpointSlice,
    /// Nodes.
    Node,
    /// Namespaces (`attach_metadata: {namespace: true}`).
    Namespace,
}

/// One list + watch: the API path and the kind it returns.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Below the server's URL (`/api/v1/namespaces/ns/pods`).
    pub path: String,
    /// What it returns.
    pub kind: Kind,
}

/// The namespaces an entry watches (none: all), `own` being the one inferdb runs in.
pub fn namespaces_of(c: &KubernetesSdConfig, own: Option<String>) -> Result<Vec<String>, String> {
    let mut namespaces: Vec<String> = c.namespaces.names.clone();
    if c.namespaces.own_namespace {
        namespaces.push(own.ok_or_else(|| {
            "own_namespace: the service account's namespace file is unreadable".to_string()
        })?);
    }
    Ok(namespaces)
}

/// The watches a role needs: its own kind and those its groups read, in every namespace of
/// `namespaces` (cluster-wide when empty; nodes and namespaces always).
pub fn watch_specs(c: &KubernetesSdConfig, namespaces: &[String]) -> Vec<WatchSpec> {
    let pods = ("/api/v1/{ns}pods", Kind::Pod);
    let services = ("/api/v1/{ns}services", Kind::Service);
    let mut kinds = match c.role {
        Role::Pod => vec![pods],
        Role::Service => vec![services],
        Role::Endpoints => vec![("/api/v1/{ns}endpoints", Kind::Endpoints), services, pods],
        Role::EndpointSlice => vec![
            (
                "/apis/discovery.k8s.io/v1/{ns}endpointslices",
                Kind::EndpointSlice,
            ),
            services,
            pods,
        ],
        Role::Node => vec![("/api/v1/nodes", Kind::Node)],
        Role::Ingress => vec![],
    };
    if c.attach_metadata.node && matches!(c.role, Role::Pod | Role::Endpoints | Role::EndpointSlice)
    {
        kinds.push(("/api/v1/nodes", Kind::Node));
    }
    if c.attach_metadata.namespace {
        kinds.push(("/api/v1/namespaces", Kind::Namespace));
    }
    let mut v = vec![];
    for (path, kind) in kinds {
        if !path.contains("{ns}") || namespaces.is_empty() {
            v.push(WatchSpec {
                path: path.replace("{ns}", ""),
                kind,
            });
        } else {
            for ns in namespaces {
                v.push(WatchSpec {
                    path: path.replace("{ns}", &format!("namespaces/{ns}/")),
                    kind,
                });
            }
        }
    }
    v
}

/// Runs the discovery of one entry on a task.
pub(crate) fn start(c: KubernetesSdConfig, up: Updater) -> tokio::task::AbortHandle {
    start_with(c, up, PathBuf::from(SERVICE_ACCOUNT_DIR))
}

/// [`start`] with the service account files in `sa_dir` (tests).
pub(crate) fn start_with(
    c: KubernetesSdConfig,
    up: Updater,
    sa_dir: PathBuf,
) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let (api, own_ns) = match Api::new(&c, &sa_dir) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("kubernetes SD: {e}");
                up.error(e);
                return;
            }
        };
        let namespaces = match namespaces_of(&c, own_ns) {
            Ok(n) => n,
            Err(e) => {
                up.error(e);
                return;
            }
        };
        let api = Arc::new(api);
        let watches = watch_specs(&c, &namespaces);
        let selectors: Vec<_> = watches
            .iter()
            .map(|w| match w.kind {
                Kind::Pod => c.selector(Role::Pod),
                Kind::Service => c.selector(Role::Service),
                Kind::Endpoints => c.selector(Role::Endpoints),
                Kind::EndpointSlice => c.selector(Role::EndpointSlice),
                Kind::Node => c.selector(Role::Node),
                Kind::Namespace => (None, None),
            })
            .collect();
        let d = Arc::new(Mutex::new(Discoverer::new(c, watches.len())));
        let mut tasks = tokio::task::JoinSet::new();
        for (w, (label_selector, field_selector)) in watches.into_iter().zip(selectors) {
            let res = Resource {
                path: w.path,
                label_selector,
                field_selector,
            };
            let (d, upd, api) = (d.clone(), up.clone(), api.clone());
            let e_up = up.clone();
            let err = move |e: String| e_up.error(e);
            // each watch keeps the keys of the objects it put in the stores
            macro_rules! go {
                ($t:ty) => {{
                    let mut state = WatchState::default();
                    tasks.spawn(reflect::<$t>(
                        api,
                        res,
                        move |evs| match d.lock().apply(&mut state, evs) {
                            Emit::Nothing => {}
                            Emit::All(gs) => upd.replace(gs),
                            Emit::Changed(gs) => upd.update(gs),
                        },
                        err,
                    ));
                }};
            }
            match w.kind {
                Kind::Pod => go!(Pod),
                Kind::Service => go!(Service),
                Kind::Endpoints => go!(Endpoints),
                Kind::EndpointSlice => go!(EndpointSlice),
                Kind::Node => go!(Node),
                Kind::Namespace => go!(Namespace),
            }
        }
        while tasks.join_next().await.is_some() {}
    })
    .abort_handle()
}

/// Decodes `data` as each kind of object and builds every role's groups from the ones that
/// decode (see [`crate::discovery::fuzz_decode`]).
pub(crate) fn fuzz_decode(data: &[u8]) -> usize {
    let mut s = Stores::default();
    let mut ok = 0;
    macro_rules! try_kind {
        ($t:ty, $field:ident) => {
            if let Ok(o) = serde_json::from_slice::<$t>(data) {
                ok += 1;
                s.$field.insert(o.key(), o);
            }
        };
    }
    try_kind!(Pod, pods);
    try_kind!(Service, services);
    try_kind!(Endpoints, endpoints);
    try_kind!(EndpointSlice, slices);
    try_kind!(Node, nodes);
    try_kind!(Namespace, namespaces);
    for role in ["pod", "service", "endpoints", "endpointslice", "node"] {
        let y = format!("{{role: {role}, attach_metadata: {{node: true, namespace: true}}}}");
        if let Ok(c) = serde_yaml::from_str::<KubernetesSdConfig>(&y) {
            let _ = build(&c, &s);
        }
    }
    ok
}

#[cfg(test)]
mod prometheus_tests;
#[cfg(test)]
mod tests;
