//! Real Linux as the engine's machine (the live daemon's): the processes it manages, how it
//! sees each one's writes, nodes and tiers from sysfs, pages located through their frames and
//! moved with `move_pages(2)`.
//!
//! **Processes.** Every process under Strata (`strata run`, or any with
//! `LD_PRELOAD=libstrata.so`) has a channel (`/dev/shm/strata.PID`, unlinked at once): the
//! machine finds channels by looking through `/proc/*/fd` (at start and then every
//! `daemon.discovery_ms`), and at once for a process that announces itself ([`Linux::hello`]).
//! A channel with a bad magic, version or sizes is refused for that process, once, with a line
//! on stderr; the others carry on. Any other process can be attached by hand
//! ([`Linux::attach`]): its anonymous memory is managed page by page. A process that exits is
//! forgotten (its start time tells a reused pid).
//!
//! **Seeing writes** ([`Tracker`]), per process, by what it and the kernel offer:
//! `pagemap-scan` when the process registered Strata's memory for asynchronous write-protect
//! (its channel says so; Linux 6.7+): one `PAGEMAP_SCAN` with `PM_SCAN_WP_MATCHING` reports the
//! present pages of that memory, which were written since their last scan, and protects them
//! again; else `soft-dirty` when the kernel has it: pagemap's soft-dirty bit over every private
//! anonymous mapping, cleared (`clear_refs` 4) when a full scan ends; else none, and the
//! process's pages are not scanned. Both see writes only: a page read and not written looks
//! idle (docs/daemon.md says which tracker sees reads on which kernel). Reads come from DAMON
//! (`damon-vaddr`) or, where configured, from `hint-fault`: pagemap-scan's writes, and each
//! pass one sampled page of every 2 MiB block of the process that its agent makes missing
//! until touched (libstrata/agent/sample.c); a block whose sample was touched counts as read,
//! every page of it, for DAMON_WINDOW.
//!
//! **Where pages are.** From each page's frame in pagemap and the memory blocks of each node in
//! sysfs ([`Frames`]) when the daemon may see frames (root), else `move_pages(2)` with no
//! target.
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_policy::{ContextObs, Directive, Node, NodeObs, ObjectObs, PageObs, Tier};

use crate::agent::{Agent, AgentCounters};
use crate::pagemap::{self, Frames};
use crate::pidfd::Identity;
use stratad::channel::{Channel, ChannelError};
use stratad::config::{Mechanism, MoverConfig, Reserve, TrackerKind as Tracker};
use stratad::machine::{move_statuses, Machine, MoveStatus, ProcessObs, Refusal};

const PAGE: u64 = 4096;
const MPOL_MF_MOVE: libc::c_int = 1 << 1;
/// the end of a user address space (x86-64, 4-level page tables: TASK_SIZE_MAX)
const USER_TOP: u64 = (1 << 47) - PAGE;
/// A page counts as read when DAMON saw its region accessed in any aggregation of this long
/// (the last reads, one a round): one aggregation sees a buffer read in sweeps longer than it
/// only now and then (each page of it is touched once a sweep, and DAMON samples one page of a
/// region every 5 ms), so a hot set read in sweeps of about a second looked idle half the time in
/// the guest and was promoted and demoted by turns.
const DAMON_WINDOW: Duration = Duration::from_secs(2);
/// a page's node is read again (from its frame) at least every this many passes; in between
/// the machine keeps what it last read or moved it to. A pass reads again one stripe of 2 MiB
/// blocks of the address space (whole blocks: one read of pagemap each)
const REFRESH_PASSES: u64 = 8;
const REFRESH_BLOCK: u64 = 2 << 20;

/// The hint-fault tracker samples one page of every block this large each pass (DAMON's
/// regions, fixed), at most STRATA_AGENT_MAX_PAGES a process a pass (in turns beyond that).
const HINT_BLOCK: u64 = 2 << 20;

/// What a scan of one process found: its present pages (address, accessed and written since
/// their last scan), the pages it took of the round's budget, and where it stopped (None: it
/// reached the end of the process).
type Scanned = (Vec<(u64, bool, bool)>, u64, Option<u64>);

/// A process the machine manages.
struct Proc {
    /// the process itself, for as long as it lives (a reused pid is another process)
    pidfd: Option<crate::pidfd::Pidfd>,
    /// its channel, for a process under Strata
    channel: Option<Channel>,
    /// attached by hand (`strata attach`): managed until detached or gone
    attached: bool,
    /// a priority given from outside, over the one it claims
    given_priority: Option<i32>,
    command: String,
    /// from /proc/PID/stat: a different one is another process with the same pid
    start_time: u64,
    /// bytes its tracker found in each tier (index: the tier) in the pass going on, and in
    /// the last whole one
    tiers_now: Vec<u64>,
    tiers_last: Option<Vec<u64>>,
    /// why its last scan failed, if it did
    scan_error: Option<String>,
    /// each present page's node as the last pass found it, and as this pass does (both in
    /// address order), with how far this pass has read the first
    nodes_last: Vec<(u64, Node)>,
    nodes_now: Vec<(u64, Node)>,
    nodes_at: usize,
    /// its agent, when it offered one and the daemon kept it (transactional moves, hint-fault
    /// samples)
    agent: Option<Agent>,
    /// hint-fault: the pass each block (address / HINT_BLOCK) was last seen touched, and which
    /// block the next pass's samples start from
    hint_seen: BTreeMap<u64, u64>,
    hint_next: u64,
}

impl Proc {
    fn new(command: String, start_time: u64) -> Proc {
        Proc {
            pidfd: None,
            channel: None,
            attached: false,
            given_priority: None,
            command,
            start_time,
            tiers_now: Vec::new(),
            tiers_last: None,
            scan_error: None,
            nodes_last: Vec::new(),
            nodes_now: Vec::new(),
            nodes_at: 0,
            agent: None,
            hint_seen: BTreeMap::new(),
            hint_next: 0,
        }
    }
}

/// A managed process, as `strata stats` shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Managed {
    pub pid: u32,
    pub command: String,
    /// what rules match besides the command
    #[serde(default, flatten)]
    pub ids: stratad::ProcessIds,
    /// it runs under Strata (it has a channel)
    pub strata: bool,
    pub attached: bool,
    pub claimed_priority: i32,
    pub given_priority: Option<i32>,
    pub tracker: Tracker,
    /// present pages its tracker reported in the last whole pass (None: no pass ended yet)
    pub tracked_pages: Option<u64>,
    /// why its tracker failed in the last round, if it did
    pub tracker_error: Option<String>,
    /// what its agent did, when it has one (transactional moves)
    pub agent: Option<AgentCounters>,
}

