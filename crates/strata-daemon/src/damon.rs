//! DAMON for virtual address spaces, through its sysfs interface
//! (`/sys/kernel/mm/damon/admin/kdamonds`): which regions of a process were accessed, reads and
//! writes alike, sampled by the kernel. The tracker that sees reads where the kernel has it
//! (`CONFIG_DAMON_VADDR`: Debian's 6.12, not its 6.1).
//!
//! The daemon only ever uses DAMON it configured itself: at start there must be no kdamond at
//! all (another tool's would be destroyed by resizing the set), and on exit it switches its
//! kdamonds off and removes them. One kdamond a process (DAMON's sysfs takes one context a
//! kdamond, and regions of several targets of one context cannot be told apart), each sampling
//! every 5 ms (DAMON's default) and aggregating over most of the daemon's round (DAMON's default
//! 100 ms saw a 128 MiB buffer read in a loop only in part: in the guest a sweep of it takes
//! longer than that, so its pages looked idle three rounds in four), with a scheme whose action
//! is `stat` over every region, whose tried regions are read each pass: a region with
//! `nr_accesses` > 0 was accessed in the last aggregation interval.
use std::path::{Path, PathBuf};

const ADMIN: &str = "/sys/kernel/mm/damon/admin/kdamonds";
/// Regions per process DAMON keeps at least and at most (its defaults: 10 and 1000).
const MIN_REGIONS: u32 = 100;
const MAX_REGIONS: u32 = 1000;

/// A region of a process and how often DAMON saw it accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub nr_accesses: u32,
}

pub struct Damon {
    dir: PathBuf,
    /// the processes monitored, kdamond i for pids[i]
    pids: Vec<u32>,
    /// the aggregation interval the kdamonds were started with, µs
    aggr_us: u64,
}

fn write(p: &Path, v: &str) -> Result<(), String> {
    std::fs::write(p, v).map_err(|e| format!("{}: {e}", p.display()))
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).map_err(|e| format!("{}: {e}", p.display()))
}

impl Damon {
    /// DAMON for virtual addresses, if this kernel has it and nobody else configured DAMON.
    pub fn open() -> Result<Damon, String> {
        Damon::open_at(Path::new(ADMIN))
    }

