//! DAMON tiering (Linux 6.16's recipe, `samples/damon/mtier.c` and damo's tiering example): the
//! kernel's data-access monitor and two DAMOS schemes, read from the kernel's source (no code
//! copied).
//!
//! **Monitoring** (`mm/damon/core.c`). The address space is cut into regions, at least
//! `min_nr_regions` (10) and at most `max_nr_regions` (1,000). Every sampling interval (5 ms)
//! DAMON checks one random page of each region for an access (its accessed bit, cleared at the
//! check before); a region's `nr_accesses` counts the checks that found one over an aggregation
//! interval (100 ms, so at most 20). At the end of each aggregation the schemes are applied
//! (`kdamond_apply_schemes`); then a region whose `nr_accesses` moved by more than a tenth of
//! the maximum since the last aggregation gets age 0, else one more; adjacent regions whose
//! counts differ by at most that tenth merge (sizes and counts averaged by size), the threshold
//! doubling while there are too many regions (`kdamond_merge_regions`); and while there are fewer
//! than half the maximum, each region splits in two at a random point (`damon_split_regions_of`).
//!
//! **Schemes** (mtier.c): `migrate_hot` to the fast tier for regions with at least one access,
//! keeping only pages that are young now (a `young` filter), and `migrate_cold` from the fast
//! tier for regions with none, keeping only pages that are not young. Each is applied every
//! second (its apply interval) under a quota of at most 200 MiB a second, spent hottest
//! (respectively coldest) first: a region's hot score weighs its access frequency and its age
//! in log2 seconds (weights 100 and 100, size 0: `damon_hot_score`), the cold score is 99 minus
//! it, and the regions above the score at which their sizes fill the quota are applied
//! (`damos_adjust_quota`). The quota is tuned every reset interval (1 s) by a feedback loop
//! toward a goal (`damon_feed_loop_next_input`): the fast tier 99.7 % used for promotion, 0.5 %
//! free for demotion.
//!
//! **Here.** The engine gives this policy the accessed bit of every page each round; a round is
//! one aggregation interval (`round_ms`), and `nr_accesses` counts the accessed bits of 20 random
//! pages of the region (one a sampling interval), so a page counts as accessed over the
//! aggregation interval rather than over one sampling interval. Regions are per process and
//! over virtual addresses (DAMON's `vaddr` operations); the recipe monitors physical node ranges
//! (`paddr`), where a region holds the pages of one node: the schemes here act on each region's
//! pages of the tier they move from. Every interval is its default times `time_scale`.
use serde::Deserialize;

use crate::{Action, Needs, Observations, Policy, Tier};

/// The recipe's parameters; the defaults are mtier.c's and DAMON's.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// DAMON's sampling and aggregation intervals, microseconds
    pub sample_us: u64,
    pub aggr_us: u64,
    pub min_nr_regions: usize,
    pub max_nr_regions: usize,
    /// how often the schemes are applied, microseconds
    pub apply_interval_us: u64,
    /// the quota: at most this many bytes each reset interval (ms)
    pub quota_bytes: u64,
    pub quota_reset_ms: u64,
    /// the priority weights of access frequency and age
    pub weight_nr_accesses: u32,
    pub weight_age: u32,
    /// the goals the quotas are tuned toward, in basis points of the fast tier: used (promotion)
    /// and free (demotion)
    pub fast_used_bp: u64,
    pub fast_free_bp: u64,
    /// every interval above times this (strata bench tiering's --time-scale)
    pub time_scale: f64,
    /// the seed of the random sampling and splitting
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sample_us: 5_000,
            aggr_us: 100_000,
            min_nr_regions: 10,
            max_nr_regions: 1_000,
            apply_interval_us: 1_000_000,
            quota_bytes: 200 << 20,
            quota_reset_ms: 1_000,
            weight_nr_accesses: 100,
            weight_age: 100,
            fast_used_bp: 9_970,
            fast_free_bp: 50,
            time_scale: 1.0,
            seed: 1,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if self.sample_us == 0 || self.aggr_us < self.sample_us {
            return Err(format!(
                "sample_us must be positive and at most aggr_us ({} / {})",
                self.sample_us, self.aggr_us
            ));
        }
        if self.min_nr_regions < 3 || self.max_nr_regions < self.min_nr_regions {
            return Err("min_nr_regions must be at least 3 and at most max_nr_regions".into());
        }
        if self.apply_interval_us == 0 || self.quota_reset_ms == 0 {
            return Err("apply_interval_us and quota_reset_ms must be positive".into());
        }
        if self.fast_used_bp == 0 || self.fast_used_bp > 10_000 || self.fast_free_bp == 0 || self.fast_free_bp > 10_000
        {
            return Err("fast_used_bp and fast_free_bp must be in 1..=10000".into());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err(format!("time_scale must be positive, not {}", self.time_scale));
        }
        Ok(())
    }

    /// An interval in simulated nanoseconds, scaled.
    fn ns(&self, us: u64) -> u64 {
        ((us as f64) * 1e3 * self.time_scale).max(1.0) as u64
    }

    /// Checks of a region per aggregation (`damon_max_nr_accesses`).
    fn max_nr_accesses(&self) -> u32 {
        (self.aggr_us / self.sample_us).max(1) as u32
    }
}

