//! hmalloc's first placement (seed 001 §3.1): where a context's new objects are born, learnt
//! from how hot its earlier objects were. It changes directives, never moves a page.
//!
//! Execution is divided in epochs of events (sampled accesses, allocations and frees): the first
//! `epoch_first` (1,000) events long, each next one `epoch_growth` (2) times longer, up to
//! `epoch_max` (500,000). During an epoch every sample that falls in a tracked object counts for
//! the object's context, and each context's tracked bytes resident are followed (their peak in
//! the epoch: the paper asks Ambix for them; the machine reports each object's residency). At
//! its end each context's hotness is `accesses / resident bytes`, and the contexts whose next
//! allocations go to the fast tier are chosen by a 0/1 knapsack:
//!
//! - the knapsack is the fast tier's share of the memory in use, `capacity_ratio` times it
//!   (default: the fast tier's capacity over the memory in use, so the whole fast tier);
//! - an item is a context, its weight its resident bytes (Algorithm 1's "real memory usage
//!   from Ambix": what its objects would take of the fast tier, and, the paper assumes, what its
//!   new ones will), its value its hotness times that weight, i.e. its sampled accesses: the
//!   knapsack maximises the accesses the fast tier serves. (The text names the hotness alone as
//!   the value, which would count a context's worth regardless of its size.)
//!
//! Chosen contexts get the `fast` directive, the others with tracked objects `slow`; contexts
//! without tracked objects (all smaller than libstrata's track_min) have no measured hotness and
//! keep theirs. Allocations under 64 bytes always go to the fast tier without a context: that is
//! libstrata's `fast_below` option, not a decision of this policy.
use std::collections::HashMap;

use serde::Deserialize;

use crate::{object_at, Action, Directive, Needs, Observations, Policy};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// events in the first epoch
    pub epoch_first: u64,
    /// events in an epoch at most
    pub epoch_max: u64,
    /// each epoch is this many times longer than the one before
    pub epoch_growth: f64,
    /// the knapsack's capacity as a share of the memory in use (default: the fast tier's share)
    pub capacity_ratio: Option<f64>,
}

impl Default for Config {
    fn default() -> Config {
        Config { epoch_first: 1000, epoch_max: 500_000, epoch_growth: 2.0, capacity_ratio: None }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if self.epoch_first == 0 || self.epoch_max < self.epoch_first {
            return Err(format!(
                "epoch_first must be positive and at most epoch_max ({} and {})",
                self.epoch_first, self.epoch_max
            ));
        }
        if !(self.epoch_growth >= 1.0 && self.epoch_growth.is_finite()) {
            return Err(format!("epoch_growth must be at least 1, not {}", self.epoch_growth));
        }
        if let Some(r) = self.capacity_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return Err(format!("capacity_ratio must be in (0, 1], not {r}"));
            }
        }
        Ok(())
    }
}

/// One context's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Epoch {
    accesses: u64,
    /// peak tracked bytes resident
    resident: u64,
    /// cumulative counters at the last round
    allocs: u64,
    frees: u64,
}

pub struct Hmalloc {
    cfg: Config,
    /// events in the current epoch so far, and its length
    events: u64,
    epoch_len: u64,
    /// the most memory in use (all tiers) at any round of the epoch
    peak_used: u64,
    /// the lengths of the epochs that ended
    pub epochs: Vec<u64>,
    contexts: HashMap<(u32, u32), Epoch>,
    directives: HashMap<(u32, u32), Directive>,
    /// the knapsack's capacity in bytes, when a combined policy sets it
    capacity_bytes: Option<u64>,
}

impl Hmalloc {
    pub fn new(cfg: Config) -> Hmalloc {
        let epoch_len = cfg.epoch_first;
        Hmalloc {
            cfg,
            events: 0,
            epoch_len,
            peak_used: 0,
            epochs: Vec::new(),
            contexts: HashMap::new(),
            directives: HashMap::new(),
            capacity_bytes: None,
        }
    }

