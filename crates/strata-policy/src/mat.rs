//! MAT (seed 003 §3.2-§3.5): object tiering from sampled LLC misses, with the `proactive`
//! per-site placement of its extension.
//!
//! Every round is one profiling interval. Each tracked object (a 64 MiB record at most, as
//! libstrata records them; `split_mb` splits further) keeps an estimate of its sampled misses
//! per interval, an EWMA: `tau <- alpha * t + (1 - alpha) * tau` (alpha 0.1), where t is its
//! samples this interval. A trigger decides when the objects are re-assigned:
//!
//! - `time`: every `time_intervals` intervals (the paper tried 1, 2, 5, 10 and 100);
//! - `llcmpi`: when this interval's LLC misses per access exceed the mean of the ten before by
//!   `llcmpi_threshold` times that mean (2). The paper divides by instructions; the machine
//!   counts memory accesses, not instructions. It needs the counters: on a machine without them
//!   the engine refuses to start it;
//! - `allocation`: once `allocation_mb` (1,024) MB have been allocated since the last one.
//!
//! Re-assignment ranks the objects by the priority (`fifo`: the newest first; `lru`: the most
//! recently sampled first; `apb`: the highest estimate per byte first) and walks the ranking,
//! putting objects in the fast set while their resident bytes fit in `fast_fill` (90 %) of the
//! fast tier, less what is resident there outside the objects; the first that does not fit ends
//! the set. Objects
//! of the slow set resident in the fast tier are demoted, then objects of the fast set promoted:
//! whole objects, never scattered pages. An object seen for the first time this interval is
//! neither ranked nor moved until it has lived a whole interval (ephemeral buffering: objects
//! that die young are never moved).
//!
//! `proactive` (§3.5, the paper's conservative scheme): at each re-assignment, a site all of
//! whose ranked objects were put in the slow set has its later allocations sent to the slow
//! tier, one all of whose objects were put in the fast set to the fast tier, and any other site
//! is left to the default (fast while there is room). `site_fraction` (1.0) relaxes "all".
use std::collections::{HashMap, HashSet, VecDeque};

use serde::Deserialize;

use crate::{object_at, Action, Directive, Needs, ObjectObs, Observations, Policy, Tier};

/// The order objects are considered for the fast tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// newest first
    Fifo,
    /// most recently sampled first
    Lru,
    /// most sampled misses per byte first
    Apb,
}

impl Priority {
    pub fn parse(s: &str) -> Option<Priority> {
        match s {
            "fifo" => Some(Priority::Fifo),
            "lru" => Some(Priority::Lru),
            "apb" => Some(Priority::Apb),
            _ => None,
        }
    }
}

/// When objects are re-assigned to tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    Time,
    Llcmpi,
    Allocation,
}

/// MAT's parameters; the defaults are the paper's where it gives one.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub priority: Priority,
    /// weight of the latest interval in the EWMA
    pub alpha: f64,
    /// share of the fast tier the fast set may fill
    pub fast_fill: f64,
    pub trigger: Trigger,
    /// `time`: re-assign every this many intervals (ours: 1; the paper's choice is not stated)
    pub time_intervals: u32,
    /// `llcmpi`: the normalised rise that fires it
    pub llcmpi_threshold: f64,
    /// `allocation`: MB allocated between re-assignments
    pub allocation_mb: u64,
    /// records larger than this are ranked and moved in pieces of it, MB (fractions allowed;
    /// whole pages are used)
    pub split_mb: f64,
    /// proactive per-site placement
    pub proactive: bool,
    /// proactive: share of a site's objects in one tier that sends its new ones there
    pub site_fraction: f64,
    /// an object in the fast tier ranks as if its estimate were this much higher (0: the
    /// paper's plain ranking; `strata` uses it so that near-ties do not swap places each round)
    pub hysteresis: f64,
    /// an object below the fast tier joins the fast set only once it has been sampled this many
    /// intervals in a row (0: the paper's rule; `strata` uses it so that a burst, such as an
    /// object's first fill, does not promote what is demoted the next round)
    pub min_streak: u32,
    /// an object demoted after a stay in the fast tier in which it was sampled in fewer than half
    /// of the intervals (a promotion that did not pay: a sweep's passing heat) needs `min_streak`
    /// more intervals in a row for each such stay before it is promoted again (false: the paper's
    /// rule)
    pub unpaid_backoff: bool,
    /// what the program's arenas are (their pages' records, with the arena's binding as the
    /// program's hint): see [`Hints`]
    pub hints: Hints,
    /// `prior`: an arena bound to the fast tier ranks as if `1 + hint_weight` times hotter than
    /// measured, one bound below it as if that many times colder, among its own process's
    /// units only: the fast set is chosen by measured heat, then each process's part of it
    /// re-picked with the weights (a binding, the process's own word, never takes fast memory
    /// from another process)
    pub hint_weight: f64,
}

/// How the program's arenas are ranked and moved. An arena is one unit: its records (mixed
/// pages, runs, large mappings) are ranked by their samples per byte together and move
/// together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hints {
    /// not seen: MAT's paper, which knows only the allocator's objects
    Ignore,
    /// an arena the program bound to a tier stays where the program put it; an unbound one
    /// moves as a unit
    Pin,
    /// every arena moves as a unit, with its binding as the prior (`hint_weight`)
    Prior,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            priority: Priority::Apb,
            alpha: 0.1,
            fast_fill: 0.9,
            trigger: Trigger::Time,
            time_intervals: 1,
            llcmpi_threshold: 2.0,
            allocation_mb: 1024,
            split_mb: 64.0,
            proactive: false,
            site_fraction: 1.0,
            hysteresis: 0.0,
            min_streak: 0,
            unpaid_backoff: false,
            hints: Hints::Pin,
            hint_weight: 1.0,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return Err(format!("alpha must be in (0, 1], not {}", self.alpha));
        }
        if !(self.fast_fill > 0.0 && self.fast_fill <= 1.0) {
            return Err(format!("fast_fill must be in (0, 1], not {}", self.fast_fill));
        }
        if !(self.site_fraction > 0.5 && self.site_fraction <= 1.0) {
            return Err(format!("site_fraction must be in (0.5, 1], not {}", self.site_fraction));
        }
        if self.time_intervals == 0 || self.allocation_mb == 0 {
            return Err("time_intervals and allocation_mb must be positive".into());
        }
        if !(self.split_mb * 1048576.0 >= 4096.0 && self.split_mb.is_finite()) {
            return Err(format!("split_mb must be at least a page (0.00390625), not {}", self.split_mb));
        }
        if !(self.hysteresis >= 0.0 && self.hysteresis.is_finite()) {
            return Err(format!("hysteresis must be at least 0, not {}", self.hysteresis));
        }
        if !(self.hint_weight >= 0.0 && self.hint_weight.is_finite()) {
            return Err(format!("hint_weight must be at least 0, not {}", self.hint_weight));
        }
        if !(self.llcmpi_threshold > 0.0 && self.llcmpi_threshold.is_finite()) {
            return Err(format!("llcmpi_threshold must be positive, not {}", self.llcmpi_threshold));
        }
        Ok(())
    }
}