/// A monitoring region of one process: [start, end), page aligned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Region {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    pub nr_accesses: u32,
    pub last_nr_accesses: u32,
    pub age: u32,
}

impl Region {
    fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// One DAMOS scheme's quota (`struct damos_quota`).
#[derive(Clone, Debug, Default, PartialEq)]
struct Quota {
    /// the effective quota of this charge window, bytes, and its feedback input
    esz: u64,
    esz_bp: u64,
    charged: u64,
    /// the start of the charge window (None: none yet)
    charged_from: Option<u64>,
}

/// `damon_feed_loop_next_input`: the next input toward a score of 10,000, assuming input and
/// score proportional; never below 10,000 (so it can grow again).
pub fn feed_loop_next_input(last: u64, score: u64) -> u64 {
    const GOAL: u64 = 10_000;
    const MIN_INPUT: u64 = 10_000;
    if score == GOAL {
        return last;
    }
    if score >= GOAL * 2 {
        return MIN_INPUT;
    }
    let diff = score.abs_diff(GOAL);
    let compensation = if last < u64::MAX / diff { last * diff / GOAL } else { last / GOAL * diff };
    if score > GOAL {
        last.saturating_sub(compensation).max(MIN_INPUT)
    } else {
        last.saturating_add(compensation)
    }
}

/// `damon_hot_score` (0..=99): access frequency and age in log2 seconds, weighted; an unaccessed
/// region's age counts toward coldness.
pub fn hot_score(cfg: &Config, r: &Region) -> u32 {
    const MAX_SUBSCORE: i64 = 100;
    const MAX_AGE_IN_LOG: i64 = 32;
    const MAX_SCORE: i64 = 99;
    let freq = r.nr_accesses as i64 * MAX_SUBSCORE / cfg.max_nr_accesses() as i64;
    let mut age_sec = r.age as u64 * cfg.aggr_us / 1_000_000;
    let mut age_log = 0i64;
    while age_log < MAX_AGE_IN_LOG && age_sec > 0 {
        age_log += 1;
        age_sec >>= 1;
    }
    if freq == 0 {
        age_log = -age_log;
    }
    let age = (age_log + MAX_AGE_IN_LOG) * MAX_SUBSCORE / MAX_AGE_IN_LOG / 2;
    let (fw, aw) = (cfg.weight_nr_accesses as i64, cfg.weight_age as i64);
    let mut hot = fw * freq + aw * age;
    if fw + aw > 0 {
        hot /= fw + aw;
    }
    (hot * MAX_SCORE / MAX_SUBSCORE).clamp(0, MAX_SCORE) as u32
}

/// The two schemes of the recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// migrate_hot to the fast tier: regions with an access, young pages only
    Promote,
    /// migrate_cold from the fast tier: regions without, pages not young only
    Demote,
}

