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

use crate::pagemap;

/// One tracker and its verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tracker {
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
pub fn probe() -> Vec<Tracker> {
    let t = |name: &str, sees: &str, used: bool, r: Result<String, String>| Tracker {
        name: name.into(),
        sees: sees.into(),
        available: r.is_ok(),
        used,
        reason: r.unwrap_or_else(|e| e),
    };
    vec![
        t("perf-mem", "sampled loads and stores with addresses (reads and writes)", false, perf_mem()),
        t("damon-vaddr", "accessed regions of a process (reads and writes, sampled)", true, damon_vaddr()),
        t("idle-page", "pages accessed since marked idle (reads and writes)", false, idle_page()),
        t("pagemap-scan", "pages written since the last scan (writes only)", true, pagemap_scan()),
        t("soft-dirty", "pages written since the bits were cleared (writes only)", true, soft_dirty()),
        t("hint-fault", "first access to sampled pages made missing (reads and writes)", true, hint_fault()),
    ]
}

/// One way of moving pages between nodes, and its verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mover {
    pub name: String,
    pub how: String,
    pub available: bool,
    /// how it was found available, or why it is not
    pub reason: String,
}

/// Every mover (`mover.mechanism`): the transactional one needs what it was found to need.
pub fn movers() -> Vec<Mover> {
    let m = |name: &str, how: &str, r: Result<String, String>| Mover {
        name: name.into(),
        how: how.into(),
        available: r.is_ok(),
        reason: r.unwrap_or_else(|e| e),
    };
    vec![
        m("move_pages", "the kernel copies while the process's accesses to the page wait", move_pages()),
        m(
            "transactional",
            "the process's agent copies while the page stays in use, commits if unwritten, keeps shadows",
            transactional(),
        ),
    ]
}

fn move_pages() -> Result<String, String> {
    let page = Page::new()?;
    let mut p = page.addr() as *mut libc::c_void;
    let mut status = -1i32;
    // SAFETY: one page of our own, queried (no nodes given: nothing moves)
    let rc = unsafe {
        libc::syscall(libc::SYS_move_pages, 0, 1usize, &mut p as *mut _, std::ptr::null::<i32>(), &mut status, 0)
    };
    if rc != 0 || status < 0 {
        return Err(format!("move_pages(2) on a page of this process: {}", std::io::Error::last_os_error()));
    }
    Ok(format!("move_pages(2) found this process's page on node {status}"))
}