/// What MAT keeps per object (per piece of `split_mb`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct ObjState {
    len: u64,
    context: u32,
    /// the interval it was first seen in
    born: u64,
    /// estimated samples per interval
    tau: f64,
    /// the last sample's time, ns
    last_ns: Option<u64>,
    /// intervals in a row, up to this one, in which it was sampled
    streak: u32,
    /// since it was promoted (the interval of its promotion, and the intervals since in which it
    /// was sampled); None while it has not been promoted or has been demoted since
    stay: Option<(u64, u32)>,
    /// its stays in the fast tier that did not pay (`unpaid_backoff`)
    unpaid: u32,
}

impl ObjState {
    /// A move decided for it: a promotion starts a stay in the fast tier (one of a unit already
    /// mostly there only tops it up); a demotion ends one, counting it unpaid when it was
    /// sampled in fewer than half of the stay's intervals.
    fn moved(&mut self, to_fast: bool, was_fast: bool, interval: u64) {
        match (to_fast, was_fast) {
            (true, false) => self.stay = Some((interval, 0)),
            (false, true) => {
                if let Some((from, sampled)) = self.stay.take() {
                    let paid = u64::from(sampled) * 2 >= interval - from;
                    self.unpaid = if paid { 0 } else { self.unpaid.saturating_add(1) };
                }
            }
            _ => {}
        }
    }

    fn new(len: u64, context: u32, born: u64) -> ObjState {
        ObjState { len, context, born, tau: 0.0, last_ns: None, streak: 0, stay: None, unpaid: 0 }
    }
}

/// What is ranked and moved as one: an object (a record of one), or all records of an arena.
struct Unit {
    pid: u32,
    /// the arena, 0 for an object
    arena: u32,
    /// its allocation context (0 for an arena)
    context: u32,
    /// its first record's address (ties are broken by it)
    addr: u64,
    /// the records' states summed: bytes, estimate, the oldest birth; an arena's own streak
    st: ObjState,
    fast_bytes: u64,
    resident_bytes: u64,
    /// the hint's weight on its estimate (1: none)
    prior: f64,
    /// indices of its records
    members: Vec<usize>,
}

impl Unit {
    fn new(o: &ObjectObs, prior: f64) -> Unit {
        let st = ObjState::new(0, o.context, u64::MAX);
        Unit {
            pid: o.pid,
            arena: o.arena,
            context: o.context,
            addr: o.addr,
            st,
            fast_bytes: 0,
            resident_bytes: 0,
            prior,
            members: Vec::new(),
        }
    }

    fn add(&mut self, i: usize, o: &ObjectObs, st: &ObjState) {
        self.st.len += o.len;
        self.st.tau += st.tau;
        self.st.born = self.st.born.min(st.born);
        self.st.last_ns = self.st.last_ns.max(st.last_ns);
        self.st.streak = self.st.streak.max(st.streak);
        self.st.unpaid = self.st.unpaid.max(st.unpaid);
        self.fast_bytes += o.fast_bytes;
        self.resident_bytes += o.resident_bytes;
        self.members.push(i);
    }

    /// What it takes of the fast tier there: its resident bytes (a record's pages that were
    /// never touched are not moved; a 1 MiB vector grown in a 4 MiB mapping is a 4 MiB record
    /// of which 1 MiB is resident, and counted by its length it took four times its room).
    fn cost(&self) -> u64 {
        self.resident_bytes
    }

    /// Most of it is in the fast tier.
    fn in_fast(&self) -> bool {
        self.fast_bytes * 2 > self.resident_bytes
    }
}

/// The intervals of the LLC-miss-rate trigger's mean.
const LLCMPI_HISTORY: usize = 10;

pub struct Mat {
    cfg: Config,
    name: &'static str,
    objects: HashMap<(u32, u64), ObjState>,
    /// per arena (pid, number): intervals in a row, up to this one, in which any of its
    /// records was sampled (a unit's streak is its own: an arena of many small records
    /// sampled every round has few records sampled twice in a row)
    arena_streaks: HashMap<(u32, u32), u32>,
    interval: u64,
    last_assignment: u64,
    /// bytes allocated (all contexts) at the last re-assignment, and now
    allocated_at_last: Option<u64>,
    /// the counters at the previous interval, and the miss rates of the last ten
    counters_before: Option<crate::Counters>,
    rates: VecDeque<f64>,
    /// the directive each site was last given
    directives: HashMap<(u32, u32), Directive>,
    /// re-assignments so far
    pub assignments: u64,
    fast_set_bytes: u64,
    /// the bytes of the fast tier the objects may fill, when a combined policy sets them (else
    /// `fast_fill` of it less what is resident there outside the objects)
    budget_bytes: Option<u64>,
    /// processes whose records stay where they are this round (`set_held`)
    held: HashSet<u32>,
}

impl Mat {
    pub fn new(cfg: Config, name: &'static str) -> Mat {
        Mat {
            cfg,
            name,
            objects: HashMap::new(),
            arena_streaks: HashMap::new(),
            interval: 0,
            last_assignment: 0,
            allocated_at_last: None,
            counters_before: None,
            rates: VecDeque::new(),
            directives: HashMap::new(),
            assignments: 0,
            fast_set_bytes: 0,
            budget_bytes: None,
            held: HashSet::new(),
        }
    }

    /// The objects split in pieces of at most `split_mb`, in (pid, addr) order.
    fn pieces(&self, obs: &Observations) -> Vec<ObjectObs> {
        let split = ((self.cfg.split_mb * 1048576.0) as u64) & !4095;
        if self.cfg.hints == Hints::Ignore && obs.objects.iter().any(|o| o.arena != 0) {
            let objects: Vec<ObjectObs> = obs.objects.iter().filter(|o| o.arena == 0).copied().collect();
            return split_records(&objects, split, obs);
        }
        split_records(&obs.objects, split, obs)
    }