pub struct Linux {
    start: Instant,
    sysfs: PathBuf,
    procs: BTreeMap<u32, Proc>,
    /// processes whose channel was refused, with why (said once, then left alone)
    pub refused: BTreeMap<u32, String>,
    discovered: Option<Instant>,
    discovery: Duration,
    tier_of: BTreeMap<Node, Tier>,
    frames: Frames,
    soft_dirty: bool,
    pagemap_scan: bool,
    /// where the scan goes on: the next process and address
    cursor: (u32, u64),
    /// whole passes so far (which stripe of pages has its nodes read again)
    pass: u64,
    /// what of each node is reported as not free, left for the kernel
    reserve: Reserve,
    /// the trackers to use, preferred first (the daemon's configuration; none chosen: the
    /// machine scans nothing)
    trackers: Vec<Tracker>,
    /// DAMON, when the daemon uses it, with at most this many processes, and each process's
    /// regions as this pass read them
    damon: Option<crate::damon::Damon>,
    damon_max: usize,
    damon_aggr_us: u64,
    /// per process, DAMON's last reads (the latest last), as many as cover DAMON_WINDOW, the
    /// passes a read (DAMON's or a sample's) counts for
    damon_regions: BTreeMap<u32, std::collections::VecDeque<Vec<crate::damon::Region>>>,
    damon_keep: usize,
    /// how pages move (the daemon's mover configuration)
    mover: MoverConfig,
    /// say on stderr why a channel is refused (the daemon does; `strata stats` only lists them)
    say_refusals: bool,
}

/// move_pages(2) on another process; `nodes` None only asks where the pages are.
fn move_pages(pid: u32, pages: &[u64], nodes: Option<&[libc::c_int]>) -> Result<Vec<libc::c_int>, i32> {
    let ptrs: Vec<*mut libc::c_void> = pages.iter().map(|&a| a as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    let nodes_ptr = nodes.map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: the arrays have pages.len() elements and outlive the call
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_long,
            ptrs.len() as libc::c_ulong,
            ptrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            MPOL_MF_MOVE,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
    }
    Ok(status)
}

/// The private anonymous writable mappings of a process, [start, end), in address order.
fn anonymous_ranges(pid: u32) -> Vec<(u64, u64)> {
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

/// What /proc/zoneinfo says of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct ZoneFree {
    /// bytes the node can give a program's pages without dipping into what the kernel keeps
    /// for itself: over its zones, free pages above the zone's high watermark and the reserve
    /// it holds back from movable allocations (lowmem_reserve). The kernel's own promotion
    /// keeps the high watermark free too; a node filled past it leaves the kernel short of
    /// memory for itself (seen in the guest: the OOM killer took a program).
    movable: u64,
    /// the node has memory outside ZONE_MOVABLE, so the kernel's own allocations (slab, page
    /// tables, tmpfs) can come from it; a node onlined as movable only (CXL) cannot hold them
    kernel: bool,
}

fn zone_free(zoneinfo: &str) -> BTreeMap<Node, ZoneFree> {
    struct Zone {
        name: String,
        free: u64,
        high: u64,
        managed: u64,
        protection: Vec<u64>,
    }
    let mut nodes: BTreeMap<Node, Vec<Zone>> = BTreeMap::new();
    let mut current: Option<Node> = None;
    for line in zoneinfo.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Node ") {
            let (node, zone) = rest.split_once(", zone").unwrap_or(("", ""));
            current = node.trim().parse().ok();
            if let Some(n) = current {
                let z = Zone { name: zone.trim().into(), free: 0, high: 0, managed: 0, protection: Vec::new() };
                nodes.entry(n).or_default().push(z);
            }
            continue;
        }
        let Some(z) = current.and_then(|n| nodes.get_mut(&n)).and_then(|v| v.last_mut()) else { continue };
        let value = |k: &str| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(v) = value("pages free") {
            z.free = v;
        } else if let Some(v) = value("high") {
            z.high = v;
        } else if let Some(v) = value("managed") {
            z.managed = v;
        } else if let Some(p) = l.strip_prefix("protection:") {
            z.protection = p
                .trim()
                .trim_matches(|c| c == '(' || c == ')')
                .split(',')
                .filter_map(|x| x.trim().parse().ok())
                .collect();
        }
    }
    nodes
        .into_iter()
        .map(|(n, zones)| {
            let movable = zones.iter().position(|z| z.name == "Movable").unwrap_or(zones.len().saturating_sub(1));
            let pages: u64 = zones
                .iter()
                .map(|z| z.free.saturating_sub(z.high + z.protection.get(movable).copied().unwrap_or(0)))
                .sum();
            let kernel = zones.iter().any(|z| z.managed > 0 && z.name != "Movable" && z.name != "Device");
            (n, ZoneFree { movable: pages * PAGE, kernel })
        })
        .collect()
}

/// Resident bytes per node of process `pid`, from /proc/PID/numa_maps.
pub fn node_bytes(pid: u32) -> BTreeMap<u8, u64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")) else { return out };
    for line in text.lines() {
        let page_kb = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(4);
        for w in line.split_whitespace() {
            let Some((node, pages)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) else { continue };
            if let (Ok(node), Ok(pages)) = (node.parse::<u8>(), pages.parse::<u64>()) {
                *out.entry(node).or_default() += pages * page_kb * 1024;
            }
        }
    }
    out
}

/// Whether an agent's error is its connection closed: its process exited or exec'd, which is
/// not worth a line (the next prune forgets it).
fn agent_closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), BrokenPipe | ConnectionReset | UnexpectedEof)
}

impl Linux {
    /// The machine as libstrata sees it: sysfs at $STRATA_SYSFS (or /sys), tiers overridden
    /// by $STRATA_TIERS.
    pub fn new() -> Linux {
        let sysfs = std::env::var_os("STRATA_SYSFS").map_or_else(|| PathBuf::from("/sys"), PathBuf::from);
        Linux {
            start: Instant::now(),
            frames: Frames::load(&sysfs),
            sysfs,
            procs: BTreeMap::new(),
            refused: BTreeMap::new(),
            discovered: None,
            discovery: Duration::from_secs(10),
            tier_of: BTreeMap::new(),
            soft_dirty: crate::probe::soft_dirty().is_ok(),
            pagemap_scan: crate::probe::pagemap_scan().is_ok(),
            cursor: (0, 0),
            pass: 0,
            reserve: Reserve::default(),
            trackers: vec![Tracker::PagemapScan, Tracker::SoftDirty],
            damon: None,
            damon_max: 0,
            damon_aggr_us: 100_000,
            damon_regions: BTreeMap::new(),
            damon_keep: 1,
            mover: MoverConfig::default(),
            say_refusals: false,
        }
    }