    /// Fill the knapsack up to these bytes (at most the memory in use) instead of
    /// `capacity_ratio` of it: a combined policy shares one budget of the fast tier.
    pub fn set_capacity(&mut self, bytes: Option<u64>) {
        self.capacity_bytes = bytes;
    }

    /// Count this round: samples per context, residency, allocation events.
    fn observe(&mut self, obs: &Observations) {
        let mut resident: HashMap<(u32, u32), u64> = HashMap::new();
        for o in &obs.objects {
            *resident.entry((o.pid, o.context)).or_default() += o.resident_bytes;
        }
        for s in &obs.samples {
            if let Some(i) = object_at(&obs.objects, s.pid, s.addr) {
                let o = &obs.objects[i];
                self.contexts.entry((o.pid, o.context)).or_default().accesses += 1;
            }
        }
        self.events += obs.samples.len() as u64;
        let used: u64 = obs.tiers.iter().map(|t| t.capacity_bytes.saturating_sub(t.free_bytes)).sum();
        self.peak_used = self.peak_used.max(used);
        for c in &obs.contexts {
            let e = self.contexts.entry((c.pid, c.index)).or_default();
            // allocations and frees since the last round count as events
            self.events += (c.allocs + c.frees).saturating_sub(e.allocs + e.frees);
            (e.allocs, e.frees) = (c.allocs, c.frees);
            e.resident = e.resident.max(resident.get(&(c.pid, c.index)).copied().unwrap_or(0));
        }
    }

    /// The epoch ends: choose the fast contexts and start the next epoch.
    fn end_epoch(&mut self, obs: &Observations) -> Vec<Action> {
        self.epochs.push(self.epoch_len);
        self.epoch_len = ((self.epoch_len as f64 * self.cfg.epoch_growth) as u64).min(self.cfg.epoch_max);
        self.events = 0;
        // the epoch's peak, not this round's: an epoch that ends just after the program freed
        // most of its memory (multi-site between generations) made a knapsack of what little
        // was left, and sent the hot contexts' next objects to the slow tier
        let used = std::mem::take(&mut self.peak_used);
        let fast = obs.tiers.iter().find(|t| t.tier == 0).map_or(0, |t| t.capacity_bytes);
        let capacity = match self.capacity_bytes {
            Some(b) => b.min(used),
            None => knapsack_capacity(used, fast, self.cfg.capacity_ratio),
        };

        let mut items = Vec::new(); // (key, weight bytes, value)
        for c in &obs.contexts {
            let key = (c.pid, c.index);
            let Some(e) = self.contexts.get_mut(&key) else { continue };
            if e.resident > 0 {
                let hotness = e.accesses as f64 / e.resident as f64;
                items.push((key, e.resident, hotness * e.resident as f64));
            }
            e.accesses = 0;
            e.resident = 0;
        }
        items.sort_by_key(|i| i.0);
        let weights: Vec<u64> = items.iter().map(|i| i.1).collect();
        let values: Vec<f64> = items.iter().map(|i| i.2).collect();
        let chosen = knapsack(&weights, &values, capacity);
        let mut actions = Vec::new();
        for (k, item) in items.iter().enumerate() {
            let d = if chosen[k] { Directive::Fast } else { Directive::Slow };
            if self.directives.insert(item.0, d) != Some(d) {
                actions.push(Action::SetDirective { pid: item.0 .0, context: item.0 .1, directive: d });
            }
        }
        actions
    }
}

/// The knapsack's capacity in bytes: `ratio` of the memory in use, or without one the fast
/// tier's capacity (at most the memory in use). Computed in integers where it can be: a ratio
/// of fast / used multiplied back by used lost a byte to rounding (16 MiB - 1), and with it a
/// whole context of exactly half the fast tier.
fn knapsack_capacity(used: u64, fast: u64, ratio: Option<f64>) -> u64 {
    match ratio {
        Some(r) => (used as f64 * r).round() as u64,
        None => fast.min(used),
    }
}