    /// Aggregation: this interval's samples per object into the EWMA; objects gone are dropped,
    /// new ones start at zero.
    fn aggregate(&mut self, obs: &Observations, objects: &[ObjectObs]) {
        let mut counts = vec![0u32; objects.len()];
        let mut last = vec![None; objects.len()];
        for s in &obs.samples {
            if let Some(i) = object_at(objects, s.pid, s.addr) {
                counts[i] += 1;
                last[i] = last[i].max(Some(s.time_ns));
            }
        }
        let mut next = HashMap::with_capacity(objects.len());
        let mut sampled_arenas: HashMap<(u32, u32), bool> = HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            if o.arena != 0 {
                *sampled_arenas.entry((o.pid, o.arena)).or_default() |= counts[i] > 0;
            }
            let key = (o.pid, o.addr);
            let mut st = match self.objects.get(&key) {
                Some(st) if st.len == o.len && st.context == o.context => *st,
                // a new object (or another one at a reused address)
                _ => ObjState::new(o.len, o.context, self.interval),
            };
            st.tau = self.cfg.alpha * counts[i] as f64 + (1.0 - self.cfg.alpha) * st.tau;
            st.last_ns = st.last_ns.max(last[i]);
            st.streak = if counts[i] > 0 { st.streak.saturating_add(1) } else { 0 };
            if let Some((_, sampled)) = &mut st.stay {
                *sampled += u32::from(counts[i] > 0);
            }
            next.insert(key, st);
        }
        self.objects = next;
        let before = std::mem::take(&mut self.arena_streaks);
        for (key, sampled) in sampled_arenas {
            let streak = if sampled { before.get(&key).copied().unwrap_or(0).saturating_add(1) } else { 0 };
            self.arena_streaks.insert(key, streak);
        }
    }

    /// The trigger routine.
    fn triggered(&mut self, obs: &Observations) -> bool {
        match self.cfg.trigger {
            Trigger::Time => self.interval - self.last_assignment >= self.cfg.time_intervals as u64,
            Trigger::Allocation => {
                let now: u64 = obs.contexts.iter().map(|c| c.bytes_allocated).sum();
                let before = *self.allocated_at_last.get_or_insert(0);
                now.saturating_sub(before) >= self.cfg.allocation_mb << 20
            }
            Trigger::Llcmpi => {
                let Some(now) = obs.counters else { return false };
                let Some(before) = self.counters_before.replace(now) else { return false };
                let accesses = now.accesses.saturating_sub(before.accesses);
                if accesses == 0 {
                    return false;
                }
                let rate = now.llc_misses.saturating_sub(before.llc_misses) as f64 / accesses as f64;
                let fire = llcmpi_rise(&self.rates, rate) > self.cfg.llcmpi_threshold;
                self.rates.push_back(rate);
                if self.rates.len() > LLCMPI_HISTORY {
                    self.rates.pop_front();
                }
                fire
            }
        }
    }

    /// The ranking key of an object (smaller first); `fast`: it is in the fast tier now.
    fn rank_key(&self, st: &ObjState, fast: bool, prior: f64) -> (f64, f64) {
        let boost = if fast { 1.0 + self.cfg.hysteresis } else { 1.0 } * prior;
        match self.cfg.priority {
            Priority::Fifo => (-(st.born as f64), 0.0),
            Priority::Lru => (-(st.last_ns.map_or(-1.0, |t| t as f64)), -st.tau * boost / st.len as f64),
            Priority::Apb => (-st.tau * boost / st.len as f64, -(st.born as f64)),
        }
    }

    /// The ranking of two units (`prior`: with their bindings' weight), the address breaking ties.
    fn order(&self, a: &Unit, b: &Unit, prior: bool) -> std::cmp::Ordering {
        let w = |u: &Unit| if prior { u.prior } else { 1.0 };
        let (ka, kb) = (self.rank_key(&a.st, a.in_fast(), w(a)), self.rank_key(&b.st, b.in_fast(), w(b)));
        ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal).then(a.addr.cmp(&b.addr))
    }

    /// Which of the ranked units join the fast set of `budget` bytes, walking the ranking. A unit
    /// below the fast tier joins only once it has been sampled `min_streak` intervals in a row
    /// (a burst, such as its first fill, is not heat). `end`: the first eligible unit that does
    /// not fit ends the set (MAT's rule); otherwise it is passed over.
    fn fill<'a>(&self, ranked: impl Iterator<Item = &'a Unit>, budget: u64, end: bool) -> Vec<bool> {
        let mut filled = 0u64;
        let mut open = true;
        ranked
            .map(|u| {
                let unpaid = if self.cfg.unpaid_backoff { u.st.unpaid } else { 0 };
                let eligible = u.st.streak >= self.cfg.min_streak.saturating_mul(1 + unpaid) || u.in_fast();
                let fits = filled + u.cost() <= budget;
                open = open && (!eligible || fits || !end);
                let to_fast = open && eligible && fits;
                if to_fast {
                    filled += u.cost();
                }
                to_fast
            })
            .collect()
    }

    /// The weight of an arena's binding on its rank (1 for anything else, or without `prior`).
    fn prior(&self, hint: Directive) -> f64 {
        let w = 1.0 + self.cfg.hint_weight;
        match (self.cfg.hints, hint) {
            (Hints::Prior, Directive::Fast | Directive::Tier(0)) => w,
            (Hints::Prior, Directive::Slow | Directive::Tier(_)) => 1.0 / w,
            _ => 1.0,
        }
    }

    /// Let the objects fill these bytes of the fast tier, whatever else is resident there: a
    /// combined policy shares one budget between its parts, and its other parts make room.
    pub fn set_budget(&mut self, bytes: Option<u64>) {
        self.budget_bytes = bytes;
    }

    /// Hold these processes' records where they are: a combined policy's rule says they must not
    /// move now. They are neither ranked nor moved (their stays neither begin nor end), their
    /// fast bytes are taken from the budget, and their estimates go on.
    pub fn set_held(&mut self, pids: HashSet<u32>) {
        self.held = pids;
    }

    /// The bytes of the fast set of the last re-assignment.
    pub fn fast_set_bytes(&self) -> u64 {
        self.fast_set_bytes
    }

    /// Prioritization and enforcement: the ranked objects, the fast set's membership of each,
    /// and the moves.
    fn assign(&mut self, obs: &Observations, objects: &[ObjectObs]) -> Vec<Action> {
        let Some(fast) = obs.tiers.iter().find(|t| t.tier == 0) else { return Vec::new() };
        let slow: Tier = obs.tiers.iter().map(|t| t.tier).max().unwrap_or(0);
        if slow == 0 {
            return Vec::new();
        }
        // the units ranked: each object alone, each arena's records together (as `hints` says)
        let mut units: Vec<Unit> = Vec::new();
        let mut of_arena: HashMap<(u32, u32), usize> = HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            let Some(st) = self.objects.get(&(o.pid, o.addr)) else { continue };
            if o.arena != 0 && self.cfg.hints == Hints::Pin && o.hint != Directive::Default {
                continue; // bound by the program: not ranked, and not moved
            }
            let k = if o.arena == 0 { units.len() } else { *of_arena.entry((o.pid, o.arena)).or_insert(units.len()) };
            if k == units.len() {
                units.push(Unit::new(o, self.prior(o.hint)));
            }
            units[k].add(i, o, st);
        }
        for u in units.iter_mut().filter(|u| u.arena != 0) {
            u.st.streak = self.arena_streaks.get(&(u.pid, u.arena)).copied().unwrap_or(0);
        }
        // ephemeral buffering: only units that have lived a whole interval (and are not held)
        let ranked: Vec<Unit> =
            units.into_iter().filter(|u| u.st.born < self.interval && !self.held.contains(&u.pid)).collect();
        // the fast tier less what is resident there outside the ranked objects (with a budget
        // given: less what the objects not ranked yet hold)
        let ranked_fast: u64 = ranked.iter().map(|u| u.fast_bytes).sum();
        let budget = match self.budget_bytes {
            Some(b) => b.saturating_sub(objects.iter().map(|o| o.fast_bytes).sum::<u64>().saturating_sub(ranked_fast)),
            None => {
                let used = fast.capacity_bytes.saturating_sub(fast.free_bytes);
                let outside = used.saturating_sub(ranked_fast);
                ((fast.capacity_bytes as f64 * self.cfg.fast_fill) as u64).saturating_sub(outside)
            }
        };
        // an arena larger than the budget cannot move whole: its records are ranked one by one,
        // with the arena's prior and streak (whole, it would be demoted even where it is hot)
        let mut ranked: Vec<Unit> = ranked
            .into_iter()
            .flat_map(|u| {
                if u.arena == 0 || u.st.len <= budget {
                    return vec![u];
                }
                u.members
                    .iter()
                    .filter_map(|&i| {
                        let o = &objects[i];
                        let st = self.objects.get(&(o.pid, o.addr))?;
                        let mut one = Unit::new(o, u.prior);
                        one.add(i, o, st);
                        one.st.streak = u.st.streak;
                        Some(one)
                    })
                    .collect()
            })
            .collect();
        // the fast set by measured heat alone; each process's part of it is its allotment
        ranked.sort_by(|a, b| self.order(a, b, false));
        let measured = self.fill(ranked.iter(), budget, true);
        let mut allotment: HashMap<u32, u64> = HashMap::new();
        for (u, _) in ranked.iter().zip(&measured).filter(|(_, &f)| f) {
            *allotment.entry(u.pid).or_default() += u.cost();
        }
        // the prior re-picks each process's own units within its allotment, so a binding (the
        // process's own word, untrusted) never takes fast memory from another process
        ranked.sort_by(|a, b| self.order(a, b, true));
        let mut in_fast = vec![false; ranked.len()];
        let mut pids: Vec<u32> = allotment.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            let own: Vec<usize> = (0..ranked.len()).filter(|&k| ranked[k].pid == pid).collect();
            let picked = self.fill(own.iter().map(|&k| &ranked[k]), allotment[&pid], false);
            for (k, f) in own.into_iter().zip(picked) {
                in_fast[k] = f;
            }
        }
        let filled: u64 = ranked.iter().zip(&in_fast).filter(|(_, &f)| f).map(|(u, _)| u.cost()).sum();
        let mut actions = Vec::new();
        let mut sites: HashMap<(u32, u32), (u32, u32)> = HashMap::new(); // (in fast, in slow)
        let n = ranked.len() as i64;
        for (rank, (u, &to_fast)) in ranked.iter().zip(&in_fast).enumerate() {
            if u.context != 0 {
                let site = sites.entry((u.pid, u.context)).or_default();
                if to_fast {
                    site.0 += 1;
                } else {
                    site.1 += 1;
                }
            }
            // the unit's records, each that is not wholly where the unit goes
            for &i in &u.members {
                let o = &objects[i];
                let (go, to, priority) = if to_fast {
                    (o.resident_bytes > o.fast_bytes, 0, n - rank as i64)
                } else {
                    (o.fast_bytes > 0, slow, rank as i64)
                };
                if go {
                    actions.push(Action::Move { pid: o.pid, addr: o.addr, len: o.len, to, priority });
                    if let Some(st) = self.objects.get_mut(&(o.pid, o.addr)) {
                        st.moved(to_fast, u.in_fast(), self.interval);
                    }
                }
            }
        }
        self.fast_set_bytes = filled;
        if self.cfg.proactive {
            let mut keys: Vec<_> = sites.keys().copied().collect();
            keys.sort_unstable();
            for key in keys {
                let (f, s) = sites[&key];
                let share = |k: u32| k as f64 / (f + s) as f64;
                let d = if share(s) >= self.cfg.site_fraction {
                    Directive::Slow
                } else if share(f) >= self.cfg.site_fraction {
                    Directive::Fast
                } else {
                    Directive::Default
                };
                if self.directives.get(&key).copied().unwrap_or(Directive::Default) != d {
                    self.directives.insert(key, d);
                    actions.push(Action::SetDirective { pid: key.0, context: key.1, directive: d });
                }
            }
        }
        actions
    }
}

