//! What a daemon can observe and how it can move pages on this machine (`strata daemon
//! --probe`): each way of tracking a process's accesses and each mover, whether the kernel and
//! hardware here offer it, and why not.
//!
//! Every probe is tried for real on this process's own memory (a soft-dirty bit set by a
//! write, a written page found by `PAGEMAP_SCAN`), not inferred from the kernel version. None
//! changes anything outside this process: DAMON is only read (a context the daemon did not
//! create is never reconfigured), and `perf_event_open` counts this process only.
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::migrate;
use crate::tracker::{damon_vaddr, hint_fault, pagemap_scan, soft_dirty};

/// One tracker and its verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrackerVerdict {
    pub name: String,
    /// what it observes
    pub sees: String,
    pub available: bool,
    /// whether the daemon uses it where it is available (the others are probed only)
    pub used: bool,
    /// how it was found available, or why it is not
    pub reason: String,
}

/// Every tracker, in the order a daemon prefers them.
pub fn probe() -> Vec<TrackerVerdict> {
    let t = |name: &str, sees: &str, used: bool, r: Result<String, String>| TrackerVerdict {
        name: name.into(),
        sees: sees.into(),
        available: r.is_ok(),
        used,
        reason: r.unwrap_or_else(|e| e),
    };
    vec![
        t("perf-mem", "sampled loads and stores with addresses (reads and writes)", false, perf_mem()),
        t("damon-vaddr", damon_vaddr::SEES, true, damon_vaddr::probe()),
        t("idle-page", "pages accessed since marked idle (reads and writes)", false, idle_page()),
        t("pagemap-scan", pagemap_scan::SEES, true, pagemap_scan::probe()),
        t("soft-dirty", soft_dirty::SEES, true, soft_dirty::probe()),
        t("hint-fault", hint_fault::SEES, true, hint_fault::probe()),
    ]
}

/// One way of moving pages between nodes, and its verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MoverVerdict {
    pub name: String,
    pub how: String,
    pub available: bool,
    /// how it was found available, or why it is not
    pub reason: String,
}

/// Every mover (`mover.mechanism`): the transactional one needs what it was found to need.
pub fn movers() -> Vec<MoverVerdict> {
    let m = |name: &str, how: &str, r: Result<String, String>| MoverVerdict {
        name: name.into(),
        how: how.into(),
        available: r.is_ok(),
        reason: r.unwrap_or_else(|e| e),
    };
    vec![
        m("move_pages", "the kernel copies while the process's accesses to the page wait", migrate::probe_move_pages()),
        m(
            "transactional",
            "the process's agent copies while the page stays in use, commits if unwritten, keeps shadows",
            migrate::probe_transactional(),
        ),
    ]
}

fn perf_mem() -> Result<String, String> {
    let devices = Path::new("/sys/bus/event_source/devices");
    for (path, what) in [("cpu/events/mem-loads", "Intel PEBS mem-loads"), ("ibs_op", "AMD IBS op sampling")] {
        if devices.join(path).exists() {
            return Ok(format!("{what} ({})", devices.join(path).display()));
        }
    }
    let mut pmus: Vec<String> = fs::read_dir(devices)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    pmus.sort();
    Err(format!(
        "no PMU with memory sampling (no cpu/events/mem-loads, no ibs_op; event sources: {})",
        if pmus.is_empty() { "none".into() } else { pmus.join(", ") }
    ))
}

fn idle_page() -> Result<String, String> {
    let bitmap = "/sys/kernel/mm/page_idle/bitmap";
    match fs::File::open(bitmap) {
        Ok(_) => Ok(format!("{bitmap} is readable")),
        Err(e) => Err(format!("{bitmap}: {e} (CONFIG_IDLE_PAGE_TRACKING)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tracker_gets_a_verdict_with_a_reason() {
        let p = probe();
        assert_eq!(p.len(), 6);
        assert!(p.iter().all(|t| !t.reason.is_empty()), "{p:?}");
        // samples need what the transactional mover needs
        let hint = p.iter().find(|t| t.name == "hint-fault").unwrap();
        assert!(!hint.available || movers()[1].available, "{p:?}");
    }

    #[test]
    fn every_mover_gets_a_verdict_and_transactional_needs_at_least_what_pagemap_scan_needs() {
        let m = movers();
        assert!(m[0].available, "{m:?}");
        // the same kernel facility the pagemap-scan tracker needs (6.7) and one release more:
        // where PAGEMAP_SCAN is missing, UFFDIO_MOVE is too
        if pagemap_scan::probe().is_err() {
            assert!(!m[1].available, "{m:?}");
        }
        assert!(!m[1].reason.is_empty());
    }
}
