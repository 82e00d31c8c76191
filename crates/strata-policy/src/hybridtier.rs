//! HybridTier (Song et al., ASPLOS '25; its published runtime, `tiering_runtime/hybridtier.cpp`
//! of the artifact), read from the paper and the runtime (no code copied).
//!
//! - **Samples.** LLC-miss loads served by memory, by page. They are processed in batches
//!   (100,000 samples, a second of sampling at the runtime's 100 kHz).
//! - **Frequency and momentum.** Each batch adds every sampled page's count to two count-min
//!   sketches of 4-bit counters (TinyLFU's, four hashes): `frequency`, sized for the fast tier's
//!   pages at a 0.1 % false-positive rate and halved (aged) after 16 x 10 samples per fast page,
//!   and `momentum`, a hundredth of its size and halved after 1.1 M samples (with the artifact's
//!   16 GiB fast tier; in proportion to the fast tier here), which so counts recent accesses
//!   only.
//! - **Promotion.** A page sampled in the batch whose frequency reaches the hot threshold (5) or
//!   whose momentum reaches 3 is promoted.
//! - **Demotion.** When the fast tier's free memory is at most 1.25 % of it, pages given a
//!   second chance more than 60 s ago whose frequency has not changed are demoted; then the
//!   fast tier's pages are scanned in address order from where the last scan stopped for
//!   enough cold pages to bring it to 5 % free: frequency under the threshold and no momentum is
//!   cold; frequency at or above it without momentum gets a second chance instead (at most
//!   10,000 queued; a counter at 15 is lowered to 14 so that a new access shows). Demotion
//!   faster than 100 MB/s throttles the runtime for a second.
//! - **Plateau.** Every 20 batches (after the first 500), if fewer than 25,000 pages were
//!   promoted: with hot pages for less than 80 % of the fast tier, the hot threshold drops by one
//!   (not below 3); else, or at 3, the runtime rests (monitor mode: no sampling) and then ages
//!   both sketches and restores the threshold. Two address-space sweeps in a row that find too
//!   few cold pages do the same.
//!
//! Here a round is the engine's; samples are the engine's sampler's (`sample_period` misses
//! each). The batch's 100,000 samples, like every period, are times `time_scale`, so a batch
//! stays a second of (scaled) sampling. Not modelled: the adaptive sampling rate (it changes
//! the runtime's overhead, which the engine's does not pay) and the monitor mode's hit-ratio
//! watch (it rests `monitor_secs` instead).
use std::collections::HashMap;

use serde::Deserialize;

use crate::{Action, Needs, Observations, PageObs, Policy};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub sample_batch: u64,
    pub hot_threshold: u32,
    pub min_hot_threshold: u32,
    pub momentum_threshold: u32,
    /// the frequency sketch's false-positive rate, and its aging: after this many samples per
    /// fast-tier page
    pub false_positive: f64,
    pub samples_per_fast_page: u64,
    /// the momentum sketch ages after this many samples on a fast tier of `momentum_fast_bytes`
    /// (the runtime's 1.1 M with 16 GiB), in proportion on others
    pub momentum_samples: u64,
    pub momentum_fast_bytes: u64,
    /// fast-tier free shares: demotion starts at `alloc_wmark` and stops at `demote_wmark`
    pub alloc_wmark: f64,
    pub demote_wmark: f64,
    pub second_chance_secs: f64,
    pub second_chance_max: usize,
    pub demote_throttle_mbps: f64,
    pub plateau_batches: u64,
    pub plateau_after_batches: u64,
    pub plateau_pages: u64,
    pub monitor_secs: f64,
    pub time_scale: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sample_batch: 100_000,
            hot_threshold: 5,
            min_hot_threshold: 3,
            momentum_threshold: 3,
            false_positive: 0.001,
            samples_per_fast_page: 160,
            momentum_samples: 1_100_000,
            momentum_fast_bytes: 16 << 30,
            alloc_wmark: 0.0125,
            demote_wmark: 0.05,
            second_chance_secs: 60.0,
            second_chance_max: 10_000,
            demote_throttle_mbps: 100.0,
            plateau_batches: 20,
            plateau_after_batches: 500,
            plateau_pages: 25_000,
            monitor_secs: 120.0,
            time_scale: 1.0,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if self.sample_batch == 0 || self.hot_threshold == 0 || self.hot_threshold > 15 || self.momentum_threshold > 15
        {
            return Err("sample_batch positive; hot_threshold in 1..=15; momentum_threshold at most 15".into());
        }
        if self.min_hot_threshold == 0 || self.min_hot_threshold > self.hot_threshold {
            return Err("min_hot_threshold must be in 1..=hot_threshold".into());
        }
        if !(self.false_positive > 0.0 && self.false_positive < 1.0) {
            return Err("false_positive must be in (0, 1)".into());
        }
        if !(0.0..1.0).contains(&self.alloc_wmark) || !(self.alloc_wmark..1.0).contains(&self.demote_wmark) {
            return Err("0 <= alloc_wmark <= demote_wmark < 1".into());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err(format!("time_scale must be positive, not {}", self.time_scale));
        }
        Ok(())
    }

    fn ns(&self, secs: f64) -> u64 {
        (secs * 1e9 * self.time_scale) as u64
    }

    fn batch(&self) -> u64 {
        ((self.sample_batch as f64 * self.time_scale) as u64).max(1)
    }
}

