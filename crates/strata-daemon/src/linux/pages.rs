//! Where a managed process's pages are. From each page's frame in pagemap and the memory blocks
//! of each node in sysfs ([`Frames`]) when the daemon may see frames (root), else
//! `move_pages(2)` with no target. Each pass keeps every present page's node as it found it (in
//! address order); the next pass takes it from there, and reads it again from the frame only
//! when unknown or in that pass's stripe of 2 MiB blocks (one pass in [`REFRESH_PASSES`]), or
//! when the page is moved (it then knows where to).
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use strata_policy::{Node, PageObs, Tier};
use stratad::MoveStatus;

use crate::pagemap::{self, Frames};

use crate::PAGE;
/// a page's node is read again (from its frame) at least every this many passes; in between
/// the machine keeps what it last read or moved it to. A pass reads again one stripe of 2 MiB
/// blocks of the address space (whole blocks: one read of pagemap each)
const REFRESH_PASSES: u64 = 8;
const REFRESH_BLOCK: u64 = 2 << 20;

/// What the passes know of one process's pages.
#[derive(Default)]
struct Known {
    /// each present page's node as the last pass found it, and as this pass does (both in
    /// address order), with how far this pass has read the first
    last: Vec<(u64, Node)>,
    now: Vec<(u64, Node)>,
    at: usize,
    /// bytes its tracker found in each tier (index: the tier) in the pass going on, and in
    /// the last whole one
    tiers_now: Vec<u64>,
    tiers_last: Option<Vec<u64>>,
}

pub(crate) struct Pages {
    frames: Frames,
    known: BTreeMap<u32, Known>,
}

impl Pages {
    pub fn new(sysfs: &Path) -> Pages {
        Pages { frames: Frames::load(sysfs), known: BTreeMap::new() }
    }

    /// Memory came or went (hot-plugged blocks): the frames' nodes too, and what the passes
    /// know of pages' nodes is read again.
    pub fn reload(&mut self, sysfs: &Path) {
        self.frames = Frames::load(sysfs);
        for k in self.known.values_mut() {
            (k.last, k.at) = (Vec::new(), 0);
        }
    }

    /// Forget the processes that are gone.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.known.retain(|pid, _| live(*pid));
    }

    /// Process `pid`'s present pages as the last whole pass found them, in address order.
    pub fn last(&self, pid: u32) -> &[(u64, Node)] {
        self.known.get(&pid).map_or(&[], |k| &k.last)
    }

    /// Bytes per tier its tracker found in the last whole pass (None: no pass ended yet).
    pub fn tiers_last(&self, pid: u32) -> Option<&Vec<u64>> {
        self.known.get(&pid).and_then(|k| k.tiers_last.as_ref())
    }

    /// The node of each page of process `pid` (None: not resident, or the process is gone):
    /// from the pages' frames where the daemon can see them, else from move_pages(2).
    pub fn nodes_of(&self, pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        self.nodes_by_frame(pid, pages).unwrap_or_else(|| crate::migrate::locate(pid, pages))
    }

    /// Nodes from frames: None when frames are hidden (not root) or pagemap cannot be read.
    fn nodes_by_frame(&self, pid: u32, pages: &[u64]) -> Option<Vec<Option<Node>>> {
        let f = File::open(format!("/proc/{pid}/pagemap")).ok()?;
        let mut out = Vec::with_capacity(pages.len());
        let mut i = 0;
        while i < pages.len() {
            // a run of consecutive pages is one read
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + PAGE && j - i < 4096 {
                j += 1;
            }
            for e in pagemap::entries(&f, pages[i], j - i).ok()? {
                if !pagemap::present(e) {
                    out.push(None);
                    continue;
                }
                out.push(Some(self.frames.node(pagemap::pfn(e))?));
            }
            i = j;
        }
        Some(out)
    }

    /// The pages a scan reports, from present (address, accessed, written) triples of process
    /// `pid` in address order, in pass number `pass`: each page's node as this pass last read
    /// or moved it, read again (from its frame) when unknown or in this pass's stripe of pages.
    pub fn observe(
        &mut self,
        pid: u32,
        present: &[(u64, bool, bool)],
        pass: u64,
        tier_of: &BTreeMap<Node, Tier>,
        out: &mut Vec<PageObs>,
    ) {
        let stripe = pass % REFRESH_PASSES;
        let k = self.known.entry(pid).or_default();
        let mut cached: Vec<Option<Node>> = Vec::with_capacity(present.len());
        for &(addr, _, _) in present {
            while k.at < k.last.len() && k.last[k.at].0 < addr {
                k.at += 1;
            }
            let node = k.last.get(k.at).filter(|e| e.0 == addr).map(|e| e.1);
            cached.push(node.filter(|_| (addr / REFRESH_BLOCK) % REFRESH_PASSES != stripe));
        }
        let unknown: Vec<u64> = present.iter().zip(&cached).filter(|(_, c)| c.is_none()).map(|(p, _)| p.0).collect();
        let mut read = self.nodes_of(pid, &unknown).into_iter();
        let k = self.known.entry(pid).or_default();
        for (&(addr, accessed, dirty), c) in present.iter().zip(cached) {
            let Some(node) = c.or_else(|| read.next().flatten()) else { continue };
            k.now.push((addr, node));
            let tier = tier_of.get(&node).copied().unwrap_or(Tier::MAX);
            out.push(PageObs { pid, addr, tier, node, accessed, dirty });
            if tier != Tier::MAX {
                let t = tier as usize;
                if k.tiers_now.len() <= t {
                    k.tiers_now.resize(t + 1, 0);
                }
                k.tiers_now[t] += PAGE;
            }
        }
    }

    /// The pages moved: their nodes, as this pass and the last one know them.
    pub fn moved(&mut self, pid: u32, pages: &[u64], status: &[MoveStatus], to: Node) {
        let Some(k) = self.known.get_mut(&pid) else { return };
        for (&addr, st) in pages.iter().zip(status) {
            if st.is_ok() {
                for v in [&mut k.last, &mut k.now] {
                    if let Ok(i) = v.binary_search_by_key(&addr, |e| e.0) {
                        v[i].1 = to;
                    }
                }
            }
        }
    }

    /// A whole pass over processes `pids` ended: what it found is what the next one starts
    /// from (a process it found nothing of has nothing, not unknown).
    pub fn end_pass(&mut self, pids: &[u32]) {
        for &pid in pids {
            self.known.entry(pid).or_default();
        }
        for k in self.known.values_mut() {
            k.tiers_last = Some(std::mem::take(&mut k.tiers_now));
            // (the last pass's vector becomes the next one's, allocation and all)
            std::mem::swap(&mut k.last, &mut k.now);
            k.now.clear();
            k.at = 0;
        }
    }
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
