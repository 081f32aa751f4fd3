//! Prometheus' own cases for the `endpoints`, `endpointslice`, `node`, `service` and `pod` roles
//! (`discovery/kubernetes/{endpoints,endpointslice,node,service,pod}_test.go` at the commit of
//! `../shared/promqltest`, 3.14.0): the same objects, written as the API's JSON, are listed
//! by the watches the role opens (only those of the namespaces it watches), then the
//! changes after start arrive as watch events; the groups sent, merged by source as
//! Prometheus' test harness merges them, must equal the groups Prometheus expects, label for
//! label and target for target.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::discoverer::{Discoverer, Emit, Stored, WatchState};
use super::types::{EndpointSlice, Endpoints, Namespace, Node, Pod, Service};
use super::watch::Event;
use super::*;

/// One case: the entry, the objects before start, the changes after, the groups expected.
struct Case {
    config: &'static str,
    before: Vec<Value>,
    after: Vec<(&'static str, Value)>,
    want: Value,
}

/// The namespace inferdb runs in, as in Prometheus' tests.
const OWN_NS: &str = "own-ns";

fn kind_of(path: &str) -> &'static str {
    if path.ends_with("/pods") {
        "Pod"
    } else if path.ends_with("/services") {
        "Service"
    } else if path.ends_with("/endpoints") {
        "Endpoints"
    } else if path.ends_with("/endpointslices") {
        "EndpointSlice"
    } else if path.ends_with("/nodes") {
        "Node"
    } else {
        "Namespace"
    }
}

/// Whether the watch on `path` sees `o` (its kind, and its namespace for a namespaced path).
fn sees(path: &str, o: &Value) -> bool {
    if o["kind"] != kind_of(path) {
        return false;
    }
    match path.split_once("/namespaces/") {
        Some((_, rest)) if rest.contains('/') => {
            let ns = rest.split('/').next().unwrap_or_default();
            o["metadata"]["namespace"] == ns
        }
        _ => true,
    }
}

fn apply_typed<T: Stored>(
    d: &mut Discoverer,
    w: &mut WatchState,
    ev: &str,
    objs: Vec<Value>,
) -> Emit {
    let objs: Vec<T> = objs
        .into_iter()
        .map(|o| serde_json::from_value(o).unwrap())
        .collect();
    let events = match ev {
        "LIST" => vec![Event::Reset(objs)],
        "DELETED" => objs.into_iter().map(Event::Delete).collect(),
        _ => objs.into_iter().map(Event::Apply).collect(),
    };
    d.apply(w, events)
}

fn feed(d: &mut Discoverer, w: &mut WatchState, path: &str, ev: &str, objs: Vec<Value>) -> Emit {
    match kind_of(path) {
        "Pod" => apply_typed::<Pod>(d, w, ev, objs),
        "Service" => apply_typed::<Service>(d, w, ev, objs),
        "Endpoints" => apply_typed::<Endpoints>(d, w, ev, objs),
        "EndpointSlice" => apply_typed::<EndpointSlice>(d, w, ev, objs),
        "Node" => apply_typed::<Node>(d, w, ev, objs),
        _ => apply_typed::<Namespace>(d, w, ev, objs),
    }
}

/// A group as Prometheus' test marshals it (no targets and no labels as empty).
fn as_json(g: &TargetGroup) -> Value {
    json!({"targets": g.targets, "labels": g.labels})
}

fn normalise(want: &Value) -> BTreeMap<String, Value> {
    want.as_object()
        .unwrap()
        .iter()
        .map(|(k, g)| {
            let targets = g.get("targets").cloned().unwrap_or(json!([]));
            let labels = g.get("labels").cloned().unwrap_or(json!({}));
            (k.clone(), json!({"targets": targets, "labels": labels}))
        })
        .collect()
}

fn run(case: Case) {
    let c: KubernetesSdConfig = serde_yaml::from_str(case.config).unwrap();
    let namespaces = namespaces_of(&c, Some(OWN_NS.to_string())).unwrap();
    let watches = watch_specs(&c, &namespaces);
    let mut d = Discoverer::new(c, watches.len());
    let mut states: Vec<WatchState> = watches.iter().map(|_| WatchState::default()).collect();
    let mut got: BTreeMap<String, Value> = BTreeMap::new();
    let mut record = |s: Emit| match s {
        Emit::Nothing => {}
        Emit::All(gs) | Emit::Changed(gs) => {
            for g in gs {
                got.insert(g.source.clone(), as_json(&g));
            }
        }
    };
    for (i, w) in watches.iter().enumerate() {
        let objs: Vec<Value> = case
            .before
            .iter()
            .filter(|o| sees(&w.path, o))
            .cloned()
            .collect();
        record(feed(&mut d, &mut states[i], &w.path, "LIST", objs));
    }
    for (ev, o) in case.after {
        for (i, w) in watches.iter().enumerate() {
            if sees(&w.path, &o) {
                record(feed(&mut d, &mut states[i], &w.path, ev, vec![o.clone()]));
            }
        }
    }
    let want = normalise(&case.want);
    assert_eq!(
        got,
        want,
        "got:\n{}\nwant:\n{}",
        serde_json::to_string_pretty(&got).unwrap(),
        serde_json::to_string_pretty(&want).unwrap()
    );
}

// ---- objects ----

