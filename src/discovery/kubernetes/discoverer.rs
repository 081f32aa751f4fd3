//! What one `kubernetes_sd_configs` entry knows and which groups each change re-builds.
//!
//! Every watch (a kind in a namespace) hands its events to [`Discoverer::apply`]. Until every
//! watch has listed once nothing is sent; then every group of the role is built once. After
//! that a change re-builds only the groups Prometheus' informer handlers re-queue for it:
//! the object's own group, and for the roles that read other kinds:
//!
//! | role | re-built on |
//! |---|---|
//! | `pod` | a node's change: the pods on it (`attach_metadata: {node: true}`) |
//! | `endpoints` | a service's change: the Endpoints of the same name; a pod's phase change: the Endpoints whose ready addresses name it; a node's change: the Endpoints whose addresses name it through a pod's `nodeName` or a `Node` target (`attach_metadata: {node: true}`) |
//! | `endpointslice` | a service's change: the slices labelled with its name; a node's change as for `endpoints` |
//! | every role | a namespace's update: the groups in it (`attach_metadata: {namespace: true}`) |
//!
//! So the cost of a change is the cost of the groups it touches, not of the whole role, and
//! the groups sent are exactly the ones Prometheus sends (including what it does not
//! re-build: a node label change does not reach an address that names its node only by
//! `nodeName` without a target reference).

use std::collections::{BTreeMap, BTreeSet};

use super::types::{EndpointSlice, Endpoints, Namespace, Node, Object, Pod, Service};
use super::watch::Event;
use super::{build_one, KubernetesSdConfig, Role, Stores};
use crate::discovery::TargetGroup;

/// What [`Discoverer::apply`] asks its caller to send.
#[derive(Debug, PartialEq)]
pub enum Emit {
    /// Nothing changed, or some watch has not listed yet.
    Nothing,
    /// Every group of the role (the first time every watch has listed).
    All(Vec<TargetGroup>),
    /// The groups a change re-built (a group with no targets empties its source).
    Changed(Vec<TargetGroup>),
}

/// One watch's own objects (the keys it put in the store) and whether it has listed.
#[derive(Debug, Default)]
pub struct WatchState {
    mine: BTreeSet<String>,
    synced: bool,
}

/// The stores of one entry, how many watches have not listed yet, and the rules above.
pub struct Discoverer {
    c: KubernetesSdConfig,
    s: Stores,
    unsynced: usize,
}

/// The kinds a discoverer stores: where in [`Stores`], and what their change re-builds.
pub trait Stored: Object {
    /// The store of this kind.
    fn store(s: &Stores) -> &BTreeMap<String, Self>;
    /// The same, to change.
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self>;
    /// The keys (of the role's own kind) whose groups Prometheus re-builds when `old`
    /// becomes `new` (`None`: absent before / deleted).
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String>;
}

impl Discoverer {
    /// A discoverer for `c` fed by `watches` watches.
    pub fn new(c: KubernetesSdConfig, watches: usize) -> Discoverer {
        let s = Stores {
            // one discoverer per namespace in Prometheus when namespaces are named
            pods_per_namespace: !c.namespaces.names.is_empty() || c.namespaces.own_namespace,
            ..Default::default()
        };
        Discoverer {
            c,
            s,
            unsynced: watches,
        }
    }

    /// Applies the events one watch saw (`w` is that watch's state) and says what to send.
    pub fn apply<T: Stored>(&mut self, w: &mut WatchState, events: Vec<Event<T>>) -> Emit {
        let mut dirty: BTreeSet<String> = BTreeSet::new();
        for e in events {
            match e {
                Event::Reset(items) => {
                    // as client-go's relist: updates for what is still there, deletions for
                    // what is gone, additions for what is new
                    let mut gone = std::mem::take(&mut w.mine);
                    for o in items {
                        let k = o.key();
                        gone.remove(&k);
                        w.mine.insert(k.clone());
                        self.put(k, o, &mut dirty);
                    }
                    for k in gone {
                        self.remove::<T>(&k, &mut dirty);
                    }
                }
                Event::Apply(o) => {
                    let k = o.key();
                    w.mine.insert(k.clone());
                    self.put(k, o, &mut dirty);
                }
                Event::Delete(o) => {
                    let k = o.key();
                    w.mine.remove(&k);
                    self.remove::<T>(&k, &mut dirty);
                }
            }
        }
        if !w.synced {
            w.synced = true;
            self.unsynced -= 1;
            if self.unsynced == 0 {
                return Emit::All(super::build(&self.c, &self.s));
            }
        }
        if self.unsynced > 0 || dirty.is_empty() {
            return Emit::Nothing;
        }
        Emit::Changed(
            dirty
                .iter()
                .map(|k| build_one(&self.c, &self.s, k))
                .collect(),
        )
    }

    fn put<T: Stored>(&mut self, k: String, o: T, dirty: &mut BTreeSet<String>) {
        let old = T::store_mut(&mut self.s).insert(k.clone(), o);
        let new = T::store(&self.s).get(&k);
        dirty.extend(T::touched(self, old.as_ref(), new));
    }

    fn remove<T: Stored>(&mut self, k: &str, dirty: &mut BTreeSet<String>) {
        if let Some(old) = T::store_mut(&mut self.s).remove(k) {
            dirty.extend(T::touched(self, Some(&old), None));
        }
    }