    /// Say on stderr, once a process, why its channel is refused (the daemon's machine).
    pub fn say_refusals(&mut self) {
        self.say_refusals = true;
    }

    /// Move pages by this mechanism from now on.
    pub fn set_mover(&mut self, mover: MoverConfig) {
        self.mover = mover;
    }

    /// A process handed over its channel (or said hello without one), and perhaps its agent's
    /// connection: taken if it is still the process that said hello. Whether anything changed.
    pub fn hello(&mut self, who: Identity, channel: Option<File>, agent: Option<UnixStream>) -> bool {
        let pid = who.pid;
        if pid == std::process::id() || !who.alive() {
            return false;
        }
        if self.procs.get(&pid).is_some_and(|p| p.start_time != who.start_time) {
            self.procs.remove(&pid); // the pid's earlier process, gone
        }
        self.refused.remove(&pid);
        let handed = channel.is_some();
        if let Some(p) = self.procs.get_mut(&pid).filter(|_| handed) {
            p.channel = None; // a process that exec'd says hello again with its new channel
        }
        let known = self.procs.get(&pid).is_some_and(|p| p.channel.is_some());
        if self.open_channel(&who, channel).is_err() {
            return true;
        }
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        if p.pidfd.is_none() {
            p.pidfd = Some(who.pidfd);
        }
        if let Some(stream) = agent {
            p.agent = Some(Agent::new(stream));
            return true;
        }
        handed || !known
    }

    /// When a slower node is short of free memory, every agent drops its shadows (they are
    /// copies of pages promoted from there: nothing is lost, and nothing fails for them).
    pub fn reclaim_shadows(&mut self) {
        let short = self.nodes().iter().any(|n| {
            n.tier > 0 && (n.free_bytes as f64) < n.capacity_bytes as f64 * self.mover.shadow_reclaim_fraction
        });
        if !short {
            return;
        }
        for p in self.procs.values_mut() {
            if p.agent.as_ref().is_some_and(|a| a.counters.shadows > 0) {
                let gone = p.agent.as_mut().is_some_and(|a| a.drop_shadows(0).is_err());
                if gone {
                    p.agent = None;
                }
            }
        }
    }

    /// Track with these, preferred first; DAMON (for at most `damon_max` processes, its
    /// aggregation `round` long less a fifth, so a round can wait for it) is taken only here,
    /// by the daemon, never by a tool that only reads. Returns why DAMON, if asked for, cannot
    /// be used.
    pub fn set_trackers(&mut self, trackers: &[Tracker], damon_max: usize, round: Duration) -> Option<String> {
        self.trackers = trackers.to_vec();
        self.damon_max = damon_max;
        self.damon_aggr_us = (round.as_micros() as u64 * 4 / 5).max(5000);
        self.damon_keep = (DAMON_WINDOW.as_micros() as u64).div_ceil(round.as_micros().max(1) as u64).max(1) as usize;
        let wants_damon = trackers.contains(&Tracker::DamonVaddr) && damon_max > 0;
        if !wants_damon {
            self.damon = None;
            return None;
        }
        if self.damon.is_some() {
            return None;
        }
        match crate::damon::Damon::open() {
            Ok(d) => {
                self.damon = Some(d);
                None
            }
            Err(e) => Some(e),
        }
    }

    /// Keep this much of every node free: nodes() reports it as used.
    pub fn set_reserve(&mut self, r: Reserve) {
        self.reserve = r;
    }

    /// Look through every process's open files for channels this often.
    pub fn set_discovery(&mut self, every: Duration) {
        self.discovery = every;
    }

    /// The pids managed now (after looking for new processes if it is time).
    pub fn pids(&mut self) -> Vec<u32> {
        self.discover();
        self.procs.keys().copied().collect()
    }

    /// Forget processes that exited (or whose pid now names another process).
    fn prune(&mut self) {
        self.procs.retain(|pid, p| {
            p.pidfd.as_ref().is_none_or(|f| f.alive())
                && crate::pidfd::identity(*pid).is_some_and(|(start, _)| start == p.start_time)
        });
        self.refused.retain(|pid, _| Path::new(&format!("/proc/{pid}")).exists());
    }

    /// Take process `who`'s channel, `file` if it handed one over, else the one found among its
    /// open files: Ok(false) when it has none.
    fn open_channel(&mut self, who: &Identity, file: Option<File>) -> Result<bool, String> {
        let pid = who.pid;
        if self.procs.get(&pid).is_some_and(|p| p.channel.is_some()) {
            return Ok(true);
        }
        let opened = match file {
            Some(f) => Channel::from_file(pid, f),
            None => Channel::open(pid),
        };
        match opened {
            Ok(c) if who.alive() => {
                self.procs.entry(pid).or_insert_with(|| Proc::new(who.command.clone(), who.start_time)).channel =
                    Some(c);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e @ (ChannelError::Bad { .. } | ChannelError::Inherited { .. })) => {
                // (Inherited only from a hello: a process handed over another's channel)
                let why = match e {
                    ChannelError::Bad { why, .. } => why,
                    other => other.to_string(),
                };
                if self.refused.insert(pid, why.clone()).is_none() && self.say_refusals {
                    eprintln!("strata daemon: process {pid}: its channel is refused: {why}");
                }
                Err(why)
            }
            Err(_) => Ok(false),
        }
    }