    fn open_at(dir: &Path) -> Result<Damon, String> {
        if !dir.exists() {
            return Err(format!("no DAMON sysfs interface ({})", dir.display()));
        }
        let n = read(&dir.join("nr_kdamonds"))?;
        if n != "0" {
            return Err(format!(
                "DAMON is configured by another tool ({n} kdamonds in {}): the daemon does not touch it",
                dir.display()
            ));
        }
        // a context of our own tells whether the kernel has vaddr operations
        let d = Damon { dir: dir.to_path_buf(), pids: Vec::new(), aggr_us: 0 };
        write(&dir.join("nr_kdamonds"), "1")?;
        let ctx = dir.join("0/contexts");
        let probe = write(&ctx.join("nr_contexts"), "1").and_then(|()| read(&ctx.join("0/avail_operations")));
        let _ = write(&dir.join("nr_kdamonds"), "0");
        match probe {
            Ok(ops) if ops.split_whitespace().any(|o| o == "vaddr") => Ok(d),
            Ok(ops) => Err(format!("DAMON here monitors only: {ops} (no virtual address spaces)")),
            Err(e) => Err(e),
        }
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    fn off(&mut self) {
        for i in 0..self.pids.len() {
            let _ = write(&self.dir.join(format!("{i}/state")), "off");
        }
        let _ = write(&self.dir.join("nr_kdamonds"), "0");
        self.pids.clear();
    }

    /// Monitor exactly these processes, aggregating over `aggr_us` (nothing is done when that
    /// is what runs; a change starts every kdamond again).
    pub fn monitor(&mut self, pids: &[u32], aggr_us: u64) -> Result<(), String> {
        if pids == self.pids.as_slice() && aggr_us == self.aggr_us {
            return Ok(());
        }
        self.aggr_us = aggr_us;
        self.off();
        if pids.is_empty() {
            return Ok(());
        }
        write(&self.dir.join("nr_kdamonds"), &pids.len().to_string())?;
        for (i, pid) in pids.iter().enumerate() {
            let k = self.dir.join(i.to_string());
            let c = k.join("contexts/0");
            write(&k.join("contexts/nr_contexts"), "1")?;
            write(&c.join("operations"), "vaddr")?;
            write(&c.join("monitoring_attrs/intervals/sample_us"), "5000")?;
            write(&c.join("monitoring_attrs/intervals/aggr_us"), &aggr_us.max(5000).to_string())?;
            // at least MIN_REGIONS regions: with DAMON's default 10, a region can hold a hot set
            // and cold memory both, and one sample of it makes all of it look accessed or idle
            write(&c.join("monitoring_attrs/nr_regions/max"), &MAX_REGIONS.to_string())?;
            write(&c.join("monitoring_attrs/nr_regions/min"), &MIN_REGIONS.to_string())?;
            write(&c.join("targets/nr_targets"), "1")?;
            write(&c.join("targets/0/pid_target"), &pid.to_string())?;
            write(&c.join("schemes/nr_schemes"), "1")?;
            let s = c.join("schemes/0");
            write(&s.join("action"), "stat")?;
            // every region: the pattern's defaults match none
            for (key, max) in [("sz", u64::MAX), ("nr_accesses", u32::MAX as u64), ("age", u32::MAX as u64)] {
                write(&s.join(format!("access_pattern/{key}/min")), "0")?;
                write(&s.join(format!("access_pattern/{key}/max")), &max.to_string())?;
            }
            if let Err(e) = write(&k.join("state"), "on") {
                // the process is gone, say: the set is wrong now, start from nothing next time
                self.pids = pids[..i].to_vec();
                self.off();
                return Err(e);
            }
        }
        self.pids = pids.to_vec();
        Ok(())
    }

    /// Each monitored process's regions as of DAMON's latest aggregation, sorted by address.
    /// The kdamonds are asked at once (each answers at its next aggregation, within one
    /// aggregation interval).
    pub fn regions(&mut self) -> Vec<(u32, Result<Vec<Region>, String>)> {
        let dir = &self.dir;
        std::thread::scope(|s| {
            let asks: Vec<_> = (0..self.pids.len())
                .map(|i| s.spawn(move || write(&dir.join(format!("{i}/state")), "update_schemes_tried_regions")))
                .collect();
            asks.into_iter()
                .enumerate()
                .map(|(i, h)| {
                    let asked = h.join().unwrap_or_else(|_| Err("the request thread panicked".into()));
                    (
                        self.pids[i],
                        asked.and_then(|()| Self::tried(&dir.join(format!("{i}/contexts/0/schemes/0/tried_regions")))),
                    )
                })
                .collect()
        })
    }

    fn tried(dir: &Path) -> Result<Vec<Region>, String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue; // total_bytes
            }
            let n = |f: &str| read(&e.path().join(f)).and_then(|v| v.parse::<u64>().map_err(|x| x.to_string()));
            out.push(Region { start: n("start")?, end: n("end")?, nr_accesses: n("nr_accesses")? as u32 });
        }
        out.sort_by_key(|r| r.start);
        Ok(out)
    }
}

impl Drop for Damon {
    fn drop(&mut self) {
        self.off();
    }
}

/// Whether `addr` lies in a region (of `regions`, sorted) that was accessed; None when no
/// region holds it.
pub fn accessed(regions: &[Region], addr: u64) -> Option<bool> {
    let i = regions.partition_point(|r| r.start <= addr);
    let r = regions.get(i.checked_sub(1)?)?;
    (addr < r.end).then_some(r.nr_accesses > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_accessed_when_its_region_is() {
        let r = [
            Region { start: 0x1000, end: 0x5000, nr_accesses: 0 },
            Region { start: 0x5000, end: 0x9000, nr_accesses: 3 },
            Region { start: 0x20000, end: 0x21000, nr_accesses: 1 },
        ];
        assert_eq!(accessed(&r, 0x0), None);
        assert_eq!(accessed(&r, 0x1000), Some(false));
        assert_eq!(accessed(&r, 0x8fff), Some(true));
        assert_eq!(accessed(&r, 0x9000), None);
        assert_eq!(accessed(&r, 0x20000), Some(true));
    }

    #[test]
    fn damon_that_someone_else_configured_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("strata-damon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nr_kdamonds"), "2\n").unwrap();
        let e = Damon::open_at(&dir).err().unwrap();
        assert!(e.contains("another tool") && e.contains("2 kdamonds"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.join("nr_kdamonds")).unwrap(), "2\n", "untouched");
        assert!(Damon::open_at(&dir.join("nothing")).err().unwrap().contains("no DAMON"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
