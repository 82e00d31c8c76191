//! One engine: a policy with its trackers, mover and statistics.
//!
//! On a machine that names the processes it runs (the live daemon's) the fast tier is shared
//! between them by priority ([`crate::share`]): each group of processes gets its own instance
//! of the policy, which sees only its processes and a fast tier of the group's share: with one
//! group, the tier less what processes outside Strata hold of it. The emulated machine runs
//! one program that owns all its memory: its policy sees the machine as it is.
use std::collections::{BTreeMap, BTreeSet};

use strata_policy::{Action, Needs, Observations, Policy, Sample};
use strata_util::thread_cpu_ns;

use crate::cgroup::Cgroup;
use crate::config::Config;
use crate::heat::Heat;
use crate::machine::{Machine, ProcessObs};
use crate::mover::Mover;
use crate::share::{self, Group, GroupKey, Member};
use crate::stats::{Stats, TierStats};
use crate::Error;

pub struct Engine {
    cfg: Config,
    /// the policy's name (with its variant)
    name: String,
    /// one instance of the policy per group of processes
    policies: BTreeMap<GroupKey, Box<dyn Policy>>,
    mover: Mover,
    stats: Stats,
    needs: Needs,
    /// the processes' heat classes, where watched (the live daemon)
    heat: Option<Heat>,
    /// what the cgroups of the configuration's rules said at the last round, by rule
    cgroups: BTreeMap<usize, Cgroup>,
}

/// What policy `name` needs, once the configuration checks and the machine can provide it.
/// Where the machine has no LLC-miss sampler (no PMU) but scans pages, the scan's accessed pages
/// stand in for the samples a policy needs ([`Needs::samples`] comes back false and the third
/// value true, kept as `Stats::samples_from_pages`): one sample a page accessed that round.
fn prepare(name: &str, cfg: &Config, m: &mut dyn Machine) -> Result<(&'static str, Needs, bool), Error> {
    cfg.check(name)?;
    let policy = cfg.make_policy(name)?;
    let mut needs = policy.needs();
    let unavailable = |what: &str| {
        Error::Machine(format!("policy {}: needs {what}, which this machine cannot provide", policy.name()))
    };
    if needs.scan && !m.can_scan() {
        return Err(unavailable("page scans (`strata daemon --probe` says what this kernel offers)"));
    }
    if needs.counters && m.counters().is_none() {
        return Err(unavailable("the accesses and LLC-miss counters"));
    }
    let mut pages_for_samples = false;
    if needs.samples && !m.enable_samples(cfg.sampler.period_misses) {
        if !m.can_scan() {
            return Err(unavailable("LLC-miss samples or page scans"));
        }
        (needs.samples, needs.scan, pages_for_samples) = (false, true, true);
    }
    Ok((policy.name(), needs, pages_for_samples))
}

/// The part of `obs` that is `g`'s processes', with a fast tier of `g`'s share ([`narrow`]).
fn view(obs: &Observations, g: &Group) -> Observations {
    let pids: BTreeSet<u32> = g.pids.iter().copied().collect();
    let mut v = Observations {
        now_ns: obs.now_ns,
        page_bytes: obs.page_bytes,
        scan_complete: obs.scan_complete,
        counters: obs.counters,
        pages: obs.pages.iter().filter(|p| pids.contains(&p.pid)).copied().collect(),
        samples: obs.samples.iter().filter(|s| pids.contains(&s.pid)).copied().collect(),
        hint_faults: obs.hint_faults.iter().filter(|h| pids.contains(&h.pid)).copied().collect(),
        objects: obs.objects.iter().filter(|o| pids.contains(&o.pid)).copied().collect(),
        contexts: obs.contexts.iter().filter(|c| pids.contains(&c.pid)).copied().collect(),
        tiers: obs.tiers.clone(),
        nodes: obs.nodes.clone(),
    };
    narrow(&mut v, g);
    v
}

/// Make the fast tier of `v` `g`'s share: its capacity is the share, and what is free in it at
/// most the share less what the group holds there (the nodes in proportion).
fn narrow(v: &mut Observations, g: &Group) {
    let Some(fast) = v.tiers.iter_mut().find(|t| t.tier == 0) else { return };
    let (real_capacity, real_free) = (fast.capacity_bytes, fast.free_bytes);
    fast.capacity_bytes = g.share_bytes;
    fast.free_bytes = real_free.min(g.share_bytes.saturating_sub(g.fast_bytes));
    let scale = |x: u64, num: u64, den: u64| if den == 0 { 0 } else { (x as u128 * num as u128 / den as u128) as u64 };
    let view_free = fast.free_bytes;
    for n in v.nodes.iter_mut().filter(|n| n.tier == 0) {
        n.capacity_bytes = scale(n.capacity_bytes, g.share_bytes, real_capacity);
        n.free_bytes = scale(n.free_bytes, view_free, real_free);
    }
}

