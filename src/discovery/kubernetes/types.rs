//! The parts of the Kubernetes API objects discovery reads (JSON as the API server sends
//! it); fields absent from a document take their zero value, unknown ones are ignored.

// The fields are the API's own (camelCase there), documented by Kubernetes.
#![allow(missing_docs)]

use std::collections::BTreeMap;

use serde::Deserialize;

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner_references: Vec<OwnerReference>,
}

/// `metadata.ownerReferences[]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

impl ObjectMeta {
    /// The owner that is the object's controller.
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|r| r.controller == Some(true))
    }
}

/// A Pod.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    pub node_name: String,
    pub containers: Vec<Container>,
    pub init_containers: Vec<Container>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: String,
    pub container_port: i32,
    pub protocol: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    pub phase: String,
    #[serde(rename = "podIP")]
    pub pod_ip: String,
    #[serde(rename = "hostIP")]
    pub host_ip: String,
    pub conditions: Vec<Condition>,
    pub container_statuses: Vec<ContainerStatus>,
    pub init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
}

/// A Service.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Service {
    pub metadata: ObjectMeta,
    pub spec: ServiceSpec,
    pub status: ServiceStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceSpec {
    pub ports: Vec<ServicePort>,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(rename = "clusterIP")]
    pub cluster_ip: String,
    pub external_name: String,
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: String,
    pub ip_family_policy: Option<String>,
    pub ip_families: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    pub name: String,
    pub port: i32,
    pub protocol: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceStatus {
    pub load_balancer: LoadBalancerStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct LoadBalancerStatus {
    pub ingress: Vec<LoadBalancerIngress>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct LoadBalancerIngress {
    pub ip: String,
}

/// An object reference (`targetRef`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ObjectReference {
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// Endpoints (core/v1).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Endpoints {
    pub metadata: ObjectMeta,
    pub subsets: Vec<EndpointSubset>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointSubset {
    pub addresses: Vec<EndpointAddress>,
    pub not_ready_addresses: Vec<EndpointAddress>,
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointAddress {
    pub ip: String,
    pub hostname: String,
    pub node_name: Option<String>,
    pub target_ref: Option<ObjectReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointPort {
    pub name: String,
    pub port: i32,
    pub protocol: String,
    pub app_protocol: Option<String>,
}

/// An EndpointSlice (discovery.k8s.io/v1).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndpointSlice {
    pub metadata: ObjectMeta,
    pub address_type: String,
    pub endpoints: Vec<SliceEndpoint>,
    pub ports: Vec<SlicePort>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlicePort {
    pub name: Option<String>,
    pub port: Option<i32>,
    pub protocol: Option<String>,
    pub app_protocol: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SliceEndpoint {
    pub addresses: Vec<String>,
    pub conditions: SliceConditions,
    pub hostname: Option<String>,
    pub node_name: Option<String>,
    pub zone: Option<String>,
    pub target_ref: Option<ObjectReference>,
    pub deprecated_topology: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SliceConditions {
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

/// A Node.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Node {
    pub metadata: ObjectMeta,
    pub spec: NodeSpec,
    pub status: NodeStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(rename = "providerID")]
    pub provider_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeStatus {
    pub addresses: Vec<NodeAddress>,
    pub conditions: Vec<Condition>,
    pub daemon_endpoints: DaemonEndpoints,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DaemonEndpoints {
    pub kubelet_endpoint: DaemonEndpoint,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DaemonEndpoint {
    #[serde(rename = "Port")]
    pub port: i32,
}

/// A Namespace (only its metadata matters).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Namespace {
    pub metadata: ObjectMeta,
}

/// Every kind the discovery watches has metadata.
pub trait Object: for<'de> Deserialize<'de> + Clone + Send + Sync + 'static {
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// `namespace/name` (just `name` for cluster-wide kinds).
    fn key(&self) -> String {
        let m = self.meta();
        if m.namespace.is_empty() {
            m.name.clone()
        } else {
            format!("{}/{}", m.namespace, m.name)
        }
    }
}

macro_rules! object {
    ($($t:ty),*) => {$(
        impl Object for $t {
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
        }
    )*};
}
object!(Pod, Service, Endpoints, EndpointSlice, Node, Namespace);
