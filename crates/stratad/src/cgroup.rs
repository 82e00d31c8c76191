//! What a cgroup (v2) says of its processes, for a `[[process]]` rule that names it and leaves
//! these unset: its fast-tier bounds, from its memory controller, and its priority, from its
//! CPU controller (docs/daemon.md, "cgroups").
//!
//! **Bounds**, as the tier-aware memcg proposals read the memory controller (Kaiyang Zhao's
//! tiering-fairness RFC, 2024; Joshua Hahn's "mm/memcontrol: Make memcg limits tier-aware",
//! February 2026): `memory.min` is guaranteed in the fast tier as it is, `memory.low` in
//! proportion to the fast tier's share of all memory, and `memory.high` bounds it in the same
//! proportion.
//!
//! **Priority.** cgroup v2 has no memory priority; the closest thing an administrator sets is
//! the CPU's: `cpu.idle` (systemd's `CPUWeight=idle`) is `low`, and a `cpu.weight` other than
//! the default 100 (systemd's `CPUWeight=`) is ten steps of priority a doubling: 200 is `high`
//! (10), 50 is `low` (-10), 10000 is 66. A cgroup at the default says nothing, and the
//! process's own claim stands.
//!
//! **Whose word.** Only files root owns are read: a cgroup delegated to a user (systemd's
//! `Delegate=`, a user's own slice) has files its user owns and may write, and a user must not
//! raise their processes' guarantee or priority by writing them. Such a file reads as the
//! default, as if absent.
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a cgroup's controllers say (absent files read as their defaults, "max" as None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cgroup {
    pub memory_min: u64,
    pub memory_low: u64,
    pub memory_high: Option<u64>,
    pub cpu_weight: u64,
    pub cpu_idle: bool,
}

impl Default for Cgroup {
    fn default() -> Cgroup {
        Cgroup { memory_min: 0, memory_low: 0, memory_high: None, cpu_weight: 100, cpu_idle: false }
    }
}

impl Cgroup {
    /// From the cgroup's directory (e.g. /sys/fs/cgroup/system.slice/redis.service); None when
    /// there is no such cgroup.
    pub fn read(dir: &Path) -> Option<Cgroup> {
        if !dir.is_dir() {
            return None;
        }
        let value = |f: &str| {
            let path = dir.join(f);
            if std::fs::metadata(&path).ok()?.uid() != 0 {
                return None; // delegated: its user's word, not the administrator's
            }
            let text = std::fs::read_to_string(path).ok()?;
            match text.trim() {
                "max" => Some(None),
                n => n.parse::<u64>().ok().map(Some),
            }
        };
        let d = Cgroup::default();
        Some(Cgroup {
            memory_min: value("memory.min").flatten().unwrap_or(0),
            memory_low: value("memory.low").flatten().unwrap_or(0),
            memory_high: value("memory.high").unwrap_or(None),
            cpu_weight: value("cpu.weight").flatten().unwrap_or(d.cpu_weight),
            cpu_idle: value("cpu.idle").flatten() == Some(1),
        })
    }

    /// Its fast-tier bounds, (min_fast_bytes, max_fast_bytes), where the fast tier is
    /// `fast_share` of all memory.
    pub fn fast_bounds(&self, fast_share: f64) -> (u64, Option<u64>) {
        let scaled = |x: u64| (x as f64 * fast_share.clamp(0.0, 1.0)) as u64;
        (self.memory_min.max(scaled(self.memory_low)), self.memory_high.map(scaled))
    }

    /// Its priority, None at the CPU controller's defaults.
    pub fn priority(&self) -> Option<i32> {
        if self.cpu_idle {
            return Some(strata_sys::STRATA_PRIORITY_LOW);
        }
        if self.cpu_weight == 100 || self.cpu_weight == 0 {
            return None;
        }
        let steps = (10.0 * (self.cpu_weight as f64 / 100.0).log2()).round() as i32;
        Some(steps.clamp(strata_sys::STRATA_PRIORITY_MIN, strata_sys::STRATA_PRIORITY_MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn a_cgroup_guarantees_its_min_and_a_share_of_its_low_and_high_as_the_fast_tier_is_of_all() {
        let c = Cgroup { memory_min: G, memory_low: 4 * G, memory_high: Some(8 * G), ..Cgroup::default() };
        assert_eq!(c.fast_bounds(0.25), (G, Some(2 * G)), "low 4 GiB at 1:4 is 1 GiB; min as it is");
        assert_eq!(c.fast_bounds(0.5), (2 * G, Some(4 * G)));
        assert_eq!(Cgroup::default().fast_bounds(0.5), (0, None), "no bounds: none");
    }

    #[test]
    fn a_cgroup_s_priority_is_its_cpu_weight_in_doublings_and_idle_is_low() {
        let weight = |w| Cgroup { cpu_weight: w, ..Cgroup::default() }.priority();
        assert_eq!(weight(100), None, "the default says nothing");
        assert_eq!((weight(200), weight(50), weight(400)), (Some(10), Some(-10), Some(20)));
        assert_eq!((weight(10000), weight(1)), (Some(66), Some(-66)));
        assert_eq!(Cgroup { cpu_idle: true, cpu_weight: 400, ..Cgroup::default() }.priority(), Some(-10));
    }

    #[test]
    fn a_cgroup_is_read_from_its_files() {
        let dir = std::env::temp_dir().join(format!("strata-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.min"), "0\n").unwrap();
        std::fs::write(dir.join("memory.low"), "1073741824\n").unwrap();
        std::fs::write(dir.join("memory.high"), "max\n").unwrap();
        std::fs::write(dir.join("cpu.weight"), "200\n").unwrap();
        let c = Cgroup::read(&dir).unwrap();
        assert_eq!((c.memory_min, c.memory_low, c.memory_high, c.priority()), (0, G, None, Some(10)));
        std::fs::remove_file(dir.join("memory.min")).unwrap();
        std::fs::remove_file(dir.join("cpu.weight")).unwrap();
        std::fs::write(dir.join("memory.high"), "2147483648\n").unwrap();
        std::fs::write(dir.join("cpu.idle"), "1\n").unwrap();
        let c = Cgroup::read(&dir).unwrap();
        assert_eq!((c.memory_min, c.memory_high, c.cpu_weight, c.priority()), (0, Some(2 * G), 100, Some(-10)));
        // a file a user owns (a delegated cgroup) is not the administrator's: as if absent
        // SAFETY: geteuid has no preconditions
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(dir.join("cpu.idle"), Some(65534), None).unwrap();
            std::os::unix::fs::chown(dir.join("memory.low"), Some(65534), None).unwrap();
            let c = Cgroup::read(&dir).unwrap();
            assert_eq!((c.memory_low, c.cpu_idle, c.priority()), (0, false, None), "{c:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Cgroup::read(&dir), None, "no such cgroup");
    }
}