fn transactional() -> Result<String, String> {
    // SAFETY: a plain syscall; the descriptor is closed below (the daemon runs as root, as the
    // processes' agents need a full userfaultfd: root, /dev/userfaultfd, or
    // vm.unprivileged_userfaultfd)
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(format!(
            "a full userfaultfd: {} (a process's agent needs root, access to /dev/userfaultfd, or \
             vm.unprivileged_userfaultfd = 1)",
            std::io::Error::last_os_error()
        ));
    }
    let fd = fd as libc::c_int;
    let result = (|| {
        let mut api = [UFFD_API, UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_MOVE, 0u64];
        // SAFETY: uffdio_api is three u64s
        if unsafe { libc::ioctl(fd, UFFDIO_API, api.as_mut_ptr()) } != 0 {
            return Err(format!(
                "userfaultfd offers no UFFDIO_MOVE with asynchronous write-protect (Linux 6.8): {}; \
                 the daemon moves by move_pages",
                std::io::Error::last_os_error()
            ));
        }
        // a page moved for real: from one of ours into a registered, empty one
        let from = Page::new()?;
        from.write(42);
        let to = Page::new()?;
        // SAFETY: our own page, mapped by Page::new
        unsafe { libc::madvise(to.addr() as *mut libc::c_void, 4096, libc::MADV_DONTNEED) };
        let mut reg = [to.addr(), 4096, UFFDIO_REGISTER_MODE_WP, 0u64];
        // SAFETY: uffdio_register is a range (two u64s), a mode and the ioctls reported
        if unsafe { libc::ioctl(fd, UFFDIO_REGISTER, reg.as_mut_ptr()) } != 0 {
            return Err(format!("UFFDIO_REGISTER: {}", std::io::Error::last_os_error()));
        }
        let mut mv = [to.addr(), from.addr(), 4096u64, 0u64, 0u64];
        // SAFETY: uffdio_move is dst, src, len, mode and the bytes moved
        if unsafe { libc::ioctl(fd, UFFDIO_MOVE, mv.as_mut_ptr()) } != 0 {
            return Err(format!("UFFDIO_MOVE of a page: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `to` is mapped and now holds the moved page
        match unsafe { std::ptr::read_volatile(to.0) } {
            42 => Ok("a full userfaultfd with UFFDIO_MOVE moved a page of this process whole".into()),
            v => Err(format!("UFFDIO_MOVE ran but the page reads {v}, not what was written")),
        }
    })();
    // SAFETY: our descriptor
    unsafe { libc::close(fd) };
    result
}

/// A page of this process's own, mapped and touched; unmapped on drop.
struct Page(*mut u8);

impl Page {
    fn new() -> Result<Page, String> {
        // SAFETY: an anonymous private mapping of one page; checked for failure
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let page = Page(p as *mut u8);
        page.write(1);
        Ok(page)
    }
    fn write(&self, v: u8) {
        // SAFETY: the page is mapped read-write by new()
        unsafe { std::ptr::write_volatile(self.0, v) }
    }
    fn addr(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping made by new()
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 4096) };
    }
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

fn damon_vaddr() -> Result<String, String> {
    // a kdamond of the probe's own, made and removed (never one another tool configured)
    crate::damon::Damon::open().map(|_| "DAMON with vaddr operations, unused by any other tool".to_string())
}

fn idle_page() -> Result<String, String> {
    let bitmap = "/sys/kernel/mm/page_idle/bitmap";
    match fs::File::open(bitmap) {
        Ok(_) => Ok(format!("{bitmap} is readable")),
        Err(e) => Err(format!("{bitmap}: {e} (CONFIG_IDLE_PAGE_TRACKING)")),
    }
}

/// The pagemap entry of this process's page at `addr`.
fn pagemap_entry(addr: u64) -> Result<u64, String> {
    let f = fs::File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
    pagemap::entries(&f, addr, 1).map(|v| v[0]).map_err(|e| format!("/proc/self/pagemap: {e}"))
}

pub(crate) fn soft_dirty() -> Result<String, String> {
    let page = Page::new()?;
    fs::write("/proc/self/clear_refs", "4").map_err(|e| format!("/proc/self/clear_refs: {e}"))?;
    let clean = pagemap::soft_dirty(pagemap_entry(page.addr())?);
    page.write(2);
    let dirty = pagemap::soft_dirty(pagemap_entry(page.addr())?);
    match (clean, dirty) {
        (false, true) => Ok("a written page showed the soft-dirty bit (pagemap bit 55) after clear_refs 4".into()),
        _ => Err("a page written after clear_refs 4 shows no soft-dirty bit: the kernel is built without \
                  CONFIG_MEM_SOFT_DIRTY"
            .into()),
    }
}

// userfaultfd (linux/userfaultfd.h)
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const UFFDIO_MOVE: libc::c_ulong = 0xc028_aa05;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;

/// Pages written in [start, end) since the last call (which write-protects them again).
fn scan_written(start: u64, end: u64) -> Result<Vec<pagemap::Region>, String> {
    let f = fs::File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
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

pub(crate) fn pagemap_scan() -> Result<String, String> {
    // SAFETY: a plain syscall; the descriptor is closed below
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY) };
    if fd < 0 {
        return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()));
    }
    let fd = fd as libc::c_int;
    let result = (|| {
        let mut api = [UFFD_API, UFFD_FEATURE_WP_ASYNC, 0u64];
        // SAFETY: uffdio_api is three u64s
        if unsafe { libc::ioctl(fd, UFFDIO_API, api.as_mut_ptr()) } != 0 {
            return Err(format!(
                "userfaultfd does not offer asynchronous write-protect (UFFD_FEATURE_WP_ASYNC, Linux 6.7): {}",
                std::io::Error::last_os_error()
            ));
        }
        let page = Page::new()?;
        let mut reg = [page.addr(), 4096, UFFDIO_REGISTER_MODE_WP, 0u64];
        // SAFETY: uffdio_register is a range (two u64s), a mode and the ioctls reported
        if unsafe { libc::ioctl(fd, UFFDIO_REGISTER, reg.as_mut_ptr()) } != 0 {
            return Err(format!("UFFDIO_REGISTER (write-protect): {}", std::io::Error::last_os_error()));
        }
        scan_written(page.addr(), page.addr() + 4096)?; // protects it
        let before = scan_written(page.addr(), page.addr() + 4096)?;
        page.write(3);
        let after = scan_written(page.addr(), page.addr() + 4096)?;
        if before.is_empty() && after.len() == 1 {
            Ok("userfaultfd asynchronous write-protect + PAGEMAP_SCAN found the one page written".into())
        } else {
            Err(format!(
                "PAGEMAP_SCAN ran but did not see a write as written ({} region(s) before it, {} after)",
                before.len(),
                after.len()
            ))
        }
    })();
    // SAFETY: our descriptor
    unsafe { libc::close(fd) };
    result
}

/// The hint-fault tracker: pagemap-scan's writes, and reads from pages the process's agent
/// samples (libstrata/agent/sample.c), which needs what the transactional mover needs.
fn hint_fault() -> Result<String, String> {
    pagemap_scan().map_err(|e| format!("it adds reads to pagemap-scan, which is unavailable: {e}"))?;
    transactional().map_err(|e| format!("the agent cannot sample: {e}"))?;
    Ok("a process's agent can make a page missing and move it back when touched (UFFDIO_MOVE), \
        with pagemap-scan for writes; asked for by name in daemon.trackers"
        .into())
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
        if pagemap_scan().is_err() {
            assert!(!m[1].available, "{m:?}");
        }
        assert!(!m[1].reason.is_empty());
    }
}