/// `makeEndpoints`.
fn make_endpoints(ns: &str) -> Value {
    json!({"kind": "Endpoints",
    "metadata": {"name": "testendpoints", "namespace": ns, "annotations": {"test.annotation": "test"}},
    "subsets": [
        {"addresses": [{"ip": "1.2.3.4", "hostname": "testendpoint1", "nodeName": "foobar"}],
         "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]},
        {"addresses": [{"ip": "2.3.4.5"}], "notReadyAddresses": [{"ip": "2.3.4.5"}],
         "ports": [{"name": "testport", "port": 9001, "protocol": "TCP"}]},
        {"addresses": [{"ip": "6.7.8.9", "targetRef": {"kind": "Node", "name": "barbaz"}}],
         "ports": [{"name": "testport", "port": 9002, "protocol": "TCP"}]}
    ]})
}

/// The four targets of `makeEndpoints`, node labels on the first and last when given.
fn make_endpoints_targets(node1: Option<&str>, node2: Option<&str>) -> Value {
    let mut t = json!([
        {"__address__": "1.2.3.4:9000", "__meta_kubernetes_endpoint_hostname": "testendpoint1",
         "__meta_kubernetes_endpoint_node_name": "foobar", "__meta_kubernetes_endpoint_port_name": "testport",
         "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"},
        {"__address__": "2.3.4.5:9001", "__meta_kubernetes_endpoint_port_name": "testport",
         "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"},
        {"__address__": "2.3.4.5:9001", "__meta_kubernetes_endpoint_port_name": "testport",
         "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "false"},
        {"__address__": "6.7.8.9:9002", "__meta_kubernetes_endpoint_address_target_kind": "Node",
         "__meta_kubernetes_endpoint_address_target_name": "barbaz", "__meta_kubernetes_endpoint_port_name": "testport",
         "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"}
    ]);
    for (i, node, az) in [(0, "foobar", node1), (3, "barbaz", node2)] {
        if let Some(az) = az {
            let m = t[i].as_object_mut().unwrap();
            m.insert("__meta_kubernetes_node_label_az".into(), json!(az));
            m.insert(
                "__meta_kubernetes_node_labelpresent_az".into(),
                json!("true"),
            );
            m.insert("__meta_kubernetes_node_name".into(), json!(node));
        }
    }
    t
}

fn make_endpoints_labels(ns: &str) -> Value {
    json!({"__meta_kubernetes_namespace": ns, "__meta_kubernetes_endpoints_name": "testendpoints",
        "__meta_kubernetes_endpoints_annotation_test_annotation": "test",
        "__meta_kubernetes_endpoints_annotationpresent_test_annotation": "true"})
}

fn with(mut a: Value, b: Value) -> Value {
    let m = a.as_object_mut().unwrap();
    for (k, v) in b.as_object().unwrap() {
        m.insert(k.clone(), v.clone());
    }
    a
}

/// `makeNode(name, "", "", labels, nil, nil)`.
fn make_node(name: &str, az: &str) -> Value {
    json!({"kind": "Node", "metadata": {"name": name, "labels": {"az": az}}})
}

/// `makeNamespace`.
fn make_namespace(name: &str, labels: Value, annotations: Value) -> Value {
    json!({"kind": "Namespace", "metadata": {"name": name, "labels": labels, "annotations": annotations}})
}

fn service(name: &str, ns: &str, labels: Value) -> Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": ns, "labels": labels}})
}

/// A pod with one container per `(name, port name, port)` (init containers after `init`).
fn pod(ns: &str, ip: &str, containers: &[(&str, &str, i64)], init: &[(&str, &str, i64)]) -> Value {
    let c = |v: &[(&str, &str, i64)]| -> Value {
        v.iter()
            .map(|(n, pn, p)| {
                json!({"name": n, "image": format!("{n}:latest"),
                "ports": [{"name": pn, "containerPort": p, "protocol": "TCP"}]})
            })
            .collect()
    };
    json!({"kind": "Pod", "metadata": {"name": "testpod", "namespace": ns, "uid": "deadbeef"},
        "spec": {"nodeName": "testnode", "containers": c(containers), "initContainers": c(init)},
        "status": {"hostIP": "2.3.4.5", "podIP": ip}})
}

/// The labels of `pod(..)` on a target: the pod's, and its container's when `c` is given.
fn pod_target(ip: &str, c: Option<(&str, &str, &str, bool)>) -> Value {
    let mut t = json!({"__meta_kubernetes_pod_name": "testpod", "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_ready": "unknown", "__meta_kubernetes_pod_phase": "",
        "__meta_kubernetes_pod_node_name": "testnode", "__meta_kubernetes_pod_host_ip": "2.3.4.5",
        "__meta_kubernetes_pod_uid": "deadbeef"});
    if let Some((name, port_name, port, init)) = c {
        t = with(
            t,
            json!({"__meta_kubernetes_pod_container_name": name,
                "__meta_kubernetes_pod_container_image": format!("{name}:latest"),
                "__meta_kubernetes_pod_container_port_name": port_name,
                "__meta_kubernetes_pod_container_port_number": port,
                "__meta_kubernetes_pod_container_port_protocol": "TCP",
                "__meta_kubernetes_pod_container_init": init.to_string()}),
        );
    }
    t
}

// ---- endpoints_test.go ----

#[test]
fn endpoints_discovery_before_run() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![make_endpoints("default")],
        after: vec![],
        want: json!({"endpoints/default/testendpoints": {
            "targets": make_endpoints_targets(None, None), "labels": make_endpoints_labels("default")}}),
    });
}

#[test]
fn endpoints_discovery_add() {
    let p = pod(
        "default",
        "1.2.3.4",
        &[("c1", "mainport", 9000), ("c2", "sideport", 9001)],
        &[],
    );
    run(Case {
        config: "{role: endpoints}",
        before: vec![p],
        after: vec![(
            "ADDED",
            json!({"kind": "Endpoints",
            "metadata": {"name": "testendpoints", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
                "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]}]}),
        )],
        want: json!({"endpoints/default/testendpoints": {
            "targets": [
                with(pod_target("1.2.3.4", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod"})),
                with(pod_target("1.2.3.4", Some(("c2", "sideport", "9001", false))), json!({"__address__": "1.2.3.4:9001"})),
            ],
            "labels": {"__meta_kubernetes_endpoints_name": "testendpoints", "__meta_kubernetes_namespace": "default"}}}),
    });
}

#[test]
fn endpoints_discovery_delete() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![make_endpoints("default")],
        after: vec![("DELETED", make_endpoints("default"))],
        want: json!({"endpoints/default/testendpoints": {}}),
    });
}

#[test]
fn endpoints_discovery_update() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![make_endpoints("default")],
        after: vec![(
            "MODIFIED",
            json!({"kind": "Endpoints",
            "metadata": {"name": "testendpoints", "namespace": "default"},
            "subsets": [
                {"addresses": [{"ip": "1.2.3.4"}], "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]},
                {"addresses": [{"ip": "2.3.4.5"}], "ports": [{"name": "testport", "port": 9001, "protocol": "TCP"}]}]}),
        )],
        want: json!({"endpoints/default/testendpoints": {
            "targets": [
                {"__address__": "1.2.3.4:9000", "__meta_kubernetes_endpoint_port_name": "testport",
                 "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"},
                {"__address__": "2.3.4.5:9001", "__meta_kubernetes_endpoint_port_name": "testport",
                 "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"}],
            "labels": {"__meta_kubernetes_namespace": "default", "__meta_kubernetes_endpoints_name": "testendpoints"}}}),
    });
}

#[test]
fn endpoints_discovery_empty_subsets() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![make_endpoints("default")],
        after: vec![(
            "MODIFIED",
            json!({"kind": "Endpoints",
            "metadata": {"name": "testendpoints", "namespace": "default"}, "subsets": []}),
        )],
        want: json!({"endpoints/default/testendpoints": {
            "labels": {"__meta_kubernetes_namespace": "default", "__meta_kubernetes_endpoints_name": "testendpoints"}}}),
    });
}

fn service_labels_json(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut m = json!({"__meta_kubernetes_service_name": name});
    for (k, v) in labels {
        let k = sanitize(k);
        m[format!("__meta_kubernetes_service_label_{k}")] = json!(v);
        m[format!("__meta_kubernetes_service_labelpresent_{k}")] = json!("true");
    }
    m
}