/// A count-min sketch of 4-bit counters with four hashes, halved every `sample_size` additions
/// (TinyLFU's frequency sketch).
#[derive(Clone, Debug)]
pub struct Sketch {
    counters: Vec<u8>,
    size: u64,
    sample_size: u64,
}

impl Sketch {
    /// Counters for `n` keys at false-positive rate `p` with four hashes (the Bloom filter's
    /// m = n x -k / ln(1 - p^(1/k))), divided by `shrink`.
    pub fn new(n: u64, p: f64, shrink: u64, sample_size: u64) -> Sketch {
        let k = 4.0;
        let r = -k / (1.0 - (p.ln() / k).exp()).ln();
        let m = ((n.max(1) as f64 * r).ceil() as u64 / shrink.max(1)).max(64);
        Sketch { counters: vec![0; m as usize], size: 0, sample_size: sample_size.max(1) }
    }

    fn slots(&self, key: u64) -> [usize; 4] {
        let mut out = [0; 4];
        for (i, o) in out.iter_mut().enumerate() {
            // splitmix64 of the key and the row
            let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1));
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            *o = (z % self.counters.len() as u64) as usize;
        }
        out
    }

    pub fn frequency(&self, key: u64) -> u32 {
        self.slots(key).iter().map(|&s| self.counters[s] as u32).min().unwrap_or(0)
    }

    /// Add `count` to the key; its frequency after. Ages the sketch when it has seen its sample
    /// size.
    pub fn increase(&mut self, key: u64, count: u32) -> u32 {
        for s in self.slots(key) {
            self.counters[s] = (self.counters[s] as u32 + count).min(15) as u8;
        }
        let f = self.frequency(key);
        self.size += count as u64;
        if self.size >= self.sample_size {
            self.age();
        }
        f
    }

    pub fn decrement(&mut self, key: u64) {
        for s in self.slots(key) {
            self.counters[s] = self.counters[s].saturating_sub(1);
        }
    }

    /// Halve every counter (TinyLFU's reset).
    pub fn age(&mut self) {
        for c in &mut self.counters {
            *c >>= 1;
        }
        self.size /= 2;
    }
}

fn key(pid: u32, addr: u64) -> u64 {
    ((pid as u64) << 48) ^ (addr >> 12)
}

pub struct HybridTier {
    cfg: Config,
    frequency: Option<Sketch>,
    momentum: Option<Sketch>,
    hot_threshold: u32,
    /// samples of the batch being collected, by page
    batch: HashMap<(u32, u64), u32>,
    batch_samples: u64,
    batches: u64,
    promoted_in_window: u64,
    /// the last frequency seen of each sampled page (for the plateau's count of hot pages)
    seen: HashMap<(u32, u64), u32>,
    second_chance: Vec<((u32, u64), u32)>,
    second_chance_at: u64,
    last_scanned: (u32, u64),
    sweeps_short: u32,
    last_demotion_ns: u64,
    rest_until_ns: u64,
}

