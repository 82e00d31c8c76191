//! Real Linux as the engine's machine (the live daemon's): the processes it manages
//! ([`processes`]), how it sees each one's accesses ([`crate::tracker`]), where their pages are
//! ([`pages`]), nodes and tiers from sysfs, and moves ([`crate::migrate`]).
//!
//! A round starts with [`Linux::next_round`]: one look at the processes (those gone are
//! forgotten, new channels found when it is time) and one read of the nodes, which every
//! question of the round is answered from. The scan goes through the processes in pid order,
//! each by the first tracker of the configuration that can see it, a budget of pages a round;
//! a whole pass may take several rounds. Each tracker sees what it sees: pagemap-scan and
//! soft-dirty writes only (a page read and not written looks idle), DAMON and hint-fault reads
//! too (docs/daemon.md says which tracker sees reads on which kernel).
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_policy::{ContextObs, Directive, Node, NodeObs, ObjectObs, PageObs, Tier};
use stratad::config::{MoverConfig, Reserve, TrackerKind};
use stratad::{Machine, MoveStatus, ProcessObs, Refusal};

use crate::agent::Agent;
use crate::pidfd::Identity;
use crate::tracker::{Target, Trackers};

mod pages;
mod processes;

pub use pages::node_bytes;
use pages::Pages;
pub use processes::Managed;
use processes::Processes;

use crate::PAGE;

pub struct Linux {
    start: Instant,
    sysfs: PathBuf,
    procs: Processes,
    pages: Pages,
    tier_of: BTreeMap<Node, Tier>,
    /// this round's nodes (read once a round, by next_round or the first question)
    nodes: Option<Vec<NodeObs>>,
    /// where the scan goes on: the next process and address
    cursor: (u32, u64),
    /// whole passes so far (which stripe of pages has its nodes read again)
    pass: u64,
    /// what of each node is reported as not free, left for the kernel
    reserve: Reserve,
    /// the trackers to use, preferred first (the daemon's configuration), and what they were
    /// made with (kinds, DAMON's processes at most, the round)
    trackers: Trackers,
    made_with: (Vec<TrackerKind>, usize, Duration),
    /// how pages move (the daemon's mover configuration)
    mover: MoverConfig,
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

impl Linux {
    /// The machine as libstrata sees it: sysfs at $STRATA_SYSFS (or /sys), tiers overridden
    /// by $STRATA_TIERS; tracked by pagemap-scan and soft-dirty until told otherwise.
    pub fn new() -> Linux {
        let sysfs = std::env::var_os("STRATA_SYSFS").map_or_else(|| PathBuf::from("/sys"), PathBuf::from);
        let round = Duration::from_millis(100);
        Linux {
            start: Instant::now(),
            pages: Pages::new(&sysfs),
            sysfs,
            procs: Processes::new(),
            tier_of: BTreeMap::new(),
            nodes: None,
            cursor: (0, 0),
            pass: 0,
            reserve: Reserve::default(),
            trackers: Trackers::new(&[TrackerKind::PagemapScan, TrackerKind::SoftDirty], 0, round).0,
            made_with: (vec![TrackerKind::PagemapScan, TrackerKind::SoftDirty], 0, round),
            mover: MoverConfig::default(),
        }
    }

    /// Say on stderr, once a process, why its channel is refused (the daemon's machine).
    pub fn say_refusals(&mut self) {
        self.procs.say_refusals = true;
    }

    /// Processes whose channel was refused, with why.
    pub fn refused(&self) -> &BTreeMap<u32, String> {
        &self.procs.refused
    }

    /// Move pages by this mechanism from now on.
    pub fn set_mover(&mut self, mover: MoverConfig) {
        self.mover = mover;
    }

    /// A process handed over its channel (or said hello without one), and perhaps its agent's
    /// connection: taken if it is still the process that said hello. Whether anything changed.
    pub fn hello(&mut self, who: Identity, channel: Option<File>, agent: Option<UnixStream>) -> bool {
        let deadline = Duration::from_millis(self.mover.agent_deadline_ms);
        self.procs.hello(who, channel, agent.map(|stream| Agent::new(stream, deadline)))
    }

    /// When a slower node is short of free memory, every agent drops its shadows (they are
    /// copies of pages promoted from there: nothing is lost, and nothing fails for them).
    pub fn reclaim_shadows(&mut self) {
        let fraction = self.mover.shadow_reclaim_fraction;
        let short =
            self.nodes().iter().any(|n| n.tier > 0 && (n.free_bytes as f64) < n.capacity_bytes as f64 * fraction);
        if !short {
            return;
        }
        for p in self.procs.procs.values_mut() {
            if p.agent.as_mut().is_some_and(|a| !crate::migrate::drop_shadows(a)) {
                p.agent = None;
            }
        }
    }