#[test]
fn endpoints_discovery_with_service() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            make_endpoints("default"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![],
        want: json!({"endpoints/default/testendpoints": {
            "targets": make_endpoints_targets(None, None),
            "labels": with(make_endpoints_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

#[test]
fn endpoints_discovery_with_service_update() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            make_endpoints("default"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![(
            "MODIFIED",
            service(
                "testendpoints",
                "default",
                json!({"app/name": "svc", "component": "testing"}),
            ),
        )],
        want: json!({"endpoints/default/testendpoints": {
            "targets": make_endpoints_targets(None, None),
            "labels": with(make_endpoints_labels("default"),
                service_labels_json("testendpoints", &[("app/name", "svc"), ("component", "testing")]))}}),
    });
}

#[test]
fn endpoints_discovery_with_node_metadata() {
    run(Case {
        config: "{role: endpoints, attach_metadata: {node: true}}",
        before: vec![
            make_endpoints("default"),
            service("testendpoints", "default", json!({"app/name": "test"})),
            make_node("foobar", "us-east1"),
            make_node("barbaz", "us-west2"),
        ],
        after: vec![],
        want: json!({"endpoints/default/testendpoints": {
            "targets": make_endpoints_targets(Some("us-east1"), Some("us-west2")),
            "labels": with(make_endpoints_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

/// The node of the first address is named only by `nodeName`, without a target reference:
/// Prometheus' node index leaves it out, so its labels stay as they were.
#[test]
fn endpoints_discovery_with_updated_node_metadata() {
    run(Case {
        config: "{role: endpoints, attach_metadata: {node: true}}",
        before: vec![
            make_endpoints("default"),
            make_node("foobar", "us-east1"),
            make_node("barbaz", "us-west2"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![("MODIFIED", make_node("foobar", "eu-central1"))],
        want: json!({"endpoints/default/testendpoints": {
            "targets": make_endpoints_targets(Some("us-east1"), Some("us-west2")),
            "labels": with(make_endpoints_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

#[test]
fn endpoints_discovery_namespaces() {
    let mut ep1 = make_endpoints("default");
    ep1["metadata"]["namespace"] = json!("ns1");
    run(Case {
        config: "{role: endpoints, namespaces: {names: [ns1, ns2]}}",
        before: vec![
            ep1,
            json!({"kind": "Endpoints", "metadata": {"name": "testendpoints", "namespace": "ns2"},
                "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "ns2"}}],
                    "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}]}]}),
            service("testendpoints", "ns1", json!({"app": "app1"})),
            pod("ns2", "4.3.2.1", &[("c1", "mainport", 9000)], &[]),
        ],
        after: vec![],
        want: json!({
            "endpoints/ns1/testendpoints": {
                "targets": make_endpoints_targets(None, None),
                "labels": with(make_endpoints_labels("ns1"), service_labels_json("testendpoints", &[("app", "app1")]))},
            "endpoints/ns2/testendpoints": {
                "targets": [with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                    "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod"}))],
                "labels": {"__meta_kubernetes_namespace": "ns2", "__meta_kubernetes_endpoints_name": "testendpoints"}}}),
    });
}

#[test]
fn endpoints_discovery_own_namespace() {
    let mut ep1 = make_endpoints("default");
    ep1["metadata"]["namespace"] = json!("own-ns");
    let mut ep2 = make_endpoints("default");
    ep2["metadata"]["namespace"] = json!("non-own-ns");
    run(Case {
        config: "{role: endpoints, namespaces: {own_namespace: true}}",
        before: vec![
            ep1,
            ep2,
            pod("own-ns", "4.3.2.1", &[("p1", "mainport", 9000)], &[]),
            pod("non-own-ns", "4.3.2.1", &[("p1", "mainport", 9000)], &[]),
        ],
        after: vec![],
        want: json!({"endpoints/own-ns/testendpoints": {
            "targets": make_endpoints_targets(None, None), "labels": make_endpoints_labels("own-ns")}}),
    });
}

#[test]
fn endpoints_discovery_empty_pod_status() {
    let mut ep = make_endpoints("default");
    ep["metadata"]["namespace"] = json!("ns");
    let mut p = pod("ns", "", &[("p1", "mainport", 9000)], &[]);
    p["status"] = json!({});
    run(Case {
        config: "{role: endpoints, namespaces: {own_namespace: true}}",
        before: vec![ep, p],
        after: vec![],
        want: json!({}),
    });
}

/// A pod's phase change reaches the Endpoints that name it.
#[test]
fn endpoints_discovery_update_pod() {
    let mut p = pod("default", "4.3.2.1", &[("c1", "mainport", 9000)], &[]);
    p["status"]["phase"] = json!("Pending");
    p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    let mut running = p.clone();
    running["status"]["phase"] = json!("Running");
    running["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            json!({"kind": "Endpoints", "metadata": {"name": "testendpoints", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
                    "ports": [{"name": "mainport", "port": 9000, "protocol": "TCP"}]}]}),
            p,
        ],
        after: vec![("MODIFIED", running)],
        want: json!({"endpoints/default/testendpoints": {
            "targets": [with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "mainport",
                "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                "__meta_kubernetes_endpoint_address_target_name": "testpod",
                "__meta_kubernetes_pod_ready": "true", "__meta_kubernetes_pod_phase": "Running"}))],
            "labels": {"__meta_kubernetes_namespace": "default", "__meta_kubernetes_endpoints_name": "testendpoints"}}}),
    });
}

#[test]
fn endpoints_discovery_sidecar_container() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            json!({"kind": "Endpoints", "metadata": {"name": "testsidecar", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
                    "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}, {"name": "initport", "port": 9111, "protocol": "TCP"}]}]}),
            pod(
                "default",
                "4.3.2.1",
                &[("c1", "mainport", 9000)],
                &[("ic1", "initport", 1111), ("ic2", "initport", 9111)],
            ),
        ],
        after: vec![],
        want: json!({"endpoints/default/testsidecar": {
            "targets": [
                with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod", "__meta_kubernetes_endpoint_port_name": "testport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"})),
                with(pod_target("4.3.2.1", Some(("ic2", "initport", "9111", true))), json!({
                    "__address__": "4.3.2.1:9111", "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                    "__meta_kubernetes_endpoint_address_target_name": "testpod", "__meta_kubernetes_endpoint_port_name": "initport",
                    "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true"})),
                with(pod_target("4.3.2.1", Some(("ic1", "initport", "1111", true))), json!({"__address__": "4.3.2.1:1111"})),
            ],
            "labels": {"__meta_kubernetes_endpoints_name": "testsidecar", "__meta_kubernetes_namespace": "default"}}}),
    });
}

fn namespace_labels_json(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
    let mut m = json!({});
    for (k, v) in labels {
        let k = sanitize(k);
        m[format!("__meta_kubernetes_namespace_label_{k}")] = json!(v);
        m[format!("__meta_kubernetes_namespace_labelpresent_{k}")] = json!("true");
    }
    for (k, v) in annotations {
        let k = sanitize(k);
        m[format!("__meta_kubernetes_namespace_annotation_{k}")] = json!(v);
        m[format!("__meta_kubernetes_namespace_annotationpresent_{k}")] = json!("true");
    }
    m
}

#[test]
fn endpoints_discovery_with_namespace_metadata() {
    run(Case {
        config: "{role: endpoints, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"environment": "production", "team": "backend"}),
                json!({"owner": "platform", "version": "v1.2.3"}),
            ),
            make_endpoints("test-ns"),
        ],
        after: vec![],
        want: json!({"endpoints/test-ns/testendpoints": {
            "targets": make_endpoints_targets(None, None),
            "labels": with(make_endpoints_labels("test-ns"), namespace_labels_json(
                &[("environment", "production"), ("team", "backend")],
                &[("owner", "platform"), ("version", "v1.2.3")]))}}),
    });
}

#[test]
fn endpoints_discovery_with_updated_namespace_metadata() {
    run(Case {
        config: "{role: endpoints, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"environment": "development", "team": "frontend"}),
                json!({"owner": "devops", "version": "v2.1.0"}),
            ),
            make_endpoints("test-ns"),
        ],
        after: vec![(
            "MODIFIED",
            make_namespace(
                "test-ns",
                json!({"environment": "staging", "team": "frontend", "region": "us-west"}),
                json!({"owner": "sre", "version": "v2.1.0", "cost-center": "engineering"}),
            ),
        )],
        want: json!({"endpoints/test-ns/testendpoints": {
            "targets": make_endpoints_targets(None, None),
            "labels": with(make_endpoints_labels("test-ns"), namespace_labels_json(
                &[("environment", "staging"), ("team", "frontend"), ("region", "us-west")],
                &[("owner", "sre"), ("version", "v2.1.0"), ("cost-center", "engineering")]))}}),
    });
}

// ---- endpointslice_test.go ----

/// `makeEndpointSliceV1`.
fn make_slice(ns: &str) -> Value {
    json!({"kind": "EndpointSlice",
    "metadata": {"name": "testendpoints", "namespace": ns,
        "labels": {"kubernetes.io/service-name": "testendpoints"}, "annotations": {"test.annotation": "test"}},
    "addressType": "IPv4",
    "ports": [{"name": "testport", "port": 9000, "protocol": "TCP", "appProtocol": "http"}],
    "endpoints": [
        {"addresses": ["1.2.3.4"], "conditions": {"ready": true, "serving": true, "terminating": false},
         "hostname": "testendpoint1", "targetRef": {}, "nodeName": "foobar",
         "deprecatedTopology": {"topology": "value"}, "zone": "us-east-1a"},
        {"addresses": ["2.3.4.5"], "conditions": {"ready": true, "serving": true, "terminating": false}, "zone": "us-east-1b"},
        {"addresses": ["3.4.5.6"], "conditions": {"ready": false, "serving": true, "terminating": true}, "zone": "us-east-1c"},
        {"addresses": ["4.5.6.7"], "conditions": {"ready": true, "serving": true, "terminating": false},
         "targetRef": {"kind": "Node", "name": "barbaz"}, "zone": "us-east-1a"}
    ]})
}

/// The targets of `makeEndpointSliceV1` (the first `n`), node labels on the first and
/// fourth when given.
fn make_slice_targets(n: usize, node1: Option<&str>, node2: Option<&str>) -> Value {
    let port = json!({"__meta_kubernetes_endpointslice_port": "9000",
        "__meta_kubernetes_endpointslice_port_app_protocol": "http",
        "__meta_kubernetes_endpointslice_port_name": "testport",
        "__meta_kubernetes_endpointslice_port_protocol": "TCP"});
    let cond = |r: bool, s: bool, t: bool| {
        json!({"__meta_kubernetes_endpointslice_endpoint_conditions_ready": r.to_string(),
            "__meta_kubernetes_endpointslice_endpoint_conditions_serving": s.to_string(),
            "__meta_kubernetes_endpointslice_endpoint_conditions_terminating": t.to_string()})
    };
    let mut t = vec![
        with(
            with(
                with(port.clone(), cond(true, true, false)),
                json!({"__address__": "1.2.3.4:9000",
            "__meta_kubernetes_endpointslice_address_target_kind": "",
            "__meta_kubernetes_endpointslice_address_target_name": "",
            "__meta_kubernetes_endpointslice_endpoint_hostname": "testendpoint1",
            "__meta_kubernetes_endpointslice_endpoint_node_name": "foobar",
            "__meta_kubernetes_endpointslice_endpoint_topology_present_topology": "true",
            "__meta_kubernetes_endpointslice_endpoint_topology_topology": "value",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1a"}),
            ),
            json!({}),
        ),
        with(
            with(port.clone(), cond(true, true, false)),
            json!({"__address__": "2.3.4.5:9000",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1b"}),
        ),
        with(
            with(port.clone(), cond(false, true, true)),
            json!({"__address__": "3.4.5.6:9000",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1c"}),
        ),
        with(
            with(port.clone(), cond(true, true, false)),
            json!({"__address__": "4.5.6.7:9000",
            "__meta_kubernetes_endpointslice_address_target_kind": "Node",
            "__meta_kubernetes_endpointslice_address_target_name": "barbaz",
            "__meta_kubernetes_endpointslice_endpoint_zone": "us-east-1a"}),
        ),
    ];
    for (i, node, az) in [(0, "foobar", node1), (3, "barbaz", node2)] {
        if let Some(az) = az {
            t[i] = with(
                t[i].clone(),
                json!({"__meta_kubernetes_node_label_az": az,
                "__meta_kubernetes_node_labelpresent_az": "true", "__meta_kubernetes_node_name": node}),
            );
        }
    }
    t.truncate(n);
    Value::Array(t)
}

fn make_slice_labels(ns: &str) -> Value {
    json!({"__meta_kubernetes_endpointslice_address_type": "IPv4", "__meta_kubernetes_namespace": ns,
        "__meta_kubernetes_endpointslice_name": "testendpoints",
        "__meta_kubernetes_endpointslice_label_kubernetes_io_service_name": "testendpoints",
        "__meta_kubernetes_endpointslice_labelpresent_kubernetes_io_service_name": "true",
        "__meta_kubernetes_endpointslice_annotation_test_annotation": "test",
        "__meta_kubernetes_endpointslice_annotationpresent_test_annotation": "true"})
}

#[test]
fn endpointslice_discovery_before_run() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![make_slice("default")],
        after: vec![],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(4, None, None), "labels": make_slice_labels("default")}}),
    });
}

#[test]
fn endpointslice_discovery_add() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![pod(
            "default",
            "1.2.3.4",
            &[("c1", "mainport", 9000), ("c2", "sideport", 9001)],
            &[],
        )],
        after: vec![(
            "ADDED",
            json!({"kind": "EndpointSlice",
            "metadata": {"name": "testendpoints", "namespace": "default"}, "addressType": "IPv4",
            "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["4.3.2.1"], "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"},
                "conditions": {"ready": false}}]}),
        )],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": [
                with(pod_target("1.2.3.4", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "false",
                    "__meta_kubernetes_endpointslice_port": "9000",
                    "__meta_kubernetes_endpointslice_port_name": "testport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP"})),
                with(pod_target("1.2.3.4", Some(("c2", "sideport", "9001", false))), json!({"__address__": "1.2.3.4:9001"})),
            ],
            "labels": {"__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testendpoints", "__meta_kubernetes_namespace": "default"}}}),
    });
}

