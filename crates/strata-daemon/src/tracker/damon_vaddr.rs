//! `damon-vaddr`: reads and writes, from DAMON's monitor of virtual address spaces
//! ([`crate::damon`]; kernels built with `CONFIG_DAMON_VADDR`, Debian's 6.12, not its 6.1). At
//! the start of each pass DAMON monitors the first processes (by pid) up to
//! `daemon.damon_max_processes`, and its regions of each are read; a page counts as accessed
//! when written (soft-dirty, where the kernel has it) or in a region DAMON saw accessed within
//! [`READ_WINDOW`](super::READ_WINDOW). The pages are those of every private anonymous mapping.
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use stratad::config::TrackerKind;

use super::{soft_dirty, Offers, Scanned, Target, Tracker};
use crate::damon::{self, Damon, Region};

/// What it sees, as `strata daemon --probe` says.
pub const SEES: &str = "accessed regions of a process (reads and writes, sampled)";

pub struct DamonVaddr {
    /// DAMON, when this kernel has it and no other tool configured it
    damon: Option<Damon>,
    /// processes it monitors at most
    max: usize,
    /// its aggregation interval: the round less a fifth, so a round can wait for it
    aggr_us: u64,
    /// per process, DAMON's last reads (the latest last), as many as cover READ_WINDOW
    regions: BTreeMap<u32, VecDeque<Vec<Region>>>,
    keep: usize,
    /// the kernel has soft-dirty bits, for the writes
    soft_dirty: bool,
}

impl DamonVaddr {
    /// The tracker, and why DAMON cannot be used here if it cannot (then it sees nothing).
    pub fn open(max: usize, round: Duration) -> (DamonVaddr, Option<String>) {
        let (damon, why) = match Damon::open() {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(e)),
        };
        let d = DamonVaddr {
            damon,
            max,
            aggr_us: (round.as_micros() as u64 * 4 / 5).max(5000),
            regions: BTreeMap::new(),
            keep: super::window_rounds(round),
            soft_dirty: soft_dirty::probe().is_ok(),
        };
        (d, why)
    }
}

impl Tracker for DamonVaddr {
    fn kind(&self) -> TrackerKind {
        TrackerKind::DamonVaddr
    }

    fn cannot_see(&self, _p: Offers) -> Option<&'static str> {
        self.damon.is_none().then_some("DAMON for processes is not in this kernel or not set up")
    }

    fn watches(&self, pid: u32, _p: Offers) -> bool {
        self.damon.as_ref().is_some_and(|d| d.pids().contains(&pid))
    }

    /// DAMON monitors the first processes (by pid) up to its limit, and what it saw of them is
    /// read.
    fn start_pass(&mut self, targets: &mut [Target<'_>], _pass: u64) {
        let Some(d) = self.damon.as_mut() else { return };
        let chosen: Vec<u32> = targets.iter().map(|t| t.pid).take(self.max).collect();
        self.regions.retain(|pid, _| chosen.contains(pid));
        if let Err(e) = d.monitor(&chosen, self.aggr_us) {
            eprintln!("strata daemon: DAMON: {e}");
            return;
        }
        for (pid, r) in d.regions() {
            match r {
                Ok(regions) => {
                    let reads = self.regions.entry(pid).or_default();
                    reads.push_back(regions);
                    while reads.len() > self.keep {
                        reads.pop_front();
                    }
                }
                Err(e) => {
                    if let Some(t) = targets.iter_mut().find(|t| t.pid == pid) {
                        *t.error = Some(format!("DAMON: {e}"));
                    }
                }
            }
        }
    }

    fn scan(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String> {
        let reads = self.regions.get(&pid);
        let read =
            |addr: u64| reads.is_some_and(|r| r.iter().any(|regions| damon::accessed(regions, addr) == Some(true)));
        soft_dirty::scan(pid, from, max, self.soft_dirty, &read)
    }

    fn end_pass(&mut self, pids: &[u32]) {
        if self.soft_dirty {
            soft_dirty::clear(pids);
        }
    }

    fn forget(&mut self, live: &dyn Fn(u32) -> bool) {
        self.regions.retain(|pid, _| live(*pid));
    }
}

/// Whether this kernel has it: a kdamond of the probe's own, made and removed (never one
/// another tool configured).
pub fn probe() -> Result<String, String> {
    Damon::open().map(|_| "DAMON with vaddr operations, unused by any other tool".to_string())
}