impl Engine {
    /// An engine running policy `name`, configured by `cfg`, on machine `m`: refused when the
    /// policy needs what the machine cannot observe (LLC-miss samples or counters without a PMU).
    pub fn new(name: &str, cfg: Config, m: &mut dyn Machine) -> Result<Engine, Error> {
        let (made, needs, pages_for_samples) = prepare(name, &cfg, m)?;
        let mover = Mover::new(cfg.mover.clone());
        Ok(Engine {
            stats: Stats { policy: made.into(), samples_from_pages: pages_for_samples, ..Stats::default() },
            cfg,
            name: name.into(),
            policies: BTreeMap::new(),
            mover,
            needs,
            heat: None,
            cgroups: BTreeMap::new(),
        })
    }

    /// Take a new configuration and policy while running; the old ones stay when the new
    /// ones are refused. The policies start afresh when the policy or its parameters changed;
    /// the statistics and the mover's budget carry on.
    pub fn reconfigure(&mut self, name: &str, cfg: Config, m: &mut dyn Machine) -> Result<(), Error> {
        let (made, needs, pages_for_samples) = prepare(name, &cfg, m)?;
        if name != self.name || cfg.policy != self.cfg.policy {
            self.policies.clear();
        }
        self.mover.reconfigure(cfg.mover.clone());
        if let Some(h) = &mut self.heat {
            h.reconfigure(cfg.heat.clone());
        }
        (self.stats.policy, self.stats.samples_from_pages) = (made.into(), pages_for_samples);
        (self.name, self.cfg, self.needs) = (name.into(), cfg, needs);
        Ok(())
    }

