//! Role `endpoints`: one group per Endpoints object (`endpoints/<namespace>/<name>`) with its
//! service's labels, one target per address and port (ready and not ready), pod and
//! container labels when the address is a known pod, and one more target for each port of
//! such a pod's containers that the Endpoints do not list.

use std::collections::BTreeMap;

use super::pod::{containers, pod_labels};
use super::service::service_labels;
use super::types::{EndpointAddress, EndpointPort, Endpoints, ObjectReference, Pod};
use super::{
    add_namespace_labels, add_node_labels, add_object_meta, join_host_port, KubernetesSdConfig,
    Stores, PREFIX,
};
use crate::discovery::{LabelSet, TargetGroup, ADDRESS_LABEL};

/// The pod a `targetRef` of an object in namespace `ns` names, if it is a pod the stores
/// know (of the same namespace when namespaces are named).
pub fn resolve_pod<'a>(s: &'a Stores, ns: &str, r: Option<&ObjectReference>) -> Option<&'a Pod> {
    let r = r.filter(|r| r.kind == "Pod")?;
    if s.pods_per_namespace && r.namespace != ns {
        return None;
    }
    s.pods.get(&format!("{}/{}", r.namespace, r.name))
}

/// Targets for the container ports of the pods seen that no endpoint port covered.
pub fn extra_pod_targets(g: &mut TargetGroup, seen: &BTreeMap<String, (&Pod, Vec<i32>)>) {
    for (pod, ports) in seen.values() {
        if pod.status.pod_ip.is_empty() {
            continue;
        }
        for (c, init) in containers(pod) {
            for cp in &c.ports {
                if ports.contains(&cp.container_port) {
                    continue;
                }
                let mut t = pod_labels(pod);
                t.insert(
                    ADDRESS_LABEL.into(),
                    join_host_port(&pod.status.pod_ip, cp.container_port.into()),
                );
                t.insert(format!("{PREFIX}pod_container_name"), c.name.clone());
                t.insert(format!("{PREFIX}pod_container_image"), c.image.clone());
                t.insert(format!("{PREFIX}pod_container_port_name"), cp.name.clone());
                t.insert(
                    format!("{PREFIX}pod_container_port_number"),
                    cp.container_port.to_string(),
                );
                t.insert(
                    format!("{PREFIX}pod_container_port_protocol"),
                    cp.protocol.clone(),
                );
                t.insert(format!("{PREFIX}pod_container_init"), init.to_string());
                g.targets.push(t);
            }
        }
    }
}

/// The group of one object.
pub(crate) fn build(c: &KubernetesSdConfig, s: &Stores, eps: &Endpoints) -> TargetGroup {
    let m = &eps.metadata;
    let mut g = TargetGroup {
        source: format!("endpoints/{}/{}", m.namespace, m.name),
        ..Default::default()
    };
    g.labels
        .insert(format!("{PREFIX}namespace"), m.namespace.clone());
    if let Some(svc) = s.services.get(&format!("{}/{}", m.namespace, m.name)) {
        g.labels.extend(service_labels(svc));
    }
    add_object_meta(&mut g.labels, m, "endpoints");
    if c.attach_metadata.namespace {
        add_namespace_labels(&mut g.labels, s, &m.namespace);
    }
    let mut seen: BTreeMap<String, (&Pod, Vec<i32>)> = BTreeMap::new();
    let mut add = |addr: &EndpointAddress, port: &EndpointPort, ready: &str| {
        let mut t = LabelSet::new();
        t.insert(
            ADDRESS_LABEL.into(),
            join_host_port(&addr.ip, port.port.into()),
        );
        t.insert(format!("{PREFIX}endpoint_port_name"), port.name.clone());
        t.insert(
            format!("{PREFIX}endpoint_port_protocol"),
            port.protocol.clone(),
        );
        t.insert(format!("{PREFIX}endpoint_ready"), ready.into());
        if let Some(r) = &addr.target_ref {
            t.insert(
                format!("{PREFIX}endpoint_address_target_kind"),
                r.kind.clone(),
            );
            t.insert(
                format!("{PREFIX}endpoint_address_target_name"),
                r.name.clone(),
            );
        }
        if let Some(n) = &addr.node_name {
            t.insert(format!("{PREFIX}endpoint_node_name"), n.clone());
        }
        if !addr.hostname.is_empty() {
            t.insert(format!("{PREFIX}endpoint_hostname"), addr.hostname.clone());
        }
        if c.attach_metadata.node {
            if addr.node_name.is_some() {
                add_node_labels(&mut t, s, addr.node_name.as_deref());
            } else if let Some(r) = addr.target_ref.as_ref().filter(|r| r.kind == "Node") {
                add_node_labels(&mut t, s, Some(&r.name));
            }
        }
        let Some(pod) = resolve_pod(s, &m.namespace, addr.target_ref.as_ref()) else {
            g.targets.push(t);
            return;
        };
        let entry = seen
            .entry(format!("{}/{}", pod.metadata.namespace, pod.metadata.name))
            .or_insert((pod, vec![]));
        t.extend(pod_labels(pod));
        // the last container exposing the port wins, as in Prometheus
        for (ct, init) in containers(pod) {
            if let Some(cp) = ct.ports.iter().find(|cp| cp.container_port == port.port) {
                t.insert(format!("{PREFIX}pod_container_name"), ct.name.clone());
                t.insert(format!("{PREFIX}pod_container_image"), ct.image.clone());
                t.insert(format!("{PREFIX}pod_container_port_name"), cp.name.clone());
                t.insert(
                    format!("{PREFIX}pod_container_port_number"),
                    port.port.to_string(),
                );
                t.insert(
                    format!("{PREFIX}pod_container_port_protocol"),
                    port.protocol.clone(),
                );
                t.insert(format!("{PREFIX}pod_container_init"), init.to_string());
            }
        }
        entry.1.push(port.port);
        g.targets.push(t);
    };
    for ss in &eps.subsets {
        for port in &ss.ports {
            for a in &ss.addresses {
                add(a, port, "true");
            }
            for a in &ss.not_ready_addresses {
                add(a, port, "false");
            }
        }
    }
    extra_pod_targets(&mut g, &seen);
    g
}

/// The groups of every Endpoints object.
pub fn groups(c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    s.endpoints.values().map(|e| build(c, s, e)).collect()
}
