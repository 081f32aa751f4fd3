//! Role `service`: one group per service (`svc/<namespace>/<name>`), one target per port
//! (`<name>.<namespace>.svc:<port>`).

use super::types::Service;
use super::{
    add_namespace_labels, add_object_meta, join_host_port, KubernetesSdConfig, Stores, PREFIX,
};
use crate::discovery::{LabelSet, TargetGroup, ADDRESS_LABEL};

/// The service's labels (Prometheus' `serviceLabels`), also put on endpoints groups.
pub fn service_labels(svc: &Service) -> LabelSet {
    let mut ls = LabelSet::new();
    ls.insert(format!("{PREFIX}namespace"), svc.metadata.namespace.clone());
    add_object_meta(&mut ls, &svc.metadata, "service");
    ls
}

fn load_balancer_ips(svc: &Service) -> String {
    let ips: Vec<&str> = svc
        .status
        .load_balancer
        .ingress
        .iter()
        .map(|i| i.ip.as_str())
        .filter(|i| !i.is_empty())
        .collect();
    if ips.is_empty() {
        svc.spec.load_balancer_ip.clone()
    } else {
        ips.join(",")
    }
}

/// The group of one object.
pub(crate) fn build(c: &KubernetesSdConfig, s: &Stores, svc: &Service) -> TargetGroup {
    let m = &svc.metadata;
    let mut g = TargetGroup {
        source: format!("svc/{}/{}", m.namespace, m.name),
        labels: service_labels(svc),
        targets: vec![],
    };
    if c.attach_metadata.namespace {
        add_namespace_labels(&mut g.labels, s, &m.namespace);
    }
    for p in &svc.spec.ports {
        let mut t = LabelSet::new();
        t.insert(
            ADDRESS_LABEL.into(),
            join_host_port(&format!("{}.{}.svc", m.name, m.namespace), p.port.into()),
        );
        t.insert(format!("{PREFIX}service_port_name"), p.name.clone());
        t.insert(format!("{PREFIX}service_port_number"), p.port.to_string());
        t.insert(format!("{PREFIX}service_port_protocol"), p.protocol.clone());
        t.insert(format!("{PREFIX}service_type"), svc.spec.kind.clone());
        if svc.spec.kind == "ExternalName" {
            t.insert(
                format!("{PREFIX}service_external_name"),
                svc.spec.external_name.clone(),
            );
        } else {
            t.insert(
                format!("{PREFIX}service_cluster_ip"),
                svc.spec.cluster_ip.clone(),
            );
        }
        if svc.spec.kind == "LoadBalancer" {
            t.insert(
                format!("{PREFIX}service_loadbalancer_ip"),
                load_balancer_ips(svc),
            );
        }
        g.targets.push(t);
    }
    g
}

/// The groups of every service.
pub fn groups(c: &KubernetesSdConfig, s: &Stores) -> Vec<TargetGroup> {
    s.services.values().map(|svc| build(c, s, svc)).collect()
}