    /// The time between rounds, ns.
    pub fn period_ns(&self) -> u64 {
        (self.cfg.scanner.period_ms * 1e6) as u64
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Keep every process's heat classes and working set from now on (crate::heat): the page
    /// scans run every round for it, and the tracked objects are read, whatever the policy needs.
    pub fn watch_heat(&mut self, m: &mut dyn Machine) {
        if m.can_scan() {
            self.heat = Some(Heat::new(self.cfg.heat.clone()));
        }
    }

    pub fn heat(&self) -> Option<&Heat> {
        self.heat.as_ref()
    }

    /// A process's priority: given from outside, else its configuration rule's, else that of
    /// the cgroup its rule names (crate::cgroup: from the CPU weight, where not the default), else
    /// its own.
    pub fn priority(&self, p: &ProcessObs) -> i32 {
        let ruled = self.cfg.rule_at(p);
        p.given_priority
            .or_else(|| ruled.and_then(|(_, r)| r.priority))
            .or_else(|| ruled.and_then(|(i, _)| self.cgroups.get(&i)).and_then(|c| c.priority()))
            .unwrap_or(p.claimed_priority)
    }

    /// What the cgroup of each rule that names one and matches a process of `procs` says now.
    fn read_cgroups(&mut self, procs: &[ProcessObs], m: &mut dyn Machine) {
        self.cgroups.clear();
        for p in procs {
            if let Some((i, r)) = self.cfg.rule_at(p) {
                if let (Some(path), false) = (&r.cgroup, self.cgroups.contains_key(&i)) {
                    if let Some(c) = m.cgroup(path) {
                        self.cgroups.insert(i, c);
                    }
                }
            }
        }
    }

    /// One round: observe, decide, move.
    pub fn tick(&mut self, m: &mut dyn Machine) {
        let start = thread_cpu_ns();
        let obs = self.observe(m);
        let procs = m.processes();
        self.read_cgroups(&procs, m);
        if let Some(h) = &mut self.heat {
            h.update(&obs, &procs.iter().map(|p| p.pid).collect::<Vec<_>>());
        }
        let priority_of: BTreeMap<u32, i32> = procs.iter().map(|p| (p.pid, self.priority(p))).collect();
        let t = thread_cpu_ns();
        let now = obs.now_ns;
        let actions = self.decide(obs, &procs, &priority_of, m);
        self.stats.policy_cpu_ns += thread_cpu_ns() - t;
        self.mover.apply(now, actions, m, &mut self.stats, &priority_of);
        self.stats.tiers = m
            .tiers()
            .iter()
            .map(|t| TierStats { tier: t.tier, capacity_bytes: t.capacity_bytes, free_bytes: t.free_bytes })
            .collect();
        self.stats.engine_cpu_ns += thread_cpu_ns() - start;
    }

    /// What the machine saw this round (only what the policy needs).
    fn observe(&mut self, m: &mut dyn Machine) -> Observations {
        let page = m.page_bytes();
        let nodes = m.nodes();
        let tiers = strata_policy::tiers_of(&nodes);
        let mut obs = Observations { now_ns: m.now_ns(), page_bytes: page, tiers, nodes, ..Default::default() };
        if self.needs.scan || self.heat.is_some() {
            obs.scan_complete = m.scan(self.cfg.scanner.scan_bytes / page, &mut obs.pages);
        }
        if self.needs.samples {
            m.samples(&mut obs.samples);
        }
        if self.stats.samples_from_pages {
            let now = obs.now_ns;
            let accessed = obs.pages.iter().filter(|p| p.accessed);
            obs.samples.extend(accessed.map(|p| Sample {
                pid: p.pid,
                addr: p.addr,
                tier: p.tier,
                time_ns: now,
                store: p.dirty,
            }));
        }
        m.hint_faults(&mut obs.hint_faults);
        if self.needs.objects || self.heat.is_some() {
            m.objects(&mut obs.objects);
        }
        if self.needs.contexts {
            m.contexts(&mut obs.contexts);
        }
        if self.needs.counters {
            obs.counters = m.counters();
        }
        self.stats.rounds += 1;
        self.stats.objects = self.stats.objects.max(obs.objects.len() as u64);
        self.stats.contexts = self.stats.contexts.max(obs.contexts.len() as u64);
        self.stats.pages_scanned += obs.pages.len() as u64;
        self.stats.full_scans += u64::from(obs.scan_complete);
        self.stats.samples += obs.samples.len() as u64;
        self.stats.hint_faults += obs.hint_faults.len() as u64;
        obs
    }

    /// Every group's policy on its view of the round.
    fn decide(
        &mut self,
        mut obs: Observations,
        procs: &[ProcessObs],
        priority_of: &BTreeMap<u32, i32>,
        m: &mut dyn Machine,
    ) -> Vec<Action> {
        let (cfg, name) = (&self.cfg, &self.name);
        let make = || cfg.make_policy(name).expect("checked when the engine was configured");
        if procs.is_empty() {
            // one program, which sees the machine as it is
            let key = GroupKey::Priority(0);
            self.policies.retain(|k, _| *k == key);
            return self.policies.entry(key).or_insert_with(make).decide(&obs);
        }
        // each rule's bounds, those of a rule with a cgroup from the cgroup where the rule
        // leaves them unset, and each cgroup rule's processes one group
        let fast_share = {
            let fast = obs.tiers.iter().filter(|t| t.tier == 0).map(|t| t.capacity_bytes).sum::<u64>();
            fast as f64 / obs.tiers.iter().map(|t| t.capacity_bytes).sum::<u64>().max(1) as f64
        };
        let mut cgroups = BTreeMap::new();
        let ruled: Vec<_> = procs
            .iter()
            .map(|p| {
                let Some((i, r)) = cfg.rule_at(p) else { return (None, None, 0) };
                let (cg_min, cg_max) = self.cgroups.get(&i).map_or((0, None), |c| c.fast_bounds(fast_share));
                let key = r.cgroup.as_ref().map(|c| {
                    cgroups.insert(i, c.clone());
                    GroupKey::Cgroup(i)
                });
                (key, r.max_fast_bytes.or(cg_max), r.min_fast_bytes.unwrap_or(cg_min))
            })
            .collect();
        let members: Vec<Member> = procs
            .iter()
            .zip(ruled)
            .map(|(p, (key, max_fast_bytes, min_fast_bytes))| {
                let resident = m.resident(p.pid);
                Member {
                    pid: p.pid,
                    priority: priority_of[&p.pid],
                    key,
                    max_fast_bytes,
                    min_fast_bytes,
                    resident_bytes: resident.iter().sum(),
                    fast_bytes: resident.first().copied().unwrap_or(0),
                }
            })
            .collect();
        // the fast tier less what processes outside Strata hold of it
        let managed: u64 = members.iter().map(|p| p.fast_bytes).sum();
        let available =
            obs.tiers.iter().find(|t| t.tier == 0).map_or(0, |t| (t.free_bytes + managed).min(t.capacity_bytes));
        let groups = share::groups(&members, available, &cgroups);
        self.policies.retain(|k, _| groups.iter().any(|g| g.key == *k));
        let mut actions = Vec::new();
        if let [g] = &groups[..] {
            // one group: every observation is its own (no copy)
            narrow(&mut obs, g);
            actions = self.policies.entry(g.key).or_insert_with(make).decide(&obs);
        } else {
            for g in &groups {
                actions.extend(self.policies.entry(g.key).or_insert_with(make).decide(&view(&obs, g)));
            }
        }
        self.stats.groups = groups;
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_policy::{Node, NodeObs, PageObs, TierObs};

    fn group(pids: &[u32], share: u64, fast: u64) -> Group {
        Group {
            key: GroupKey::Priority(0),
            priority: 0,
            pids: pids.to_vec(),
            cgroup: None,
            max_fast_bytes: None,
            min_fast_bytes: 0,
            share_bytes: share,
            fast_bytes: fast,
            want_bytes: 0,
        }
    }

    #[test]
    fn a_groups_view_has_its_processes_and_a_fast_tier_of_its_share() {
        let page = |pid| PageObs { pid, addr: 0, tier: 1, node: 1, accessed: true, dirty: false };
        let node = |node, tier, cap, free| NodeObs { node, tier, distance: 10, capacity_bytes: cap, free_bytes: free };
        let obs = Observations {
            pages: vec![page(1), page(2), page(1)],
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: 1000, free_bytes: 400 },
                TierObs { tier: 1, capacity_bytes: 5000, free_bytes: 5000 },
            ],
            nodes: vec![node(0, 0, 1000, 400), node(1, 1, 5000, 5000)],
            ..Default::default()
        };
        let v = view(&obs, &group(&[1], 500, 200));
        assert_eq!(v.pages.len(), 2);
        assert!(v.pages.iter().all(|p| p.pid == 1));
        assert_eq!((v.tiers[0].capacity_bytes, v.tiers[0].free_bytes), (500, 300), "share 500, holding 200");
        assert_eq!(v.tiers[1], obs.tiers[1], "the slow tier as it is");
        assert_eq!((v.nodes[0].capacity_bytes, v.nodes[0].free_bytes), (500, 300));
        let v = view(&obs, &group(&[2], 500, 700));
        assert_eq!(v.tiers[0].free_bytes, 0, "over its share: nothing free");
        let v = view(&obs, &group(&[2], 1000, 0));
        assert_eq!(v.tiers[0].free_bytes, 400, "never more than is really free");
    }

