//! The engine's configuration: one TOML file with a block per component, units in the field
//! names, unknown fields refused. Every error names its key and, when it comes from a file, its
//! line. `examples/strata.toml` documents every key; emulated runs ignore `[daemon]` and
//! `[[process]]`.
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::{Error, ProcessObs};

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// tiers and where to read sysfs (libstrata's STRATA_TIERS and STRATA_SYSFS, which win)
    #[serde(default)]
    pub topology: TopologyConfig,
    #[serde(default)]
    pub scanner: ScannerConfig,
    #[serde(default)]
    pub sampler: SamplerConfig,
    #[serde(default)]
    pub mover: MoverConfig,
    /// one table per policy, by name ([policy.ambix]); read by strata-policy
    #[serde(default)]
    pub policy: toml::Table,
    /// the live daemon
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// the live daemon's rules for processes, by command name ([[process]])
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessRule>,
    /// the live daemon's Prometheus endpoint
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// the live daemon's heat classes (hot, warm, cold) and working set
    #[serde(default)]
    pub heat: crate::heat::HeatConfig,
}

/// The live daemon's Prometheus endpoint (`strata stats --metrics` serves the same from a
/// process of its own).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// where to serve http://ADDR/metrics, e.g. "127.0.0.1:9464" (unset: not served). Anyone
    /// who can reach it reads every managed process's pid, command, cgroup and counters
    pub listen: Option<String>,
    /// contexts per process in the per-context metrics, the largest by live bytes
    pub top_contexts: Option<usize>,
}

/// The machine's tiers, where the kernel's own are not what should be used.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// tier override, fastest first, in the STRATA_TIERS syntax: "0;1", "0,2;1,3"
    pub tiers: Option<String>,
    /// read sysfs from here instead of /sys (fixture trees, dry runs)
    pub sysfs: Option<String>,
}

/// The A/D-bit scanner: how often, and how much of the address space a round.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScannerConfig {
    /// a round every this much time (Ambix: 1 s)
    pub period_ms: f64,
    /// bytes of address space scanned a round (Ambix: 40 GB)
    pub scan_bytes: u64,
}

impl Default for ScannerConfig {
    fn default() -> ScannerConfig {
        ScannerConfig { period_ms: 1000.0, scan_bytes: 40 << 30 }
    }
}

/// The LLC-miss sampler, for policies that use samples (MAT, hmalloc).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplerConfig {
    /// one sample every this many LLC misses (MAT: 4,096)
    pub period_misses: u64,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig { period_misses: 4096 }
    }
}

/// The mover: at most `rate_mbps` on average and `max_bytes_per_round` a round, by a mechanism.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MoverConfig {
    /// MB/s the mover may move on average (tokens accrue with time, at most one round's worth
    /// of cap is kept)
    pub rate_mbps: f64,
    /// bytes a round at most
    pub max_bytes_per_round: u64,
    /// how pages move: move_pages (the kernel's migration: the program's accesses to a page wait
    /// while it is copied) or transactional (Nomad's: copied while in use, committed only if not
    /// written meanwhile, a shadow kept so a clean page demotes without a copy; by the process's
    /// agent, where it has one, else move_pages)
    pub mechanism: Mechanism,
    /// transactional: copies tried before a page is given up for the round
    pub attempts: u32,
    /// transactional: every agent drops its shadows when a slower node has less than this share
    /// of it free (shadows never make an allocation fail)
    pub shadow_reclaim_fraction: f64,
    /// a page moved back the other way within this many rounds of its last move counts as
    /// ping-pong (the statistics' `pingpong_pages`, per process and in all)
    pub pingpong_rounds: u64,
    /// transactional: a process's agent that has not answered a request whole within this many
    /// ms is dropped, and its pages move by move_pages
    pub agent_deadline_ms: u64,
}

/// How the mover moves a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    MovePages,
    Transactional,
}

impl Default for MoverConfig {
    fn default() -> MoverConfig {
        MoverConfig {
            rate_mbps: 2048.0,
            max_bytes_per_round: 500 << 20,
            mechanism: Mechanism::MovePages,
            attempts: 3,
            shadow_reclaim_fraction: 0.05,
            pingpong_rounds: 10,
            agent_deadline_ms: 5000,
        }
    }
}

/// The live daemon's shortest round: a shorter one would have it spin (emulated runs, on
/// simulated time, may go shorter).
pub const MIN_PERIOD_MS: f64 = 1.0;
/// The shortest time between two searches of every process's open files.
pub const MIN_DISCOVERY_MS: u64 = 100;

