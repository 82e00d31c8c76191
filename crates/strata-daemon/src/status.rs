//! What `strata stats` shows: the tiers, the processes under Strata (and those attached) with
//! their bytes on each tier, their top contexts and objects, and the running daemon's own
//! status.
//!
//! Everything but the daemon's part is read directly from the machine, whoever runs it: the
//! tiers from sysfs, each process's bytes per node from `/proc/PID/numa_maps` (the kernel's
//! count, not Strata's), contexts and objects from the processes' channels. The daemon's part
//! (priorities, trackers, shares, what it moved) comes from the daemon over its control
//! socket ([`crate::control`]).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_policy::{ContextObs, Directive, ObjectObs};

use crate::linux::{node_bytes, Linux, Managed};
use stratad::{Machine, Stats};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TierStatus {
    pub tier: u8,
    pub nodes: Vec<u8>,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessStatus {
    pub pid: u32,
    pub command: String,
    /// resident bytes on each tier, from /proc/PID/numa_maps
    pub tier_bytes: BTreeMap<u8, u64>,
    pub contexts: usize,
    pub objects: usize,
    /// bytes of its tracked objects
    pub tracked_bytes: u64,
    /// its priority in force and how the daemon sees its writes, when a daemon manages it
    pub priority: Option<i32>,
    pub tracker: Option<stratad::config::TrackerKind>,
    /// hot, warm and cold bytes and the working set, as the daemon's trackers see them
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heat: Option<stratad::heat::ProcessHeat>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContextStatus {
    pub pid: u32,
    pub index: u32,
    pub id: String,
    pub live_bytes: u64,
    pub allocs: u64,
    pub frees: u64,
    pub directive: Directive,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ObjectStatus {
    pub pid: u32,
    pub addr: String,
    pub len: u64,
    pub context: u32,
    pub resident_bytes: u64,
    pub fast_bytes: u64,
}

/// A process the daemon manages, with what the daemon makes of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonProcess {
    #[serde(flatten)]
    pub process: Managed,
    /// the priority in force: given from outside, else its configuration rule's, else its own
    pub priority: i32,
    /// its fast-tier limit, from its configuration rule
    pub max_fast_bytes: Option<u64>,
    /// how much of it is hot, warm and cold, and its working set (stratad::heat), where the
    /// daemon's trackers see it
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heat: Option<stratad::heat::ProcessHeat>,
}

/// The daemon's status, as it answers `{"op":"status"}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub pid: u32,
    pub policy: String,
    /// its configuration file, if any
    pub config: Option<PathBuf>,
    pub uptime_s: f64,
    pub period_ms: f64,
    pub processes: Vec<DaemonProcess>,
    /// processes whose channel it refused, and why
    pub refused: BTreeMap<u32, String>,
    /// what this kernel and hardware offer for tracking (`strata daemon --probe`)
    pub trackers: Vec<crate::probe::TrackerVerdict>,
    /// bytes migrated per second over the last ten seconds, MB/s
    pub migration_rate_mbps: f64,
    /// how the last reload went (SIGHUP or `{"op":"reload"}`), if there was one
    pub last_reload: Option<String>,
    pub stats: Stats,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    pub tiers: Vec<TierStatus>,
    pub processes: Vec<ProcessStatus>,
    /// the contexts with the most live bytes, over every process
    pub top_contexts: Vec<ContextStatus>,
    /// the largest tracked objects, over every process
    pub top_objects: Vec<ObjectStatus>,
    /// the daemon's status, if one answers on the socket
    pub daemon: Option<DaemonStatus>,
}

/// Gather the status now, with the daemon's (`control::daemon_status`, if one answers); `top`
/// contexts and objects at most.
pub fn gather(m: &mut Linux, daemon: Option<DaemonStatus>, top: usize) -> Status {
    m.next_round();
    let nodes = m.nodes();
    let tiers = strata_policy::tiers_of(&nodes)
        .into_iter()
        .map(|t| TierStatus {
            tier: t.tier,
            nodes: nodes.iter().filter(|n| n.tier == t.tier).map(|n| n.node).collect(),
            capacity_bytes: t.capacity_bytes,
            free_bytes: t.free_bytes,
        })
        .collect();
    let tier_of: BTreeMap<u8, u8> = nodes.iter().map(|n| (n.node, n.tier)).collect();
    let mut contexts: Vec<ContextObs> = Vec::new();
    let mut objects: Vec<ObjectObs> = Vec::new();
    m.contexts(&mut contexts);
    m.objects(&mut objects);
    // the processes under Strata found here, and those the daemon manages besides
    let mut pids = m.pids();
    pids.extend(daemon.iter().flat_map(|d| d.processes.iter().map(|p| p.process.pid)));
    pids.sort_unstable();
    pids.dedup();
    let processes = pids
        .into_iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .map(|pid| {
            let mut tier_bytes = BTreeMap::new();
            for (node, bytes) in node_bytes(pid) {
                *tier_bytes.entry(tier_of.get(&node).copied().unwrap_or(u8::MAX)).or_default() += bytes;
            }
            let mine = objects.iter().filter(|o| o.pid == pid);
            let managed = daemon.as_ref().and_then(|d| d.processes.iter().find(|p| p.process.pid == pid));
            ProcessStatus {
                pid,
                command: std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().into(),
                tier_bytes,
                contexts: contexts.iter().filter(|c| c.pid == pid).count(),
                objects: mine.clone().count(),
                tracked_bytes: mine.map(|o| o.len).sum(),
                priority: managed.map(|p| p.priority),
                tracker: managed.map(|p| p.process.tracker),
                heat: managed.and_then(|p| p.heat.clone()),
            }
        })
        .collect();
    contexts.sort_by_key(|c| std::cmp::Reverse(c.live_bytes));
    objects.sort_by_key(|o| std::cmp::Reverse(o.len));
    Status {
        tiers,
        processes,
        top_contexts: contexts
            .iter()
            .take(top)
            .map(|c| ContextStatus {
                pid: c.pid,
                index: c.index,
                id: format!("{:016x}", c.id),
                live_bytes: c.live_bytes,
                allocs: c.allocs,
                frees: c.frees,
                directive: c.directive,
            })
            .collect(),
        top_objects: objects
            .iter()
            .take(top)
            .map(|o| ObjectStatus {
                pid: o.pid,
                addr: format!("{:#x}", o.addr),
                len: o.len,
                context: o.context,
                resident_bytes: o.resident_bytes,
                fast_bytes: o.fast_bytes,
            })
            .collect(),
        daemon,
    }
}