#[test]
fn endpointslice_discovery_delete() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![make_slice("default")],
        after: vec![("DELETED", make_slice("default"))],
        want: json!({"endpointslice/default/testendpoints": {}}),
    });
}

#[test]
fn endpointslice_discovery_update() {
    let mut s = make_slice("default");
    let meta = s["metadata"].as_object_mut().unwrap();
    meta.remove("labels");
    meta.remove("annotations");
    s["endpoints"].as_array_mut().unwrap().truncate(2);
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![make_slice("default")],
        after: vec![("MODIFIED", s)],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(2, None, None),
            "labels": {"__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testendpoints", "__meta_kubernetes_namespace": "default"}}}),
    });
}

#[test]
fn endpointslice_discovery_empty_endpoints() {
    let mut s = make_slice("default");
    s["endpoints"] = json!([]);
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![make_slice("default")],
        after: vec![("MODIFIED", s)],
        want: json!({"endpointslice/default/testendpoints": {"labels": make_slice_labels("default")}}),
    });
}

#[test]
fn endpointslice_discovery_with_service() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![
            make_slice("default"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(4, None, None),
            "labels": with(make_slice_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

#[test]
fn endpointslice_discovery_with_service_update() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![
            make_slice("default"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![(
            "MODIFIED",
            service(
                "testendpoints",
                "default",
                json!({"app/name": "svc", "component": "testing"}),
            ),
        )],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(4, None, None),
            "labels": with(make_slice_labels("default"),
                service_labels_json("testendpoints", &[("app/name", "svc"), ("component", "testing")]))}}),
    });
}

