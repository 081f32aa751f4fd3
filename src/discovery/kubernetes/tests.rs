//! The target groups Prometheus' own tests (`discovery/kubernetes/*_test.go`) expect for
//! their objects, written here as the API's JSON, and the configuration checks.

use serde_json::json;

use super::*;

fn cfg(y: &str) -> KubernetesSdConfig {
    serde_yaml::from_str(y).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> LabelSet {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stores_with<T: Object>(objs: Vec<serde_json::Value>, put: impl Fn(&mut Stores, T)) -> Stores {
    let mut s = Stores::default();
    for o in objs {
        put(&mut s, serde_json::from_value(o).unwrap());
    }
    s
}

/// `TestPodDiscoveryBeforeRun` (makeMultiPortPods).
#[test]
fn multi_port_pod_as_prometheus() {
    let pod = json!({
        "metadata": {"name": "testpod", "namespace": "default",
            "labels": {"test/label": "testvalue"}, "annotations": {"test/annotation": "testannotationvalue"},
            "uid": "abc123", "ownerReferences": [{"kind": "testcontrollerkind", "name": "testcontrollername", "controller": true}]},
        "spec": {"nodeName": "testnode", "containers": [
            {"name": "testcontainer0", "image": "testcontainer0:latest", "ports": [
                {"name": "testport0", "protocol": "TCP", "containerPort": 9000},
                {"name": "testport1", "protocol": "UDP", "containerPort": 9001}]},
            {"name": "testcontainer1", "image": "testcontainer1:latest"}]},
        "status": {"podIP": "1.2.3.4", "hostIP": "2.3.4.5", "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "testcontainer0", "containerID": "docker://a1b2c3d4e5f6"},
                {"name": "testcontainer1", "containerID": "containerd://6f5e4d3c2b1a"}]}
    });
    let s = stores_with(vec![pod], |s, p: Pod| {
        s.pods.insert(p.key(), p);
    });
    let g = build(&cfg("{role: pod}"), &s);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].source, "pod/default/testpod");
    let t = |addr: &str, c: &str, img: &str, port: Option<(&str, &str, &str)>, id: &str| {
        let mut l = labels(&[
            ("__address__", addr),
            ("__meta_kubernetes_pod_container_name", c),
            ("__meta_kubernetes_pod_container_image", img),
            ("__meta_kubernetes_pod_container_init", "false"),
            ("__meta_kubernetes_pod_container_id", id),
        ]);
        if let Some((n, num, proto)) = port {
            l.extend(labels(&[
                ("__meta_kubernetes_pod_container_port_name", n),
                ("__meta_kubernetes_pod_container_port_number", num),
                ("__meta_kubernetes_pod_container_port_protocol", proto),
            ]));
        }
        l
    };
    assert_eq!(
        g[0].targets,
        vec![
            t(
                "1.2.3.4:9000",
                "testcontainer0",
                "testcontainer0:latest",
                Some(("testport0", "9000", "TCP")),
                "docker://a1b2c3d4e5f6"
            ),
            t(
                "1.2.3.4:9001",
                "testcontainer0",
                "testcontainer0:latest",
                Some(("testport1", "9001", "UDP")),
                "docker://a1b2c3d4e5f6"
            ),
            t(
                "1.2.3.4",
                "testcontainer1",
                "testcontainer1:latest",
                None,
                "containerd://6f5e4d3c2b1a"
            ),
        ]
    );
    assert_eq!(
        g[0].labels,
        labels(&[
            ("__meta_kubernetes_pod_name", "testpod"),
            ("__meta_kubernetes_namespace", "default"),
            ("__meta_kubernetes_pod_label_test_label", "testvalue"),
            ("__meta_kubernetes_pod_labelpresent_test_label", "true"),
            (
                "__meta_kubernetes_pod_annotation_test_annotation",
                "testannotationvalue"
            ),
            (
                "__meta_kubernetes_pod_annotationpresent_test_annotation",
                "true"
            ),
            ("__meta_kubernetes_pod_node_name", "testnode"),
            ("__meta_kubernetes_pod_ip", "1.2.3.4"),
            ("__meta_kubernetes_pod_host_ip", "2.3.4.5"),
            ("__meta_kubernetes_pod_ready", "true"),
            ("__meta_kubernetes_pod_phase", "Running"),
            ("__meta_kubernetes_pod_uid", "abc123"),
            (
                "__meta_kubernetes_pod_controller_kind",
                "testcontrollerkind"
            ),
            (
                "__meta_kubernetes_pod_controller_name",
                "testcontrollername"
            ),
        ])
    );
    // with attach_metadata.node and the node unknown: no targets (Prometheus waits for it)
    let g = build(&cfg("{role: pod, attach_metadata: {node: true}}"), &s);
    assert!(g[0].targets.is_empty());
}