    /// Look for processes with a channel if it is time, and forget those that exited.
    pub fn discover(&mut self) {
        self.prune();
        if self.discovered.is_some_and(|t| t.elapsed() < self.discovery) {
            return;
        }
        self.discovered = Some(Instant::now());
        let Ok(dir) = std::fs::read_dir("/proc") else { return };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid != std::process::id()
                && !self.procs.contains_key(&pid)
                && !self.refused.contains_key(&pid)
                && Channel::find(pid).is_some()
            {
                if let Some(who) = Identity::of(pid) {
                    if self.open_channel(&who, None) == Ok(true) {
                        self.procs.get_mut(&pid).expect("just taken").pidfd = Some(who.pidfd);
                    }
                }
            }
        }
    }

    /// Manage process `pid`, with `priority` over the one it claims: a process under Strata
    /// by its channel, any other by its anonymous memory, page by page.
    pub fn attach(&mut self, pid: u32, priority: Option<i32>) -> Result<(), String> {
        if pid == std::process::id() {
            return Err("the daemon does not manage itself".into());
        }
        let Some(who) = Identity::of(pid) else { return Err(format!("no process {pid}")) };
        if self.procs.get(&pid).is_some_and(|p| p.start_time != who.start_time) {
            self.procs.remove(&pid);
        }
        self.open_channel(&who, None).map_err(|why| format!("process {pid}: its channel is refused: {why}"))?;
        let p = self.procs.entry(pid).or_insert_with(|| Proc::new(who.command.clone(), who.start_time));
        p.pidfd.get_or_insert(who.pidfd);
        p.attached = true;
        if let Some(given) = priority {
            p.given_priority = Some(given.clamp(strata_sys::STRATA_PRIORITY_MIN, strata_sys::STRATA_PRIORITY_MAX));
        }
        Ok(())
    }

    /// Stop managing an attached process (a process under Strata stays, with its own priority).
    pub fn detach(&mut self, pid: u32) -> Result<(), String> {
        let Some(p) = self.procs.get_mut(&pid) else { return Err(format!("process {pid} is not managed")) };
        if p.channel.is_some() {
            p.attached = false;
            p.given_priority = None;
        } else {
            self.procs.remove(&pid);
        }
        Ok(())
    }

    /// How process `pid`'s writes are seen.
    pub fn tracker(&self, pid: u32) -> Tracker {
        let Some(p) = self.procs.get(&pid) else { return Tracker::None };
        let usable = |t: &Tracker| match t {
            Tracker::DamonVaddr => self.damon.as_ref().is_some_and(|d| d.pids().contains(&pid)),
            Tracker::HintFault => {
                self.pagemap_scan && p.channel.as_ref().is_some_and(|c| c.wp_async()) && p.agent.is_some()
            }
            Tracker::PagemapScan => self.pagemap_scan && p.channel.as_ref().is_some_and(|c| c.wp_async()),
            Tracker::SoftDirty => self.soft_dirty,
            Tracker::None => false,
        };
        self.trackers.iter().copied().find(usable).unwrap_or(Tracker::None)
    }

    /// Why no tracker of the configuration can ever see process `pid`'s accesses, if none can
    /// (said to `strata attach`): the daemon would hold it and move nothing of it.
    pub fn unseen_because(&self, pid: u32) -> Option<String> {
        let p = self.procs.get(&pid)?;
        let wp = p.channel.as_ref().is_some_and(|c| c.wp_async());
        let mut why = Vec::new();
        for t in &self.trackers {
            let (can, because) = match t {
                Tracker::DamonVaddr => {
                    (self.damon.is_some(), "DAMON for processes is not in this kernel or not set up")
                }
                Tracker::PagemapScan | Tracker::HintFault if !self.pagemap_scan => {
                    (false, "PAGEMAP_SCAN needs Linux 6.7")
                }
                Tracker::PagemapScan | Tracker::HintFault => {
                    (wp, "it needs the process's own userfaultfd, which only a process under Strata offers")
                }
                Tracker::SoftDirty => (self.soft_dirty, "this kernel has no soft-dirty bits"),
                Tracker::None => (false, ""),
            };
            if can {
                return None;
            }
            why.push(format!("{}: {because}", t.name()));
        }
        Some(format!(
            "no tracker can see process {pid}, so nothing of it will move ({}); strata daemon --probe says more",
            why.join("; ")
        ))
    }

    /// At the start of a pass: DAMON monitors the first processes (by pid) up to its limit,
    /// and what it saw of them is read.
    fn damon_pass(&mut self) {
        let Some(d) = self.damon.as_mut() else { return };
        let chosen: Vec<u32> = self.procs.keys().copied().take(self.damon_max).collect();
        self.damon_regions.retain(|pid, _| chosen.contains(pid));
        if let Err(e) = d.monitor(&chosen, self.damon_aggr_us) {
            eprintln!("strata daemon: DAMON: {e}");
            return;
        }
        for (pid, r) in d.regions() {
            match r {
                Ok(regions) => {
                    let reads = self.damon_regions.entry(pid).or_default();
                    reads.push_back(regions);
                    while reads.len() > self.damon_keep {
                        reads.pop_front();
                    }
                }
                Err(e) => {
                    if let Some(p) = self.procs.get_mut(&pid) {
                        p.scan_error = Some(format!("DAMON: {e}"));
                    }
                }
            }
        }
    }

    /// At the start of a pass: each hint-fault process's agent reports the samples touched
    /// since the last pass and takes new ones, a page of each 2 MiB block the last pass found
    /// present (the block's page chosen anew each pass).
    fn hint_pass(&mut self) {
        let pids: Vec<u32> = self.procs.keys().copied().filter(|&p| self.tracker(p) == Tracker::HintFault).collect();
        let pass = self.pass;
        for pid in pids {
            let Some(p) = self.procs.get_mut(&pid) else { continue };
            // each block, and where its pages start in nodes_last (address order)
            let pages = &p.nodes_last;
            let blocks: Vec<(u64, usize)> = (0..pages.len())
                .filter(|&i| i == 0 || pages[i].0 / HINT_BLOCK != pages[i - 1].0 / HINT_BLOCK)
                .map(|i| (pages[i].0 / HINT_BLOCK, i))
                .collect();
            let max = strata_sys::STRATA_AGENT_MAX_PAGES;
            let start = blocks.partition_point(|(b, _)| *b < p.hint_next);
            let chosen: Vec<u64> = (0..blocks.len().min(max))
                .map(|i| (start + i) % blocks.len())
                .map(|k| {
                    let (b, from) = blocks[k];
                    let to = blocks.get(k + 1).map_or(pages.len(), |n| n.1);
                    let pick = (b.wrapping_mul(0x9E37_79B9) ^ pass.wrapping_mul(0x85EB_CA6B)) as usize % (to - from);
                    pages[from + pick].0
                })
                .collect();
            p.hint_next = blocks.get((start + max) % blocks.len().max(1)).map_or(0, |(b, _)| *b);
            let Some(agent) = p.agent.as_mut() else { continue };
            match agent.sample(&chosen) {
                Ok(touched) => {
                    for (page, _) in touched {
                        p.hint_seen.insert(page / HINT_BLOCK, pass);
                    }
                    let keep = self.damon_keep.max(blocks.len().div_ceil(max)) as u64;
                    p.hint_seen.retain(|_, seen| pass - *seen <= keep);
                }
                Err(e) => {
                    if !agent_closed(&e) {
                        eprintln!("strata daemon: process {pid}'s agent stopped answering ({e}); no more samples");
                    }
                    p.agent = None;
                    p.hint_seen.clear();
                }
            }
        }
    }

    /// The managed processes, for status.
    pub fn managed(&self) -> Vec<Managed> {
        self.procs
            .iter()
            .map(|(&pid, p)| Managed {
                pid,
                command: p.command.clone(),
                ids: stratad::ProcessIds::of(pid),
                strata: p.channel.is_some(),
                attached: p.attached,
                claimed_priority: p.channel.as_ref().map_or(0, |c| c.priority()),
                given_priority: p.given_priority,
                tracker: self.tracker(pid),
                tracked_pages: p.tiers_last.as_ref().map(|t| t.iter().sum::<u64>() / PAGE),
                tracker_error: p.scan_error.clone(),
                agent: p.agent.as_ref().map(|a| a.counters),
            })
            .collect()
    }

    /// The node of each page of process `pid` (None: not resident, or the process is gone):
    /// from the pages' frames where the daemon can see them, else from move_pages(2).
    fn nodes_of(&self, pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        if let Some(nodes) = self.nodes_by_frame(pid, pages) {
            return nodes;
        }
        match move_pages(pid, pages, None) {
            Ok(st) => st.iter().map(|&s| (s >= 0).then_some(s as Node)).collect(),
            Err(_) => vec![None; pages.len()],
        }
    }

    /// Nodes from frames: None when frames are hidden (not root) or pagemap cannot be read.
    fn nodes_by_frame(&self, pid: u32, pages: &[u64]) -> Option<Vec<Option<Node>>> {
        let f = File::open(format!("/proc/{pid}/pagemap")).ok()?;
        let mut out = Vec::with_capacity(pages.len());
        let mut i = 0;
        while i < pages.len() {
            // a run of consecutive pages is one read
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + PAGE && j - i < 4096 {
                j += 1;
            }
            for e in pagemap::entries(&f, pages[i], j - i).ok()? {
                if !pagemap::present(e) {
                    out.push(None);
                    continue;
                }
                out.push(Some(self.frames.node(pagemap::pfn(e))?));
            }
            i = j;
        }
        Some(out)
    }

    /// The pages a scan reports, from present (address, written) pairs of process `pid` in
    /// address order: each page's node as this pass last read or moved it, read again (from
    /// its frame) when unknown or in this pass's stripe of pages.
    fn observe(&mut self, pid: u32, present: &[(u64, bool, bool)], out: &mut Vec<PageObs>) {
        let stripe = self.pass % REFRESH_PASSES;
        let Some(p) = self.procs.get_mut(&pid) else { return };
        let mut known: Vec<Option<Node>> = Vec::with_capacity(present.len());
        for &(addr, _, _) in present {
            while p.nodes_at < p.nodes_last.len() && p.nodes_last[p.nodes_at].0 < addr {
                p.nodes_at += 1;
            }
            let cached = p.nodes_last.get(p.nodes_at).filter(|e| e.0 == addr).map(|e| e.1);
            known.push(cached.filter(|_| (addr / REFRESH_BLOCK) % REFRESH_PASSES != stripe));
        }
        let unknown: Vec<u64> = present.iter().zip(&known).filter(|(_, k)| k.is_none()).map(|(p, _)| p.0).collect();
        let mut read = self.nodes_of(pid, &unknown).into_iter();
        let Some(p) = self.procs.get_mut(&pid) else { return };
        for (&(addr, accessed, dirty), k) in present.iter().zip(known) {
            let Some(node) = k.or_else(|| read.next().flatten()) else { continue };
            p.nodes_now.push((addr, node));
            let tier = self.tier_of.get(&node).copied().unwrap_or(Tier::MAX);
            out.push(PageObs { pid, addr, tier, node, accessed, dirty });
        }
    }

    /// The pages moved: their nodes, as this pass and the last one know them.
    fn moved(&mut self, pid: u32, pages: &[u64], status: &[MoveStatus], to: Node) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        for (&addr, st) in pages.iter().zip(status) {
            if st.is_ok() {
                for v in [&mut p.nodes_last, &mut p.nodes_now] {
                    if let Ok(i) = v.binary_search_by_key(&addr, |e| e.0) {
                        v[i].1 = to;
                    }
                }
            }
        }
    }

    /// Scan one process from `from`: at most `max` pages.
    fn scan_process(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String> {
        let pm = File::open(format!("/proc/{pid}/pagemap")).map_err(|e| format!("/proc/{pid}/pagemap: {e}"))?;
        let mut present = Vec::new();
        Ok(match self.tracker(pid) {
            Tracker::None => (present, 0, None),
            tracker @ (Tracker::PagemapScan | Tracker::HintFault) => {
                // present pages (not the shared zero page) of registered memory, written or
                // not; matching protects them again, and unregistered mappings are skipped;
                // hint-fault: a page counts as accessed too when its block's sample was touched
                let q = pagemap::Query {
                    flags: pagemap::PM_SCAN_WP_MATCHING,
                    inverted: pagemap::PAGE_IS_PFNZERO,
                    mask: pagemap::PAGE_IS_PRESENT | pagemap::PAGE_IS_PFNZERO,
                    report: pagemap::PAGE_IS_WRITTEN,
                };
                let mut regions = Vec::new();
                let end = pagemap::scan(&pm, from, USER_TOP, max, q, &mut regions)
                    .map_err(|e| format!("PAGEMAP_SCAN: {e}"))?;
                let seen = self.procs.get(&pid).filter(|_| tracker == Tracker::HintFault).map(|p| &p.hint_seen);
                for r in &regions {
                    let written = r.categories & pagemap::PAGE_IS_WRITTEN != 0;
                    present.extend((r.start..r.end).step_by(PAGE as usize).map(|a| {
                        let read = seen.is_some_and(|s| s.contains_key(&(a / HINT_BLOCK)));
                        (a, written || read, written)
                    }));
                }
                let n = present.len() as u64;
                (present, n, (end < USER_TOP).then_some(end))
            }
            // every private anonymous mapping, from pagemap: written if soft-dirty (where the
            // kernel has it), accessed if written or, with DAMON, in a region it saw accessed
            tracker @ (Tracker::SoftDirty | Tracker::DamonVaddr) => {
                let reads = self.damon_regions.get(&pid);
                let seen = |addr: u64, e: u64| {
                    let dirty = self.soft_dirty && pagemap::soft_dirty(e);
                    let read = tracker == Tracker::DamonVaddr
                        && reads.is_some_and(|r| {
                            r.iter().any(|regions| crate::damon::accessed(regions, addr) == Some(true))
                        });
                    (addr, dirty || read, dirty)
                };
                let mut taken = 0u64;
                for (lo, hi) in anonymous_ranges(pid) {
                    let mut addr = lo.max(from);
                    while addr < hi {
                        if taken >= max {
                            return Ok((present, taken, Some(addr)));
                        }
                        let n = ((hi - addr) / PAGE).min(max - taken).min(4096) as usize;
                        let Ok(entries) = pagemap::entries(&pm, addr, n) else { break };
                        present.extend(
                            entries
                                .iter()
                                .enumerate()
                                .filter(|(_, &e)| pagemap::present(e))
                                .map(|(i, &e)| seen(addr + i as u64 * PAGE, e)),
                        );
                        taken += n as u64;
                        addr += n as u64 * PAGE;
                    }
                }
                (present, taken, None)
            }
        })
    }
}