/// The live daemon's own settings.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// the policy (`strata daemon --policy` wins)
    pub policy: String,
    /// the control socket: programs under Strata announce themselves here, `strata attach`
    /// and `strata stats` talk to the daemon through it
    pub socket: PathBuf,
    /// the group allowed to use the socket besides root (none: root only)
    pub socket_group: Option<String>,
    /// how often every process's open files are searched for channels, ms (programs that
    /// start while the daemon runs announce themselves at once)
    pub discovery_ms: u64,
    /// share of every node the daemon leaves free beyond the kernel's watermarks, for the
    /// kernel's own allocations: memory onlined as ZONE_MOVABLE (CXL, the guest's slow node)
    /// cannot hold them, so a fast node filled to its watermarks with pages nothing can
    /// reclaim leaves the kernel short (seen in the guest: the OOM killer took a program)
    pub node_reserve_fraction: f64,
    /// bytes left free at least on every node the kernel's own allocations can come from
    /// (a node with memory outside ZONE_MOVABLE), at most half the node: the share above is
    /// a few MiB on a small fast node, too little for the kernel while programs start, write
    /// files and grow their page tables (seen in the guest: a 10 MiB reserve, and the OOM
    /// killer took a program when `strata stats` wrote a file to tmpfs)
    pub kernel_reserve_bytes: u64,
    /// how the daemon may see accesses, preferred first: damon-vaddr (reads and writes),
    /// pagemap-scan, soft-dirty (writes); each process gets the first it and the kernel allow
    pub trackers: Vec<TrackerKind>,
    /// processes DAMON watches at most (a kernel thread each); the others fall to the next
    /// tracker
    pub damon_max_processes: usize,
}

impl Default for DaemonConfig {
    fn default() -> DaemonConfig {
        DaemonConfig {
            policy: strata_policy::DEFAULT_POLICY.into(),
            socket: PathBuf::from(strata_sys::STRATA_DAEMON_SOCKET_DEFAULT),
            socket_group: None,
            discovery_ms: 10_000,
            node_reserve_fraction: 0.02,
            kernel_reserve_bytes: 64 << 20,
            trackers: DEFAULT_TRACKERS.to_vec(),
            damon_max_processes: 8,
        }
    }
}

/// How the live daemon may see a process's accesses (`daemon.trackers`; `strata_daemon::linux`
/// says how each works). `None`: no tracker can see the process (never configured).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrackerKind {
    DamonVaddr,
    HintFault,
    PagemapScan,
    SoftDirty,
    None,
}

impl TrackerKind {
    /// Its name in configurations and in `strata daemon --probe`.
    pub fn name(self) -> &'static str {
        match self {
            TrackerKind::DamonVaddr => "damon-vaddr",
            TrackerKind::HintFault => "hint-fault",
            TrackerKind::PagemapScan => "pagemap-scan",
            TrackerKind::SoftDirty => "soft-dirty",
            TrackerKind::None => "none",
        }
    }

    /// Whether it sees reads as well as writes (DAMON's accessed bits, hint-fault samples).
    pub fn sees_reads(self) -> bool {
        matches!(self, TrackerKind::DamonVaddr | TrackerKind::HintFault)
    }
}

/// The trackers the daemon can use.
pub const TRACKERS: [TrackerKind; 4] =
    [TrackerKind::DamonVaddr, TrackerKind::HintFault, TrackerKind::PagemapScan, TrackerKind::SoftDirty];
/// Those it uses when none are configured, preferred first (hint-fault is asked for by name:
/// it makes the program wait on the pages it samples).
pub const DEFAULT_TRACKERS: [TrackerKind; 3] =
    [TrackerKind::DamonVaddr, TrackerKind::PagemapScan, TrackerKind::SoftDirty];
/// What the daemon leaves free on each node beyond the kernel's watermarks, for the kernel:
/// a share of every node, and at least `kernel_bytes` of a node the kernel's own allocations
/// can come from (see `daemon.node_reserve_fraction` and `daemon.kernel_reserve_bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reserve {
    pub fraction: f64,
    pub kernel_bytes: u64,
}

impl Reserve {
    /// The bytes held back on a node of `capacity` bytes.
    pub fn bytes(&self, capacity: u64, kernel: bool) -> u64 {
        let share = (capacity as f64 * self.fraction) as u64;
        match kernel {
            true => share.max(self.kernel_bytes.min(capacity / 2)),
            false => share,
        }
    }
}

