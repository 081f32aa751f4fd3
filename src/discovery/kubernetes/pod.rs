//! Role `pod`: one group per pod with an IP (`pod/<namespace>/<name>`), one target per
//! container port (`<podIP>:<port>`) or per container without ports (`<podIP>`), init
//! containers included.

use super::types::{Container, ContainerStatus, Pod};
use super::{
    add_namespace_labels, add_node_labels, add_object_meta, join_host_port, KubernetesSdConfig,
    Stores, PREFIX,
};
use crate::discovery::{LabelSet, TargetGroup, ADDRESS_LABEL};

/// `ready` as Prometheus reports it: the `Ready` condition's status, lower case.
fn ready(p: &Pod) -> String {
    p.status
        .conditions
        .iter()
        .find(|c| c.kind == "Ready")
        .map(|c| c.status.to_lowercase())
        .unwrap_or_else(|| "unknown".into())
}

/// The pod's own labels (Prometheus' `podLabels`): shared by the pod, endpoints and
/// endpointslice roles.
pub fn pod_labels(p: &Pod) -> LabelSet {
    let mut ls = LabelSet::new();
    for (k, v) in [
        ("pod_ip", p.status.pod_ip.clone()),
        ("pod_ready", ready(p)),
        ("pod_phase", p.status.phase.clone()),
        ("pod_node_name", p.spec.node_name.clone()),
        ("pod_host_ip", p.status.host_ip.clone()),
        ("pod_uid", p.metadata.uid.clone()),
    ] {
        ls.insert(format!("{PREFIX}{k}"), v);
    }
    add_object_meta(&mut ls, &p.metadata, "pod");
    if let Some(c) = p.metadata.controller() {
        if !c.kind.is_empty() {
            ls.insert(format!("{PREFIX}pod_controller_kind"), c.kind.clone());
        }
        if !c.name.is_empty() {
            ls.insert(format!("{PREFIX}pod_controller_name"), c.name.clone());
        }
    }
    ls
}

/// Every container with whether it is an init container.
pub fn containers(p: &Pod) -> impl Iterator<Item = (&Container, bool)> {
    p.spec
        .containers
        .iter()
        .map(|c| (c, false))
        .chain(p.spec.init_containers.iter().map(|c| (c, true)))
}

fn container_id(statuses: &[ContainerStatus], name: &str) -> String {
    statuses
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.container_id.clone())
        .unwrap_or_default()
}

/// The group of one pod (no targets when it has no IP yet, or when its node is unknown with
/// `attach_metadata: {node: true}`).
pub fn build_pod(c: &KubernetesSdConfig, s: &Stores, p: &Pod) -> TargetGroup {
    let mut g = TargetGroup {
        source: format!("pod/{}/{}", p.metadata.namespace, p.metadata.name),
        ..Default::default()
    };
    if p.status.pod_ip.is_empty() {
        return g;
    }
    if c.attach_metadata.node && !s.nodes.contains_key(&p.spec.node_name) {
        return g;
    }
    g.labels = pod_labels(p);
    g.labels
        .insert(format!("{PREFIX}namespace"), p.metadata.namespace.clone());
    if c.attach_metadata.node {
        add_node_labels(&mut g.labels, s, Some(&p.spec.node_name));
    }
    if c.attach_metadata.namespace {
        add_namespace_labels(&mut g.labels, s, &p.metadata.namespace);
    }
    let ip = &p.status.pod_ip;
    for (ct, init) in containers(p) {
        let statuses = if init {
            &p.status.init_container_statuses
        } else {
            &p.status.container_statuses
        };
        let mut base = LabelSet::new();
        base.insert(format!("{PREFIX}pod_container_name"), ct.name.clone());
        base.insert(
            format!("{PREFIX}pod_container_id"),
            container_id(statuses, &ct.name),
        );
        base.insert(format!("{PREFIX}pod_container_image"), ct.image.clone());
        base.insert(format!("{PREFIX}pod_container_init"), init.to_string());
        if ct.ports.is_empty() {
            base.insert(ADDRESS_LABEL.into(), ip.clone());
            g.targets.push(base);
            continue;
        }
        for port in &ct.ports {
            let mut t = base.clone();
            t.insert(
                ADDRESS_LABEL.into(),
                join_host_port(ip, port.container_port.into()),
            );
            t.insert(
                format!("{PREFIX}pod_container_port_number"),
                port.container_port.to_string(),
            );
            t.insert(
                format!("{PREFIX}pod_container_port_name"),
                port.name.clone(),
            );
            t.insert(
                format!("{PREFIX}pod_container_port_protocol"),
                port.protocol.clone(),
            );
            g.targets.push(t);
        }
    }
    g
}

/// The groups of every pod.
pub fn groups(c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    s.pods.values().map(|p| build_pod(c, s, p)).collect()
}