impl Default for Linux {
    fn default() -> Self {
        Linux::new()
    }
}

impl Machine for Linux {
    /// From the cgroup v2 hierarchy under this machine's sysfs (/sys/fs/cgroup).
    fn cgroup_memory(&mut self, cgroup: &str) -> Option<stratad::share::CgroupMemory> {
        if cgroup.split('/').any(|c| c == "..") {
            return None;
        }
        stratad::share::CgroupMemory::read(&self.sysfs.join("fs/cgroup").join(cgroup.trim_start_matches('/')))
    }

    fn page_bytes(&self) -> u64 {
        PAGE
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn nodes(&mut self) -> Vec<NodeObs> {
        let tiers = std::env::var("STRATA_TIERS").ok();
        let Ok(topo) = strata_topo::discover_at(&self.sysfs, tiers.as_deref()) else { return Vec::new() };
        let cpu_node = topo.nodes.iter().find(|n| n.has_cpus).map_or(0, |n| n.id);
        let mut nodes: Vec<NodeObs> = topo
            .nodes
            .iter()
            .map(|n| NodeObs {
                node: n.id as Node,
                tier: n.tier as Tier,
                distance: n.distances.iter().find(|d| d.0 == cpu_node).map_or(10, |d| d.1.min(255) as u8),
                capacity_bytes: n.total_bytes,
                free_bytes: n.free_bytes,
            })
            .collect();
        // free for the engine: above the kernel's watermarks (for this machine's own sysfs),
        // less the reserve the daemon keeps for the kernel
        let zones = match self.sysfs == Path::new("/sys") {
            true => std::fs::read_to_string("/proc/zoneinfo").map(|z| zone_free(&z)).unwrap_or_default(),
            false => BTreeMap::new(),
        };
        for n in &mut nodes {
            let z = zones.get(&n.node);
            if let Some(z) = z {
                n.free_bytes = n.free_bytes.min(z.movable);
            }
            let kernel = z.is_none_or(|z| z.kernel);
            n.free_bytes = n.free_bytes.saturating_sub(self.reserve.bytes(n.capacity_bytes, kernel));
        }
        nodes.sort_by_key(|n| (n.distance, n.node));
        let tiers: BTreeMap<Node, Tier> = nodes.iter().map(|n| (n.node, n.tier)).collect();
        if tiers != self.tier_of {
            // memory came or went (hot-plugged blocks): the frames' nodes too, and what the
            // passes know of pages' nodes is read again
            self.frames = Frames::load(&self.sysfs);
            self.tier_of = tiers;
            for p in self.procs.values_mut() {
                (p.nodes_last, p.nodes_at) = (Vec::new(), 0);
            }
        }
        nodes
    }

    fn can_scan(&self) -> bool {
        self.soft_dirty || self.pagemap_scan || self.damon.is_some()
    }

    /// The processes in pid order, each by its tracker, from where the last call stopped.
    fn scan(&mut self, max: u64, out: &mut Vec<PageObs>) -> bool {
        self.discover();
        if self.cursor == (0, 0) {
            self.damon_pass();
            self.hint_pass();
        }
        let mut taken = 0u64;
        let pids: Vec<u32> = self.procs.keys().copied().filter(|&p| p >= self.cursor.0).collect();
        for pid in pids {
            let from = if pid == self.cursor.0 { self.cursor.1 } else { 0 };
            let before = out.len();
            let result = self.scan_process(pid, from, max - taken);
            if let Ok((present, _, _)) = &result {
                self.observe(pid, present, out);
            }
            let Some(p) = self.procs.get_mut(&pid) else { continue };
            for o in out[before..].iter().filter(|o| o.tier != Tier::MAX) {
                let t = o.tier as usize;
                if p.tiers_now.len() <= t {
                    p.tiers_now.resize(t + 1, 0);
                }
                p.tiers_now[t] += PAGE;
            }
            let (n, stopped) = result.as_ref().map_or((0, None), |r| (r.1, r.2));
            p.scan_error = result.err();
            taken += n;
            if let Some(at) = stopped {
                self.cursor = (pid, at);
                return false;
            }
        }
        // a pass ended: soft-dirty bits start again from clean
        let soft: Vec<u32> = self
            .procs
            .keys()
            .copied()
            .filter(|&p| self.soft_dirty && matches!(self.tracker(p), Tracker::SoftDirty | Tracker::DamonVaddr))
            .collect();
        for pid in soft {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "4");
        }
        for p in self.procs.values_mut() {
            p.tiers_last = Some(std::mem::take(&mut p.tiers_now));
            // (the last pass's vector becomes the next one's, allocation and all)
            std::mem::swap(&mut p.nodes_last, &mut p.nodes_now);
            p.nodes_now.clear();
            p.nodes_at = 0;
        }
        self.cursor = (0, 0);
        self.pass += 1;
        true
    }