impl HybridTier {
    pub fn new(cfg: Config) -> HybridTier {
        let hot_threshold = cfg.hot_threshold;
        HybridTier {
            cfg,
            frequency: None,
            momentum: None,
            hot_threshold,
            batch: HashMap::new(),
            batch_samples: 0,
            batches: 0,
            promoted_in_window: 0,
            seen: HashMap::new(),
            second_chance: Vec::new(),
            second_chance_at: 0,
            last_scanned: (0, 0),
            sweeps_short: 0,
            last_demotion_ns: 0,
            rest_until_ns: 0,
        }
    }

    /// Rest (monitor mode), then age both sketches and restore the threshold.
    fn rest(&mut self, now: u64) {
        self.rest_until_ns = now + self.cfg.ns(self.cfg.monitor_secs);
        for s in [&mut self.frequency, &mut self.momentum].into_iter().flatten() {
            s.age();
        }
        self.hot_threshold = self.cfg.hot_threshold;
        self.second_chance.clear();
        self.sweeps_short = 0;
        self.batch.clear();
        self.batch_samples = 0;
    }

    /// One batch: update the sketches, promote, demote when the fast tier is short, check for a
    /// plateau.
    fn process(&mut self, obs: &Observations, pages: &[PageObs], now: u64, out: &mut Vec<Action>) {
        let page = obs.page_bytes.max(1);
        let fast = obs.tiers.iter().find(|t| t.tier == 0).copied().unwrap_or_default();
        let fast_pages = fast.capacity_bytes / page;
        let cfg = self.cfg.clone();
        let freq = self.frequency.get_or_insert_with(|| {
            Sketch::new(fast_pages, cfg.false_positive, 1, fast_pages * cfg.samples_per_fast_page)
        });
        let mut sampled: Vec<((u32, u64), u32)> = self.batch.drain().collect();
        sampled.sort_unstable();
        let mut fs = Vec::with_capacity(sampled.len());
        for &((pid, addr), n) in &sampled {
            fs.push(freq.increase(key(pid, addr), n));
        }
        let mom = self.momentum.get_or_insert_with(|| {
            let share = fast.capacity_bytes as f64 / cfg.momentum_fast_bytes.max(1) as f64;
            Sketch::new(fast_pages, cfg.false_positive, 100, (cfg.momentum_samples as f64 * share) as u64)
        });
        let tier_of = |pid: u32, addr: u64| {
            pages.binary_search_by_key(&(pid, addr), |p| (p.pid, p.addr)).ok().map(|i| pages[i].tier)
        };
        let mut promoted = 0;
        for (&((pid, addr), n), f) in sampled.iter().zip(fs) {
            let m = mom.increase(key(pid, addr), n);
            self.seen.insert((pid, addr), f);
            if (f >= self.hot_threshold || m >= cfg.momentum_threshold) && tier_of(pid, addr).is_some_and(|t| t > 0) {
                crate::push_page_move(out, pid, addr, page, 0, f as i64);
                promoted += 1;
            }
        }
        self.promoted_in_window += promoted;
        self.batch_samples = 0;
        self.batches += 1;
        let promoted_bytes = promoted * page;
        let free = fast.free_bytes.saturating_sub(promoted_bytes);
        if free as f64 <= cfg.alloc_wmark * fast.capacity_bytes as f64 {
            self.demote(obs, pages, free, now, out);
        }
        if self.batches % cfg.plateau_batches == cfg.plateau_batches - 1 {
            let plateau = self.batches > cfg.plateau_after_batches && self.promoted_in_window <= cfg.plateau_pages;
            self.promoted_in_window = 0;
            if plateau {
                let hot = self.seen.values().filter(|f| **f >= self.hot_threshold).count() as u64 * page;
                if hot < fast.capacity_bytes * 8 / 10 && self.hot_threshold > cfg.min_hot_threshold {
                    self.hot_threshold -= 1;
                } else {
                    self.rest(now);
                }
            }
        }
    }

