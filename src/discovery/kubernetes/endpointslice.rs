//! Role `endpointslice`: one group per EndpointSlice (`endpointslice/<namespace>/<name>`)
//! with its service's labels (the `kubernetes.io/service-name` label), one target per
//! endpoint address and port, pod and container labels when the endpoint is a known pod,
//! and one more target for each port of such a pod's containers the slice does not list.

use std::collections::BTreeMap;

use super::endpoints::{extra_pod_targets, resolve_pod};
use super::pod::{containers, pod_labels};
use super::service::service_labels;
use super::types::{EndpointSlice, Pod, Service, SliceEndpoint, SlicePort};
use super::{
    add_namespace_labels, add_node_labels, add_object_meta, join_host_port, sanitize,
    KubernetesSdConfig, Stores, PREFIX,
};
use crate::discovery::{LabelSet, TargetGroup, ADDRESS_LABEL};

/// The label naming a slice's service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether the slice is the secondary IP family's slice of a dual-stack service (its targets
/// would repeat the primary slice's): Prometheus sends its group without targets.
fn non_primary_ip_family(svc: Option<&Service>, eps: &EndpointSlice) -> bool {
    let Some(svc) = svc else {
        return false;
    };
    matches!(
        svc.spec.ip_family_policy.as_deref(),
        Some("PreferDualStack" | "RequireDualStack")
    ) && svc
        .spec
        .ip_families
        .first()
        .is_some_and(|f| *f != eps.address_type)
}

/// The group of one object.
pub(crate) fn build(c: &KubernetesSdConfig, s: &Stores, eps: &EndpointSlice) -> TargetGroup {
    let m = &eps.metadata;
    let mut g = TargetGroup {
        source: format!("endpointslice/{}/{}", m.namespace, m.name),
        ..Default::default()
    };
    g.labels
        .insert(format!("{PREFIX}namespace"), m.namespace.clone());
    g.labels.insert(
        format!("{PREFIX}endpointslice_address_type"),
        eps.address_type.clone(),
    );
    add_object_meta(&mut g.labels, m, "endpointslice");
    let svc = m
        .labels
        .get(SERVICE_NAME_LABEL)
        .and_then(|n| s.services.get(&format!("{}/{n}", m.namespace)));
    if let Some(svc) = svc {
        g.labels.extend(service_labels(svc));
    }
    if c.attach_metadata.namespace {
        add_namespace_labels(&mut g.labels, s, &m.namespace);
    }
    if non_primary_ip_family(svc, eps) {
        return g;
    }
    let mut seen: BTreeMap<String, (&Pod, Vec<i32>)> = BTreeMap::new();
    let mut add = |addr: &str, ep: &SliceEndpoint, port: &SlicePort| {
        let mut t = LabelSet::new();
        let a = match port.port {
            Some(p) => join_host_port(addr, p.into()),
            None => addr.to_string(),
        };
        t.insert(ADDRESS_LABEL.into(), a);
        let mut opt = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                t.insert(format!("{PREFIX}endpointslice_{k}"), v);
            }
        };
        opt("port_name", port.name.clone());
        opt("port_protocol", port.protocol.clone());
        opt("port", port.port.map(|p| p.to_string()));
        opt("port_app_protocol", port.app_protocol.clone());
        opt(
            "endpoint_conditions_ready",
            ep.conditions.ready.map(|b| b.to_string()),
        );
        opt(
            "endpoint_conditions_serving",
            ep.conditions.serving.map(|b| b.to_string()),
        );
        opt(
            "endpoint_conditions_terminating",
            ep.conditions.terminating.map(|b| b.to_string()),
        );
        opt("endpoint_hostname", ep.hostname.clone());
        if let Some(r) = &ep.target_ref {
            opt("address_target_kind", Some(r.kind.clone()));
            opt("address_target_name", Some(r.name.clone()));
        }
        opt("endpoint_node_name", ep.node_name.clone());
        opt("endpoint_zone", ep.zone.clone());
        for (k, v) in &ep.deprecated_topology {
            let n = sanitize(k);
            t.insert(
                format!("{PREFIX}endpointslice_endpoint_topology_{n}"),
                v.clone(),
            );
            t.insert(
                format!("{PREFIX}endpointslice_endpoint_topology_present_{n}"),
                "true".into(),
            );
        }
        if c.attach_metadata.node {
            match ep.target_ref.as_ref().filter(|r| r.kind == "Node") {
                Some(r) => add_node_labels(&mut t, s, Some(&r.name)),
                None => add_node_labels(&mut t, s, ep.node_name.as_deref()),
            }
        }
        let Some(pod) = resolve_pod(s, &m.namespace, ep.target_ref.as_ref()) else {
            g.targets.push(t);
            return;
        };
        let entry = seen
            .entry(format!("{}/{}", pod.metadata.namespace, pod.metadata.name))
            .or_insert((pod, vec![]));
        t.extend(pod_labels(pod));
        if let Some(pp) = port.port {
            // the last container exposing the port wins, as in Prometheus
            for (ct, init) in containers(pod) {
                if let Some(cp) = ct.ports.iter().find(|cp| cp.container_port == pp) {
                    t.insert(format!("{PREFIX}pod_container_name"), ct.name.clone());
                    t.insert(format!("{PREFIX}pod_container_image"), ct.image.clone());
                    t.insert(format!("{PREFIX}pod_container_port_name"), cp.name.clone());
                    t.insert(format!("{PREFIX}pod_container_port_number"), pp.to_string());
                    t.insert(
                        format!("{PREFIX}pod_container_port_protocol"),
                        cp.protocol.clone(),
                    );
                    t.insert(format!("{PREFIX}pod_container_init"), init.to_string());
                }
            }
            entry.1.push(pp);
        }
        g.targets.push(t);
    };
    for ep in &eps.endpoints {
        for port in &eps.ports {
            for a in &ep.addresses {
                add(a, ep, port);
            }
        }
    }
    extra_pod_targets(&mut g, &seen);
    g
}

/// The groups of every EndpointSlice.
pub fn groups(c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    s.slices.values().map(|e| build(c, s, e)).collect()
}