    /// A machine of two nodes whose scan finds four pages, all accessed, and which has no
    /// LLC-miss sampler; `scans`: whether it can scan at all.
    struct NoSampler {
        scans: bool,
    }

    impl Machine for NoSampler {
        fn page_bytes(&self) -> u64 {
            4096
        }
        fn now_ns(&self) -> u64 {
            0
        }
        fn nodes(&mut self) -> Vec<NodeObs> {
            let node = |node, tier| NodeObs { node, tier, distance: 10, capacity_bytes: 1 << 30, free_bytes: 1 << 29 };
            vec![node(0, 0), node(1, 1)]
        }
        fn can_scan(&self) -> bool {
            self.scans
        }
        fn scan(&mut self, _max: u64, out: &mut Vec<PageObs>) -> bool {
            let page = |i: u64| PageObs { pid: 0, addr: i * 4096, tier: 1, node: 1, accessed: true, dirty: i == 0 };
            out.extend((0..4).map(page));
            true
        }
        fn locate(&mut self, _pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
            vec![Some(1); pages.len()]
        }
        fn move_pages(&mut self, _pid: u32, pages: &[u64], _to: Node) -> Vec<crate::MoveStatus> {
            vec![Ok(()); pages.len()]
        }
    }

    #[test]
    fn without_a_sampler_the_scan_s_accessed_pages_are_the_samples_and_without_scans_it_is_refused() {
        let mut m = NoSampler { scans: true };
        let mut e = Engine::new("mat", Config::default(), &mut m).expect("the page scan stands in");
        assert!(e.stats().samples_from_pages);
        e.tick(&mut m);
        assert_eq!(e.stats().samples, 4, "one sample a page accessed: {:?}", e.stats());
        let e = Engine::new("ambix", Config::default(), &mut m).unwrap();
        assert!(!e.stats().samples_from_pages, "a policy that needs no samples gets none");
        // MAT needs no page scans of its own: without them, its samples cannot come from pages
        let err = Engine::new("mat", Config::default(), &mut NoSampler { scans: false }).err().unwrap().to_string();
        assert!(err.contains("needs LLC-miss samples or page scans"), "{err}");
    }
}