    /// Second-chance pages first, then a scan of the fast tier from where the last one stopped.
    fn demote(&mut self, obs: &Observations, pages: &[PageObs], free: u64, now: u64, out: &mut Vec<Action>) {
        let page = obs.page_bytes.max(1);
        let cap = obs.tiers.iter().find(|t| t.tier == 0).map_or(0, |t| t.capacity_bytes);
        let (freq, mom) = match (&mut self.frequency, &self.momentum) {
            (Some(f), Some(m)) => (f, m),
            _ => return,
        };
        let push = |out: &mut Vec<Action>, (pid, addr): (u32, u64)| {
            crate::push_page_move(out, pid, addr, page, 1, 0);
        };
        let mut second = 0u64; // second-chance pages demoted
        if !self.second_chance.is_empty() && now >= self.second_chance_at + self.cfg.ns(self.cfg.second_chance_secs) {
            for &(k, old) in &self.second_chance {
                if freq.frequency(key(k.0, k.1)) == old {
                    push(out, k);
                    second += 1;
                }
            }
            self.second_chance.clear();
            self.second_chance_at = now;
        }
        let want = ((self.cfg.demote_wmark * cap as f64) as u64).saturating_sub(free + second * page) / page;
        let fast: Vec<&PageObs> = pages.iter().filter(|p| p.tier == 0).collect();
        let start = fast.partition_point(|p| (p.pid, p.addr) <= self.last_scanned);
        let mut cold = 0u64;
        let mut reached_end = true;
        for p in &fast[start..] {
            if cold >= want {
                self.last_scanned = (p.pid, p.addr);
                reached_end = false;
                break;
            }
            let k = key(p.pid, p.addr);
            let (f, m) = (freq.frequency(k), mom.frequency(k));
            if m >= 1 {
                continue;
            }
            if f < self.hot_threshold {
                push(out, (p.pid, p.addr));
                cold += 1;
            } else if self.second_chance.len() < self.cfg.second_chance_max {
                let old = if f == 15 {
                    freq.decrement(k);
                    14
                } else {
                    f
                };
                self.second_chance.push(((p.pid, p.addr), old));
            }
        }
        if reached_end {
            self.last_scanned = (0, 0);
            if cold < want {
                self.sweeps_short += 1;
            }
        } else {
            self.sweeps_short = 0;
        }
        let demoted = second + cold;
        // throttle: faster than the limit since the last demotion rests the runtime a second
        let since = now.saturating_sub(self.last_demotion_ns).max(1) as f64 / (1e9 * self.cfg.time_scale);
        let mbps = (demoted * page) as f64 / since / 1e6;
        self.last_demotion_ns = now;
        if mbps > self.cfg.demote_throttle_mbps {
            self.rest_until_ns = now + self.cfg.ns(1.0);
        }
        if self.sweeps_short >= 2 {
            self.rest(now);
        }
    }
}

