//! memtierd's heat policy (Intel's memtierd, `pkg/memtier/policy_heat.go`, `counters_heatmap.go`
//! and the idlepage tracker, `tracker_idlepage.go`), read from its source (no code copied).
//!
//! - **Tracker.** The address space is cut into regions of `pages_in_region` (256) pages. Every
//!   scan (`scan_interval_ms`, 5 s) counts, per region, the pages accessed since the last scan
//!   (the idle-page bits; at most `max_count_per_region`, 0 meaning the region's pages), and adds
//!   the count to the region's counter.
//! - **Heat.** Every policy interval (`interval_ms`, 10 s) the counters are read and reset: a
//!   region's new heat is its count over its pages, capped at `heat_max`, plus its old heat
//!   times `heat_retention` to the power of the seconds since its last update (also capped).
//! - **Classes.** A heat falls in class floor(`heat_classes` x heat / `heat_max`) (the last
//!   class holds heat_max itself).
//! - **Placement** (`startMovesFillFastFree`, used when node sizes are given). Regions are taken
//!   hottest first (ties by address); a region whose class maps to a tier (`hot_classes` to the
//!   fast tier, `cold_classes` to the slow one) and is not all there moves to it if the tier's
//!   limit (`fast_limit`: its capacity times this for the fast tier; the slow one unlimited)
//!   still has room for the whole region after what this interval already placed; classes in
//!   neither list stay where they are.
//! - **Mover.** At most `mover_bandwidth_mbps` (200 MB/s) of moves.
//!
//! The defaults are memtierd's README example of the heat policy with the idlepage tracker
//! (256 pages a region, 5 s scans, 10 s intervals, heat_max 0.01, retention 0.8, four classes,
//! class 0 to the slow node and class 3 to the fast one). Every period and the retention's
//! second are times `time_scale`. Here the scan is the engine's (a round is one tracker scan,
//! `round_ms`), its accessed bits standing for the idle-page bits.
use serde::Deserialize;

use crate::{Action, Needs, Observations, PageObs, Policy, Tier};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub interval_ms: u64,
    pub scan_interval_ms: u64,
    pub pages_in_region: u64,
    /// 0: the region's pages
    pub max_count_per_region: u64,
    pub heat_max: f64,
    pub heat_retention: f64,
    pub heat_classes: u32,
    /// classes that belong in the fast tier, and in the slow one
    pub hot_classes: Vec<u32>,
    pub cold_classes: Vec<u32>,
    /// the fast tier's NumaSize, as a share of its capacity
    pub fast_limit: f64,
    pub mover_bandwidth_mbps: f64,
    pub time_scale: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            interval_ms: 10_000,
            scan_interval_ms: 5_000,
            pages_in_region: 256,
            max_count_per_region: 0,
            heat_max: 0.01,
            heat_retention: 0.8,
            heat_classes: 4,
            hot_classes: vec![3],
            cold_classes: vec![0],
            fast_limit: 1.0,
            mover_bandwidth_mbps: 200.0,
            time_scale: 1.0,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if self.interval_ms == 0 || self.scan_interval_ms == 0 || self.pages_in_region == 0 {
            return Err("interval_ms, scan_interval_ms and pages_in_region must be positive".into());
        }
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if !positive(self.heat_max) || !(0.0..=1.0).contains(&self.heat_retention) || self.heat_classes == 0 {
            return Err("heat_max must be positive, heat_retention in [0, 1], heat_classes at least 1".into());
        }
        if let Some(c) = self.hot_classes.iter().chain(&self.cold_classes).find(|c| **c >= self.heat_classes) {
            return Err(format!("class {c} is not below heat_classes ({})", self.heat_classes));
        }
        if !(positive(self.fast_limit) && self.fast_limit <= 1.0 && positive(self.mover_bandwidth_mbps)) {
            return Err("fast_limit must be in (0, 1] and mover_bandwidth_mbps positive".into());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err(format!("time_scale must be positive, not {}", self.time_scale));
        }
        Ok(())
    }

    /// A region's class (`Heatmap.HeatClass`).
    pub fn class(&self, heat: f64) -> u32 {
        ((self.heat_classes as f64 * heat / self.heat_max) as u32).min(self.heat_classes - 1)
    }
}

/// A heat range: a tracker region of one process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeatRange {
    pub pid: u32,
    pub addr: u64,
    pub pages: u64,
    /// accessed pages counted since the last interval
    pub count: u64,
    pub heat: f64,
    /// when its heat was last updated, ns (None: never)
    pub updated_ns: Option<u64>,
}

