//! One engine: a policy with its trackers, mover and statistics.
use strata_policy::{Needs, Observations, Policy};

use crate::config::Config;
use crate::machine::Machine;
use crate::mover::Mover;
use crate::stats::{Stats, TierStats};
use crate::Error;

pub struct Engine {
    cfg: Config,
    policy: Box<dyn Policy>,
    mover: Mover,
    stats: Stats,
    needs: Needs,
}

/// This thread's CPU time, ns (the policy's cost on the host, not simulated).
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Engine {
    /// An engine running policy `name`, configured by `cfg`, on machine `m`: refused when the
    /// policy needs what the machine cannot observe (LLC-miss samples or counters without a PMU).
    pub fn new(name: &str, cfg: Config, m: &mut dyn Machine) -> Result<Engine, Error> {
        cfg.check(name)?;
        let policy = cfg.make_policy(name)?;
        let needs = policy.needs();
        let unavailable = |what: &str| {
            Error::Machine(format!("policy {}: needs {what}, which this machine cannot provide", policy.name()))
        };
        if needs.scan && !m.can_scan() {
            return Err(unavailable(
                "page scans (soft-dirty bits here; `strata daemon --probe` says what this kernel offers)",
            ));
        }
        if needs.counters && m.counters().is_none() {
            return Err(unavailable("the accesses and LLC-miss counters"));
        }
        if needs.samples && !m.enable_samples(cfg.sampler.period_misses) {
            return Err(unavailable("LLC-miss samples"));
        }
        let mover = Mover::new(cfg.mover.clone());
        Ok(Engine { stats: Stats { policy: policy.name().into(), ..Stats::default() }, cfg, policy, mover, needs })
    }

    /// The time between rounds, ns.
    pub fn period_ns(&self) -> u64 {
        (self.cfg.scanner.period_ms * 1e6) as u64
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// One round: observe, decide, move.
    pub fn tick(&mut self, m: &mut dyn Machine) {
        let start = cpu_ns();
        let page = m.page_bytes();
        let nodes = m.nodes();
        let tiers = strata_policy::tiers_of(&nodes);
        let mut obs = Observations { now_ns: m.now_ns(), page_bytes: page, tiers, nodes, ..Default::default() };
        if self.needs.scan {
            obs.scan_complete = m.scan(self.cfg.scanner.scan_bytes / page, &mut obs.pages);
        }
        if self.needs.samples {
            m.samples(&mut obs.samples);
        }
        m.hint_faults(&mut obs.hint_faults);
        if self.needs.objects {
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
        let t = cpu_ns();
        let actions = self.policy.decide(&obs);
        self.stats.policy_cpu_ns += cpu_ns() - t;
        self.mover.apply(obs.now_ns, actions, m, &mut self.stats);
        self.stats.tiers = m
            .tiers()
            .iter()
            .map(|t| TierStats { tier: t.tier, capacity_bytes: t.capacity_bytes, free_bytes: t.free_bytes })
            .collect();
        self.stats.engine_cpu_ns += cpu_ns() - start;
    }
}