    fn locate(&mut self, pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        self.nodes_of(pid, pages)
    }

    /// By the process's agent when the mechanism is transactional and it has one (an agent
    /// that stops answering is forgotten, and the pages go by move_pages), else move_pages(2).
    fn move_pages(&mut self, pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus> {
        let (mechanism, attempts) = (self.mover.mechanism, self.mover.attempts);
        let by_agent = self.procs.get_mut(&pid).and_then(|p| match (&mut p.agent, mechanism) {
            (Some(a), Mechanism::Transactional) => match a.move_pages(pages, to, attempts, false) {
                Ok(st) => Some(st),
                Err(e) => {
                    if !agent_closed(&e) {
                        eprintln!("strata daemon: process {pid}'s agent stopped answering ({e}); moving by move_pages");
                    }
                    p.agent = None;
                    None
                }
            },
            _ => None,
        });
        let status = match by_agent {
            Some(st) => move_statuses(&st, to),
            None => {
                let nodes = vec![to as libc::c_int; pages.len()];
                match move_pages(pid, pages, Some(&nodes)) {
                    Ok(status) => move_statuses(&status, to),
                    Err(e) => vec![Err(Refusal::from_errno(e)); pages.len()],
                }
            }
        };
        self.moved(pid, pages, &status, to);
        status
    }

    fn set_directive(&mut self, pid: u32, context: u32, d: Directive) -> Result<(), Refusal> {
        match self.procs.get(&pid).and_then(|p| p.channel.as_ref()) {
            Some(c) if c.set_directive(context, d) => Ok(()),
            Some(_) => Err(Refusal::Other(libc::EINVAL)),
            None => Err(Refusal::Gone),
        }
    }

    /// The tracked objects of every process, each with its residency.
    fn objects(&mut self, out: &mut Vec<ObjectObs>) {
        self.discover();
        let start = out.len();
        for c in self.procs.values().filter_map(|p| p.channel.as_ref()) {
            c.objects(out);
        }
        for o in &mut out[start..] {
            let pages: Vec<u64> = (o.addr..o.addr + o.len).step_by(PAGE as usize).collect();
            for node in self.nodes_of(o.pid, &pages).into_iter().flatten() {
                o.resident_bytes += PAGE;
                if self.tier_of.get(&node) == Some(&0) {
                    o.fast_bytes += PAGE;
                }
            }
        }
    }

    fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        self.discover();
        for c in self.procs.values_mut().filter_map(|p| p.channel.as_mut()) {
            c.contexts(out);
        }
    }

