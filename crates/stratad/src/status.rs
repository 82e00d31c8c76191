//! What `strata stats` shows: the tiers, the processes under Strata with their bytes on each
//! tier, their top contexts and objects, and the daemon's own statistics when one runs.
//!
//! Everything but the daemon's part is read directly from the machine, whoever runs it: the
//! tiers from sysfs, each process's bytes per node from `/proc/PID/numa_maps` (the kernel's
//! count, not Strata's), contexts and objects from the processes' channels. The daemon writes
//! its statistics to a state file after every round ([`write_state`]); `strata stats` reads
//! it, so it needs no connection to the daemon and works without one.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use strata_policy::{ContextObs, Directive, ObjectObs};

use crate::linux::Linux;
use crate::{Machine, Stats};

/// Where the daemon keeps its state file unless told otherwise.
pub const STATE_FILE: &str = "/run/strata/stratad.json";

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

/// The daemon's state file: its statistics after its last round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    /// seconds since the epoch when it was written
    pub written_at: u64,
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
    /// the daemon's statistics, if a daemon is running (its state file names a live process)
    pub daemon: Option<DaemonState>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Write the daemon's state (a temporary file renamed over the old one, so a reader never
/// sees half of it).
pub fn write_state(path: &Path, stats: &Stats) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let state = DaemonState { pid: std::process::id(), written_at: now_secs(), stats: stats.clone() };
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&state).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

/// The daemon's state, if the file is there and its writer is alive.
pub fn read_state(path: &Path) -> Option<DaemonState> {
    let s: DaemonState = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Path::new(&format!("/proc/{}", s.pid)).exists().then_some(s)
}

/// Resident bytes per node of process `pid`, from /proc/PID/numa_maps.
pub fn node_bytes(pid: u32) -> BTreeMap<u8, u64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")) else { return out };
    for line in text.lines() {
        let page_kb = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(4);
        for w in line.split_whitespace() {
            let Some((node, pages)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) else { continue };
            if let (Ok(node), Ok(pages)) = (node.parse::<u8>(), pages.parse::<u64>()) {
                *out.entry(node).or_default() += pages * page_kb * 1024;
            }
        }
    }
    out
}

/// Gather the status now; `top` contexts and objects at most.
pub fn gather(m: &mut Linux, state: &Path, top: usize) -> Status {
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
    let processes = m
        .processes()
        .into_iter()
        .map(|pid| {
            let mut tier_bytes = BTreeMap::new();
            for (node, bytes) in node_bytes(pid) {
                *tier_bytes.entry(tier_of.get(&node).copied().unwrap_or(u8::MAX)).or_default() += bytes;
            }
            let mine = objects.iter().filter(|o| o.pid == pid);
            ProcessStatus {
                pid,
                command: std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().into(),
                tier_bytes,
                contexts: contexts.iter().filter(|c| c.pid == pid).count(),
                objects: mine.clone().count(),
                tracked_bytes: mine.map(|o| o.len).sum(),
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
        daemon: read_state(state),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_resident_bytes_on_some_node() {
        let v = vec![1u8; 1 << 20];
        let bytes = node_bytes(std::process::id());
        assert!(bytes.values().sum::<u64>() >= v.len() as u64, "{bytes:?}");
    }

    #[test]
    fn the_state_file_is_read_back_while_its_writer_lives() {
        let dir = std::env::temp_dir().join(format!("strata-state-{}", std::process::id()));
        let path = dir.join("stratad.json");
        let stats = Stats { policy: "ambix".into(), rounds: 7, ..Stats::default() };
        write_state(&path, &stats).unwrap();
        let s = read_state(&path).expect("written by a live process: this one");
        assert_eq!((s.pid, s.stats.rounds), (std::process::id(), 7));
        // a state file whose writer is gone is not a running daemon's
        let dead = DaemonState { pid: u32::MAX - 1, written_at: 0, stats };
        std::fs::write(&path, serde_json::to_vec(&dead).unwrap()).unwrap();
        assert!(read_state(&path).is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