pub struct Damon {
    cfg: Config,
    regions: Vec<Region>,
    rng: u64,
    quotas: [Quota; 2],
    next_apply_ns: u64,
}

impl Damon {
    pub fn new(cfg: Config) -> Damon {
        let rng = cfg.seed | 1;
        Damon { cfg, regions: Vec::new(), rng, quotas: Default::default(), next_apply_ns: 0 }
    }

    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    fn random(&mut self, below: u64) -> u64 {
        // xorshift64*: deterministic, so a run repeats exactly
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % below.max(1)
    }

    /// Regions for processes seen for the first time (their span split evenly into
    /// min_nr_regions), and the edge regions of the others stretched to pages outside them.
    fn cover(&mut self, pages: &[crate::PageObs], page: u64) {
        let mut spans: Vec<(u32, u64, u64)> = Vec::new();
        for p in pages {
            match spans.last_mut() {
                Some(s) if s.0 == p.pid => {
                    s.1 = s.1.min(p.addr);
                    s.2 = s.2.max(p.addr + page);
                }
                _ => spans.push((p.pid, p.addr, p.addr + page)),
            }
        }
        for (pid, lo, hi) in spans {
            let first = self.regions.iter().position(|r| r.pid == pid);
            match first {
                Some(i) => {
                    let last = self.regions.iter().rposition(|r| r.pid == pid).expect("a first has a last");
                    self.regions[i].start = self.regions[i].start.min(lo);
                    self.regions[last].end = self.regions[last].end.max(hi);
                }
                None => {
                    let n = self.cfg.min_nr_regions as u64;
                    let pages_each = ((hi - lo) / page).div_ceil(n).max(1);
                    let mut at = lo;
                    while at < hi {
                        let end = (at + pages_each * page).min(hi);
                        self.regions.push(Region { pid, start: at, end, nr_accesses: 0, last_nr_accesses: 0, age: 0 });
                        at = end;
                    }
                }
            }
        }
        self.regions.sort_by_key(|r| (r.pid, r.start));
    }

    /// One aggregation's checks: each region's nr_accesses from the accessed bits of
    /// max_nr_accesses random pages of it.
    fn sample(&mut self, pages: &[crate::PageObs], page: u64) {
        let checks = self.cfg.max_nr_accesses();
        for i in 0..self.regions.len() {
            let r = self.regions[i];
            let npages = (r.size() / page).max(1);
            let mut n = 0;
            for _ in 0..checks {
                let addr = r.start + self.random(npages) * page;
                let hit =
                    pages.binary_search_by_key(&(r.pid, addr), |p| (p.pid, p.addr)).is_ok_and(|k| pages[k].accessed);
                n += hit as u32;
            }
            self.regions[i].nr_accesses = n;
        }
    }

    /// `kdamond_merge_regions`, with the age update of `damon_merge_regions_of`.
    fn merge(&mut self) {
        let max = self.cfg.max_nr_accesses();
        let mut thres = (max / 10).max(1);
        let total: u64 = self.regions.iter().map(Region::size).sum();
        let sz_limit = (total / self.cfg.min_nr_regions as u64).max(1);
        for r in &mut self.regions {
            if r.nr_accesses.abs_diff(r.last_nr_accesses) > thres {
                r.age = 0;
            } else {
                r.age = r.age.saturating_add(1);
            }
        }
        loop {
            let mut out: Vec<Region> = Vec::with_capacity(self.regions.len());
            for r in self.regions.drain(..) {
                match out.last_mut() {
                    Some(p)
                        if p.pid == r.pid
                            && p.end == r.start
                            && p.nr_accesses.abs_diff(r.nr_accesses) <= thres
                            && p.size() + r.size() <= sz_limit =>
                    {
                        let (a, b) = (p.size(), r.size());
                        p.nr_accesses = ((p.nr_accesses as u64 * a + r.nr_accesses as u64 * b) / (a + b)) as u32;
                        p.age = ((p.age as u64 * a + r.age as u64 * b) / (a + b)) as u32;
                        p.end = r.end;
                    }
                    _ => out.push(r),
                }
            }
            self.regions = out;
            if self.regions.len() <= self.cfg.max_nr_regions || thres >= max {
                break;
            }
            thres = (thres * 2).min(max);
        }
    }