    fn role(&self) -> Role {
        self.c.role
    }

    /// The keys of the role's own objects in namespace `ns`.
    fn in_namespace(&self, ns: &str) -> Vec<String> {
        fn keys<T>(m: &BTreeMap<String, T>, ns: &str) -> Vec<String> {
            let p = format!("{ns}/");
            m.range(p.clone()..)
                .take_while(|(k, _)| k.starts_with(&p))
                .map(|(k, _)| k.clone())
                .collect()
        }
        match self.role() {
            Role::Pod => keys(&self.s.pods, ns),
            Role::Service => keys(&self.s.services, ns),
            Role::Endpoints => keys(&self.s.endpoints, ns),
            Role::EndpointSlice => keys(&self.s.slices, ns),
            Role::Node | Role::Ingress => vec![],
        }
    }

    /// Whether a pod of namespace `pod_ns` resolves for an object of namespace `ns`.
    pub(crate) fn pod_visible(&self, ns: &str, pod_ns: &str) -> bool {
        !self.s.pods_per_namespace || ns == pod_ns
    }
}

/// The key an object is stored under.
fn own<T: Object>(old: Option<&T>, new: Option<&T>) -> Vec<String> {
    new.or(old).map(|o| o.key()).into_iter().collect()
}

impl Stored for Pod {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.pods
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.pods
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        match d.role() {
            Role::Pod => own(old, new),
            // only a phase change re-queues the Endpoints naming the pod
            Role::Endpoints => match (old, new) {
                (Some(o), Some(n)) if o.status.phase != n.status.phase => {
                    let key = n.key();
                    d.s.endpoints
                        .iter()
                        .filter(|(_, e)| {
                            e.subsets.iter().any(|ss| {
                                ss.addresses.iter().any(|a| {
                                    a.target_ref.as_ref().is_some_and(|r| {
                                        r.kind == "Pod"
                                            && format!("{}/{}", r.namespace, r.name) == key
                                    })
                                })
                            }) && d.pod_visible(&e.metadata.namespace, &n.metadata.namespace)
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                }
                _ => vec![],
            },
            _ => vec![],
        }
    }
}

impl Stored for Service {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.services
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.services
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        let key = own(old, new);
        match d.role() {
            Role::Service => key,
            Role::Endpoints => key
                .into_iter()
                .filter(|k| d.s.endpoints.contains_key(k))
                .collect(),
            Role::EndpointSlice => {
                let Some(svc) = new.or(old) else {
                    return vec![];
                };
                d.s.slices
                    .iter()
                    .filter(|(_, e)| {
                        e.metadata.namespace == svc.metadata.namespace
                            && e.metadata
                                .labels
                                .get(super::endpointslice::SERVICE_NAME_LABEL)
                                == Some(&svc.metadata.name)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            }
            _ => vec![],
        }
    }
}

impl Stored for Endpoints {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.endpoints
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.endpoints
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        match d.role() {
            Role::Endpoints => own(old, new),
            _ => vec![],
        }
    }
}

impl Stored for EndpointSlice {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.slices
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.slices
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        match d.role() {
            Role::EndpointSlice => own(old, new),
            _ => vec![],
        }
    }
}

impl Stored for Node {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.nodes
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.nodes
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        let Some(name) = new.or(old).map(|n| n.metadata.name.as_str()) else {
            return vec![];
        };
        // Prometheus' node index: a pod address by its nodeName, a Node target by its name
        let names_node = |r: Option<&super::types::ObjectReference>, node_name: Option<&String>| {
            r.is_some_and(|r| match r.kind.as_str() {
                "Pod" => node_name.is_some_and(|n| n == name),
                "Node" => r.name == name,
                _ => false,
            })
        };
        match d.role() {
            Role::Node => own(old, new),
            Role::Pod if d.c.attach_metadata.node => {
                d.s.pods
                    .iter()
                    .filter(|(_, p)| p.spec.node_name == name)
                    .map(|(k, _)| k.clone())
                    .collect()
            }
            Role::Endpoints if d.c.attach_metadata.node => {
                d.s.endpoints
                    .iter()
                    .filter(|(_, e)| {
                        e.subsets.iter().any(|ss| {
                            ss.addresses
                                .iter()
                                .any(|a| names_node(a.target_ref.as_ref(), a.node_name.as_ref()))
                        })
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            }
            Role::EndpointSlice if d.c.attach_metadata.node => {
                d.s.slices
                    .iter()
                    .filter(|(_, e)| {
                        e.endpoints
                            .iter()
                            .any(|ep| names_node(ep.target_ref.as_ref(), ep.node_name.as_ref()))
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            }
            _ => vec![],
        }
    }
}

impl Stored for Namespace {
    fn store(s: &Stores) -> &BTreeMap<String, Self> {
        &s.namespaces
    }
    fn store_mut(s: &mut Stores) -> &mut BTreeMap<String, Self> {
        &mut s.namespaces
    }
    fn touched(d: &Discoverer, old: Option<&Self>, new: Option<&Self>) -> Vec<String> {
        // only updates: a namespace's creation or deletion reaches its objects' own handlers
        match (old, new) {
            (Some(_), Some(n)) if d.c.attach_metadata.namespace => d.in_namespace(&n.metadata.name),
            _ => vec![],
        }
    }
}
