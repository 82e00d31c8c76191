//! The machine as Strata sees it: NUMA nodes, what the kernel and firmware say about them,
//! and the tier order Strata uses, each fact with its source.
//!
//! Discovery itself is libstrata's (`libstrata/machine/topo.c`): one implementation serves
//! the allocator inside applications and this crate. This crate turns it into Rust values,
//! and adds the emulated presets ([`preset`]) used by `strata topo --emulate` and the
//! emulated machine.
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
    /// No preset of that name.
    UnknownPreset(String),
    /// A size or scale that makes no sense (zero, negative).
    BadSize(String),
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
            TopoError::UnknownPreset(s) => {
                write!(f, "no emulated preset '{s}' (known: {})", PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", "))
            }
            TopoError::BadSize(s) => write!(f, "{s}"),
            TopoError::Io(e) => write!(f, "topology discovery failed: {}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

impl std::error::Error for TopoError {}

fn c_str(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
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
            let members: Vec<u32> = nodes
                .iter()
                .filter(|n| n.tier == tier)
                .map(|n| n.id)
                .collect();
            let total = nodes
                .iter()
                .filter(|n| n.tier == tier)
                .map(|n| n.total_bytes)
                .sum();
            Tier {
                tier,
                nodes: members,
                total_bytes: total,
            }
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
    let root =
        CString::new(sysfs_root.as_os_str().as_encoded_bytes()).map_err(|_| TopoError::Io(22))?;
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
        e if e == -22 => Err(TopoError::BadOverride(tiers.unwrap_or("").into())),
        e => Err(TopoError::Io(-e)),
    }
}

/// An emulated tier of a preset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PresetTier {
    pub bytes: u64,
    pub read_latency_ns: f64,
    pub write_latency_ns: f64,
    pub read_bandwidth_mbps: f64,
    pub write_bandwidth_mbps: f64,
}

/// A named emulated machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub doc: &'static str,
    /// Tiers, fastest first; tier i is emulated node i; node 0 has the CPUs.
    pub tiers: &'static [PresetTier],
}

const GIB: u64 = 1 << 30;

/// The presets Strata ships.
pub const PRESETS: &[Preset] = &[Preset {
    name: "m2t",
    doc: "the M2T testbed (Intel Ice Lake, far memory = the other socket with its cores off): \
          local 84.6 ns / 176 GB/s with a 64 GB fast tier, far 156 ns / 55 GB/s (128 GB)",
    tiers: &[
        PresetTier {
            bytes: 64 * GIB,
            read_latency_ns: 84.6,
            write_latency_ns: 84.6,
            read_bandwidth_mbps: 176_000.0,
            write_bandwidth_mbps: 176_000.0,
        },
        PresetTier {
            bytes: 128 * GIB,
            read_latency_ns: 156.0,
            write_latency_ns: 156.0,
            read_bandwidth_mbps: 55_000.0,
            write_bandwidth_mbps: 55_000.0,
        },
    ],
}];

/// How to size an emulated topology.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PresetSize {
    /// Multiply every tier's size (e.g. 0.001 for a laptop-sized run).
    pub scale: Option<f64>,
    /// Set the fast tier's size in bytes (applied after `scale`).
    pub fast_bytes: Option<u64>,
}

/// Look a preset up by name.
pub fn find_preset(name: &str) -> Result<&'static Preset, TopoError> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| TopoError::UnknownPreset(name.into()))
}

/// The emulated topology of a preset.
pub fn preset(name: &str, size: PresetSize) -> Result<Topology, TopoError> {
    let p = find_preset(name)?;
    let scale = size.scale.unwrap_or(1.0);
    if !(scale > 0.0 && scale.is_finite()) {
        return Err(TopoError::BadSize(format!(
            "scale must be a positive number, not {scale}"
        )));
    }
    if size.fast_bytes == Some(0) {
        return Err(TopoError::BadSize("the fast tier cannot be 0 bytes".into()));
    }
    let n = p.tiers.len() as u32;
    let nodes: Vec<Node> = p
        .tiers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut bytes = (t.bytes as f64 * scale) as u64;
            if i == 0 {
                bytes = size.fast_bytes.unwrap_or(bytes);
            }
            Node {
                id: i as u32,
                tier: i as u32,
                cpus: if i == 0 { "0".into() } else { String::new() },
                has_cpus: i == 0,
                total_bytes: bytes,
                free_bytes: bytes,
                kernel_tier: None,
                read_latency_ns: Some(t.read_latency_ns),
                write_latency_ns: Some(t.write_latency_ns),
                read_bandwidth_mbps: Some(t.read_bandwidth_mbps),
                write_bandwidth_mbps: Some(t.write_bandwidth_mbps),
                distances: (0..n)
                    .map(|j| (j, if j == i as u32 { 10 } else { 20 }))
                    .collect(),
            }
        })
        .collect();
    let tiers = nodes
        .iter()
        .map(|nd| Tier {
            tier: nd.tier,
            nodes: vec![nd.id],
            total_bytes: nd.total_bytes,
        })
        .collect();
    Ok(Topology {
        nodes,
        tiers,
        tier_source: format!("preset {} (latency order)", p.name),
        nodes_source: format!("emulated: {}", p.doc),
        emulated: Some(p.name.to_string()),
        notes: vec![
            "emulated topology: figures measured on it are model outputs of this preset".into(),
        ],
    })
}