    /// `damon_split_regions_of`: while there are fewer than half the maximum, each region of at
    /// least two pages splits in two at a random page between a tenth and nine tenths of it.
    fn split(&mut self, page: u64) {
        if self.regions.len() * 2 > self.cfg.max_nr_regions {
            return;
        }
        let old = std::mem::take(&mut self.regions);
        for r in old {
            let npages = r.size() / page;
            if npages < 2 {
                self.regions.push(r);
                continue;
            }
            let lo = (npages / 10).max(1);
            let hi = (npages * 9 / 10).max(lo + 1);
            let at = r.start + (lo + self.random(hi - lo)) * page;
            self.regions.push(Region { end: at, ..r });
            self.regions.push(Region { start: at, ..r });
        }
    }

    /// `damos_adjust_quota` at a new charge window: the feedback loop's next effective quota.
    fn tune(&mut self, s: Scheme, now: u64, obs: &Observations) {
        let reset = self.cfg.ns(self.cfg.quota_reset_ms * 1000);
        let q = &mut self.quotas[s as usize];
        if q.charged_from.is_some_and(|from| now < from + reset) {
            return;
        }
        q.charged_from = Some(now);
        q.charged = 0;
        let Some(fast) = obs.tiers.iter().find(|t| t.tier == 0) else { return };
        let cap = fast.capacity_bytes.max(1);
        let (current, target) = match s {
            Scheme::Promote => ((cap - fast.free_bytes.min(cap)) * 10_000 / cap, self.cfg.fast_used_bp),
            Scheme::Demote => (fast.free_bytes.min(cap) * 10_000 / cap, self.cfg.fast_free_bp),
        };
        q.esz_bp = feed_loop_next_input(q.esz_bp.max(10_000), current * 10_000 / target);
        q.esz = (q.esz_bp / 10_000).min(self.cfg.quota_bytes);
    }

    /// Apply one scheme: the matching regions above the quota's score, each up to what is left
    /// of the quota, as moves of their pages that pass the filter.
    fn apply(&mut self, s: Scheme, obs: &Observations, pages: &[crate::PageObs], out: &mut Vec<Action>) {
        let page = obs.page_bytes.max(1);
        let matches = |r: &Region| match s {
            Scheme::Promote => r.nr_accesses >= 1,
            Scheme::Demote => r.nr_accesses == 0,
        };
        let score = |r: &Region| {
            let h = hot_score(&self.cfg, r);
            match s {
                Scheme::Promote => h,
                Scheme::Demote => 99 - h,
            }
        };
        let q = &self.quotas[s as usize];
        if q.charged >= q.esz {
            return;
        }
        let left = q.esz - q.charged;
        // the score above which the matching regions fill the quota
        let mut histogram = [0u64; 100];
        for r in self.regions.iter().filter(|r| matches(r)) {
            histogram[score(r) as usize] += r.size();
        }
        let mut min_score = 99;
        let mut sum = 0;
        while min_score > 0 {
            sum += histogram[min_score];
            if sum >= left {
                break;
            }
            min_score -= 1;
        }
        let mut charged = 0u64;
        let mut order: Vec<&Region> =
            self.regions.iter().filter(|r| matches(r) && score(r) as usize >= min_score).collect();
        order.sort_by_key(|r| std::cmp::Reverse(score(r)));
        for r in order {
            if charged >= left {
                break;
            }
            let sz = r.size().min((left - charged) / page * page);
            if sz == 0 {
                break;
            }
            charged += sz;
            let (lo, hi) = (r.start, r.start + sz);
            let first = pages.partition_point(|p| (p.pid, p.addr) < (r.pid, lo));
            let (to, priority): (Tier, i64) = match s {
                Scheme::Promote => (0, score(r) as i64),
                Scheme::Demote => (1, score(r) as i64),
            };
            for p in pages[first..].iter().take_while(|p| p.pid == r.pid && p.addr < hi) {
                let wanted = match s {
                    Scheme::Promote => p.tier > 0 && p.accessed,
                    Scheme::Demote => p.tier == 0 && !p.accessed,
                };
                if wanted {
                    crate::push_page_move(out, r.pid, p.addr, page, to, priority);
                }
            }
        }
        self.quotas[s as usize].charged += charged;
    }
}

