//! The machine a measurement was taken on.
use serde::{Deserialize, Serialize};

/// What every measured figure carries: on these machines the processor changes from one to
/// the next (Intel with a 105 MiB L3, AMD EPYC with 32 MiB), and a figure without it means
/// nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// /proc/cpuinfo's "model name", e.g. "AMD EPYC" or "Intel(R) Xeon(R) Platinum 8481C"
    pub cpu_model: String,
    pub cpus: usize,
    /// the last-level cache as sysfs gives it, bytes
    pub llc_bytes: u64,
    pub memory_bytes: u64,
    /// uname -r
    pub kernel: String,
}

impl Host {
    pub fn detect() -> Host {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Host {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            llc_bytes: llc_bytes(),
            memory_bytes: memory_bytes(),
            kernel: kernel_release(),
        }
    }

    /// A short name for file names: "amd-epyc", "intel-r-xeon-r-platinum-8481c".
    pub fn slug(&self) -> String {
        let mut s = String::new();
        for c in self.cpu_model.to_ascii_lowercase().chars() {
            if c.is_ascii_alphanumeric() {
                s.push(c);
            } else if !s.ends_with('-') && !s.is_empty() {
                s.push('-');
            }
        }
        s.trim_end_matches('-').to_string()
    }
}

fn llc_bytes() -> u64 {
    (0..8)
        .filter_map(|i| {
            let d = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let kind = std::fs::read_to_string(format!("{d}/type")).ok()?;
            if kind.trim() == "Instruction" {
                return None;
            }
            let size = std::fs::read_to_string(format!("{d}/size")).ok()?;
            let t = size.trim();
            let (n, m) = match t.strip_suffix('K') {
                Some(n) => (n, 1u64 << 10),
                None => (t.strip_suffix('M').unwrap_or(t), if t.ends_with('M') { 1 << 20 } else { 1 }),
            };
            n.parse::<u64>().ok().map(|v| v * m)
        })
        .max()
        .unwrap_or(0)
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn kernel_release() -> String {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_a_model_and_a_slug() {
        let h = Host::detect();
        assert!(!h.cpu_model.is_empty() && h.cpus >= 1 && h.memory_bytes > 0);
        let s = Host { cpu_model: "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz".into(), ..h }.slug();
        assert_eq!(s, "intel-r-xeon-r-platinum-8481c-cpu-2-70ghz");
    }
}