    fn processes(&mut self) -> Vec<ProcessObs> {
        self.discover();
        self.procs
            .iter()
            .map(|(&pid, p)| ProcessObs {
                pid,
                command: p.command.clone(),
                ids: stratad::ProcessIds::of(pid),
                claimed_priority: p.channel.as_ref().map_or(0, |c| c.priority()),
                given_priority: p.given_priority,
            })
            .collect()
    }

    /// What its tracker found in its last whole pass (what the engine manages of it), else
    /// what numa_maps says (the kernel's count, which walks every page table of the process:
    /// the larger part of a round's cost, when it was read every round)
    fn resident(&mut self, pid: u32) -> Vec<u64> {
        if let Some(t) = self.procs.get(&pid).and_then(|p| p.tiers_last.clone()) {
            return t;
        }
        let mut out: Vec<u64> = Vec::new();
        for (node, bytes) in node_bytes(pid) {
            let tier = self.tier_of.get(&node).copied().unwrap_or(0) as usize;
            if out.len() <= tier {
                out.resize(tier + 1, 0);
            }
            out[tier] += bytes;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    fn libstrata() -> PathBuf {
        let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build/libstrata.so");
        assert!(lib.exists(), "run `make lib` first ({} is missing)", lib.display());
        lib
    }

    /// A shell under LD_PRELOAD=libstrata.so holding a 64 KiB variable (a tracked object).
    fn preloaded_shell(env: &[(&str, &str)]) -> Child {
        Command::new("sh")
            .args(["-c", "x=$(head -c 65536 /dev/zero | tr '\\0' a); sleep 30"])
            .env("LD_PRELOAD", libstrata())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Wait until `pid` is managed and `ok` holds.
    fn until(m: &mut Linux, pid: u32, mut ok: impl FnMut(&mut Linux) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            m.discovered = None; // look again now
            if m.pids().contains(&pid) && ok(m) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    #[test]
    fn a_preloaded_process_is_found_its_objects_located_and_its_pages_gone_when_it_exits() {
        let mut child = preloaded_shell(&[("STRATA_PRIORITY", "high")]);
        let pid = child.id();
        let mut m = Linux::new();
        let mut objects = Vec::new();
        let found = until(&mut m, pid, |m| {
            m.nodes();
            objects.clear();
            m.objects(&mut objects);
            objects.iter().any(|o| o.pid == pid && o.resident_bytes > 0)
        });
        let procs = m.processes();
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "no resident tracked object of {pid}: {objects:?}");
        let o = objects.iter().find(|o| o.pid == pid && o.resident_bytes > 0).unwrap();
        assert!(o.fast_bytes <= o.resident_bytes && o.resident_bytes <= o.len.div_ceil(PAGE) * PAGE);
        let p = procs.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!((p.command.as_str(), p.claimed_priority, p.given_priority), ("sh", 10, None));
        // the process has exited: its pages are gone, not an error, and it is forgotten
        assert_eq!(m.move_pages(pid, &[o.addr], 0), vec![Err(Refusal::Gone)]);
        assert!(!m.pids().contains(&pid));
    }

    #[test]
    fn a_preloaded_process_is_scanned_by_pagemap_scan_where_the_kernel_has_it() {
        if crate::probe::pagemap_scan().is_err() {
            eprintln!("skipped: this kernel has no asynchronous write-protect (PAGEMAP_SCAN)");
            return;
        }
        let mut child = preloaded_shell(&[]);
        let pid = child.id();
        let mut m = Linux::new();
        let tracked = until(&mut m, pid, |m| m.tracker(pid) == Tracker::PagemapScan);
        m.nodes();
        let mine = |v: &Vec<PageObs>| v.iter().filter(|p| p.pid == pid).cloned().collect::<Vec<_>>();
        let full_scan = |m: &mut Linux, step: u64| {
            let mut v = Vec::new();
            while !m.scan(step, &mut v) {}
            mine(&v)
        };
        // full scans: every present page of Strata's memory, until the shell has built its
        // string and sleeps (the same pages twice); then one in small steps (the cursor carries
        // on), which finds none written since
        let first = full_scan(&mut m, 1 << 20);
        let mut settled = first.clone();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let again = full_scan(&mut m, 1 << 20);
            if again.len() == settled.len() {
                break;
            }
            settled = again;
        }
        let second = full_scan(&mut m, 64);
        let _ = child.kill();
        let _ = child.wait();
        assert!(tracked, "tracker {:?}", m.tracker(pid));
        assert!(settled.len() >= 16, "the shell's 64 KiB and more: {} pages", settled.len());
        assert!(first.iter().any(|p| p.dirty), "its pages were written before the first scan");
        let first = settled;
        assert_eq!(second.len(), first.len(), "the same pages, present still");
        assert!(second.iter().all(|p| !p.dirty), "a sleeping shell writes nothing");
    }

    #[test]
    fn any_process_can_be_attached_with_a_priority_and_detached() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let mut m = Linux::new();
        m.attach(pid, Some(-10)).unwrap();
        let p = m.processes().into_iter().find(|p| p.pid == pid).expect("attached");
        assert_eq!((p.command.as_str(), p.given_priority), ("sleep", Some(-10)));
        let managed = m.managed();
        assert!(managed.iter().any(|x| x.pid == pid && x.attached && !x.strata));
        assert!(m.resident(pid).iter().sum::<u64>() > 0, "sleep has resident memory");
        m.detach(pid).unwrap();
        assert!(m.detach(pid).is_err());
        assert!(m.attach(u32::MAX - 1, None).unwrap_err().contains("no process"));
        assert!(m.attach(std::process::id(), None).is_err());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The review's row 1.7: a hello (with an agent) is taken for the process that said it and
    /// no other; once that process has exited, whatever has its pid now gets nothing of it.
    #[test]
    fn a_hello_from_a_process_that_has_exited_is_not_taken_for_another_with_its_pid() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let who = Identity::of(pid).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let (agent, _) = UnixStream::pair().unwrap();
        let mut m = Linux::new();
        assert!(!m.hello(who, None, Some(agent)), "taken for a process that has exited");
        assert!(m.managed().iter().all(|p| p.pid != pid));
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        m.attach(child.id(), Some(5000)).unwrap();
        let p = m.managed().into_iter().find(|p| p.pid == child.id()).unwrap();
        assert_eq!(p.given_priority, Some(strata_sys::STRATA_PRIORITY_MAX), "clamped");
        let _ = child.kill();
        let _ = child.wait();
        m.discover();
        assert!(m.managed().iter().all(|p| p.pid != child.id()), "gone with its process");
    }

    #[test]
    fn pages_of_this_process_are_located_and_moved_to_the_node_they_are_on() {
        let v = vec![7u8; 3 * PAGE as usize];
        let page = (v.as_ptr() as u64).next_multiple_of(PAGE);
        let pid = std::process::id();
        let mut m = Linux::new();
        let node = m.locate(pid, &[page])[0].expect("a touched page is resident");
        assert_eq!(m.move_pages(pid, &[page], node), vec![Ok(())]);
        assert_eq!(m.locate(pid, &[page]), vec![Some(node)]);
        assert_eq!(m.locate(pid, &[page + (1 << 40)]), vec![None], "an unmapped page");
    }

    #[test]
    fn free_memory_for_the_engine_is_above_the_watermarks_and_the_reserves_of_each_zone() {
        // the guest's node 0 when the daemon had filled it: DMA's pages are all held back from
        // movable allocations, DMA32 is below its high watermark; node 1 is movable only
        let z = "Node 0, zone      DMA\n  pages free     1983\n        min      7\n        low      10\n        high     13\n        managed  3840\n        protection: (0, 400, 4000, 4000, 4000)\n\
                 Node 0, zone    DMA32\n  pages free     298\n        high     448\n        managed  120000\n        protection: (0, 0, 0, 0, 0)\n\
                 Node 0, zone   Normal\n  pages free     0\n        high     0\n        managed  0\n        protection: (0, 0, 0, 0, 0)\n\
                 Node 0, zone  Movable\n  pages free     0\n        high     0\n        managed  0\n        protection: (0, 0, 0, 0, 0)\n\
                 Node 1, zone   Normal\n  pages free     0\n        high     0\n        managed  0\n        protection: (0, 0, 0, 0, 0)\n\
                 Node 1, zone  Movable\n  pages free     100000\n        high     1000\n        managed  131072\n        protection: (0, 0, 0, 0, 0)\n";
        let free = zone_free(z);
        assert_eq!(free[&0], ZoneFree { movable: 0, kernel: true });
        assert_eq!(free[&1], ZoneFree { movable: 99_000 * PAGE, kernel: false }, "an empty Normal zone holds nothing");
        let here = zone_free(&std::fs::read_to_string("/proc/zoneinfo").unwrap());
        let total: u64 = here.values().map(|z| z.movable).sum();
        assert!(total > 0 && total < 64 << 40, "{here:?}");
        assert!(here.values().any(|z| z.kernel), "this machine's kernel allocates from some node: {here:?}");
    }

    #[test]
    fn the_reserve_is_a_share_of_every_node_and_a_floor_on_the_nodes_the_kernel_allocates_from() {
        let r = Reserve { fraction: 0.02, kernel_bytes: 64 << 20 };
        // the guest's fast node: 2 % would be 10 MiB, too little for the kernel
        assert_eq!(r.bytes(512 << 20, true), 64 << 20);
        assert_eq!(r.bytes(512 << 20, false), (512 << 20) / 50, "a movable-only node keeps the share");
        assert_eq!(r.bytes(64 << 30, true), (64u64 << 30) / 50, "on a large node the share is more");
        assert_eq!(r.bytes(100 << 20, true), 50 << 20, "never more than half a node");
        assert_eq!(Reserve::default().bytes(1 << 30, true), 0);
    }

    #[test]
    fn this_process_has_resident_bytes_on_some_node_and_anonymous_mappings() {
        let v = vec![1u8; 1 << 20];
        let bytes = node_bytes(std::process::id());
        assert!(bytes.values().sum::<u64>() >= v.len() as u64, "{bytes:?}");
        let at = v.as_ptr() as u64;
        assert!(anonymous_ranges(std::process::id()).iter().any(|&(a, b)| a <= at && at < b));
    }
}