/// `TestNodeDiscoveryBeforeStart` (makeNode).
#[test]
fn node_as_prometheus() {
    let node = json!({
        "metadata": {"name": "test", "labels": {"test-label": "testvalue"}, "annotations": {"test-annotation": "testannotationvalue"}},
        "spec": {"providerID": "aws:///nl-north-7b/i-03149834983492827"},
        "status": {"addresses": [{"type": "InternalIP", "address": "1.2.3.4"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
    });
    let s = stores_with(vec![node], |s, n: Node| {
        s.nodes.insert(n.key(), n);
    });
    let g = build(&cfg("{role: node}"), &s);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].source, "node/test");
    assert_eq!(
        g[0].targets,
        vec![labels(&[
            ("__address__", "1.2.3.4:10250"),
            ("instance", "test"),
            ("__meta_kubernetes_node_address_InternalIP", "1.2.3.4"),
        ])]
    );
    assert_eq!(
        g[0].labels,
        labels(&[
            ("__meta_kubernetes_node_name", "test"),
            (
                "__meta_kubernetes_node_provider_id",
                "aws:///nl-north-7b/i-03149834983492827"
            ),
            ("__meta_kubernetes_node_label_test_label", "testvalue"),
            ("__meta_kubernetes_node_labelpresent_test_label", "true"),
            (
                "__meta_kubernetes_node_annotation_test_annotation",
                "testannotationvalue"
            ),
            (
                "__meta_kubernetes_node_annotationpresent_test_annotation",
                "true"
            ),
        ])
    );
}

/// `TestServiceDiscoveryAdd` (makeService, ClusterIP).
#[test]
fn service_as_prometheus() {
    let svc = json!({
        "metadata": {"name": "testservice", "namespace": "default"},
        "spec": {"ports": [{"name": "testport", "protocol": "TCP", "port": 30900}], "type": "ClusterIP", "clusterIP": "10.0.0.1"}
    });
    let s = stores_with(vec![svc], |s, v: Service| {
        s.services.insert(v.key(), v);
    });
    let g = build(&cfg("{role: service}"), &s);
    assert_eq!(g[0].source, "svc/default/testservice");
    assert_eq!(
        g[0].targets,
        vec![labels(&[
            ("__address__", "testservice.default.svc:30900"),
            ("__meta_kubernetes_service_type", "ClusterIP"),
            ("__meta_kubernetes_service_cluster_ip", "10.0.0.1"),
            ("__meta_kubernetes_service_port_name", "testport"),
            ("__meta_kubernetes_service_port_number", "30900"),
            ("__meta_kubernetes_service_port_protocol", "TCP"),
        ])]
    );
    assert_eq!(
        g[0].labels,
        labels(&[
            ("__meta_kubernetes_namespace", "default"),
            ("__meta_kubernetes_service_name", "testservice"),
        ])
    );
}

#[test]
fn config_is_checked_as_prometheus_checks_it() {
    let c = cfg("{role: endpointslice, api_server: 'https://k:6443', bearer_token: t, namespaces: {names: [a, b]}, selectors: [{role: pod, label: 'app=x'}]}");
    assert_eq!(c.role, Role::EndpointSlice);
    assert_eq!(c.namespaces.names, ["a", "b"]);
    for (y, want) in [
        ("{api_server: 'http://k'}", "role missing"),
        (
            "{role: pod, api_server: 'http://k', kubeconfig_file: f}",
            "cannot use 'kubeconfig_file' and 'api_server' simultaneously",
        ),
        (
            "{role: pod, bearer_token: t}",
            "please provide the 'api_server' URL explicitly",
        ),
        (
            "{role: pod, kubeconfig_file: f, bearer_token: t}",
            "cannot use a custom HTTP client configuration together with 'kubeconfig_file'",
        ),
        (
            "{role: pod, api_server: 'http://k', namespaces: {own_namespace: true}}",
            "cannot use 'api_server' and 'namespaces.own_namespace' simultaneously",
        ),
        (
            "{role: service, selectors: [{role: pod}]}",
            "service role supports only service selectors",
        ),
        (
            "{role: pod, selectors: [{role: pod}, {role: pod}]}",
            "duplicated selector role: pod",
        ),
        ("{role: pods}", "unknown variant"),
        ("{role: pod, foo: 1}", "unknown field `foo`"),
        ("{role: ingress}", "ingress is not supported"),
    ] {
        let e = serde_yaml::from_str::<KubernetesSdConfig>(y)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{y}: {e}");
    }
}