impl Policy for Damon {
    fn name(&self) -> &'static str {
        "damon"
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, ..Needs::default() }
    }

    fn round_ms(&self) -> Option<f64> {
        Some(self.cfg.aggr_us as f64 / 1e3 * self.cfg.time_scale)
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let page = obs.page_bytes.max(1);
        let sorted = crate::sorted_pages(&obs.pages);
        let pages: &[crate::PageObs] = &sorted;
        self.cover(pages, page);
        self.sample(pages, page);
        let mut out = Vec::new();
        if obs.now_ns >= self.next_apply_ns {
            self.next_apply_ns = obs.now_ns + self.cfg.ns(self.cfg.apply_interval_us);
            for s in [Scheme::Demote, Scheme::Promote] {
                self.tune(s, obs.now_ns, obs);
                self.apply(s, obs, pages, &mut out);
            }
        }
        self.merge();
        for r in &mut self.regions {
            r.last_nr_accesses = r.nr_accesses;
            r.nr_accesses = 0;
        }
        self.split(page);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PageObs, TierObs};

    const PAGE: u64 = 4096;

    fn obs(now_ns: u64, pages: Vec<PageObs>, fast_cap: u64, fast_free: u64) -> Observations {
        Observations {
            now_ns,
            page_bytes: PAGE,
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: fast_cap, free_bytes: fast_free },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
            ],
            pages,
            ..Default::default()
        }
    }

    fn page(i: u64, tier: Tier, accessed: bool) -> PageObs {
        PageObs { pid: 1, addr: 0x10000000 + i * PAGE, tier, node: tier, accessed, dirty: false }
    }

    #[test]
    fn the_feedback_loop_grows_the_quota_below_the_goal_and_shrinks_it_above() {
        assert_eq!(feed_loop_next_input(10_000, 5_000), 15_000);
        assert_eq!(feed_loop_next_input(10_000, 0), 20_000);
        assert_eq!(feed_loop_next_input(40_000, 10_000), 40_000);
        assert_eq!(feed_loop_next_input(40_000, 15_000), 20_000);
        assert_eq!(feed_loop_next_input(40_000, 20_000), 10_000);
        assert_eq!(feed_loop_next_input(12_000, 19_000), 10_000, "never below the minimum input");
    }

    #[test]
    fn the_hot_score_weighs_frequency_and_age_and_an_idle_regions_age_counts_as_cold() {
        let c = Config::default();
        let r = |nr, age| Region { pid: 1, start: 0, end: PAGE, nr_accesses: nr, last_nr_accesses: 0, age };
        // 20 of 20 checks and age 0: frequency 100, age subscore 50 -> 75 -> 74 of 99
        assert_eq!(hot_score(&c, &r(20, 0)), 74);
        assert_eq!(hot_score(&c, &r(0, 0)), 24);
        // an idle region 100 aggregations old (10 s, log 4) is colder than a fresh one
        assert!(hot_score(&c, &r(0, 100)) < hot_score(&c, &r(0, 0)));
        // an accessed one of that age hotter
        assert!(hot_score(&c, &r(10, 100)) > hot_score(&c, &r(10, 0)));
    }

    #[test]
    fn regions_cover_the_span_merge_when_alike_and_split_while_few() {
        let mut d = Damon::new(Config::default());
        let pages: Vec<PageObs> = (0..1000).map(|i| page(i, 1, i < 100)).collect();
        d.cover(&pages, PAGE);
        assert_eq!(d.regions().len(), 10);
        assert_eq!(d.regions()[0].start, pages[0].addr);
        assert_eq!(d.regions()[9].end, pages[999].addr + PAGE);
        d.sample(&pages, PAGE);
        assert_eq!(d.regions()[0].nr_accesses, 20, "every check of the accessed tenth finds an access");
        assert!(d.regions()[1..].iter().all(|r| r.nr_accesses == 0));
        d.merge();
        // the nine idle regions are alike, but merging is capped at a tenth of the span each
        assert_eq!(d.regions().len(), 10);
        let before = d.regions().len();
        d.split(PAGE);
        assert_eq!(d.regions().len(), 2 * before);
        let total: u64 = d.regions().iter().map(Region::size).sum();
        assert_eq!(total, 1000 * PAGE, "splits keep the span");
        // a region whose count changes a lot restarts its age
        let mut r = d.regions.clone();
        r[0].last_nr_accesses = 20;
        r[0].nr_accesses = 0;
        r[0].age = 7;
        d.regions = r;
        d.merge();
        assert_eq!(d.regions()[0].age, 0);
    }

    #[test]
    fn the_schemes_promote_young_pages_of_accessed_regions_and_demote_idle_ones_within_the_quota() {
        let c = Config { time_scale: 0.001, ..Config::default() };
        let mut d = Damon::new(c);
        // 100 slow pages read every round, 100 fast pages never
        let pages = |_: u64| -> Vec<PageObs> {
            (0..200).map(|i| if i < 100 { page(i, 1, true) } else { page(i, 0, false) }).collect()
        };
        // fast tier full: demotion's goal (0.5 % free) grows its quota from one byte a second;
        // promotion's (99.7 % used) is met, so its quota stays at the minimum
        let mut moved_down = 0;
        let mut moved_up = 0;
        for round in 0..200u64 {
            let acts = d.decide(&obs(round * 100_000, pages(round), 100 * PAGE, 0));
            for a in acts {
                if let Action::Move { len, to, .. } = a {
                    if to == 0 {
                        moved_up += len;
                    } else {
                        moved_down += len;
                    }
                }
            }
        }
        assert_eq!(moved_up, 0, "the fast tier is used beyond the promotion goal");
        assert!(moved_down > 0, "the demotion quota grew to pages");
        // once the fast tier has room, the accessed slow pages go up
        let mut up = 0;
        for round in 200..800u64 {
            for a in d.decide(&obs(round * 100_000, pages(round), 100 * PAGE, 50 * PAGE)) {
                if let Action::Move { addr, len, to: 0, .. } = a {
                    assert!(addr < 0x10000000 + 100 * PAGE, "only the accessed pages");
                    up += len;
                }
            }
        }
        assert!(up > 0);
    }

    #[test]
    fn the_quota_caps_what_each_window_applies() {
        // a quota of two pages a window, and room in the fast tier: the feedback loop would let
        // the promotion quota grow without end, the cap holds it at two pages
        let c = Config { time_scale: 0.001, quota_bytes: 2 * PAGE, ..Config::default() };
        let mut d = Damon::new(c);
        let pages: Vec<PageObs> = (0..400).map(|i| page(i, 1, true)).collect();
        let mut windows_that_moved = 0;
        for window in 0..60u64 {
            // one aggregation a window (apply and reset intervals are both 1 s x 0.001)
            let acts = d.decide(&obs(window * 1_000_000, pages.clone(), 1000 * PAGE, 900 * PAGE));
            let up: u64 = acts.iter().map(|a| if let Action::Move { len, to: 0, .. } = a { *len } else { 0 }).sum();
            assert!(up <= 2 * PAGE, "window {window}: {up} bytes");
            windows_that_moved += (up > 0) as u32;
        }
        assert!(windows_that_moved > 10, "the quota grew to whole pages: {windows_that_moved}");
    }

    #[test]
    fn a_run_repeats_exactly() {
        let run = || {
            let mut d = Damon::new(Config { time_scale: 0.001, ..Config::default() });
            let mut all = Vec::new();
            for round in 0..50u64 {
                let pages: Vec<PageObs> = (0..300).map(|i| page(i, (i % 2) as Tier, (i + round) % 7 == 0)).collect();
                all.extend(d.decide(&obs(round * 100_000, pages, 150 * PAGE, PAGE)));
            }
            (all, d.regions().to_vec())
        };
        assert_eq!(run(), run());
    }
}