#[test]
fn endpointslices_discovery_with_node_metadata() {
    run(Case {
        config: "{role: endpointslice, attach_metadata: {node: true}}",
        before: vec![
            make_slice("default"),
            make_node("foobar", "us-east1"),
            make_node("barbaz", "us-west2"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(4, Some("us-east1"), Some("us-west2")),
            "labels": with(make_slice_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

/// As for Endpoints: the first endpoint's target reference has no kind, so a change of its
/// node does not reach it.
#[test]
fn endpointslices_discovery_with_updated_node_metadata() {
    run(Case {
        config: "{role: endpointslice, attach_metadata: {node: true}}",
        before: vec![
            make_slice("default"),
            make_node("foobar", "us-east1"),
            make_node("barbaz", "us-west2"),
            service("testendpoints", "default", json!({"app/name": "test"})),
        ],
        after: vec![("MODIFIED", make_node("foobar", "us-central1"))],
        want: json!({"endpointslice/default/testendpoints": {
            "targets": make_slice_targets(4, Some("us-east1"), Some("us-west2")),
            "labels": with(make_slice_labels("default"), service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

#[test]
fn endpointslice_discovery_namespaces() {
    let mut s1 = make_slice("default");
    s1["metadata"]["namespace"] = json!("ns1");
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [ns1, ns2]}}",
        before: vec![
            s1,
            json!({"kind": "EndpointSlice", "metadata": {"name": "testendpoints", "namespace": "ns2"},
                "addressType": "IPv4", "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["4.3.2.1"], "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "ns2"}}]}),
            service("testendpoints", "ns1", json!({"app": "app1"})),
            pod("ns2", "4.3.2.1", &[("c1", "mainport", 9000)], &[]),
        ],
        after: vec![],
        want: json!({
            "endpointslice/ns1/testendpoints": {
                "targets": make_slice_targets(4, None, None),
                "labels": with(make_slice_labels("ns1"), service_labels_json("testendpoints", &[("app", "app1")]))},
            "endpointslice/ns2/testendpoints": {
                "targets": [with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000",
                    "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_port": "9000",
                    "__meta_kubernetes_endpointslice_port_name": "testport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP"}))],
                "labels": {"__meta_kubernetes_endpointslice_address_type": "IPv4",
                    "__meta_kubernetes_endpointslice_name": "testendpoints", "__meta_kubernetes_namespace": "ns2"}}}),
    });
}

#[test]
fn endpointslice_discovery_own_namespace() {
    let mut s1 = make_slice("default");
    s1["metadata"]["namespace"] = json!("own-ns");
    let mut s2 = make_slice("default");
    s2["metadata"]["namespace"] = json!("non-own-ns");
    run(Case {
        config: "{role: endpointslice, namespaces: {own_namespace: true}}",
        before: vec![
            s1,
            s2,
            pod("own-ns", "4.3.2.1", &[("p1", "mainport", 9000)], &[]),
            pod("non-own-ns", "4.3.2.1", &[("p1", "mainport", 9000)], &[]),
        ],
        after: vec![],
        want: json!({"endpointslice/own-ns/testendpoints": {
            "targets": make_slice_targets(4, None, None), "labels": make_slice_labels("own-ns")}}),
    });
}

/// Prometheus' `TestEndpointSliceDiscoveryEmptyPodStatus` (which runs the endpoints role).
#[test]
fn endpointslice_discovery_empty_pod_status() {
    let mut s = make_slice("default");
    s["metadata"]["namespace"] = json!("ns");
    let mut p = pod("ns", "", &[("p1", "mainport", 9000)], &[]);
    p["status"] = json!({});
    run(Case {
        config: "{role: endpoints, namespaces: {own_namespace: true}}",
        before: vec![s, p],
        after: vec![],
        want: json!({}),
    });
}

#[test]
fn endpointslice_discovery_sidecar_container() {
    run(Case {
        config: "{role: endpointslice}",
        before: vec![
            json!({"kind": "EndpointSlice", "metadata": {"name": "testsidecar", "namespace": "default"},
                "addressType": "IPv4",
                "ports": [{"name": "testport", "port": 9000, "protocol": "TCP"}, {"name": "initport", "port": 9111, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["4.3.2.1"], "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}]}),
            pod(
                "default",
                "4.3.2.1",
                &[("c1", "mainport", 9000)],
                &[("ic1", "initport", 1111), ("ic2", "initport", 9111)],
            ),
        ],
        after: vec![],
        want: json!({"endpointslice/default/testsidecar": {
            "targets": [
                with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                    "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_port": "9000", "__meta_kubernetes_endpointslice_port_name": "testport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP"})),
                with(pod_target("4.3.2.1", Some(("ic2", "initport", "9111", true))), json!({
                    "__address__": "4.3.2.1:9111", "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
                    "__meta_kubernetes_endpointslice_address_target_name": "testpod",
                    "__meta_kubernetes_endpointslice_port": "9111", "__meta_kubernetes_endpointslice_port_name": "initport",
                    "__meta_kubernetes_endpointslice_port_protocol": "TCP"})),
                with(pod_target("4.3.2.1", Some(("ic1", "initport", "1111", true))), json!({"__address__": "4.3.2.1:1111"})),
            ],
            "labels": {"__meta_kubernetes_endpointslice_address_type": "IPv4",
                "__meta_kubernetes_endpointslice_name": "testsidecar", "__meta_kubernetes_namespace": "default"}}}),
    });
}

#[test]
fn endpointslices_discovery_with_namespace_metadata() {
    run(Case {
        config: "{role: endpointslice, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"service": "web", "layer": "frontend"}),
                json!({"contact": "platform", "release": "v5.6.7"}),
            ),
            service("testendpoints", "test-ns", json!({"app/name": "test"})),
            make_slice("test-ns"),
        ],
        after: vec![],
        want: json!({"endpointslice/test-ns/testendpoints": {
            "targets": make_slice_targets(4, None, None),
            "labels": with(with(make_slice_labels("test-ns"), namespace_labels_json(
                &[("service", "web"), ("layer", "frontend")], &[("contact", "platform"), ("release", "v5.6.7")])),
                service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

#[test]
fn endpointslices_discovery_with_updated_namespace_metadata() {
    run(Case {
        config: "{role: endpointslice, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"component": "database", "layer": "backend"}),
                json!({"contact": "dba", "release": "v6.7.8"}),
            ),
            service("testendpoints", "test-ns", json!({"app/name": "test"})),
            make_slice("test-ns"),
        ],
        after: vec![(
            "MODIFIED",
            make_namespace(
                "test-ns",
                json!({"component": "cache", "layer": "backend", "region": "us-central"}),
                json!({"contact": "sre", "release": "v6.7.8", "monitoring": "enabled"}),
            ),
        )],
        want: json!({"endpointslice/test-ns/testendpoints": {
            "targets": make_slice_targets(4, None, None),
            "labels": with(with(make_slice_labels("test-ns"), namespace_labels_json(
                &[("component", "cache"), ("layer", "backend"), ("region", "us-central")],
                &[("contact", "sre"), ("release", "v6.7.8"), ("monitoring", "enabled")])),
                service_labels_json("testendpoints", &[("app/name", "test")]))}}),
    });
}

fn dual_stack_service(policy: &str, families: &[&str]) -> Value {
    json!({"kind": "Service", "metadata": {"name": "testsvc", "namespace": "default"},
        "spec": {"ipFamilyPolicy": policy, "ipFamilies": families}})
}

fn dual_stack_slice(name: &str, addr_type: &str, addr: &str) -> Value {
    json!({"kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "testsvc"}},
        "addressType": addr_type, "ports": [{"name": "http", "port": 9000, "protocol": "TCP"}],
        "endpoints": [{"addresses": [addr], "conditions": {"ready": true}}]})
}

/// `dualStackGroupLabels` and, when `addr` is given, `dualStackTarget`.
fn dual_stack_group(addr_type: &str, slice: &str, addr: Option<&str>) -> Value {
    let labels = json!({"__meta_kubernetes_namespace": "default",
        "__meta_kubernetes_endpointslice_address_type": addr_type,
        "__meta_kubernetes_endpointslice_name": slice,
        "__meta_kubernetes_endpointslice_label_kubernetes_io_service_name": "testsvc",
        "__meta_kubernetes_endpointslice_labelpresent_kubernetes_io_service_name": "true",
        "__meta_kubernetes_service_name": "testsvc"});
    let targets: Vec<Value> = addr
        .map(|a| json!({"__address__": a, "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
            "__meta_kubernetes_endpointslice_port": "9000", "__meta_kubernetes_endpointslice_port_name": "http",
            "__meta_kubernetes_endpointslice_port_protocol": "TCP"}))
        .into_iter()
        .collect();
    json!({"targets": targets, "labels": labels})
}

#[test]
fn endpointslice_discovery_dual_stack_secondary_slice_has_no_targets() {
    for policy in ["PreferDualStack", "RequireDualStack"] {
        run(Case {
            config: "{role: endpointslice, namespaces: {names: [default]}}",
            before: vec![
                dual_stack_service(policy, &["IPv4", "IPv6"]),
                dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
                dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            ],
            after: vec![],
            want: json!({
                "endpointslice/default/testsvc-ipv4": dual_stack_group("IPv4", "testsvc-ipv4", Some("1.2.3.4:9000")),
                "endpointslice/default/testsvc-ipv6": dual_stack_group("IPv6", "testsvc-ipv6", None)}),
        });
    }
}

#[test]
fn endpointslice_discovery_single_stack_unaffected() {
    for (fam, slice, addr, target) in [
        ("IPv4", "testsvc-ipv4", "1.2.3.4", "1.2.3.4:9000"),
        ("IPv6", "testsvc-ipv6", "fd00::1", "[fd00::1]:9000"),
    ] {
        run(Case {
            config: "{role: endpointslice, namespaces: {names: [default]}}",
            before: vec![
                dual_stack_service("SingleStack", &[fam]),
                dual_stack_slice(slice, fam, addr),
            ],
            after: vec![],
            want: json!({format!("endpointslice/default/{slice}"): dual_stack_group(fam, slice, Some(target))}),
        });
    }
}

#[test]
fn endpointslice_discovery_dual_stack_ipv6_primary() {
    run(Case {
        config: "{role: endpointslice, namespaces: {names: [default]}}",
        before: vec![
            dual_stack_service("PreferDualStack", &["IPv6", "IPv4"]),
            dual_stack_slice("testsvc-ipv6", "IPv6", "fd00::1"),
            dual_stack_slice("testsvc-ipv4", "IPv4", "1.2.3.4"),
        ],
        after: vec![],
        want: json!({
            "endpointslice/default/testsvc-ipv6": dual_stack_group("IPv6", "testsvc-ipv6", Some("[fd00::1]:9000")),
            "endpointslice/default/testsvc-ipv4": dual_stack_group("IPv4", "testsvc-ipv4", None)}),
    });
}

/// Two containers exposing the endpoint's port: the last one's labels win, as Prometheus'
/// loop goes on after a match.
#[test]
fn the_last_container_with_the_port_wins() {
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            json!({"kind": "Endpoints", "metadata": {"name": "e", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
                    "ports": [{"name": "p", "port": 9000, "protocol": "TCP"}]}]}),
            pod(
                "default",
                "4.3.2.1",
                &[("c1", "a", 9000), ("c2", "b", 9000)],
                &[],
            ),
        ],
        after: vec![],
        want: json!({"endpoints/default/e": {
            "targets": [with(pod_target("4.3.2.1", Some(("c2", "b", "9000", false))), json!({
                "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "p",
                "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                "__meta_kubernetes_endpoint_address_target_name": "testpod"}))],
            "labels": {"__meta_kubernetes_endpoints_name": "e", "__meta_kubernetes_namespace": "default"}}}),
    });
}

/// Only a phase change of a pod reaches the Endpoints naming it (Prometheus' pod handler).
#[test]
fn a_pod_change_without_a_phase_change_is_not_seen_by_endpoints() {
    let mut p = pod("default", "4.3.2.1", &[("c1", "mainport", 9000)], &[]);
    p["status"]["phase"] = json!("Running");
    let mut relabelled = p.clone();
    relabelled["metadata"]["labels"] = json!({"new": "label"});
    run(Case {
        config: "{role: endpoints}",
        before: vec![
            json!({"kind": "Endpoints", "metadata": {"name": "e", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": "4.3.2.1", "targetRef": {"kind": "Pod", "name": "testpod", "namespace": "default"}}],
                    "ports": [{"name": "mainport", "port": 9000, "protocol": "TCP"}]}]}),
            p,
        ],
        after: vec![("MODIFIED", relabelled)],
        want: json!({"endpoints/default/e": {
            "targets": [with(pod_target("4.3.2.1", Some(("c1", "mainport", "9000", false))), json!({
                "__address__": "4.3.2.1:9000", "__meta_kubernetes_endpoint_port_name": "mainport",
                "__meta_kubernetes_endpoint_port_protocol": "TCP", "__meta_kubernetes_endpoint_ready": "true",
                "__meta_kubernetes_endpoint_address_target_kind": "Pod",
                "__meta_kubernetes_endpoint_address_target_name": "testpod",
                "__meta_kubernetes_pod_phase": "Running"}))],
            "labels": {"__meta_kubernetes_endpoints_name": "e", "__meta_kubernetes_namespace": "default"}}}),
    });
}

// ---- node_test.go (TestNodeDiscoveryBeforeStart is `tests::node_as_prometheus`) ----

/// `makeNode(name, "1.2.3.4", provider, labels, {}, conditions)`.
fn node(name: &str, provider: &str, labels: Value, conditions: Value) -> Value {
    json!({"kind": "Node", "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider},
        "status": {"addresses": [{"type": "InternalIP", "address": "1.2.3.4"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "conditions": conditions}})
}

fn node_group(name: &str, labels: Value) -> Value {
    json!({"targets": [{"__address__": "1.2.3.4:10250", "instance": name,
        "__meta_kubernetes_node_address_InternalIP": "1.2.3.4"}], "labels": labels})
}

#[test]
fn node_discovery_add() {
    run(Case {
        config: "{role: node}",
        before: vec![],
        after: vec![(
            "ADDED",
            node("test1", "aws:///de-west-3a/i-1", json!({}), json!([])),
        )],
        want: json!({"node/test1": node_group("test1", json!({"__meta_kubernetes_node_name": "test1",
            "__meta_kubernetes_node_provider_id": "aws:///de-west-3a/i-1"}))}),
    });
}

#[test]
fn node_discovery_delete() {
    let n = node("test0", "aws:///de-west-3a/i-0", json!({}), json!([]));
    run(Case {
        config: "{role: node}",
        before: vec![n.clone()],
        after: vec![("DELETED", n)],
        want: json!({"node/test0": {}}),
    });
}

#[test]
fn node_discovery_update() {
    run(Case {
        config: "{role: node}",
        before: vec![],
        after: vec![
            (
                "ADDED",
                node("test0", "aws:///de-west-3a/i-0", json!({}), json!([])),
            ),
            (
                "MODIFIED",
                node(
                    "test0",
                    "aws:///fr-south-1c/i-49508290343823952",
                    json!({"Unschedulable": "true"}),
                    json!([]),
                ),
            ),
        ],
        want: json!({"node/test0": node_group("test0", json!({
            "__meta_kubernetes_node_label_Unschedulable": "true",
            "__meta_kubernetes_node_labelpresent_Unschedulable": "true",
            "__meta_kubernetes_node_name": "test0",
            "__meta_kubernetes_node_provider_id": "aws:///fr-south-1c/i-49508290343823952"}))}),
    });
}

#[test]
fn node_discovery_conditions() {
    for (conditions, extra) in [
        (
            json!([{"type": "Ready", "status": "True"}]),
            json!({"__meta_kubernetes_node_condition_ready": "true"}),
        ),
        (
            json!([{"type": "Ready", "status": "False"}]),
            json!({"__meta_kubernetes_node_condition_ready": "false"}),
        ),
        (
            json!([{"type": "Ready", "status": "Unknown"}]),
            json!({"__meta_kubernetes_node_condition_ready": "unknown"}),
        ),
        (json!([]), json!({})),
        (
            json!([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"},
                {"type": "DiskPressure", "status": "False"}]),
            json!({"__meta_kubernetes_node_condition_memorypressure": "false",
                "__meta_kubernetes_node_condition_ready": "true",
                "__meta_kubernetes_node_condition_diskpressure": "false"}),
        ),
    ] {
        run(Case {
            config: "{role: node}",
            before: vec![node(
                "test",
                "aws:///test-zone/i-test",
                json!({}),
                conditions,
            )],
            after: vec![],
            want: json!({"node/test": node_group("test", with(json!({"__meta_kubernetes_node_name": "test",
                "__meta_kubernetes_node_provider_id": "aws:///test-zone/i-test"}), extra))}),
        });
    }
}

// ---- service_test.go ----

/// `makeService(ns)`.
fn make_service(ns: &str) -> Value {
    json!({"kind": "Service", "metadata": {"name": "testservice", "namespace": ns},
        "spec": {"ports": [{"name": "testport", "protocol": "TCP", "port": 30900}], "type": "ClusterIP", "clusterIP": "10.0.0.1"}})
}

fn make_service_group(ns: &str, labels: Value) -> Value {
    json!({"targets": [{"__address__": format!("testservice.{ns}.svc:30900"),
            "__meta_kubernetes_service_port_protocol": "TCP", "__meta_kubernetes_service_type": "ClusterIP",
            "__meta_kubernetes_service_cluster_ip": "10.0.0.1", "__meta_kubernetes_service_port_name": "testport",
            "__meta_kubernetes_service_port_number": "30900"}],
        "labels": with(json!({"__meta_kubernetes_service_name": "testservice", "__meta_kubernetes_namespace": ns}), labels)})
}

/// The four services of `TestServiceDiscoveryAdd` (`tests::service_as_prometheus` checks
/// the first alone).
#[test]
fn service_discovery_add() {
    let port =
        |name: &str, port: i64| json!({"ports": [{"name": name, "protocol": "TCP", "port": port}]});
    let one = |svc: &str, t: Value| {
        json!({"targets": [with(json!({"__address__": format!("{svc}.default.svc:31900"),
                "__meta_kubernetes_service_port_protocol": "TCP", "__meta_kubernetes_service_port_name": "testport",
                "__meta_kubernetes_service_port_number": "31900"}), t)],
            "labels": {"__meta_kubernetes_service_name": svc, "__meta_kubernetes_namespace": "default"}})
    };
    run(Case {
        config: "{role: service}",
        before: vec![],
        after: vec![
            ("ADDED", make_service("default")),
            (
                "ADDED",
                json!({"kind": "Service", "metadata": {"name": "testservice-external", "namespace": "default"},
                "spec": with(port("testport", 31900), json!({"type": "ExternalName", "externalName": "FooExternalName"}))}),
            ),
            (
                "ADDED",
                json!({"kind": "Service", "metadata": {"name": "testservice-loadbalancer", "namespace": "default"},
                "spec": with(port("testport", 31900), json!({"type": "LoadBalancer", "loadBalancerIP": "127.0.0.1", "clusterIP": "10.0.0.1"}))}),
            ),
            (
                "ADDED",
                json!({"kind": "Service", "metadata": {"name": "testservice-lb-ingress", "namespace": "default"},
                "spec": with(port("testport", 31900), json!({"type": "LoadBalancer", "clusterIP": "10.0.0.1"})),
                "status": {"loadBalancer": {"ingress": [{"ip": "192.168.1.15"}, {"ip": "2001:db8::1"}]}}}),
            ),
        ],
        want: json!({
            "svc/default/testservice": make_service_group("default", json!({})),
            "svc/default/testservice-external": one("testservice-external", json!({
                "__meta_kubernetes_service_type": "ExternalName", "__meta_kubernetes_service_external_name": "FooExternalName"})),
            "svc/default/testservice-loadbalancer": one("testservice-loadbalancer", json!({
                "__meta_kubernetes_service_type": "LoadBalancer", "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                "__meta_kubernetes_service_loadbalancer_ip": "127.0.0.1"})),
            "svc/default/testservice-lb-ingress": one("testservice-lb-ingress", json!({
                "__meta_kubernetes_service_type": "LoadBalancer", "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                "__meta_kubernetes_service_loadbalancer_ip": "192.168.1.15,2001:db8::1"})),
        }),
    });
}

#[test]
fn service_discovery_delete() {
    run(Case {
        config: "{role: service}",
        before: vec![make_service("default")],
        after: vec![("DELETED", make_service("default"))],
        want: json!({"svc/default/testservice": {}}),
    });
}

#[test]
fn service_discovery_update() {
    run(Case {
        config: "{role: service}",
        before: vec![make_service("default")],
        after: vec![(
            "MODIFIED",
            json!({"kind": "Service",
            "metadata": {"name": "testservice", "namespace": "default",
                "labels": {"test-label": "testvalue"}, "annotations": {"test-annotation": "testannotationvalue"}},
            "spec": {"ports": [{"name": "testport0", "protocol": "TCP", "port": 30900}, {"name": "testport1", "protocol": "UDP", "port": 30901}],
                "type": "ClusterIP", "clusterIP": "10.0.0.1"}}),
        )],
        want: json!({"svc/default/testservice": {
            "targets": [
                {"__meta_kubernetes_service_port_protocol": "TCP", "__address__": "testservice.default.svc:30900",
                 "__meta_kubernetes_service_type": "ClusterIP", "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                 "__meta_kubernetes_service_port_name": "testport0", "__meta_kubernetes_service_port_number": "30900"},
                {"__meta_kubernetes_service_port_protocol": "UDP", "__address__": "testservice.default.svc:30901",
                 "__meta_kubernetes_service_type": "ClusterIP", "__meta_kubernetes_service_cluster_ip": "10.0.0.1",
                 "__meta_kubernetes_service_port_name": "testport1", "__meta_kubernetes_service_port_number": "30901"}],
            "labels": {"__meta_kubernetes_service_name": "testservice", "__meta_kubernetes_namespace": "default",
                "__meta_kubernetes_service_label_test_label": "testvalue",
                "__meta_kubernetes_service_labelpresent_test_label": "true",
                "__meta_kubernetes_service_annotation_test_annotation": "testannotationvalue",
                "__meta_kubernetes_service_annotationpresent_test_annotation": "true"}}}),
    });
}

/// `TestServiceDiscoveryNamespaces`, `...OwnNamespace` and `...AllNamespaces`: services
/// created after start in the namespaces given.
#[test]
fn service_discovery_namespaces() {
    for (config, created, seen) in [
        (
            "{role: service, namespaces: {names: [ns1, ns2]}}",
            &["ns1", "ns2"][..],
            &["ns1", "ns2"][..],
        ),
        (
            "{role: service, namespaces: {own_namespace: true}}",
            &["own-ns", "non-own-ns"],
            &["own-ns"],
        ),
        (
            "{role: service}",
            &["own-ns", "non-own-ns"],
            &["own-ns", "non-own-ns"],
        ),
    ] {
        let want: serde_json::Map<String, Value> = seen
            .iter()
            .map(|ns| {
                (
                    format!("svc/{ns}/testservice"),
                    make_service_group(ns, json!({})),
                )
            })
            .collect();
        run(Case {
            config,
            before: vec![],
            after: created
                .iter()
                .map(|ns| ("ADDED", make_service(ns)))
                .collect(),
            want: Value::Object(want),
        });
    }
}

#[test]
fn service_discovery_with_namespace_metadata() {
    run(Case {
        config: "{role: service, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"environment": "production", "team": "backend"}),
                json!({"owner": "platform", "version": "v1.2.3"}),
            ),
            make_service("test-ns"),
        ],
        after: vec![],
        want: json!({"svc/test-ns/testservice": make_service_group("test-ns", namespace_labels_json(
            &[("environment", "production"), ("team", "backend")], &[("owner", "platform"), ("version", "v1.2.3")]))}),
    });
}

#[test]
fn service_discovery_with_updated_namespace_metadata() {
    run(Case {
        config: "{role: service, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"environment": "development", "team": "frontend"}),
                json!({"owner": "devops", "version": "v2.1.0"}),
            ),
            make_service("test-ns"),
        ],
        after: vec![(
            "MODIFIED",
            make_namespace(
                "test-ns",
                json!({"environment": "staging", "team": "frontend", "region": "us-west"}),
                json!({"owner": "sre", "version": "v2.1.0", "cost-center": "engineering"}),
            ),
        )],
        want: json!({"svc/test-ns/testservice": make_service_group("test-ns", namespace_labels_json(
            &[("environment", "staging"), ("team", "frontend"), ("region", "us-west")],
            &[("owner", "sre"), ("version", "v2.1.0"), ("cost-center", "engineering")]))}),
    });
}

// ---- pod_test.go (TestPodDiscoveryBeforeRun is `tests::multi_port_pod_as_prometheus`; the
// deployment, job and cronjob cases need `attach_metadata` inferdb refuses; the node-selector
// case needs the API server's label selection) ----

/// `makePods(ns)`.
fn make_pod(ns: &str) -> Value {
    json!({"kind": "Pod", "metadata": {"name": "testpod", "namespace": ns, "uid": "abc123"},
        "spec": {"nodeName": "testnode", "containers": [{"name": "testcontainer", "image": "testcontainer:latest",
            "ports": [{"name": "testport", "protocol": "TCP", "containerPort": 9000}]}]},
        "status": {"podIP": "1.2.3.4", "hostIP": "2.3.4.5", "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "testcontainer", "containerID": "docker://a1b2c3d4e5f6"}]}})
}

/// `expectedPodTargetGroups(ns)` with `labels` added to the group's.
fn make_pod_group(ns: &str, labels: Value) -> Value {
    json!({"targets": [{"__address__": "1.2.3.4:9000", "__meta_kubernetes_pod_container_name": "testcontainer",
            "__meta_kubernetes_pod_container_image": "testcontainer:latest",
            "__meta_kubernetes_pod_container_port_name": "testport", "__meta_kubernetes_pod_container_port_number": "9000",
            "__meta_kubernetes_pod_container_port_protocol": "TCP", "__meta_kubernetes_pod_container_init": "false",
            "__meta_kubernetes_pod_container_id": "docker://a1b2c3d4e5f6"}],
        "labels": with(json!({"__meta_kubernetes_pod_name": "testpod", "__meta_kubernetes_namespace": ns,
            "__meta_kubernetes_pod_node_name": "testnode", "__meta_kubernetes_pod_ip": "1.2.3.4",
            "__meta_kubernetes_pod_host_ip": "2.3.4.5", "__meta_kubernetes_pod_ready": "true",
            "__meta_kubernetes_pod_phase": "Running", "__meta_kubernetes_pod_uid": "abc123"}), labels)})
}

#[test]
fn pod_discovery_init_container() {
    let mut p = make_pod("default");
    p["spec"]["initContainers"] =
        json!([{"name": "initcontainer", "image": "initcontainer:latest"}]);
    p["status"]["phase"] = json!("Pending");
    p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    p["status"]["initContainerStatuses"] =
        json!([{"name": "initcontainer", "containerID": "containerd://6f5e4d3c2b1a"}]);
    let mut want = make_pod_group(
        "default",
        json!({"__meta_kubernetes_pod_phase": "Pending", "__meta_kubernetes_pod_ready": "false"}),
    );
    want["targets"].as_array_mut().unwrap().push(json!({"__address__": "1.2.3.4",
        "__meta_kubernetes_pod_container_name": "initcontainer", "__meta_kubernetes_pod_container_image": "initcontainer:latest",
        "__meta_kubernetes_pod_container_init": "true", "__meta_kubernetes_pod_container_id": "containerd://6f5e4d3c2b1a"}));
    run(Case {
        config: "{role: pod}",
        before: vec![p],
        after: vec![],
        want: json!({"pod/default/testpod": want}),
    });
}

#[test]
fn pod_discovery_add_delete_update() {
    run(Case {
        config: "{role: pod}",
        before: vec![],
        after: vec![("ADDED", make_pod("default"))],
        want: json!({"pod/default/testpod": make_pod_group("default", json!({}))}),
    });
    run(Case {
        config: "{role: pod}",
        before: vec![make_pod("default")],
        after: vec![("DELETED", make_pod("default"))],
        want: json!({"pod/default/testpod": {}}),
    });
    let mut old = make_pod("default");
    old["metadata"]["uid"] = json!("xyz321");
    old["status"] = json!({"podIP": "1.2.3.4", "hostIP": "2.3.4.5"});
    run(Case {
        config: "{role: pod}",
        before: vec![old],
        after: vec![("MODIFIED", make_pod("default"))],
        want: json!({"pod/default/testpod": make_pod_group("default", json!({}))}),
    });
    // TestPodDiscoveryUpdateEmptyPodIP
    let mut no_ip = make_pod("default");
    no_ip["status"]["podIP"] = json!("");
    run(Case {
        config: "{role: pod}",
        before: vec![make_pod("default")],
        after: vec![("MODIFIED", no_ip)],
        want: json!({"pod/default/testpod": {}}),
    });
}

#[test]
fn pod_discovery_namespaces() {
    run(Case {
        config: "{role: pod, namespaces: {names: [ns1, ns2]}}",
        before: vec![make_pod("ns1"), make_pod("ns2")],
        after: vec![],
        want: json!({"pod/ns1/testpod": make_pod_group("ns1", json!({})),
            "pod/ns2/testpod": make_pod_group("ns2", json!({}))}),
    });
    run(Case {
        config: "{role: pod, namespaces: {own_namespace: true}}",
        before: vec![make_pod("own-ns"), make_pod("non-own-ns")],
        after: vec![],
        want: json!({"pod/own-ns/testpod": make_pod_group("own-ns", json!({}))}),
    });
}

#[test]
fn pod_discovery_with_node_metadata() {
    let node_meta = |l: &str, v: &str| {
        json!({"__meta_kubernetes_node_name": "testnode",
            format!("__meta_kubernetes_node_label_{l}"): v, format!("__meta_kubernetes_node_labelpresent_{l}"): "true"})
    };
    let node = |l: &str, v: &str| json!({"kind": "Node", "metadata": {"name": "testnode", "labels": {l: v}}});
    run(Case {
        config: "{role: pod, attach_metadata: {node: true}}",
        before: vec![],
        after: vec![("ADDED", node("l1", "v1")), ("ADDED", make_pod("default"))],
        want: json!({"pod/default/testpod": make_pod_group("default", node_meta("l1", "v1"))}),
    });
    // TestPodDiscoveryWithNodeMetadataUpdateNode: the node's change reaches its pods
    run(Case {
        config: "{role: pod, attach_metadata: {node: true}}",
        before: vec![node("l1", "v1")],
        after: vec![
            ("ADDED", make_pod("default")),
            ("MODIFIED", node("l2", "v2")),
        ],
        want: json!({"pod/default/testpod": make_pod_group("default", node_meta("l2", "v2"))}),
    });
}

#[test]
fn pod_discovery_with_namespace_metadata() {
    run(Case {
        config: "{role: pod, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"app": "web", "tier": "frontend"}),
                json!({"maintainer": "devops", "build": "v3.4.5"}),
            ),
            make_pod("test-ns"),
        ],
        after: vec![],
        want: json!({"pod/test-ns/testpod": make_pod_group("test-ns", namespace_labels_json(
            &[("app", "web"), ("tier", "frontend")], &[("maintainer", "devops"), ("build", "v3.4.5")]))}),
    });
    run(Case {
        config: "{role: pod, attach_metadata: {namespace: true}}",
        before: vec![
            make_namespace(
                "test-ns",
                json!({"app": "api", "tier": "backend"}),
                json!({"maintainer": "platform", "build": "v4.5.6"}),
            ),
            make_pod("test-ns"),
        ],
        after: vec![(
            "MODIFIED",
            make_namespace(
                "test-ns",
                json!({"app": "service", "tier": "backend", "zone": "us-east"}),
                json!({"maintainer": "sre", "build": "v4.5.6", "deployment": "canary"}),
            ),
        )],
        want: json!({"pod/test-ns/testpod": make_pod_group("test-ns", namespace_labels_json(
            &[("app", "service"), ("tier", "backend"), ("zone", "us-east")],
            &[("maintainer", "sre"), ("build", "v4.5.6"), ("deployment", "canary")]))}),
    });
}