/// The most value a knapsack of `capacity` holds: which items go in. Weights are in bytes and
/// are rounded up to 1/2048 of the capacity (a page at least), so the table stays small; with
/// weights that are multiples of that unit the answer is optimal. Zero-weight items of positive
/// value always go in.
pub fn knapsack(weights: &[u64], values: &[f64], capacity: u64) -> Vec<bool> {
    let unit = (capacity / 2048).max(4096);
    let cap = (capacity / unit) as usize;
    let w: Vec<usize> = weights.iter().map(|&b| b.div_ceil(unit) as usize).collect();
    let n = weights.len();
    // best[i][c]: the most value from the first i items within c units
    let mut best = vec![vec![0.0f64; cap + 1]; n + 1];
    for i in 0..n {
        for c in 0..=cap {
            let skip = best[i][c];
            let take = if w[i] <= c && values[i] > 0.0 { best[i][c - w[i]] + values[i] } else { f64::MIN };
            best[i + 1][c] = skip.max(take);
        }
    }
    let mut chosen = vec![false; n];
    let mut c = cap;
    for i in (0..n).rev() {
        if best[i + 1][c] != best[i][c] {
            chosen[i] = true;
            c -= w[i];
        }
    }
    chosen
}

impl Policy for Hmalloc {
    fn name(&self) -> &'static str {
        "hmalloc"
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        self.observe(obs);
        if self.events < self.epoch_len {
            return Vec::new();
        }
        self.end_epoch(obs)
    }

    fn needs(&self) -> Needs {
        Needs { samples: true, objects: true, contexts: true, ..Needs::default() }
    }
}

/// `hmalloc:ambix`, hmalloc as its paper ran it (seed 001): hmalloc decides where objects are
/// born, and Ambix, beside it, moves pages (the objects' too) with its own rules and defaults,
/// demoting what has gone cold so that the hot contexts' next objects find room.
pub struct WithAmbix {
    births: Hmalloc,
    pages: crate::ambix::Ambix,
}

impl WithAmbix {
    pub fn new(cfg: Config) -> WithAmbix {
        WithAmbix { births: Hmalloc::new(cfg), pages: crate::ambix::Ambix::new(crate::ambix::Config::default()) }
    }
}

