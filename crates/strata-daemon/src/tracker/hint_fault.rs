//! `hint-fault`: pagemap-scan's writes, and reads from samples. Each pass, a process's agent
//! (libstrata/agent/sample.c) makes one page of every 2 MiB block the last pass found present
//! missing until touched (the block's page chosen anew each pass, at most
//! STRATA_AGENT_MAX_PAGES a process a pass, in turns beyond that); a block whose sample was
//! touched counts as read, every page of it, for [`READ_WINDOW`](super::READ_WINDOW). It needs
//! pagemap-scan and the agent (Linux 6.8: UFFDIO_MOVE), and is asked for by name: it makes the
//! program wait on the pages it samples.
use std::collections::BTreeMap;
use std::time::Duration;

use stratad::config::TrackerKind;

use super::{pagemap_scan, Offers, Scanned, Target, Tracker};

/// What it sees, as `strata daemon --probe` says.
pub const SEES: &str = "first access to sampled pages made missing (reads and writes)";

/// It samples one page of every block this large each pass (DAMON's regions, fixed).
const BLOCK: u64 = 2 << 20;

pub struct HintFault {
    writes: pagemap_scan::PagemapScan,
    /// rounds a read counts for
    keep: usize,
    /// per process: the pass each block (address / BLOCK) was last seen touched, and which
    /// block the next pass's samples start from
    seen: BTreeMap<u32, BTreeMap<u64, u64>>,
    next: BTreeMap<u32, u64>,
}

impl HintFault {
    pub fn new(round: Duration) -> HintFault {
        HintFault {
            writes: pagemap_scan::PagemapScan::here(),
            keep: super::window_rounds(round),
            seen: BTreeMap::new(),
            next: BTreeMap::new(),
        }
    }
}

impl Tracker for HintFault {
    fn kind(&self) -> TrackerKind {
        TrackerKind::HintFault
    }

    fn cannot_see(&self, p: Offers) -> Option<&'static str> {
        self.writes.cannot_see(p)
    }

    fn watches(&self, _pid: u32, p: Offers) -> bool {
        self.cannot_see(p).is_none() && p.agent
    }

    /// Each process's agent reports the samples touched since the last pass and takes new ones.
    fn start_pass(&mut self, targets: &mut [Target<'_>], pass: u64) {
        for t in targets.iter_mut() {
            let pages = t.pages;
            // each block, and where its pages start (address order)
            let blocks: Vec<(u64, usize)> = (0..pages.len())
                .filter(|&i| i == 0 || pages[i].0 / BLOCK != pages[i - 1].0 / BLOCK)
                .map(|i| (pages[i].0 / BLOCK, i))
                .collect();
            let max = strata_sys::STRATA_AGENT_MAX_PAGES;
            let next = self.next.entry(t.pid).or_default();
            let start = blocks.partition_point(|(b, _)| *b < *next);
            let chosen: Vec<u64> = (0..blocks.len().min(max))
                .map(|i| (start + i) % blocks.len())
                .map(|k| {
                    let (b, from) = blocks[k];
                    let to = blocks.get(k + 1).map_or(pages.len(), |n| n.1);
                    let pick = (b.wrapping_mul(0x9E37_79B9) ^ pass.wrapping_mul(0x85EB_CA6B)) as usize % (to - from);
                    pages[from + pick].0
                })
                .collect();
            *next = blocks.get((start + max) % blocks.len().max(1)).map_or(0, |(b, _)| *b);
            let Some(agent) = t.agent.as_mut() else { continue };
            let seen = self.seen.entry(t.pid).or_default();
            match agent.sample(&chosen) {
                Ok(touched) => {
                    for (page, _) in touched {
                        seen.insert(page / BLOCK, pass);
                    }
                    let keep = self.keep.max(blocks.len().div_ceil(max)) as u64;
                    seen.retain(|_, at| pass - *at <= keep);
                }
                Err(e) => {
                    if !crate::agent::closed(&e) {
                        eprintln!("strata daemon: process {}'s agent stopped answering ({e}); no more samples", t.pid);
                    }
                    *t.agent = None;
                    seen.clear();
                }
            }
        }
    }

    fn scan(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String> {
        let seen = self.seen.get(&pid);
        pagemap_scan::scan(pid, from, max, &|a| seen.is_some_and(|s| s.contains_key(&(a / BLOCK))))
    }

    fn forget(&mut self, live: &dyn Fn(u32) -> bool) {
        self.seen.retain(|pid, _| live(*pid));
        self.next.retain(|pid, _| live(*pid));
    }
}

/// Whether this kernel and this daemon can: pagemap-scan for the writes, and what the
/// transactional mover needs for the samples.
pub fn probe() -> Result<String, String> {
    pagemap_scan::probe().map_err(|e| format!("it adds reads to pagemap-scan, which is unavailable: {e}"))?;
    crate::migrate::probe_transactional().map_err(|e| format!("the agent cannot sample: {e}"))?;
    Ok("a process's agent can make a page missing and move it back when touched (UFFDIO_MOVE), \
        with pagemap-scan for writes; asked for by name in daemon.trackers"
        .into())
}
