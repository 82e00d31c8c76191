//! Real Linux as the engine's machine (the live daemon's): the processes running under Strata,
//! found by their channels; nodes and tiers from sysfs; writes seen through soft-dirty bits;
//! pages located and moved by `move_pages(2)`.
//!
//! What this machine observes is what the kernel offers (`strata daemon --probe`,
//! docs/daemon.md): with soft-dirty (the Debian 6.1 and 6.12 kernels) a scan reports the pages
//! written since the previous full scan, as both accessed and dirty; reads are not seen. Where
//! the kernel has no soft-dirty, the machine cannot scan and the engine refuses policies that
//! need scans. The scan covers the memory Strata knows: each process's tracked objects.
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use strata_policy::{ContextObs, Directive, Node, NodeObs, ObjectObs, PageObs, Tier};

use crate::channel::{Channel, ChannelError};
use crate::machine::{move_statuses, Machine, MoveStatus, Refusal};

const PAGE: u64 = 4096;
const MPOL_MF_MOVE: libc::c_int = 1 << 1;
/// processes are looked for this often (a scan of every process's open files)
const DISCOVERY: Duration = Duration::from_secs(1);

pub struct Linux {
    start: Instant,
    sysfs: PathBuf,
    channels: BTreeMap<u32, Channel>,
    /// processes whose channel was refused, with why (said once, then left alone)
    pub refused: BTreeMap<u32, String>,
    discovered: Option<Instant>,
    tier_of: BTreeMap<Node, Tier>,
    soft_dirty: bool,
    /// where the scan goes on: the next process and address
    cursor: (u32, u64),
}

/// move_pages(2) on another process; `nodes` None only asks where the pages are.
fn move_pages(pid: u32, pages: &[u64], nodes: Option<&[libc::c_int]>) -> Result<Vec<libc::c_int>, i32> {
    let ptrs: Vec<*mut libc::c_void> = pages.iter().map(|&a| a as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    let nodes_ptr = nodes.map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: the arrays have pages.len() elements and outlive the call
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_long,
            ptrs.len() as libc::c_ulong,
            ptrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            MPOL_MF_MOVE,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    Ok(status)
}

impl Linux {
    pub fn new() -> Linux {
        Linux {
            start: Instant::now(),
            sysfs: PathBuf::from("/sys"),
            channels: BTreeMap::new(),
            refused: BTreeMap::new(),
            discovered: None,
            tier_of: BTreeMap::new(),
            soft_dirty: crate::probe::soft_dirty().is_ok(),
            cursor: (0, 0),
        }
    }

    /// The processes under Strata now (found at most once a second).
    pub fn processes(&mut self) -> Vec<u32> {
        self.discover();
        self.channels.keys().copied().collect()
    }

    /// Look for new processes with a channel, forget those that exited. A channel with a bad
    /// magic, version or sizes is refused for that process, once, with a line on stderr.
    pub fn discover(&mut self) {
        if self.discovered.is_some_and(|t| t.elapsed() < DISCOVERY) {
            return;
        }
        self.discovered = Some(Instant::now());
        self.channels.retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
        self.refused.retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
        let Ok(dir) = std::fs::read_dir("/proc") else { return };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid == std::process::id() || self.channels.contains_key(&pid) || self.refused.contains_key(&pid) {
                continue;
            }
            match Channel::open(pid) {
                Ok(c) => {
                    self.channels.insert(pid, c);
                }
                Err(ChannelError::Bad { why, .. }) => {
                    eprintln!("strata daemon: process {pid}: its channel is refused: {why}");
                    self.refused.insert(pid, why);
                }
                Err(_) => {}
            }
        }
    }

    /// The node of each page of process `pid` (None: not resident, or the process is gone).
    fn nodes_of(pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        match move_pages(pid, pages, None) {
            Ok(st) => st.iter().map(|&s| (s >= 0).then_some(s as Node)).collect(),
            Err(_) => vec![None; pages.len()],
        }
    }

    /// The ranges the scan covers: each process's tracked objects, in (pid, address) order.
    fn ranges(&self) -> Vec<(u32, u64, u64)> {
        let mut objects = Vec::new();
        for c in self.channels.values() {
            c.objects(&mut objects);
        }
        let mut r: Vec<(u32, u64, u64)> = objects.iter().map(|o| (o.pid, o.addr, o.addr + o.len)).collect();
        r.sort_unstable();
        r
    }
}

impl Default for Linux {
    fn default() -> Self {
        Linux::new()
    }
}