pub struct Memtierd {
    cfg: Config,
    ranges: Vec<HeatRange>,
    next_interval_ns: Option<u64>,
}

impl Memtierd {
    pub fn new(cfg: Config) -> Memtierd {
        Memtierd { cfg, ranges: Vec::new(), next_interval_ns: None }
    }

    pub fn ranges(&self) -> &[HeatRange] {
        &self.ranges
    }

    /// The tracker's scan: each page's accessed bit counted into its region (regions made as
    /// pages appear, aligned to pages_in_region within the process).
    fn count(&mut self, pages: &[PageObs], page: u64) {
        let span = self.cfg.pages_in_region * page;
        let max =
            if self.cfg.max_count_per_region == 0 { self.cfg.pages_in_region } else { self.cfg.max_count_per_region };
        let mut scan: Vec<(u32, u64, u64)> = Vec::new(); // (pid, region start, accessed pages)
        for p in pages {
            let start = p.addr / span * span;
            match scan.last_mut() {
                Some(s) if s.0 == p.pid && s.1 == start => s.2 += p.accessed as u64,
                _ => scan.push((p.pid, start, p.accessed as u64)),
            }
        }
        for (pid, addr, accessed) in scan {
            let n = accessed.min(max);
            match self.ranges.binary_search_by_key(&(pid, addr), |r| (r.pid, r.addr)) {
                Ok(i) => self.ranges[i].count += n,
                Err(i) => self.ranges.insert(
                    i,
                    HeatRange { pid, addr, pages: self.cfg.pages_in_region, count: n, heat: 0.0, updated_ns: None },
                ),
            }
        }
    }

    /// `UpdateFromCounters`: new heat = count / pages (capped) + old heat x retention^seconds.
    fn update_heats(&mut self, now: u64) {
        let second_ns = 1e9 * self.cfg.time_scale;
        for r in &mut self.ranges {
            let fresh = (r.count as f64 / r.pages as f64).min(self.cfg.heat_max);
            let old = match r.updated_ns {
                Some(t) => r.heat * self.cfg.heat_retention.powf(now.saturating_sub(t) as f64 / second_ns),
                None => 0.0,
            };
            r.heat = (fresh + old).min(self.cfg.heat_max);
            r.updated_ns = Some(now);
            r.count = 0;
        }
    }

    /// `startMovesFillFastFree`: hottest first, each range to its class's tier if it is not all
    /// there and the tier's limit has room for it.
    fn place(&self, obs: &Observations, pages: &[PageObs], interval_ns: u64) -> Vec<Action> {
        let page = obs.page_bytes.max(1);
        let fast_cap = obs.tiers.iter().find(|t| t.tier == 0).map_or(0, |t| t.capacity_bytes);
        let limit = (fast_cap as f64 * self.cfg.fast_limit) as u64 / page;
        let mut fast_used = pages.iter().filter(|p| p.tier == 0).count() as u64;
        let mut budget =
            (self.cfg.mover_bandwidth_mbps * 1e6 * interval_ns as f64 / (1e9 * self.cfg.time_scale)) as u64;
        let mut order: Vec<&HeatRange> = self.ranges.iter().collect();
        order.sort_by(|a, b| b.heat.total_cmp(&a.heat).then((a.pid, a.addr).cmp(&(b.pid, b.addr))));
        let mut out = Vec::new();
        for r in order {
            let class = self.cfg.class(r.heat);
            let to: Tier = if self.cfg.hot_classes.contains(&class) {
                0
            } else if self.cfg.cold_classes.contains(&class) {
                1
            } else {
                continue;
            };
            let lo = pages.partition_point(|p| (p.pid, p.addr) < (r.pid, r.addr));
            let mine = &pages[lo..];
            let mine = &mine[..mine.partition_point(|p| p.pid == r.pid && p.addr < r.addr + r.pages * page)];
            let away: Vec<&PageObs> = mine.iter().filter(|p| (p.tier == 0) != (to == 0)).collect();
            if away.is_empty() {
                continue; // already on a good node
            }
            let n = away.len() as u64;
            if to == 0 && fast_used + n > limit {
                continue; // not enough quota on the destination
            }
            let bytes = n * page;
            if bytes > budget {
                break;
            }
            budget -= bytes;
            if to == 0 {
                fast_used += n;
            } else {
                fast_used -= n;
            }
            for p in away {
                crate::push_page_move(&mut out, r.pid, p.addr, page, to, 0);
            }
        }
        out
    }
}