/// The objects split into records of at most `split` bytes (whole pages), in (pid, addr) order.
/// A record's residency is counted from the pages of this round's scan (`scan.pages`) when the
/// scan covered it: from the first page it saw this round to the last, or to the end of the
/// address space when it completed; otherwise it is the object's, shared in proportion to the
/// record's length. (Shared alone, every record of an object two-thirds fast looked two-thirds
/// fast: a fast record was not known from a slow one.)
pub fn split_records(objects: &[ObjectObs], split: u64, scan: &Observations) -> Vec<ObjectObs> {
    let page = scan.page_bytes.max(1);
    let split = split.max(page);
    let pages = crate::sorted_pages(&scan.pages);
    let window = match (pages.first(), pages.last()) {
        (Some(a), Some(b)) => {
            Some(((a.pid, a.addr), if scan.scan_complete { (u32::MAX, u64::MAX) } else { (b.pid, b.addr) }))
        }
        _ => None,
    };
    let mut out = Vec::with_capacity(objects.len());
    for o in objects {
        if o.len <= split {
            out.push(*o);
            continue;
        }
        for off in (0..o.len).step_by(split as usize) {
            let (addr, len) = (o.addr + off, split.min(o.len - off));
            let share = |b: u64| (b as u128 * len as u128 / o.len as u128) as u64;
            let (first, last) = ((o.pid, addr / page * page), (o.pid, (addr + len - 1) / page * page));
            let (resident_bytes, fast_bytes) = match window {
                Some((lo, hi)) if lo <= first && last <= hi => {
                    let from = pages.partition_point(|p| (p.pid, p.addr) < first);
                    let to = pages.partition_point(|p| (p.pid, p.addr) <= last);
                    let seen = &pages[from..to];
                    let bytes = |n: usize| n as u64 * page;
                    (bytes(seen.len()), bytes(seen.iter().filter(|p| p.tier == 0).count()))
                }
                _ => (share(o.resident_bytes), share(o.fast_bytes)),
            };
            out.push(ObjectObs { addr, len, resident_bytes, fast_bytes, ..*o });
        }
    }
    out
}

/// How far `rate` rises above the mean of `history`, in units of that mean (0 without one).
fn llcmpi_rise(history: &VecDeque<f64>, rate: f64) -> f64 {
    if history.len() < LLCMPI_HISTORY {
        return 0.0;
    }
    let mean = history.iter().sum::<f64>() / history.len() as f64;
    if mean > 0.0 {
        (rate - mean) / mean
    } else {
        0.0
    }
}

