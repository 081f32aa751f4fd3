//! Role `node`: one group per node (`node/<name>`) with one target, the kubelet
//! (`<address>:<kubelet port>`, the address by Prometheus' preference: InternalIP,
//! InternalDNS, ExternalIP, ExternalDNS, LegacyHostIP, Hostname), `instance` the node name.

use std::collections::BTreeMap;

use super::types::Node;
use super::{add_object_meta, join_host_port, sanitize, KubernetesSdConfig, Stores, PREFIX};
use crate::discovery::{LabelSet, TargetGroup, ADDRESS_LABEL};

/// The group of one node (none without an address).
pub(crate) fn build(n: &Node) -> Option<TargetGroup> {
    let mut labels = LabelSet::new();
    labels.insert(
        format!("{PREFIX}node_provider_id"),
        n.spec.provider_id.clone(),
    );
    for c in &n.status.conditions {
        labels.insert(
            format!(
                "{PREFIX}node_condition_{}",
                sanitize(&c.kind.to_lowercase())
            ),
            c.status.to_lowercase(),
        );
    }
    add_object_meta(&mut labels, &n.metadata, "node");
    let mut by_type: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for a in &n.status.addresses {
        by_type
            .entry(a.kind.as_str())
            .or_default()
            .push(a.address.as_str());
    }
    let addr = [
        "InternalIP",
        "InternalDNS",
        "ExternalIP",
        "ExternalDNS",
        "LegacyHostIP",
        "Hostname",
    ]
    .iter()
    .find_map(|t| by_type.get(t).map(|v| v[0]))?;
    let mut t = LabelSet::new();
    t.insert(
        ADDRESS_LABEL.into(),
        join_host_port(addr, n.status.daemon_endpoints.kubelet_endpoint.port.into()),
    );
    t.insert("instance".into(), n.metadata.name.clone());
    for (ty, a) in &by_type {
        t.insert(
            sanitize(&format!("{PREFIX}node_address_{ty}")),
            a[0].to_string(),
        );
    }
    Some(TargetGroup {
        source: format!("node/{}", n.metadata.name),
        targets: vec![t],
        labels,
    })
}

/// The groups of every node with an address.
pub fn groups(_c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    s.nodes.values().filter_map(build).collect()
}