impl Policy for WithAmbix {
    fn name(&self) -> &'static str {
        "hmalloc:ambix"
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let mut actions = self.births.decide(obs);
        actions.extend(self.pages.decide(obs));
        actions
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, ..self.births.needs() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextObs, ObjectObs, Sample, TierObs};

    const MB: u64 = 1 << 20;

    /// Every subset, the best one.
    fn brute_force(weights: &[u64], values: &[f64], capacity: u64) -> f64 {
        (0u32..1 << weights.len())
            .filter_map(|set| {
                let (w, v) = (0..weights.len())
                    .filter(|i| set >> i & 1 == 1)
                    .fold((0, 0.0), |(w, v), i| (w + weights[i], v + values[i]));
                (w <= capacity).then_some(v)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn the_knapsack_is_optimal_against_brute_force_on_small_instances() {
        let mut seed = 12345u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..300 {
            let n = 1 + next(10) as usize;
            let unit = 4096;
            let weights: Vec<u64> = (0..n).map(|_| next(40) * unit).collect();
            let values: Vec<f64> = (0..n).map(|_| next(100) as f64).collect();
            let capacity = next(120) * unit;
            let chosen = knapsack(&weights, &values, capacity);
            let w: u64 = (0..n).filter(|&i| chosen[i]).map(|i| weights[i]).sum();
            let v: f64 = (0..n).filter(|&i| chosen[i]).map(|i| values[i]).sum();
            assert!(w <= capacity, "{weights:?} {capacity}");
            assert_eq!(v, brute_force(&weights, &values, capacity), "{weights:?} {values:?} {capacity}");
        }
    }

    fn context(index: u32, allocs: u64, bytes: u64) -> ContextObs {
        ContextObs {
            pid: 1,
            index,
            id: index as u64,
            size_class: 0,
            allocs,
            frees: 0,
            live_bytes: bytes,
            bytes_allocated: bytes,
            directive: Directive::Default,
        }
    }

    #[test]
    fn the_capacity_is_the_fast_tier_exactly_so_two_halves_fit() {
        assert_eq!(knapsack_capacity(60 * MB, 16 * MB, None), 16 * MB);
        assert_eq!(knapsack_capacity(10 * MB, 16 * MB, None), 10 * MB);
        assert_eq!(knapsack_capacity(27_185_152, 16 * MB, Some(16.0 * MB as f64 / 27_185_152.0)), 16 * MB);
        let chosen = knapsack(&[8 * MB, 8 * MB, 8 * MB], &[5.0, 1.0, 4.0], knapsack_capacity(60 * MB, 16 * MB, None));
        assert_eq!(chosen, vec![true, false, true]);
    }

    #[test]
    fn epochs_grow_from_a_thousand_events_to_half_a_million() {
        // 100 events a round: the epochs of 1,000, 2,000, ... 256,000 and then 500,000 events
        // end after 10, 20, ... 2,560 and then 5,000 rounds
        let mut h = Hmalloc::new(Config::default());
        let ends: Vec<u64> = [1000u64, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 500000, 500000]
            .iter()
            .scan(0, |rounds, e| {
                *rounds += e / 100;
                Some(*rounds)
            })
            .collect();
        let mut allocs = 0;
        for round in 1..=*ends.last().unwrap() {
            allocs += 100;
            h.decide(&Observations { contexts: vec![context(1, allocs, 0)], ..Default::default() });
            assert_eq!(h.epochs.len(), ends.iter().filter(|&&e| e <= round).count(), "round {round}");
        }
    }

    #[test]
    fn hot_contexts_start_fast_and_cold_ones_slow_within_the_fast_share() {
        let mut h = Hmalloc::new(Config { epoch_first: 10, ..Config::default() });
        // contexts 1 (cold, 60 MiB) and 2 (hot, 20 MiB) and 3 (warm, 20 MiB), a 40 MiB fast tier
        let o = |mb: u64, len_mb: u64, context: u32, fast_mb: u64| ObjectObs {
            pid: 1,
            addr: mb * MB,
            len: len_mb * MB,
            context,
            resident_bytes: len_mb * MB,
            fast_bytes: fast_mb * MB,
            ..Default::default()
        };
        let objects = vec![o(0, 60, 1, 40), o(60, 20, 2, 0), o(80, 20, 3, 0)];
        let at = |mb: u64, n: usize| {
            (0..n).map(move |_| Sample { pid: 1, addr: mb * MB, tier: 1, time_ns: 0, store: false })
        };
        let samples: Vec<Sample> = at(1, 2).chain(at(61, 8)).chain(at(81, 4)).collect();
        let obs = Observations {
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: 40 * MB, free_bytes: 0 },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: (1 << 40) - 60 * MB },
            ],
            objects,
            samples,
            contexts: vec![context(1, 1, 60 * MB), context(2, 1, 20 * MB), context(3, 1, 20 * MB)],
            ..Default::default()
        };
        let mut a = h.decide(&obs);
        a.sort_by_key(|a| match a {
            Action::SetDirective { context, .. } => *context,
            _ => 0,
        });
        let d: Vec<_> = a
            .iter()
            .map(|a| match a {
                Action::SetDirective { context, directive, .. } => (*context, *directive),
                a => panic!("{a:?}"),
            })
            .collect();
        assert_eq!(d, vec![(1, Directive::Slow), (2, Directive::Fast), (3, Directive::Fast)]);
        assert_eq!(h.epochs, vec![10]);
    }

    #[test]
    fn contexts_without_tracked_objects_keep_their_directive() {
        let mut h = Hmalloc::new(Config { epoch_first: 1, ..Config::default() });
        let obs = Observations {
            tiers: vec![TierObs { tier: 0, capacity_bytes: MB, free_bytes: 0 }],
            contexts: vec![context(7, 5, 4096)],
            ..Default::default()
        };
        assert!(h.decide(&obs).is_empty());
    }
}
