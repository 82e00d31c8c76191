//! `soft-dirty`: writes to every private anonymous mapping of a process, from pagemap's
//! soft-dirty bit, cleared (`clear_refs` 4) when a whole pass ends. Any process can be seen so
//! (one attached by hand too), where the kernel is built with soft-dirty bits. A page read and
//! not written looks idle.
use std::fs::File;

use stratad::config::TrackerKind;

use super::{Offers, Scanned, Tracker};
use crate::pagemap;
use crate::scratch::Page;

/// What it sees, as `strata daemon --probe` says.
pub const SEES: &str = "pages written since the bits were cleared (writes only)";

use crate::PAGE;

pub struct SoftDirty {
    /// the kernel has soft-dirty bits
    available: bool,
}

impl SoftDirty {
    /// As this kernel has it (probed).
    pub fn here() -> SoftDirty {
        SoftDirty { available: probe().is_ok() }
    }
}

impl Tracker for SoftDirty {
    fn kind(&self) -> TrackerKind {
        TrackerKind::SoftDirty
    }

    fn cannot_see(&self, _p: Offers) -> Option<&'static str> {
        (!self.available).then_some("this kernel has no soft-dirty bits")
    }

    fn scan(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String> {
        scan(pid, from, max, true, &|_| false)
    }

    fn end_pass(&mut self, pids: &[u32]) {
        clear(pids);
    }
}

/// Every present page of process `pid`'s private anonymous mappings from `from`, at most `max`
/// pages looked at: written if soft-dirty (with `bits`: the kernel has them), accessed if
/// written or if `read` says so.
pub(crate) fn scan(pid: u32, from: u64, max: u64, bits: bool, read: &dyn Fn(u64) -> bool) -> Result<Scanned, String> {
    let pm = File::open(format!("/proc/{pid}/pagemap")).map_err(|e| format!("/proc/{pid}/pagemap: {e}"))?;
    let mut present = Vec::new();
    let mut taken = 0u64;
    for (lo, hi) in anonymous_ranges(pid) {
        let mut addr = lo.max(from);
        while addr < hi {
            if taken >= max {
                return Ok((present, taken, Some(addr)));
            }
            let n = ((hi - addr) / PAGE).min(max - taken).min(4096) as usize;
            let Ok(entries) = pagemap::entries(&pm, addr, n) else { break };
            for (i, &e) in entries.iter().enumerate().filter(|(_, &e)| pagemap::present(e)) {
                let a = addr + i as u64 * PAGE;
                let dirty = bits && pagemap::soft_dirty(e);
                present.push((a, dirty || read(a), dirty));
            }
            taken += n as u64;
            addr += n as u64 * PAGE;
        }
    }
    Ok((present, taken, None))
}

/// Start the soft-dirty bits of these processes again from clean.
pub(crate) fn clear(pids: &[u32]) {
    for pid in pids {
        let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "4");
    }
}

/// The private anonymous writable mappings of a process, [start, end), in address order.
pub(crate) fn anonymous_ranges(pid: u32) -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return Vec::new() };
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or("");
        let p = perms.as_bytes();
        let anonymous = inode == "0" && (path.is_empty() || path == "[heap]" || path == "[stack]");
        if p.len() < 4 || p[0] != b'r' || p[1] != b'w' || p[3] != b'p' || !anonymous {
            continue;
        }
        if let Some((a, b)) = range.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                out.push((a, b));
            }
        }
    }
    out
}

/// Whether this kernel has it: a page of the daemon's own shows the bit after a write that
/// follows clear_refs 4, and not before.
pub fn probe() -> Result<String, String> {
    let page = Page::new()?;
    std::fs::write("/proc/self/clear_refs", "4").map_err(|e| format!("/proc/self/clear_refs: {e}"))?;
    let entry = || {
        let f = File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
        pagemap::entries(&f, page.addr(), 1).map(|v| v[0]).map_err(|e| format!("/proc/self/pagemap: {e}"))
    };
    let clean = pagemap::soft_dirty(entry()?);
    page.write(2);
    let dirty = pagemap::soft_dirty(entry()?);
    match (clean, dirty) {
        (false, true) => Ok("a written page showed the soft-dirty bit (pagemap bit 55) after clear_refs 4".into()),
        _ => Err("a page written after clear_refs 4 shows no soft-dirty bit: the kernel is built without \
                  CONFIG_MEM_SOFT_DIRTY"
            .into()),
    }
}