impl Policy for Memtierd {
    fn name(&self) -> &'static str {
        "memtierd"
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, ..Needs::default() }
    }

    fn round_ms(&self) -> Option<f64> {
        Some(self.cfg.scan_interval_ms as f64 * self.cfg.time_scale)
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let page = obs.page_bytes.max(1);
        let sorted = crate::sorted_pages(&obs.pages);
        let pages: &[PageObs] = &sorted;
        self.count(pages, page);
        let interval = (self.cfg.interval_ms as f64 * 1e6 * self.cfg.time_scale) as u64;
        let next = *self.next_interval_ns.get_or_insert(obs.now_ns + interval);
        if obs.now_ns < next {
            return Vec::new();
        }
        self.next_interval_ns = Some(obs.now_ns + interval);
        self.update_heats(obs.now_ns);
        self.place(obs, pages, interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TierObs;

    const PAGE: u64 = 4096;

    fn page(i: u64, tier: Tier, accessed: bool) -> PageObs {
        PageObs { pid: 1, addr: i * PAGE, tier, node: tier, accessed, dirty: false }
    }

    fn obs(now_ns: u64, pages: Vec<PageObs>, fast_pages: u64) -> Observations {
        Observations {
            now_ns,
            page_bytes: PAGE,
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: fast_pages * PAGE, free_bytes: 0 },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
            ],
            pages,
            ..Default::default()
        }
    }

    #[test]
    fn heat_is_accessed_pages_per_page_capped_and_decays_by_the_retention_per_second() {
        let mut m = Memtierd::new(Config { heat_max: 1.0, ..Config::default() });
        let pages: Vec<PageObs> = (0..256).map(|i| page(i, 0, i < 64)).collect();
        m.count(&pages, PAGE);
        m.count(&pages, PAGE); // two scans in the interval
        m.update_heats(0);
        assert_eq!(m.ranges()[0].heat, 0.5);
        // idle for 2 s: 0.5 x 0.8^2
        let idle: Vec<PageObs> = (0..256).map(|i| page(i, 0, false)).collect();
        m.count(&idle, PAGE);
        m.update_heats(2_000_000_000);
        assert!((m.ranges()[0].heat - 0.32).abs() < 1e-12, "{}", m.ranges()[0].heat);
    }

    #[test]
    fn classes_divide_zero_to_heat_max_and_the_last_holds_the_max() {
        let c = Config::default();
        assert_eq!(c.class(0.0), 0);
        assert_eq!(c.class(0.0049), 1);
        assert_eq!(c.class(0.0075), 3);
        assert_eq!(c.class(0.01), 3);
    }

    #[test]
    fn hot_ranges_go_fast_within_the_limit_hottest_first_and_cold_ones_slow() {
        let cfg = Config { time_scale: 0.001, ..Config::default() };
        let mut m = Memtierd::new(cfg);
        // region 0 (pages 0..256) hot on the slow tier; region 1 touched once (class 1) on the
        // slow tier; region 2 idle on the fast tier; region 3 hot on the slow tier too
        let pages = |round: u64| -> Vec<PageObs> {
            (0..1024)
                .map(|i| match i / 256 {
                    0 => page(i, 1, true),
                    1 => page(i, 1, round == 0 && i == 256),
                    2 => page(i, 0, false),
                    _ => page(i, 1, i % 256 < 10),
                })
                .collect()
        };
        let mut acts = Vec::new();
        for round in 0..3u64 {
            acts = m.decide(&obs(round * 5_000_000, pages(round), 600));
        }
        assert!(m.ranges().iter().all(|r| r.updated_ns == Some(10_000_000)), "one interval of 10 s x 0.001");
        assert_eq!(m.cfg.class(m.ranges()[1].heat), 1);
        let moved = |to: Tier, lo: u64, hi: u64| {
            acts.iter().any(|a| matches!(a, Action::Move { addr, to: t, .. } if *t == to && *addr >= lo * PAGE && *addr < hi * PAGE))
        };
        assert!(moved(0, 0, 256), "the hottest region goes fast: {acts:?}");
        assert!(moved(1, 512, 768), "the idle fast region goes slow");
        assert!(!moved(0, 256, 512) && !moved(1, 256, 512), "a middle class stays");
        // the fast tier (600 pages) holds the idle region's 256 and region 0's 256: region 3's
        // would not fit until the idle region has left, which is decided after it (it is
        // colder): it waits for the next interval
        assert!(!moved(0, 768, 1024), "no room for the second hot region in this interval: {acts:?}");
    }
}