impl Policy for HybridTier {
    fn name(&self) -> &'static str {
        "hybridtier"
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, samples: true, ..Needs::default() }
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let page = obs.page_bytes.max(1);
        let sorted = crate::sorted_pages(&obs.pages);
        let pages: &[PageObs] = &sorted;
        let mut out = Vec::new();
        for s in obs.samples.iter().filter(|s| !s.store) {
            if s.time_ns < self.rest_until_ns {
                continue; // resting: not sampling
            }
            *self.batch.entry((s.pid, s.addr / page * page)).or_default() += 1;
            self.batch_samples += 1;
            if self.batch_samples >= self.cfg.batch() {
                // a batch is processed when its last sample arrives
                self.process(obs, pages, s.time_ns.min(obs.now_ns), &mut out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Sample, Tier, TierObs};

    const PAGE: u64 = 4096;

    fn page(i: u64, tier: Tier) -> PageObs {
        PageObs { pid: 1, addr: i * PAGE, tier, node: tier, accessed: false, dirty: false }
    }

    /// The pages (numbers) a move to `to` covers.
    fn pages_to(a: &Action, to: Tier) -> Vec<u64> {
        match a {
            Action::Move { addr, len, to: t, .. } if *t == to => (addr / PAGE..(addr + len) / PAGE).collect(),
            _ => Vec::new(),
        }
    }

    fn sample(i: u64) -> Sample {
        Sample { pid: 1, addr: i * PAGE + 64, tier: 1, time_ns: 0, store: false }
    }

    fn obs(now_ns: u64, pages: Vec<PageObs>, samples: Vec<Sample>, fast_pages: u64, free_pages: u64) -> Observations {
        Observations {
            now_ns,
            page_bytes: PAGE,
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: fast_pages * PAGE, free_bytes: free_pages * PAGE },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
            ],
            pages,
            samples: samples.into_iter().map(|s| Sample { time_ns: now_ns, ..s }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_sketch_counts_to_fifteen_ages_by_halving_and_is_sized_for_its_false_positive_rate() {
        let mut s = Sketch::new(1000, 0.001, 1, 100);
        // m = n x 20.4 for p = 0.001 and four hashes
        assert!((20_000..21_000).contains(&s.counters.len()), "{}", s.counters.len());
        assert_eq!(s.increase(7, 3), 3);
        assert_eq!(s.increase(7, 20), 15, "4-bit counters");
        assert_eq!(s.frequency(8), 0);
        s.decrement(7);
        assert_eq!(s.frequency(7), 14);
        for _ in 0..100 {
            s.increase(9, 1); // 100 more samples: one aging
        }
        assert!(s.frequency(7) <= 7, "halved: {}", s.frequency(7));
    }

    #[test]
    fn a_page_is_promoted_by_frequency_or_momentum_once_a_batch_is_processed() {
        let cfg = Config { sample_batch: 10, time_scale: 1.0, ..Config::default() };
        let mut h = HybridTier::new(cfg);
        let pages: Vec<PageObs> = (0..100).map(|i| page(i, if i < 50 { 0 } else { 1 })).collect();
        // page 60 sampled 6 times, page 61 twice, page 10 (fast) 2 times: a batch of 10
        let mut samples: Vec<Sample> = (0..6).map(|_| sample(60)).collect();
        samples.extend([sample(61), sample(61), sample(10), sample(10)]);
        let acts = h.decide(&obs(0, pages.clone(), samples, 1000, 900));
        let up: Vec<u64> = acts.iter().flat_map(|a| pages_to(a, 0)).collect();
        assert_eq!(up, vec![60], "frequency 6 >= 5 promotes; 2 samples do not; a fast page stays");
        // momentum: three samples of page 62 in one batch
        let samples: Vec<Sample> = [62, 62, 62, 63, 64, 65, 66, 67, 68, 69].iter().map(|i| sample(*i)).collect();
        let acts = h.decide(&obs(1, pages, samples, 1000, 900));
        assert!(acts.iter().flat_map(|a| pages_to(a, 0)).any(|p| p == 62), "{acts:?}");
        // fewer samples than a batch: nothing yet
        let mut h = HybridTier::new(Config { sample_batch: 10, ..Config::default() });
        let acts = h.decide(&obs(0, (0..100).map(|i| page(i, 1)).collect(), vec![sample(70); 9], 1000, 900));
        assert!(acts.is_empty());
    }

    #[test]
    fn a_short_fast_tier_demotes_cold_pages_and_gives_sampled_ones_a_second_chance() {
        // (the batch scales with time: 4,000,000 x 1e-6 is 4 samples)
        let cfg = Config { sample_batch: 4_000_000, time_scale: 1e-6, ..Config::default() };
        let mut h = HybridTier::new(cfg);
        // 1,000 fast pages, 5 free (0.5 %, under 1.25 %): demote to 5 % free
        let pages: Vec<PageObs> = (0..2000).map(|i| page(i, if i < 1000 { 0 } else { 1 })).collect();
        // pages 0 and 1 are hot by frequency (earlier batches), with no recent momentum
        for _ in 0..2 {
            h.decide(&obs(0, pages.clone(), vec![sample(0), sample(0), sample(1), sample(1)], 1000, 500));
        }
        for _ in 0..3 {
            h.momentum.as_mut().unwrap().age(); // 4 samples each: no momentum left
        }
        h.hot_threshold = 2;
        let acts = h.decide(&obs(10, pages.clone(), vec![sample(1500); 4], 1000, 5));
        let down: Vec<u64> = acts.iter().flat_map(|a| pages_to(a, 1)).collect();
        // (page 1500, sampled four times, is promoted in the same batch: 4 free, 46 to demote)
        assert_eq!(down.len(), 46, "{down:?}");
        assert!(!down.contains(&0) && !down.contains(&1), "hot pages are not demoted");
        let second: Vec<u64> = h.second_chance.iter().map(|((_, a), _)| a / PAGE).collect();
        assert!(second.contains(&0) && second.contains(&1), "they get a second chance: {second:?}");
        // 60 s (scaled) later, unsampled since: the second chance is used up
        let later = 60_001_000;
        let acts = h.decide(&obs(later, pages, vec![sample(1501); 4], 1000, 5));
        assert!(acts.iter().flat_map(|a| pages_to(a, 1)).any(|p| p == 0), "{acts:?}");
    }
}