    /// Track with these, preferred first; DAMON (for at most `damon_max` processes, its
    /// aggregation `round` long less a fifth, so a round can wait for it) is taken only here,
    /// by the daemon, never by a tool that only reads. Returns why DAMON, if asked for, cannot
    /// be used.
    pub fn set_trackers(&mut self, kinds: &[TrackerKind], damon_max: usize, round: Duration) -> Option<String> {
        let asked = (kinds.to_vec(), damon_max, round);
        if self.made_with == asked {
            return None;
        }
        self.made_with = asked;
        self.trackers = Trackers::default(); // (DAMON's kdamonds are given back before it is taken again)
        let (trackers, why) = Trackers::new(kinds, damon_max, round);
        self.trackers = trackers;
        why
    }

    /// Keep this much of every node free: nodes() reports it as used.
    pub fn set_reserve(&mut self, r: Reserve) {
        self.reserve = r;
    }

    /// Look through every process's open files for channels this often.
    pub fn set_discovery(&mut self, every: Duration) {
        self.procs.discovery = every;
    }

    /// A new round: the processes looked at once (those gone forgotten, new channels found if
    /// it is time) and the nodes read once, for every question of the round.
    pub fn next_round(&mut self) {
        self.discover();
        self.nodes = None;
    }

    /// Forget the processes that exited, and look for new ones if it is time.
    pub fn discover(&mut self) {
        self.procs.discover(false);
        let procs = &self.procs.procs;
        self.pages.retain(|pid| procs.contains_key(&pid));
        for t in self.trackers.iter_mut() {
            t.forget(&|pid| procs.contains_key(&pid));
        }
    }

    /// The pids managed now (after looking for new processes if it is time).
    pub fn pids(&mut self) -> Vec<u32> {
        self.discover();
        self.procs.procs.keys().copied().collect()
    }

    /// Manage process `pid`, with `priority` over the one it claims: a process under Strata
    /// by its channel, any other by its anonymous memory, page by page.
    pub fn attach(&mut self, pid: u32, priority: Option<i32>) -> Result<(), String> {
        self.procs.attach(pid, priority)
    }

    /// Stop managing an attached process (a process under Strata stays, with its own priority).
    pub fn detach(&mut self, pid: u32) -> Result<(), String> {
        self.procs.detach(pid)
    }

    /// How process `pid`'s accesses are seen.
    pub fn tracker(&self, pid: u32) -> TrackerKind {
        let Some(p) = self.procs.procs.get(&pid) else { return TrackerKind::None };
        self.trackers.of(pid, p.offers()).map_or(TrackerKind::None, |t| t.kind())
    }

    /// Why no tracker of the configuration can ever see process `pid`'s accesses, if none can
    /// (said to `strata attach`): the daemon would hold it and move nothing of it.
    pub fn unseen_because(&self, pid: u32) -> Option<String> {
        let p = self.procs.procs.get(&pid)?;
        let why = self.trackers.unseen_because(p.offers())?;
        Some(format!(
            "no tracker can see process {pid}, so nothing of it will move ({}); strata daemon --probe says more",
            why.join("; ")
        ))
    }

    /// The managed processes, for status.
    pub fn managed(&self) -> Vec<Managed> {
        self.procs
            .procs
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
                tracked_pages: self.pages.tiers_last(pid).map(|t| t.iter().sum::<u64>() / PAGE),
                tracker_error: p.scan_error.clone(),
                agent: p.agent.as_ref().map(|a| a.counters),
            })
            .collect()
    }

    /// The nodes as sysfs and zoneinfo say now.
    fn read_nodes(&mut self) -> Vec<NodeObs> {
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
            // memory came or went (hot-plugged blocks)
            self.pages.reload(&self.sysfs);
            self.tier_of = tiers;
        }
        nodes
    }

    /// At the start of a pass: each tracker with the processes it is the first able to see.
    fn start_pass(&mut self) {
        let Linux { procs, pages, trackers, pass, .. } = self;
        let mut chosen: Vec<Vec<Target<'_>>> = Vec::new();
        chosen.resize_with(trackers.len(), Vec::new);
        for (&pid, p) in procs.procs.iter_mut() {
            if let Some(i) = trackers.first_able(p.offers()) {
                chosen[i].push(Target { pid, pages: pages.last(pid), agent: &mut p.agent, error: &mut p.scan_error });
            }
        }
        for (t, mut targets) in trackers.iter_mut().zip(chosen) {
            t.start_pass(&mut targets, *pass);
        }
    }
}

impl Default for Linux {
    fn default() -> Self {
        Linux::new()
    }
}

impl Machine for Linux {
    /// From the cgroup v2 hierarchy under this machine's sysfs (/sys/fs/cgroup).
    fn cgroup(&mut self, path: &str) -> Option<stratad::cgroup::Cgroup> {
        if path.split('/').any(|c| c == "..") {
            return None;
        }
        stratad::cgroup::Cgroup::read(&self.sysfs.join("fs/cgroup").join(path.trim_start_matches('/')))
    }

