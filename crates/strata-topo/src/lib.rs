//! The machine as Strata sees it: NUMA nodes, what the kernel and firmware say about them,
//! and the tier order Strata uses, each fact with its source.
//!
//! Discovery itself is libstrata's (`libstrata/machine/topo.c`): one implementation serves
//! the allocator inside applications and this crate. This crate turns it into Rust values.
//! Emulated machines have topologies too: strata-emu builds them from its presets.
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::path::Path;

use serde::Serialize;
use strata_sys as sys;

/// One NUMA node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    pub id: u32,
    /// Strata's tier of this node, 0 = fastest.
    pub tier: u32,
    /// CPUs as the kernel lists them ("" for a CPU-less node, e.g. CXL memory).
    pub cpus: String,
    pub has_cpus: bool,
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// The kernel's memory tier (memory_tierN), if it exposes one.
    pub kernel_tier: Option<u32>,
    /// HMAT (or preset) access characteristics from the CPUs' point of view.
    pub read_latency_ns: Option<f64>,
    pub write_latency_ns: Option<f64>,
    pub read_bandwidth_mbps: Option<f64>,
    pub write_bandwidth_mbps: Option<f64>,
    /// SLIT distance to each node, by node id.
    pub distances: Vec<(u32, u32)>,
}

/// One tier: nodes of like speed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tier {
    pub tier: u32,
    pub nodes: Vec<u32>,
    pub total_bytes: u64,
}

/// The machine's topology, or an emulated one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub tiers: Vec<Tier>,
    /// How the tier order was decided (override, kernel memory_tiering, HMAT, ...).
    pub tier_source: String,
    /// Where node facts came from (a sysfs path, or the preset).
    pub nodes_source: String,
    /// `None` for a real machine, else the preset name.
    pub emulated: Option<String>,
    /// Things a user should know about this topology.
    pub notes: Vec<String>,
}

/// Errors of topology discovery.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopoError {
    /// The tier override does not parse or names a node that does not exist.
    BadOverride(String),
    /// Discovery failed with this errno.
    Io(i32),
}

impl fmt::Display for TopoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopoError::BadOverride(s) => write!(
                f,
                "tier override '{s}' is not valid: use node lists fastest first, e.g. '0;1' or '0,2;1,3', naming existing nodes"
            ),
            TopoError::Io(e) => write!(f, "topology discovery failed: {}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

impl std::error::Error for TopoError {}

fn c_str(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

fn opt(v: i64) -> Option<f64> {
    (v >= 0).then_some(v as f64)
}

fn from_raw(t: &sys::strata_topology_t) -> Topology {
    let raw_nodes = &t.nodes[..t.nnodes as usize];
    let nodes: Vec<Node> = raw_nodes
        .iter()
        .map(|n| Node {
            id: n.id as u32,
            tier: n.tier as u32,
            cpus: c_str(&n.cpulist),
            has_cpus: n.has_cpus != 0,
            total_bytes: n.total_bytes,
            free_bytes: n.free_bytes,
            kernel_tier: u32::try_from(n.kernel_tier).ok(),
            read_latency_ns: opt(n.read_latency_ns),
            write_latency_ns: opt(n.write_latency_ns),
            read_bandwidth_mbps: opt(n.read_bandwidth_mbps),
            write_bandwidth_mbps: opt(n.write_bandwidth_mbps),
            distances: raw_nodes
                .iter()
                .filter(|m| n.distance[m.id as usize] > 0)
                .map(|m| (m.id as u32, n.distance[m.id as usize] as u32))
                .collect(),
        })
        .collect();
    let tiers = (0..t.ntiers as u32)
        .map(|tier| {
            let members: Vec<u32> = nodes.iter().filter(|n| n.tier == tier).map(|n| n.id).collect();
            let total = nodes.iter().filter(|n| n.tier == tier).map(|n| n.total_bytes).sum();
            Tier { tier, nodes: members, total_bytes: total }
        })
        .collect();
    let mut topo = Topology {
        nodes,
        tiers,
        tier_source: c_str(&t.tier_source),
        nodes_source: c_str(&t.nodes_source),
        emulated: None,
        notes: Vec::new(),
    };
    topo.add_notes();
    topo
}

impl Topology {
    fn add_notes(&mut self) {
        if self.nodes.len() == 1 {
            self.notes.push(format!(
                "one NUMA node: every placement (hot, cold, tier(n)) is accepted and lands on node {}; \
                 use `strata topo --emulate m2t` or the VM harness to see tiers",
                self.nodes[0].id
            ));
        } else if self.tiers.len() == 1 {
            self.notes.push(
                "several nodes but one tier: hot and cold land on the same nodes (set STRATA_TIERS to split them)"
                    .into(),
            );
        }
    }
}

/// The topology this process uses (the same one libstrata places by): discovered once,
/// honouring `STRATA_TIERS` and `STRATA_SYSFS`.
pub fn process() -> Topology {
    let t = unsafe { &*sys::strata_topology() };
    from_raw(t)
}

/// Discover the topology of a sysfs tree (`/sys`, or a fixture directory), with an optional
/// tier override in the `STRATA_TIERS` syntax.
pub fn discover_at(sysfs_root: &Path, tiers: Option<&str>) -> Result<Topology, TopoError> {
    let root = CString::new(sysfs_root.as_os_str().as_encoded_bytes()).map_err(|_| TopoError::Io(22))?;
    let over = match tiers {
        Some(s) => Some(CString::new(s).map_err(|_| TopoError::BadOverride(s.into()))?),
        None => None,
    };
    let mut t = Box::new(std::mem::MaybeUninit::<sys::strata_topology_t>::zeroed());
    let rc = unsafe {
        sys::strata_topology_discover(
            root.as_ptr(),
            over.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            t.as_mut_ptr(),
        )
    };
    match rc {
        0 => Ok(from_raw(unsafe { t.assume_init_ref() })),
        -22 => Err(TopoError::BadOverride(tiers.unwrap_or("").into())),
        e => Err(TopoError::Io(-e)),
    }
}