impl Policy for Mat {
    fn name(&self) -> &'static str {
        self.name
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        self.interval += 1;
        let objects = self.pieces(obs);
        self.aggregate(obs, &objects);
        if !self.triggered(obs) {
            return Vec::new();
        }
        self.last_assignment = self.interval;
        self.allocated_at_last = Some(obs.contexts.iter().map(|c| c.bytes_allocated).sum());
        self.assignments += 1;
        self.assign(obs, &objects)
    }

    fn needs(&self) -> Needs {
        Needs {
            samples: true,
            objects: true,
            contexts: self.cfg.proactive || self.cfg.trigger == Trigger::Allocation,
            counters: self.cfg.trigger == Trigger::Llcmpi,
            ..Needs::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextObs, Counters, PageObs, Sample, TierObs};

    const MB: u64 = 1 << 20;

    #[test]
    fn a_record_has_its_own_residency_where_the_scan_saw_it() {
        // an object of four 1 MiB records, half fast: records 0 and 2 wholly fast, 1 and 3 slow
        let o = ObjectObs {
            pid: 1,
            addr: 0,
            len: 4 * MB,
            context: 1,
            resident_bytes: 4 * MB,
            fast_bytes: 2 * MB,
            ..Default::default()
        };
        let pages: Vec<PageObs> = (0..4 * MB / 4096)
            .map(|k| {
                let tier = if (k * 4096 / MB).is_multiple_of(2) { 0 } else { 1 };
                PageObs { pid: 1, addr: k * 4096, tier, node: tier, accessed: false, dirty: false }
            })
            .collect();
        let fast = |obs: &Observations| -> Vec<u64> {
            split_records(&[o], MB, obs).iter().map(|r| r.fast_bytes / (MB / 4)).collect()
        };
        let whole = Observations { page_bytes: 4096, pages: pages.clone(), scan_complete: true, ..Default::default() };
        assert_eq!(fast(&whole), [4, 0, 4, 0], "in quarters of a MiB");
        // a scan that saw only the second half this round (and completed): the first two
        // records are shared in proportion, the others counted
        let half = Observations { pages: pages[pages.len() / 2..].to_vec(), ..whole.clone() };
        assert_eq!(fast(&half), [2, 2, 4, 0]);
        // one that stopped inside record 1: records 0 counted, 1 on (not covered) shared
        let part = Observations { pages: pages[..300].to_vec(), scan_complete: false, ..whole.clone() };
        assert_eq!(fast(&part), [4, 2, 2, 2]);
        // no scan (MAT alone): shared
        assert_eq!(fast(&Observations { page_bytes: 4096, ..Default::default() }), [2, 2, 2, 2]);
    }

    fn tiers(fast_cap: u64, fast_used: u64) -> Vec<TierObs> {
        vec![
            TierObs { tier: 0, capacity_bytes: fast_cap, free_bytes: fast_cap - fast_used },
            TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
        ]
    }

    /// An object at `mb` MiB of `len_mb` MiB, context `ctx`, all resident in `tier`.
    fn obj(mb: u64, len_mb: u64, ctx: u32, tier: Tier) -> ObjectObs {
        let len = len_mb * MB;
        ObjectObs {
            pid: 1,
            addr: mb * MB,
            len,
            context: ctx,
            resident_bytes: len,
            fast_bytes: if tier == 0 { len } else { 0 },
            ..Default::default()
        }
    }

    fn samples(at_mb: u64, n: usize, time_ns: u64) -> Vec<Sample> {
        (0..n).map(|_| Sample { pid: 1, addr: at_mb * MB + 64, tier: 1, time_ns, store: false }).collect()
    }

    fn obs(objects: Vec<ObjectObs>, samples: Vec<Sample>, fast_cap: u64) -> Observations {
        let used = objects.iter().map(|o| o.fast_bytes).sum();
        Observations { tiers: tiers(fast_cap, used), objects, samples, ..Default::default() }
    }

    fn mat(priority: Priority) -> Mat {
        Mat::new(Config { priority, ..Config::default() }, "mat")
    }

    /// The (addr MiB, tier) of each move.
    fn moves(actions: &[Action]) -> Vec<(u64, Tier)> {
        let mut v: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Move { addr, to, .. } => Some((addr / MB, *to)),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn the_estimate_is_an_ewma_of_samples_per_interval() {
        let mut m = mat(Priority::Apb);
        let o = vec![obj(0, 1, 1, 1)];
        m.decide(&obs(o.clone(), samples(0, 10, 5), 100 * MB));
        assert!((m.objects[&(1, 0)].tau - 1.0).abs() < 1e-9, "0.1 * 10 + 0.9 * 0");
        m.decide(&obs(o.clone(), samples(0, 20, 6), 100 * MB));
        assert!((m.objects[&(1, 0)].tau - 2.9).abs() < 1e-9, "0.1 * 20 + 0.9 * 1");
        m.decide(&obs(o, vec![], 100 * MB));
        assert!((m.objects[&(1, 0)].tau - 2.61).abs() < 1e-9, "0.9 * 2.9");
        assert_eq!(m.objects[&(1, 0)].last_ns, Some(6));
    }

    #[test]
    fn with_min_streak_a_burst_does_not_promote_and_steady_samples_do() {
        // a slow object sampled once (a burst), another every interval: with min_streak 3 only
        // the steady one is promoted, and only from its third sampled interval on
        let run = |min_streak: u32| {
            let mut m = Mat::new(Config { min_streak, ..Config::default() }, "mat");
            let o = vec![obj(0, 1, 1, 1), obj(10, 1, 2, 1)];
            (1..=6u64)
                .map(|i| {
                    let mut s = samples(10, 5, i);
                    if i == 2 {
                        s.extend(samples(0, 50, i));
                    }
                    moves(&m.decide(&obs(o.clone(), s, 100 * MB)))
                })
                .collect::<Vec<_>>()
        };
        let paper = run(0);
        assert!(paper.iter().flatten().any(|&(at, to)| at == 0 && to == 0), "the burst promotes: {paper:?}");
        let steady = run(3);
        assert!(steady.iter().flatten().all(|&(at, _)| at == 10), "{steady:?}");
        let first = steady.iter().position(|m| m.contains(&(10, 0)));
        assert_eq!(first, Some(2), "promoted in its third interval: {steady:?}");
    }

    /// A fast set with room for one of two 1 MiB objects, the moves carried out: A (at 0) fast
    /// at the start, B (at 10) slow. B is sampled 20 times an interval for the first `hot`
    /// intervals of every 60 (a sweep passing over it, or a phase); A once an interval, or, with
    /// `phases`, 20 times in the intervals B is not. The intervals in which B is promoted, of 180.
    fn promotions_of_b(unpaid_backoff: bool, hot: u64, phases: bool) -> Vec<u64> {
        let cfg = Config { hysteresis: 3.0, min_streak: 3, unpaid_backoff, ..Config::default() };
        let mut m = Mat::new(cfg, "mat");
        let mut o = vec![obj(0, 1, 1, 0), obj(10, 1, 2, 1)];
        let mut up = Vec::new();
        for i in 1..=180u64 {
            let b_hot = (i - 1) % 60 < hot;
            let mut s = samples(0, if phases && !b_hot { 20 } else { 1 }, i);
            if b_hot {
                s.extend(samples(10, 20, i));
            }
            for (at, to) in moves(&m.decide(&obs(o.clone(), s, 12 * MB / 10))) {
                let k = usize::from(at == 10);
                o[k].fast_bytes = if to == 0 { o[k].len } else { 0 };
                if at == 10 && to == 0 {
                    up.push(i);
                }
            }
        }
        up
    }

    #[test]
    fn a_promotion_that_did_not_pay_makes_the_next_one_wait_longer() {
        // five hot intervals in sixty: promoted at each pass without the backoff; with it, the
        // first stay (sampled in 3 of about 36 intervals) does not pay, and five in a row are
        // then short of the six it takes
        let without = promotions_of_b(false, 5, false);
        assert_eq!(without.len(), 3, "promoted at each pass: {without:?}");
        let with = promotions_of_b(true, 5, false);
        assert_eq!(with, without[..1], "once: {with:?}");
        // thirty in sixty, A hot in the others (phases): each stay pays, each phase promotes B
        let phases = promotions_of_b(true, 30, true);
        assert_eq!(phases.len(), 3, "{phases:?}");
        assert_eq!(phases, promotions_of_b(false, 30, true));
    }

    #[test]
    fn a_held_process_is_neither_ranked_nor_moved_and_its_stay_goes_on() {
        // process 1's record A (at 0) is promoted while hot, then never sampled again; process
        // 2's record C (at 20) is hot from interval 4 on. The fast tier holds one of them.
        let cfg = Config { min_streak: 1, unpaid_backoff: true, ..Config::default() };
        let mut m = Mat::new(cfg, "mat");
        let mut o = vec![obj(0, 1, 1, 1), ObjectObs { pid: 2, ..obj(20, 1, 2, 1) }];
        let mut by_interval = Vec::new();
        for i in 1..=12u64 {
            // process 1 is held in intervals 4-8
            m.set_held(if (4..=8).contains(&i) { HashSet::from([1]) } else { HashSet::new() });
            let mut s = if i <= 3 { samples(0, 20, i) } else { Vec::new() };
            if i >= 4 {
                s.extend(samples(20, 20, i).into_iter().map(|s| Sample { pid: 2, ..s }));
            }
            let actions = m.decide(&obs(o.clone(), s, 12 * MB / 10));
            for (at, to) in moves(&actions) {
                let k = usize::from(at == 20);
                o[k].fast_bytes = if to == 0 { o[k].len } else { 0 };
            }
            by_interval.push(moves(&actions));
            if i == 8 {
                let a = &m.objects[&(1, 0)];
                assert!(a.stay.is_some() && a.unpaid == 0, "held, A's stay neither ended nor counted");
            }
        }
        assert!(by_interval[..3].iter().any(|m| m.contains(&(0, 0))), "A promoted while hot: {by_interval:?}");
        // while A is held, C does not take its place (A's fast bytes are taken from the budget)
        assert!(by_interval[3..8].iter().all(|m| m.is_empty()), "moves while held: {by_interval:?}");
        // released: A is demoted (its stay ends unpaid) and C promoted
        assert_eq!(by_interval[8], vec![(0, 1), (20, 0)], "{by_interval:?}");
        assert_eq!(m.objects[&(1, 0)].unpaid, 1);
    }

    #[test]
    fn a_stay_pays_when_sampled_in_half_its_intervals_and_a_paid_one_clears_the_count() {
        // promoted at 10, demoted at 20: sampled in 4 of its 10 intervals does not pay, in 5 does
        let stay = |unpaid: u32, sampled: u32| {
            let mut st = ObjState { unpaid, ..ObjState::new(MB, 1, 0) };
            st.moved(true, false, 10);
            st.stay = st.stay.map(|(from, _)| (from, sampled));
            st.moved(true, true, 15); // a top-up of a unit already fast: the stay goes on
            st.moved(false, true, 20);
            (st.unpaid, st.stay)
        };
        assert_eq!(stay(2, 4), (3, None));
        assert_eq!(stay(2, 5), (0, None));
    }

    /// Three objects of 10 MiB, born in intervals 1, 2, 3 at 0, 10, 20 MiB; a fast tier that
    /// holds two of them (at 90 %: 22.2 MiB); object 0 sampled most per byte, object 1 sampled
    /// last. Returns the moves of the re-assignment in interval 5.
    fn ranking(priority: Priority) -> Vec<(u64, Tier)> {
        let mut m = mat(priority);
        let cap = 23 * MB;
        let mut live = vec![];
        for (k, at) in [0u64, 10, 20].into_iter().enumerate() {
            live.push(obj(at, 10, 1 + k as u32, 1));
            let s = if at == 0 { samples(0, 50, 10) } else { vec![] };
            m.decide(&obs(live.clone(), s, cap));
        }
        m.decide(&obs(live.clone(), samples(10, 1, 20), cap));
        moves(&m.decide(&obs(live, vec![], cap)))
    }

    #[test]
    fn each_priority_orders_the_objects_its_way() {
        // fifo: the newest (20, 10) first; lru: 10 (sampled last) then 0; apb: 0 then 10
        assert_eq!(ranking(Priority::Fifo), vec![(10, 0), (20, 0)]);
        assert_eq!(ranking(Priority::Lru), vec![(0, 0), (10, 0)]);
        assert_eq!(ranking(Priority::Apb), vec![(0, 0), (10, 0)]);
    }

    #[test]
    fn the_fast_set_fills_ninety_percent_of_the_fast_tier_less_what_else_is_there() {
        let mut m = mat(Priority::Apb);
        // ten 10 MiB objects in the slow tier, 100 MiB fast: 90 MiB for nine of them
        let live: Vec<_> = (0..10).map(|k| obj(10 * k, 10, 1, 1)).collect();
        m.decide(&obs(live.clone(), vec![], 100 * MB));
        let all: Vec<Sample> = (0..10).flat_map(|k| samples(10 * k, 10 - k as usize, 1)).collect();
        let a = m.decide(&obs(live.clone(), all.clone(), 100 * MB));
        assert_eq!(moves(&a).len(), 9, "90 of 100 MiB");
        assert!(!moves(&a).contains(&(90, 0)), "the least sampled stays");
        // 25 MiB of the fast tier used by something else: 65 MiB, six objects
        let mut o = obs(live, all, 100 * MB);
        o.tiers = tiers(100 * MB, 25 * MB);
        assert_eq!(moves(&m.decide(&o)).len(), 6);
    }

    #[test]
    fn objects_in_the_fast_tier_that_lost_their_place_are_demoted_whole() {
        let mut m = mat(Priority::Apb);
        let live = vec![obj(0, 10, 1, 0), obj(10, 10, 2, 1)];
        m.decide(&obs(live.clone(), vec![], 12 * MB));
        let a = m.decide(&obs(live, samples(10, 30, 1), 12 * MB));
        assert_eq!(moves(&a), vec![(0, 1), (10, 0)]);
        assert!(a.iter().all(|a| matches!(a, Action::Move { len, .. } if *len == 10 * MB)));
    }

    /// Records of arena `arena` (a program's arena bound as `hint`) at these MiB, 1 MiB each.
    fn arena(mbs: &[u64], arena: u32, hint: Directive, tier: Tier) -> Vec<ObjectObs> {
        mbs.iter().map(|&mb| ObjectObs { context: 0, arena, hint, ..obj(mb, 1, 0, tier) }).collect()
    }

    #[test]
    fn an_arenas_records_move_together_and_its_binding_is_pinned_or_a_prior() {
        // a cold-bound arena of three records (only one of them sampled) holds the hot data; an
        // object in the fast tier is cold; 6 MiB of fast tier
        let run = |hints: Hints| {
            let mut m = Mat::new(Config { hints, ..Config::default() }, "mat");
            let mut live = arena(&[0, 10, 20], 7, Directive::Slow, 1);
            live.push(obj(30, 4, 1, 0));
            m.decide(&obs(live.clone(), vec![], 6 * MB));
            let mut hot = samples(10, 40, 1);
            hot.extend(samples(30, 2, 1));
            m.decide(&obs(live, hot, 6 * MB))
        };
        // prior: the arena's three records go up together (the hint's weight, 2x colder, does
        // not outweigh 20x the samples per byte), and the object makes the room
        assert_eq!(moves(&run(Hints::Prior)), vec![(0, 0), (10, 0), (20, 0), (30, 1)]);
        // pin: the program bound it to the slow tier, and there it stays
        assert!(run(Hints::Pin).is_empty());
        // ignore: MAT's paper, which never sees an arena
        assert!(run(Hints::Ignore).is_empty());
        // an unbound arena moves as one unit under pin too
        let mut m = mat(Priority::Apb);
        let live = arena(&[0, 10], 3, Directive::Default, 1);
        m.decide(&obs(live.clone(), vec![], 6 * MB));
        assert_eq!(moves(&m.decide(&obs(live, samples(0, 5, 1), 6 * MB))), vec![(0, 0), (10, 0)]);
    }

    #[test]
    fn an_arena_sampled_every_round_has_a_streak_though_none_of_its_records_does() {
        // eight records, a different one sampled each round: the arena has been sampled three
        // rounds in a row at the third, no record of it twice
        let mut m = Mat::new(Config { min_streak: 3, ..Config::default() }, "mat");
        let live = arena(&[0, 1, 2, 3, 4, 5, 6, 7], 4, Directive::Default, 1);
        let promoted: Vec<bool> =
            (0..4).map(|r| !moves(&m.decide(&obs(live.clone(), samples(r, 5, r), 100 * MB))).is_empty()).collect();
        assert_eq!(promoted, [false, false, true, true]);
    }

    #[test]
    fn an_arena_larger_than_the_fast_tier_is_ranked_by_its_records() {
        // a hot-bound arena of six 1 MiB records in the slow tier, two of them sampled; 4 MiB of
        // fast tier (a fast set of 3.6): whole, it fits nowhere and nothing would move; by its
        // records, the sampled two go up first, and the fast set is filled
        let mut m = Mat::new(Config { hints: Hints::Prior, ..Config::default() }, "mat");
        let live = arena(&[0, 1, 2, 3, 4, 5], 9, Directive::Fast, 1);
        let mut s = samples(1, 10, 1);
        s.extend(samples(4, 10, 1));
        m.decide(&obs(live.clone(), vec![], 4 * MB));
        let up: Vec<_> =
            moves(&m.decide(&obs(live, s, 4 * MB))).into_iter().filter(|m| m.1 == 0).map(|m| m.0).collect();
        assert!(up.contains(&1) && up.contains(&4) && up.len() == 3, "{up:?}");
    }

    #[test]
    fn a_bindings_prior_decides_between_near_equals() {
        // a hot-bound arena (2 MiB, 8 samples) and an object (2 MiB, 10 samples) for a fast
        // tier that holds one of them: measured alone the object wins; with the prior the arena
        let run = |hint_weight: f64| {
            let mut m = Mat::new(Config { hints: Hints::Prior, hint_weight, ..Config::default() }, "mat");
            let mut live = arena(&[0, 1], 5, Directive::Fast, 1);
            live.push(obj(10, 2, 1, 1));
            m.decide(&obs(live.clone(), vec![], 3 * MB));
            let mut s = samples(0, 4, 1);
            s.extend(samples(1, 4, 1));
            s.extend(samples(10, 10, 1));
            moves(&m.decide(&obs(live, s, 3 * MB)))
        };
        assert_eq!(run(0.0), vec![(10, 0)]);
        assert_eq!(run(1.0), vec![(0, 0), (1, 0)]);
    }

    #[test]
    fn a_binding_never_takes_fast_memory_from_another_process() {
        // process 1: an object (2 MiB, 10 samples); process 2: two arenas (2 MiB, 8 samples
        // each); a fast tier that holds two of the three. Measured, process 1's object and
        // process 2's first arena are the fast set. Whatever process 2 binds its arenas to,
        // process 1 keeps its place; the bindings decide only between process 2's own two.
        let run = |x: Directive, y: Directive| {
            let mut m = Mat::new(Config { hints: Hints::Prior, hint_weight: 9.0, ..Config::default() }, "mat");
            let theirs = |o: ObjectObs| ObjectObs { pid: 2, ..o };
            let mut live = vec![obj(0, 2, 1, 1)];
            live.extend(arena(&[10, 11], 5, x, 1).into_iter().map(theirs));
            live.extend(arena(&[20, 21], 6, y, 1).into_iter().map(theirs));
            m.decide(&obs(live.clone(), vec![], 5 * MB));
            let mut s = samples(0, 10, 1);
            let at = |mb: u64| samples(mb, 4, 1).into_iter().map(|s| Sample { pid: 2, ..s });
            s.extend(at(10).chain(at(11)).chain(at(20)).chain(at(21)));
            let a = m.decide(&obs(live, s, 5 * MB));
            let up = |pid: u32| -> Vec<u64> {
                let mut v: Vec<u64> = a
                    .iter()
                    .filter_map(|a| match a {
                        Action::Move { pid: p, addr, to: 0, .. } if *p == pid => Some(addr / MB),
                        _ => None,
                    })
                    .collect();
                v.sort_unstable();
                v
            };
            (up(1), up(2))
        };
        let hints = [Directive::Default, Directive::Fast, Directive::Tier(0), Directive::Slow, Directive::Tier(3)];
        for x in hints {
            for y in hints {
                assert_eq!(run(x, y).0, vec![0], "process 2 bound its arenas {x:?} and {y:?}");
            }
        }
        assert_eq!(run(Directive::Default, Directive::Default).1, vec![10, 11]);
        assert_eq!(run(Directive::Default, Directive::Fast).1, vec![20, 21]);
        assert_eq!(run(Directive::Slow, Directive::Default).1, vec![20, 21]);
    }

    #[test]
    fn a_record_takes_its_resident_bytes_of_the_fast_set_not_its_length() {
        // two 4 MiB records (vectors grown in mappings of their own) of which 1 MiB each is
        // resident, both sampled, and a fast tier of 3 MiB (a fast set of 2.7): both fit
        let part = |mb: u64| ObjectObs { resident_bytes: MB, ..obj(mb, 4, 1, 1) };
        let live = vec![part(0), part(8)];
        let mut m = mat(Priority::Apb);
        m.decide(&obs(live.clone(), vec![], 3 * MB));
        let mut s = samples(0, 10, 1);
        s.extend(samples(8, 10, 1));
        assert_eq!(moves(&m.decide(&obs(live, s, 3 * MB))), vec![(0, 0), (8, 0)]);
    }

    #[test]
    fn objects_that_have_not_lived_a_whole_interval_are_not_moved() {
        let mut m = mat(Priority::Apb);
        let a = m.decide(&obs(vec![obj(0, 1, 1, 1)], samples(0, 100, 1), 100 * MB));
        assert!(a.is_empty(), "first seen this interval: {a:?}");
        let a = m.decide(&obs(vec![obj(0, 1, 1, 1)], samples(0, 100, 2), 100 * MB));
        assert_eq!(moves(&a), vec![(0, 0)]);
        // another object at the same address is new again
        let a = m.decide(&obs(vec![obj(0, 2, 1, 1)], samples(0, 100, 3), 100 * MB));
        assert!(a.is_empty());
    }

    #[test]
    fn large_records_are_ranked_and_moved_in_pieces() {
        let mut m = Mat::new(Config { split_mb: 4.0, ..Config::default() }, "mat");
        let live = vec![obj(0, 16, 1, 1)];
        m.decide(&obs(live.clone(), vec![], 100 * MB));
        let a = m.decide(&obs(live, samples(9, 5, 1), 5 * MB));
        assert_eq!(moves(&a), vec![(8, 0)], "the 4 MiB piece at 8 MiB");
    }

    fn counted(accesses: u64, misses: u64) -> Observations {
        Observations { counters: Some(Counters { accesses, llc_misses: misses }), ..Default::default() }
    }

    #[test]
    fn the_triggers_fire_on_time_on_a_rise_in_misses_and_on_allocation() {
        let mut m = Mat::new(Config { time_intervals: 3, ..Config::default() }, "mat");
        let fired: Vec<bool> = (0..7)
            .map(|_| {
                m.interval += 1;
                let f = m.triggered(&Observations::default());
                if f {
                    m.last_assignment = m.interval;
                }
                f
            })
            .collect();
        assert_eq!(fired, vec![false, false, true, false, false, true, false]);

        let mut m = Mat::new(Config { trigger: Trigger::Llcmpi, ..Config::default() }, "mat");
        // ten intervals at 1 miss in 100 accesses, then 2.5 % (a rise of 1.5: no), then 4 % (3: yes)
        let (mut acc, mut miss) = (0, 0);
        for _ in 0..11 {
            acc += 1000;
            miss += 10;
            assert!(!m.triggered(&counted(acc, miss)));
        }
        acc += 1000;
        miss += 25;
        assert!(!m.triggered(&counted(acc, miss)));
        acc += 1000;
        miss += 40;
        assert!(m.triggered(&counted(acc, miss)));
        assert!(!m.triggered(&Observations::default()), "no counters: never");

        let mut m = Mat::new(Config { trigger: Trigger::Allocation, allocation_mb: 2, ..Config::default() }, "mat");
        let ctx = |bytes: u64| Observations {
            contexts: vec![ContextObs {
                pid: 1,
                index: 1,
                id: 1,
                size_class: 0,
                allocs: 1,
                frees: 0,
                live_bytes: 0,
                bytes_allocated: bytes,
                directive: Directive::Default,
            }],
            ..Default::default()
        };
        assert!(!m.triggered(&ctx(MB)));
        assert!(m.triggered(&ctx(2 * MB)));
    }

    #[test]
    fn proactive_sends_a_sites_new_objects_where_all_its_objects_went() {
        let mut m = Mat::new(Config { proactive: true, ..Config::default() }, "proactive");
        // site 1: two cold objects; site 2: one hot; site 3: one hot, one cold
        let live = vec![obj(0, 10, 1, 0), obj(10, 10, 1, 0), obj(20, 10, 2, 1), obj(30, 10, 3, 1), obj(40, 10, 3, 1)];
        m.decide(&obs(live.clone(), vec![], 25 * MB));
        let mut s = samples(20, 40, 1);
        s.extend(samples(30, 20, 1));
        let a = m.decide(&obs(live.clone(), s.clone(), 25 * MB));
        let mut d: Vec<_> = a
            .iter()
            .filter_map(|a| match a {
                Action::SetDirective { context, directive, .. } => Some((*context, *directive)),
                _ => None,
            })
            .collect();
        d.sort_by_key(|x| x.0);
        assert_eq!(d, vec![(1, Directive::Slow), (2, Directive::Fast)], "site 3 is split: left to the default");
        let a = m.decide(&obs(live, s, 25 * MB));
        assert!(!a.iter().any(|a| matches!(a, Action::SetDirective { .. })), "set once");
    }

    #[test]
    fn with_hysteresis_an_object_in_the_fast_tier_keeps_its_place_against_a_near_tie() {
        // object 0 in the fast tier, object 10 slightly more sampled; room for one
        let run = |hysteresis: f64| {
            let mut m = Mat::new(Config { hysteresis, ..Config::default() }, "mat");
            let live = vec![obj(0, 10, 1, 0), obj(10, 10, 2, 1)];
            m.decide(&obs(live.clone(), vec![], 12 * MB));
            let mut s = samples(0, 20, 1);
            s.extend(samples(10, 24, 1));
            moves(&m.decide(&obs(live, s, 12 * MB)))
        };
        assert_eq!(run(0.0), vec![(0, 1), (10, 0)], "the paper's ranking swaps them");
        assert!(run(0.5).is_empty(), "24 < 20 x 1.5: they stay");
    }
}