/// What the daemon does with the processes a rule matches: those that match every key it gives
/// (`command`, `exe`, `uid`, `cgroup`; at least one). The command name is the user's to choose,
/// so a rule that favours a service should also name what no other user can: its executable,
/// its uid or its cgroup.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRule {
    /// the process's command name (/proc/PID/comm)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// the process's executable, an absolute path (/proc/PID/exe)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<PathBuf>,
    /// the user it runs as: every uid of it (real, effective, saved, filesystem) is this one
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// its cgroup (v2) or one above it, e.g. "/system.slice/redis.service"
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// its priority (high, normal, low or a number in -1000..1000), over the one it claims
    /// (unset, for a rule with a cgroup: the cgroup's, from its CPU weight, crate::cgroup)
    #[serde(default, deserialize_with = "priority_opt")]
    pub priority: Option<i32>,
    /// fast-tier bytes it may hold at most (a rule with a cgroup: all its processes together;
    /// unset: from the cgroup's memory.high, in proportion to the fast tier's share of memory)
    pub max_fast_bytes: Option<u64>,
    /// fast-tier bytes it is given before any priority is served, as far as it has memory
    /// resident (a rule with a cgroup: all its processes together; unset: the cgroup's
    /// memory.min, or its memory.low in proportion to the fast tier's share, the larger)
    pub min_fast_bytes: Option<u64>,
}

impl ProcessRule {
    /// Whether process `p` matches every key this rule gives.
    pub fn matches(&self, p: &ProcessObs) -> bool {
        let under = |rule: &str, got: &str| {
            got == rule || got.strip_prefix(rule.trim_end_matches('/')).is_some_and(|rest| rest.starts_with('/'))
        };
        self.command.as_ref().is_none_or(|c| *c == p.command)
            && self.exe.as_ref().is_none_or(|e| p.ids.exe.as_ref() == Some(e))
            && self.uid.is_none_or(|u| p.ids.uid == Some(u))
            && self.cgroup.as_ref().is_none_or(|c| p.ids.cgroup.as_deref().is_some_and(|g| under(c, g)))
    }

    fn keys(&self) -> (&Option<String>, &Option<PathBuf>, Option<u32>, &Option<String>) {
        (&self.command, &self.exe, self.uid, &self.cgroup)
    }
}

/// A priority by name or number: high 10, normal 0, low -10, or -1000..1000.
pub fn parse_priority(s: &str) -> Result<i32, String> {
    use strata_sys::{STRATA_PRIORITY_HIGH, STRATA_PRIORITY_LOW, STRATA_PRIORITY_MAX, STRATA_PRIORITY_MIN};
    match s {
        "high" => Ok(STRATA_PRIORITY_HIGH),
        "normal" => Ok(0),
        "low" => Ok(STRATA_PRIORITY_LOW),
        n => match n.parse::<i32>() {
            Ok(v) if (STRATA_PRIORITY_MIN..=STRATA_PRIORITY_MAX).contains(&v) => Ok(v),
            _ => Err(format!(
                "priority '{s}': not high, normal, low or a number in {STRATA_PRIORITY_MIN}..{STRATA_PRIORITY_MAX}"
            )),
        },
    }
}

fn priority_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Name(String),
        Number(i64),
    }
    let text = match Raw::deserialize(d)? {
        Raw::Name(s) => s,
        Raw::Number(n) => n.to_string(),
    };
    parse_priority(&text).map(Some).map_err(serde::de::Error::custom)
}

/// Where in the file a key is: its line (1-based), in `table` (`scanner`, `policy.ambix`, or
/// the `nth` `[[process]]`).
fn line_of(text: &str, table: &str, nth: usize, key: &str) -> Option<usize> {
    let mut current = String::new();
    let mut seen = 0usize;
    for (i, line) in text.lines().enumerate() {
        let l = line.split('#').next().unwrap_or("").trim();
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")) {
            if name.trim() == table {
                seen += 1;
            }
            current = format!("{}#{}", name.trim(), seen);
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            current = name.trim().to_string();
        } else if let Some((k, _)) = l.split_once('=') {
            let here = current == table || current == format!("{table}#{}", nth + 1);
            if here && k.trim().trim_matches('"') == key {
                return Some(i + 1);
            }
        }
    }
    None
}

/// A check that failed: the key (in its table) and what is wrong.
struct Bad {
    table: String,
    nth: usize,
    key: String,
    message: String,
}

impl Bad {
    fn new(table: &str, key: &str, message: String) -> Bad {
        Bad { table: table.into(), nth: 0, key: key.into(), message }
    }
    /// The error, with the key's line when the text of the file is known.
    fn error(self, text: Option<&str>) -> Error {
        let line = text.and_then(|t| line_of(t, &self.table, self.nth, &self.key));
        Error::Config(match line {
            Some(l) => format!("line {l}: {}", self.message),
            None => self.message,
        })
    }
}

impl Config {
    /// Parse a configuration, checking every value and the policy's own table.
    pub fn parse(text: &str, policy: &str) -> Result<Config, Error> {
        let c: Config = toml::from_str(text).map_err(|e| Error::Config(e.to_string().trim().to_string()))?;
        c.validate(policy).map_err(|b| b.error(Some(text)))?;
        Ok(c)
    }

