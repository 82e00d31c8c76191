//! `pagemap-scan`: writes to the memory a process under Strata registered for asynchronous
//! write-protect (its channel says so; Linux 6.7+). One `PAGEMAP_SCAN` with
//! `PM_SCAN_WP_MATCHING` reports the present pages of that memory, which were written since
//! their last scan, and protects them again. A page read and not written looks idle.
use std::fs::File;

use stratad::config::TrackerKind;

use super::{Offers, Scanned, Tracker};
use crate::pagemap;
use crate::scratch::{Page, Uffd};

/// What it sees, as `strata daemon --probe` says.
pub const SEES: &str = "pages written since the last scan (writes only)";

use crate::PAGE;
/// the end of a user address space (x86-64, 4-level page tables: TASK_SIZE_MAX)
pub(crate) const USER_TOP: u64 = (1 << 47) - PAGE;

pub struct PagemapScan {
    /// the kernel has it
    available: bool,
}

impl PagemapScan {
    /// As this kernel has it (probed).
    pub fn here() -> PagemapScan {
        PagemapScan { available: probe().is_ok() }
    }
}

impl Tracker for PagemapScan {
    fn kind(&self) -> TrackerKind {
        TrackerKind::PagemapScan
    }

    fn cannot_see(&self, p: Offers) -> Option<&'static str> {
        if !self.available {
            Some("PAGEMAP_SCAN needs Linux 6.7")
        } else if !p.wp_async {
            Some("it needs the process's own userfaultfd, which only a process under Strata offers")
        } else {
            None
        }
    }

    fn scan(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String> {
        scan(pid, from, max, &|_| false)
    }
}

/// The present pages (not the shared zero page) of process `pid`'s registered memory from
/// `from`, at most `max`, written or not (matching protects them again; unregistered mappings
/// are skipped); a page counts as accessed when written or when `read` says so.
pub(crate) fn scan(pid: u32, from: u64, max: u64, read: &dyn Fn(u64) -> bool) -> Result<Scanned, String> {
    let pm = File::open(format!("/proc/{pid}/pagemap")).map_err(|e| format!("/proc/{pid}/pagemap: {e}"))?;
    let q = pagemap::Query {
        flags: pagemap::PM_SCAN_WP_MATCHING,
        inverted: pagemap::PAGE_IS_PFNZERO,
        mask: pagemap::PAGE_IS_PRESENT | pagemap::PAGE_IS_PFNZERO,
        report: pagemap::PAGE_IS_WRITTEN,
    };
    let mut regions = Vec::new();
    let end = pagemap::scan(&pm, from, USER_TOP, max, q, &mut regions).map_err(|e| format!("PAGEMAP_SCAN: {e}"))?;
    let mut present = Vec::new();
    for r in &regions {
        let written = r.categories & pagemap::PAGE_IS_WRITTEN != 0;
        present.extend((r.start..r.end).step_by(PAGE as usize).map(|a| (a, written || read(a), written)));
    }
    let n = present.len() as u64;
    Ok((present, n, (end < USER_TOP).then_some(end)))
}

/// Pages written in [start, end) of this process since the last call (which write-protects
/// them again).
fn scan_written(start: u64, end: u64) -> Result<Vec<pagemap::Region>, String> {
    let f = File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
    let q = pagemap::Query {
        flags: pagemap::PM_SCAN_WP_MATCHING | pagemap::PM_SCAN_CHECK_WPASYNC,
        inverted: 0,
        mask: pagemap::PAGE_IS_WRITTEN,
        report: pagemap::PAGE_IS_WRITTEN,
    };
    let mut out = Vec::new();
    pagemap::scan(&f, start, end, 0, q, &mut out).map_err(|e| format!("PAGEMAP_SCAN: {e}"))?;
    Ok(out)
}

/// Whether this kernel has it: a page of the daemon's own, registered for asynchronous
/// write-protect, is seen written by PAGEMAP_SCAN after a write, and not before.
pub fn probe() -> Result<String, String> {
    let uffd = Uffd::open(true)?;
    uffd.api(crate::scratch::UFFD_FEATURE_WP_ASYNC).map_err(|e| {
        format!("userfaultfd does not offer asynchronous write-protect (UFFD_FEATURE_WP_ASYNC, Linux 6.7): {e}")
    })?;
    let page = Page::new()?;
    uffd.register_wp(&page).map_err(|e| format!("UFFDIO_REGISTER (write-protect): {e}"))?;
    scan_written(page.addr(), page.addr() + PAGE)?; // protects it
    let before = scan_written(page.addr(), page.addr() + PAGE)?;
    page.write(3);
    let after = scan_written(page.addr(), page.addr() + PAGE)?;
    if before.is_empty() && after.len() == 1 {
        Ok("userfaultfd asynchronous write-protect + PAGEMAP_SCAN found the one page written".into())
    } else {
        Err(format!(
            "PAGEMAP_SCAN ran but did not see a write as written ({} region(s) before it, {} after)",
            before.len(),
            after.len()
        ))
    }
}