    fn page_bytes(&self) -> u64 {
        PAGE
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn nodes(&mut self) -> Vec<NodeObs> {
        if self.nodes.is_none() {
            self.nodes = Some(self.read_nodes());
        }
        self.nodes.clone().unwrap_or_default()
    }

    fn can_scan(&self) -> bool {
        self.trackers.any()
    }

    /// The processes in pid order, each by its tracker, from where the last call stopped.
    fn scan(&mut self, max: u64, out: &mut Vec<PageObs>) -> bool {
        if self.cursor == (0, 0) {
            self.start_pass();
        }
        let mut taken = 0u64;
        let pids: Vec<u32> = self.procs.procs.keys().copied().filter(|&p| p >= self.cursor.0).collect();
        for pid in pids {
            let from = if pid == self.cursor.0 { self.cursor.1 } else { 0 };
            let Some(offers) = self.procs.procs.get(&pid).map(|p| p.offers()) else { continue };
            let result = match self.trackers.of(pid, offers) {
                Some(t) => t.scan(pid, from, max - taken),
                None => Ok((Vec::new(), 0, None)),
            };
            if let Ok((present, _, _)) = &result {
                self.pages.observe(pid, present, self.pass, &self.tier_of, out);
            }
            let (n, stopped) = result.as_ref().map_or((0, None), |r| (r.1, r.2));
            if let Some(p) = self.procs.procs.get_mut(&pid) {
                p.scan_error = result.err();
            }
            taken += n;
            if let Some(at) = stopped {
                self.cursor = (pid, at);
                return false;
            }
        }
        // a pass ended: each tracker with the processes it watched
        let pids: Vec<u32> = self.procs.procs.keys().copied().collect();
        let mut watched: BTreeMap<TrackerKind, Vec<u32>> = BTreeMap::new();
        for &pid in &pids {
            watched.entry(self.tracker(pid)).or_default().push(pid);
        }
        for t in self.trackers.iter_mut() {
            t.end_pass(watched.get(&t.kind()).map_or(&[], |v| v));
        }
        self.pages.end_pass(&pids);
        self.cursor = (0, 0);
        self.pass += 1;
        true
    }

    fn locate(&mut self, pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        self.pages.nodes_of(pid, pages)
    }

    /// By the process's agent when the mechanism is transactional and it has one, else
    /// move_pages(2) ([`crate::migrate::move_to`]).
    fn move_pages(&mut self, pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus> {
        let (mechanism, attempts) = (self.mover.mechanism, self.mover.attempts);
        let mut none = None;
        let agent = self.procs.procs.get_mut(&pid).map_or(&mut none, |p| &mut p.agent);
        let status = crate::migrate::move_to(pid, agent, mechanism, attempts, pages, to);
        self.pages.moved(pid, pages, &status, to);
        status
    }

    fn set_directive(&mut self, pid: u32, context: u32, d: Directive) -> Result<(), Refusal> {
        match self.procs.procs.get(&pid).and_then(|p| p.channel.as_ref()) {
            Some(c) if c.set_directive(context, d) => Ok(()),
            Some(_) => Err(Refusal::Other(libc::EINVAL)),
            None => Err(Refusal::Gone),
        }
    }

    /// The tracked objects of every process, each with its residency.
    fn objects(&mut self, out: &mut Vec<ObjectObs>) {
        let start = out.len();
        for c in self.procs.procs.values().filter_map(|p| p.channel.as_ref()) {
            c.objects(out);
        }
        for o in &mut out[start..] {
            let pages: Vec<u64> = (o.addr..o.addr + o.len).step_by(PAGE as usize).collect();
            for node in self.pages.nodes_of(o.pid, &pages).into_iter().flatten() {
                o.resident_bytes += PAGE;
                if self.tier_of.get(&node) == Some(&0) {
                    o.fast_bytes += PAGE;
                }
            }
        }
    }

    fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        for c in self.procs.procs.values_mut().filter_map(|p| p.channel.as_mut()) {
            c.contexts(out);
        }
    }

    fn processes(&mut self) -> Vec<ProcessObs> {
        self.procs
            .procs
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
        if let Some(t) = self.pages.tiers_last(pid) {
            return t.clone();
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
    use strata_policy::PageObs;

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
            m.procs.discover(true); // look again now
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
        if crate::tracker::pagemap_scan::probe().is_err() {
            eprintln!("skipped: this kernel has no asynchronous write-protect (PAGEMAP_SCAN)");
            return;
        }
        let mut child = preloaded_shell(&[]);
        let pid = child.id();
        let mut m = Linux::new();
        let tracked = until(&mut m, pid, |m| m.tracker(pid) == TrackerKind::PagemapScan);
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
        let ranges = crate::tracker::soft_dirty::anonymous_ranges(std::process::id());
        assert!(ranges.iter().any(|&(a, b)| a <= at && at < b));
    }
}