    /// Read and parse a file.
    pub fn load(path: &std::path::Path, policy: &str) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        Self::parse(&text, policy).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Read a file whose own `daemon.policy` names the policy, unless `policy` is given;
    /// returns the configuration and the policy, checked.
    pub fn load_with(path: &std::path::Path, policy: Option<&str>) -> Result<(Config, String), Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        let in_file = |e: Error| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            e => e,
        };
        let c: Config = toml::from_str(&text).map_err(|e| in_file(Error::Config(e.to_string().trim().to_string())))?;
        let policy = policy.map_or_else(|| c.daemon.policy.clone(), str::to_string);
        c.validate(&policy).map_err(|b| in_file(b.error(Some(&text))))?;
        Ok((c, policy))
    }

    /// Check every value (for a configuration made or changed in code).
    pub fn check(&self, policy: &str) -> Result<(), Error> {
        self.validate(policy).map_err(|b| b.error(None))
    }

    /// What the live daemon needs besides: a round of at least `MIN_PERIOD_MS`.
    pub fn check_live(&self) -> Result<(), Error> {
        if self.scanner.period_ms < MIN_PERIOD_MS {
            let m = format!(
                "scanner.period_ms must be at least {MIN_PERIOD_MS} for the live daemon, not {}",
                self.scanner.period_ms
            );
            return Err(Bad::new("scanner", "period_ms", m).error(None));
        }
        Ok(())
    }

    fn validate(&self, policy: &str) -> Result<(), Bad> {
        if !(self.scanner.period_ms > 0.0 && self.scanner.period_ms.is_finite()) {
            let m = format!("scanner.period_ms must be positive, not {}", self.scanner.period_ms);
            return Err(Bad::new("scanner", "period_ms", m));
        }
        if self.scanner.scan_bytes == 0 {
            return Err(Bad::new("scanner", "scan_bytes", "scanner.scan_bytes must be positive".into()));
        }
        if self.sampler.period_misses == 0 {
            return Err(Bad::new("sampler", "period_misses", "sampler.period_misses must be positive".into()));
        }
        if !(self.mover.rate_mbps > 0.0 && self.mover.rate_mbps.is_finite()) {
            let m = format!("mover.rate_mbps must be positive, not {}", self.mover.rate_mbps);
            return Err(Bad::new("mover", "rate_mbps", m));
        }
        let most = strata_sys::STRATA_AGENT_MAX_ATTEMPTS;
        if !(1..=most).contains(&self.mover.attempts) {
            let m =
                format!("mover.attempts must be 1 to {most} (copies of a page a round), not {}", self.mover.attempts);
            return Err(Bad::new("mover", "attempts", m));
        }
        if self.mover.agent_deadline_ms == 0 {
            let m = "mover.agent_deadline_ms must be positive".to_string();
            return Err(Bad::new("mover", "agent_deadline_ms", m));
        }
        if self.heat.hot_rounds == 0 || self.heat.cold_rounds <= self.heat.hot_rounds {
            let m = format!(
                "heat.cold_rounds ({}) must be above heat.hot_rounds ({}), and hot_rounds at least 1",
                self.heat.cold_rounds, self.heat.hot_rounds
            );
            return Err(Bad::new("heat", "cold_rounds", m));
        }
        if let Some(l) = &self.metrics.listen {
            if l.parse::<std::net::SocketAddr>().is_err() {
                let m = format!("metrics.listen must be an address and port such as \"127.0.0.1:9464\", not {l:?}");
                return Err(Bad::new("metrics", "listen", m));
            }
        }
        if !(0.0..1.0).contains(&self.mover.shadow_reclaim_fraction) {
            let m =
                format!("mover.shadow_reclaim_fraction must be in [0, 1), not {}", self.mover.shadow_reclaim_fraction);
            return Err(Bad::new("mover", "shadow_reclaim_fraction", m));
        }
        if self.daemon.discovery_ms < MIN_DISCOVERY_MS {
            let m = format!("daemon.discovery_ms must be at least {MIN_DISCOVERY_MS}");
            return Err(Bad::new("daemon", "discovery_ms", m));
        }
        if self.daemon.trackers.contains(&TrackerKind::None) {
            let known: Vec<&str> = TRACKERS.iter().map(|k| k.name()).collect();
            let m =
                format!("daemon.trackers: 'none' is what a process no tracker sees has (known: {})", known.join(", "));
            return Err(Bad::new("daemon", "trackers", m));
        }
        if !(0.0..0.5).contains(&self.daemon.node_reserve_fraction) {
            let m =
                format!("daemon.node_reserve_fraction must be in [0, 0.5), not {}", self.daemon.node_reserve_fraction);
            return Err(Bad::new("daemon", "node_reserve_fraction", m));
        }
        for (i, r) in self.processes.iter().enumerate() {
            let bad = |key: &str, message: String| Bad { table: "process".into(), nth: i, key: key.into(), message };
            if r.keys() == (&None, &None, None, &None) {
                let m = "a [[process]] rule names the processes it is for: command, exe, uid or cgroup".to_string();
                return Err(bad("command", m));
            }
            if let Some(c) = r.command.as_ref().filter(|c| c.is_empty() || c.len() > 15) {
                let m = format!("process.command '{c}' must be a command name of 1 to 15 bytes (/proc/PID/comm)");
                return Err(bad("command", m));
            }
            if let Some(e) = r.exe.as_ref().filter(|e| !e.is_absolute()) {
                return Err(bad("exe", format!("process.exe '{}' must be an absolute path", e.display())));
            }
            if let Some(c) = r.cgroup.as_ref().filter(|c| !c.starts_with('/')) {
                return Err(bad(
                    "cgroup",
                    format!("process.cgroup '{c}' must start with / (as /proc/PID/cgroup shows it)"),
                ));
            }
            if self.processes[..i].iter().any(|o| o.keys() == r.keys()) {
                return Err(bad("command", "two [[process]] rules name the same processes".into()));
            }
            if r.max_fast_bytes == Some(0) {
                return Err(bad("max_fast_bytes", "process.max_fast_bytes must be positive".into()));
            }
            if let (Some(min), Some(max)) = (r.min_fast_bytes, r.max_fast_bytes) {
                if min > max {
                    let m = format!("process.min_fast_bytes {min} is more than its max_fast_bytes {max}");
                    return Err(bad("min_fast_bytes", m));
                }
            }
        }
        for name in self.policy.keys() {
            if !strata_policy::POLICIES.contains(&name.as_str()) {
                let m = format!("[policy.{name}]: no such policy (known: {})", strata_policy::POLICIES.join(", "));
                return Err(Bad::new(&format!("policy.{name}"), "", m));
            }
        }
        // the chosen policy's table is checked by making it
        self.make_policy(policy).map_err(|e| {
            let base = strata_policy::base_name(policy);
            let message = e.to_string();
            // the key the message names, if it is one of the table's
            let key = self
                .policy
                .get(base)
                .and_then(|v| v.as_table())
                .and_then(|t| t.keys().find(|k| message.contains(k.as_str())).cloned())
                .unwrap_or_default();
            Bad::new(&format!("policy.{base}"), &key, message)
        })?;
        Ok(())
    }

    /// The policy `name` (with its variant, `mat:lru`) with the table of its base name.
    pub fn make_policy(&self, name: &str) -> Result<Box<dyn strata_policy::Policy>, Error> {
        let base = strata_policy::base_name(name);
        let table = self.policy.get(base).and_then(|v| v.as_table());
        if self.policy.get(base).is_some() && table.is_none() {
            return Err(Error::Config(format!("policy.{base} must be a table")));
        }
        Ok(strata_policy::create(name, table)?)
    }

    /// The daemon's trackers, preferred first.
    pub fn trackers(&self) -> Vec<TrackerKind> {
        self.daemon.trackers.clone()
    }

    /// Whether the daemon keeps the agents processes offer: for transactional moves, and for
    /// the hint-fault tracker's samples.
    pub fn wants_agents(&self) -> bool {
        self.mover.mechanism == Mechanism::Transactional || self.daemon.trackers.contains(&TrackerKind::HintFault)
    }

    /// What the daemon leaves free on each node for the kernel.
    pub fn reserve(&self) -> Reserve {
        Reserve { fraction: self.daemon.node_reserve_fraction, kernel_bytes: self.daemon.kernel_reserve_bytes }
    }

    /// The first rule that matches process `p`, if one does.
    pub fn rule(&self, p: &ProcessObs) -> Option<&ProcessRule> {
        self.rule_at(p).map(|(_, r)| r)
    }

    /// The first rule that matches process `p`, with its place among the rules.
    pub fn rule_at(&self, p: &ProcessObs) -> Option<(usize, &ProcessRule)> {
        self.processes.iter().enumerate().find(|(_, r)| r.matches(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_and_values_are_refused_naming_them() {
        assert!(Config::parse("", "ambix").is_ok());
        let e = Config::parse("[scanner]\nperiod = 5\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("unknown field `period`") && e.contains("line 2"), "{e}");
        let e = Config::parse("[scanner]\nperiod_ms = -1\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("scanner.period_ms"), "{e}");
        // the review's row 4.2: a period so short the live daemon would spin (emulated runs,
        // on simulated time, may go that short)
        let c = Config::parse("[scanner]\nperiod_ms = 0.000001\n", "ambix").unwrap();
        assert!(c.check_live().unwrap_err().to_string().contains("at least 1 for the live daemon"));
        let e = Config::parse("[daemon]\ndiscovery_ms = 5\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("daemon.discovery_ms must be at least 100"), "{e}");
        let e = Config::parse("[policy.ambix]\nmin_scan = 3\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("min_scan"), "{e}");
        let e = Config::parse("[policy.nosuch]\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("policy.nosuch"), "{e}");
        let e = Config::parse("", "nosuch").unwrap_err().to_string();
        assert!(e.contains("no policy 'nosuch'"), "{e}");
        let e =
            Config::parse("[mover]\nrate_mbps = 10\n\n[scanner]\nperiod_ms = 0\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 5") && e.contains("scanner.period_ms"), "{e}");
        let e = Config::parse("# c\n[policy.ambix]\nmin_scans = 2\nfast_free_fraction = 2.0\n", "ambix")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("fast_free_fraction"), "{e}");
        let c = Config::parse("[scanner]\nperiod_ms = 10\n[policy.ambix]\nmin_scans = 2\n", "ambix").unwrap();
        assert_eq!(c.scanner.period_ms, 10.0);
        // copies of a page a round: 1 to the agent's most
        for (n, ok) in [(0, false), (1, true), (64, true), (65, false), (4_000_000_000u32, false)] {
            let r = Config::parse(&format!("[mover]\nattempts = {n}\n"), "ambix");
            assert_eq!(r.is_ok(), ok, "attempts = {n}: {:?}", r.err().map(|e| e.to_string()));
        }
        let e = Config::parse("[mover]\nagent_deadline_ms = 0\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("agent_deadline_ms must be positive"), "{e}");
    }

    /// A process of this command, with nothing else known of it.
    fn named(command: &str) -> ProcessObs {
        ProcessObs { command: command.into(), ..ProcessObs::default() }
    }

    /// The review's row 2.11: a command name is the user's to choose; an executable, a uid
    /// and a cgroup are not, and a rule matches only what gives every key it names.
    #[test]
    fn a_process_rule_matches_only_processes_with_every_key_it_names() {
        let text = "[[process]]\ncommand = \"db-primary\"\nexe = \"/usr/sbin/db\"\nuid = 998\npriority = \"high\"\n\n\
                    [[process]]\ncgroup = \"/system.slice/batch.service/\"\npriority = \"low\"\n";
        let c = Config::parse(text, "ambix").unwrap();
        let ids = |exe: &str, uid: u32, cgroup: &str| crate::machine::ProcessIds {
            exe: Some(exe.into()),
            uid: Some(uid),
            cgroup: Some(cgroup.into()),
        };
        let with = |command: &str, ids| ProcessObs { command: command.into(), ids, ..ProcessObs::default() };
        let real = with("db-primary", ids("/usr/sbin/db", 998, "/system.slice/db.service"));
        assert_eq!(c.rule(&real).and_then(|r| r.priority), Some(10));
        // mallory's program of the same name, her own copy of the binary, or the real binary run by her
        for fake in [
            with("db-primary", ids("/home/mallory/db-primary", 1001, "/user.slice")),
            with("db-primary", ids("/home/mallory/db", 998, "/user.slice")),
            with("db-primary", ids("/usr/sbin/db", 1001, "/user.slice")),
        ] {
            assert!(c.rule(&fake).is_none(), "{fake:?}");
        }
        let batch = with("anything", ids("/bin/x", 5, "/system.slice/batch.service/worker"));
        assert_eq!(c.rule(&batch).and_then(|r| r.priority), Some(-10), "a cgroup below the rule's");
        let sibling = with("anything", ids("/bin/x", 5, "/system.slice/batch.service2"));
        assert!(c.rule(&sibling).is_none(), "not a cgroup whose name only starts the same");
        for (bad, why) in [
            ("[[process]]\npriority = 5\n", "names the processes"),
            ("[[process]]\nexe = \"db\"\n", "absolute path"),
            ("[[process]]\ncgroup = \"system.slice\"\n", "start with /"),
        ] {
            let e = Config::parse(bad, "ambix").unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn process_rules_take_priorities_by_name_or_number_and_bad_ones_are_refused_with_their_line() {
        let text = "[daemon]\npolicy = \"ambix\"\n\n[[process]]\ncommand = \"redis-server\"\npriority = \"high\"\n\n[[process]]\ncommand = \"batch\"\npriority = -20\nmax_fast_bytes = 1073741824\n";
        let c = Config::parse(text, "ambix").unwrap();
        assert_eq!(c.rule(&named("redis-server")).unwrap().priority, Some(10));
        assert_eq!(c.rule(&named("batch")).map(|r| (r.priority, r.max_fast_bytes)), Some((Some(-20), Some(1 << 30))));
        assert!(c.rule(&named("other")).is_none());
        let e =
            Config::parse("[[process]]\ncommand = \"x\"\npriority = \"urgent\"\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("urgent"), "{e}");
        let e =
            Config::parse("[[process]]\ncommand = \"x\"\n[[process]]\ncommand = \"y\"\nmax_fast_bytes = 0\n", "ambix")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 5") && e.contains("max_fast_bytes"), "{e}");
        let e = Config::parse("[[process]]\ncommand = \"x\"\n[[process]]\ncommand = \"x\"\n", "ambix")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("two [[process]] rules"), "{e}");
        let e = Config::parse("[[process]]\ncgroup = \"/a\"\nmin_fast_bytes = 2\nmax_fast_bytes = 1\n", "ambix")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("more than its max_fast_bytes"), "{e}");
        let e = Config::parse("[daemon]\ntrackers = [\"idle-page\"]\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("idle-page") && e.contains("pagemap-scan"), "{e}");
        assert!(Config::parse("[daemon]\ntrackers = [\"none\"]\n", "ambix").is_err(), "none is not a tracker");
        let e = Config::parse("[daemon]\nsocket_grup = \"strata\"\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("socket_grup"), "{e}");
        assert_eq!(parse_priority("low"), Ok(-10));
        assert!(parse_priority("1001").is_err() && parse_priority("").is_err());
    }

    #[test]
    fn the_example_configuration_parses() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/strata.toml");
        for name in strata_policy::POLICIES {
            Config::load(&p, name).unwrap();
        }
        // the example's values are the defaults
        let c = Config::load(&p, "ambix").unwrap();
        assert_eq!(
            (&c.topology, &c.scanner, &c.sampler, &c.mover, &c.daemon),
            (
                &TopologyConfig::default(),
                &ScannerConfig::default(),
                &SamplerConfig::default(),
                &MoverConfig::default(),
                &DaemonConfig::default()
            )
        );
        assert!(c.processes.is_empty());
        assert_eq!(c.metrics, MetricsConfig::default(), "no endpoint unless asked");
        assert_eq!(c.heat, crate::heat::HeatConfig::default());
        // and so are its policies' tables (a default changed in the code is changed there too)
        let table = |name: &str| c.policy[name].as_table().unwrap().clone();
        assert_eq!(table("strata").try_into(), Ok(strata_policy::strata::Config::default()));
        assert_eq!(table("ambix").try_into(), Ok(strata_policy::ambix::Config::default()));
        assert_eq!(table("mat").try_into(), Ok(strata_policy::mat::Config::default()));
        let e = Config::parse("[heat]\nhot_rounds = 5\ncold_rounds = 5\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("heat.cold_rounds"), "{e}");
        Config::parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n", "ambix").unwrap();
        let e = Config::parse("[metrics]\nlisten = \"localhost\"\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("metrics.listen"), "{e}");
        // and its commented process rule is one
        let text = std::fs::read_to_string(&p).unwrap();
        let rule: String = text
            .lines()
            .skip_while(|l| !l.starts_with("# [[process]]"))
            .map(|l| l.trim_start_matches("# ").split('#').next().unwrap().to_string() + "\n")
            .collect();
        let r = Config::parse(&rule, "ambix").unwrap();
        let redis = ProcessObs {
            command: "redis-server".into(),
            ids: crate::ProcessIds {
                exe: Some("/usr/bin/redis-check-rdb".into()),
                uid: Some(105),
                cgroup: Some("/system.slice/redis-server.service".into()),
            },
            ..ProcessObs::default()
        };
        assert_eq!(r.rule(&redis).map(|r| (r.priority, r.max_fast_bytes)), Some((Some(10), Some(4 << 30))));
        assert!(r.rule(&named("redis-server")).is_none(), "the name alone is not enough");
        let table = |n: &str| c.policy.get(n).and_then(|t| t.as_table());
        use strata_policy::{ambix, dram_first, hmalloc, mat, parse_config, strata};
        assert_eq!(parse_config::<ambix::Config>("ambix", table("ambix")).unwrap(), ambix::Config::default());
        assert_eq!(parse_config::<mat::Config>("mat", table("mat")).unwrap(), mat::Config::default());
        assert_eq!(parse_config::<hmalloc::Config>("hmalloc", table("hmalloc")).unwrap(), hmalloc::Config::default());
        let d = parse_config::<dram_first::Config>("dram-first", table("dram-first")).unwrap();
        assert_eq!(d, dram_first::Config::default());
        assert_eq!(parse_config::<strata::Config>("strata", table("strata")).unwrap(), strata::Config::default());
    }
    /// A small two-node machine's observations for round `r`: pages scanned, samples, one
    /// object, one context, counters.
    fn small_machine(r: u64) -> strata_policy::Observations {
        use strata_policy::{tiers_of, ContextObs, Counters, NodeObs, ObjectObs, Observations, PageObs, Sample};
        const MIB: u64 = 1 << 20;
        let nodes = vec![
            NodeObs { node: 0, tier: 0, distance: 10, capacity_bytes: 64 * MIB, free_bytes: 8 * MIB },
            NodeObs { node: 1, tier: 1, distance: 20, capacity_bytes: 256 * MIB, free_bytes: 200 * MIB },
        ];
        let base = 0x7f00_0000_0000u64;
        let pages = (0..64u64)
            .map(|i| PageObs {
                pid: 1,
                addr: base + i * 4096,
                tier: (i % 2) as u8,
                node: (i % 2) as u8,
                accessed: (i + r).is_multiple_of(3),
                dirty: (i + r).is_multiple_of(5),
            })
            .collect();
        let samples = (0..32u64)
            .map(|i| Sample {
                pid: 1,
                addr: base + (i % 48) * 4096,
                tier: (i % 2) as u8,
                time_ns: r * 1000 + i,
                store: i % 4 == 0,
            })
            .collect();
        Observations {
            now_ns: r * 1_000_000_000,
            page_bytes: 4096,
            tiers: tiers_of(&nodes),
            nodes,
            pages,
            scan_complete: !r.is_multiple_of(2),
            samples,
            hint_faults: Vec::new(),
            objects: vec![ObjectObs {
                pid: 1,
                addr: base,
                len: 32 * 4096,
                context: 1,
                resident_bytes: 32 * 4096,
                fast_bytes: 16 * 4096,
                ..ObjectObs::default()
            }],
            contexts: vec![ContextObs {
                pid: 1,
                index: 1,
                id: 7,
                size_class: 0,
                allocs: 10 + r,
                frees: r,
                live_bytes: 32 * 4096,
                bytes_allocated: (10 + r) * 4096,
                directive: strata_policy::Directive::Default,
            }],
            counters: Some(Counters { accesses: 1000 * (r + 1), llc_misses: 100 * (r + 1) * (r + 1) }),
        }
    }

    /// Fuzzing the configuration file, which comes from the user: the example with values
    /// swapped for extreme ones, lines dropped or doubled, characters changed. Each is refused
    /// with a message, or (it checked) it makes its policy, and the policy runs rounds.
    #[test]
    fn mutated_configurations_are_refused_or_run() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/strata.toml");
        let text = std::fs::read_to_string(p).unwrap();
        const VALUES: [&str; 20] = [
            "0",
            "-1",
            "1",
            "0.0",
            "-0.5",
            "1e309",
            "nan",
            "inf",
            "-inf",
            "18446744073709551615",
            "99999999999999999999",
            "\"\"",
            "\"x\"",
            "[]",
            "{}",
            "true",
            "1e-300",
            "4294967296",
            "2.5",
            "-9223372036854775808",
        ];
        let mut x = strata_util::XorShift::new(0x0123_4567_89ab_cdef);
        let mut rnd = move |n: usize| x.below(n as u64) as usize;
        let (mut ran, mut refused) = (0, 0);
        for _ in 0..10_000 {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for _ in 0..1 + rnd(3) {
                let k = rnd(lines.len());
                match rnd(6) {
                    0..=2 => {
                        if let Some((key, _)) = lines[k].split_once('=') {
                            lines[k] = format!("{key}= {}", VALUES[rnd(VALUES.len())]);
                        }
                    }
                    3 => {
                        lines.remove(k);
                    }
                    4 => lines.insert(k, lines[k].clone()),
                    _ => {
                        let mut b = lines[k].clone().into_bytes();
                        if !b.is_empty() {
                            let i = rnd(b.len());
                            b[i] = b"[]=\"#.,-0 x"[rnd(11)];
                        }
                        lines[k] = String::from_utf8_lossy(&b).into_owned();
                    }
                }
            }
            let t = lines.join("\n");
            let policy = strata_policy::POLICIES[rnd(strata_policy::POLICIES.len())];
            match Config::parse(&t, policy) {
                Ok(c) => {
                    let mut p = c.make_policy(policy).unwrap_or_else(|e| panic!("{policy}: {e}\n{t}"));
                    for r in 0..4 {
                        p.decide(&small_machine(r));
                    }
                    ran += 1;
                }
                Err(Error::Config(m)) => {
                    assert!(!m.is_empty());
                    refused += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(ran > 300 && refused > 300, "ran {ran}, refused {refused}");
    }
}