impl Machine for Linux {
    fn page_bytes(&self) -> u64 {
        PAGE
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn nodes(&mut self) -> Vec<NodeObs> {
        let Ok(topo) = strata_topo::discover_at(&self.sysfs, None) else { return Vec::new() };
        let cpu_node = topo.nodes.iter().find(|n| n.has_cpus).map_or(0, |n| n.id);
        let mut nodes: Vec<NodeObs> = topo
            .nodes
            .iter()
            .map(|n| NodeObs {
                node: n.id as Node,
                tier: n.tier as Tier,
                distance: n.distances.iter().find(|d| d.0 == cpu_node).map_or(10, |d| d.1.min(255) as u8),
                capacity_bytes: n.total_bytes,
                free_bytes: n.free_bytes,
            })
            .collect();
        nodes.sort_by_key(|n| (n.distance, n.node));
        self.tier_of = nodes.iter().map(|n| (n.node, n.tier)).collect();
        nodes
    }

    fn can_scan(&self) -> bool {
        self.soft_dirty
    }

    /// Soft-dirty bits of the tracked objects' pages, from /proc/PID/pagemap; cleared for
    /// every process (clear_refs 4) when a full scan ends.
    fn scan(&mut self, max: u64, out: &mut Vec<PageObs>) -> bool {
        if !self.soft_dirty {
            return true;
        }
        self.discover();
        let mut taken = 0u64;
        let ranges = self.ranges();
        for (pid, lo, hi) in ranges {
            if (pid, hi) <= self.cursor {
                continue;
            }
            let Ok(pagemap) = File::open(format!("/proc/{pid}/pagemap")) else { continue };
            let mut addr = if pid == self.cursor.0 { lo.max(self.cursor.1) } else { lo };
            while addr < hi {
                if taken >= max {
                    self.cursor = (pid, addr);
                    return false;
                }
                let n = ((hi - addr) / PAGE).min(max - taken).min(4096) as usize;
                let Ok(entries) = crate::probe::read_pagemap(&pagemap, addr, n) else { break };
                let mut present = Vec::new();
                for (i, e) in entries.into_iter().enumerate() {
                    if e >> 63 & 1 == 1 {
                        present.push((addr + i as u64 * PAGE, e >> 55 & 1 == 1));
                    }
                }
                let addrs: Vec<u64> = present.iter().map(|p| p.0).collect();
                for ((a, written), node) in present.iter().zip(Linux::nodes_of(pid, &addrs)) {
                    let Some(node) = node else { continue };
                    let tier = self.tier_of.get(&node).copied().unwrap_or(Tier::MAX);
                    out.push(PageObs { pid, addr: *a, tier, node, accessed: *written, dirty: *written });
                }
                taken += n as u64;
                addr += n as u64 * PAGE;
            }
        }
        for pid in self.channels.keys() {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "4");
        }
        self.cursor = (0, 0);
        true
    }

    fn locate(&mut self, pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        Linux::nodes_of(pid, pages)
    }

    fn move_pages(&mut self, pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus> {
        let nodes = vec![to as libc::c_int; pages.len()];
        match move_pages(pid, pages, Some(&nodes)) {
            Ok(status) => move_statuses(&status, to),
            Err(e) => vec![Err(Refusal::from_errno(e)); pages.len()],
        }
    }

    fn set_directive(&mut self, pid: u32, context: u32, d: Directive) -> Result<(), Refusal> {
        match self.channels.get(&pid) {
            Some(c) if c.set_directive(context, d) => Ok(()),
            Some(_) => Err(Refusal::Other(libc::EINVAL)),
            None => Err(Refusal::Gone),
        }
    }

    /// The tracked objects of every process, each with its residency (move_pages).
    fn objects(&mut self, out: &mut Vec<ObjectObs>) {
        self.discover();
        let start = out.len();
        for c in self.channels.values() {
            c.objects(out);
        }
        for o in &mut out[start..] {
            let pages: Vec<u64> = (o.addr..o.addr + o.len).step_by(PAGE as usize).collect();
            for node in Linux::nodes_of(o.pid, &pages).into_iter().flatten() {
                o.resident_bytes += PAGE;
                if self.tier_of.get(&node) == Some(&0) {
                    o.fast_bytes += PAGE;
                }
            }
        }
    }

    fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        self.discover();
        for c in self.channels.values_mut() {
            c.contexts(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A shell under LD_PRELOAD=libstrata.so holding a 64 KiB variable (a tracked object).
    #[test]
    fn a_preloaded_process_is_found_its_objects_located_and_its_pages_gone_when_it_exits() {
        let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build/libstrata.so");
        assert!(lib.exists(), "run `make lib` first ({} is missing)", lib.display());
        let mut child = Command::new("sh")
            .args(["-c", "x=$(head -c 65536 /dev/zero | tr '\\0' a); sleep 30"])
            .env("LD_PRELOAD", &lib)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut m = Linux::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut objects = Vec::new();
        while Instant::now() < deadline {
            m.discovered = None; // look again now
            objects.clear();
            if m.processes().contains(&pid) {
                m.nodes();
                m.objects(&mut objects);
                if objects.iter().any(|o| o.pid == pid && o.resident_bytes > 0) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = objects.iter().find(|o| o.pid == pid && o.resident_bytes > 0).cloned();
        let _ = child.kill();
        let _ = child.wait();
        let o = o.unwrap_or_else(|| panic!("no resident tracked object of {pid}: {objects:?}"));
        assert!(o.fast_bytes <= o.resident_bytes && o.resident_bytes <= o.len.div_ceil(PAGE) * PAGE);
        // the process has exited: its pages are gone, not an error
        let st = m.move_pages(pid, &[o.addr], 0);
        assert_eq!(st, vec![Err(Refusal::Gone)]);
    }

    #[test]
    fn pages_of_this_process_are_located_and_moved_to_the_node_they_are_on() {
        let v = vec![7u8; 3 * PAGE as usize];
        let page = (v.as_ptr() as u64).next_multiple_of(PAGE);
        let pid = std::process::id();
        let mut m = Linux::new();
        let node = m.locate(pid, &[page])[0].expect("a touched page is resident");
        assert_eq!(m.move_pages(pid, &[page], node), vec![Ok(())]);
        assert_eq!(m.locate(pid, &[page]), vec![Some(node)]);
        assert_eq!(m.locate(pid, &[page + (1 << 40)]), vec![None], "an unmapped page");
    }
}
