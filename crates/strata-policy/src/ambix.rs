//! Ambix (seed 001 §3.2): page scores from page-table scans, a partition threshold from their
//! ranking, and delayed, capped migration.
//!
//! Every scan of a page updates its score: +2 if it was accessed since its last scan, +1 more if
//! it was also written, -1 if it was not accessed; scores stay within [0, `score_max`]. At the
//! end of every full scan the pages are ranked by score and the ranking is cut where the pages
//! fill the fast tier less the 5 % kept free: the score there is the partition threshold.
//! Pages above it are hot and belong in the fast tier, pages below it are cold. Pages tied at
//! the threshold are split by the cut itself: those already in the fast tier keep their place
//! first (no churn), then by address. A page seen for the first time starts "warm", at the
//! threshold, and may move only once it has been scanned `min_scans` (10) times since it was
//! placed; a move places it anew (the paper counts from first placement only: counting from
//! every placement keeps a page that one access lifted above the cut from going up and down
//! again within a few rounds, the churn the paper's "delayed migration" is meant to avoid). Each round,
//! hot pages of the slow tier are promoted, hottest first, into the fast tier's room above its
//! reserve; when there is no room, each promotion demotes a page that is not hot first; and
//! when the fast tier has less than its reserve free, the coldest pages go down until it has.
//! Moves per round are capped (`max_migrate_bytes`, 500 MB). `swap_margin` (0, the paper's
//! rule) asks a slow page to score that much more than the fast page whose place it takes.
//!
//! The scan size (40 GB a round) and period (1 s) of the paper belong to the tracker that feeds
//! the policy (the engine's configuration), not to the policy.
use std::collections::HashSet;

use serde::Deserialize;

use crate::{Action, Needs, Observations, Policy, Tier, TierObs};

/// Ambix's parameters; the defaults are the paper's.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// added to a page's score when it was accessed since its last scan
    pub score_accessed: i32,
    /// added on top when it was also written
    pub score_dirty: i32,
    /// added when it was not accessed (negative)
    pub score_idle: i32,
    /// the highest score (the paper gives none: 20 lets a page that turns cold fall below the
    /// threshold within about 20 scans)
    pub score_max: i32,
    /// scans of a page before it may move
    pub min_scans: u32,
    /// share of the fast tier kept free
    pub fast_free_fraction: f64,
    /// bytes moved per round, promotions and demotions together
    pub max_migrate_bytes: u64,
    /// a hot page below the fast tier takes the place of a fast page that is not hot only when
    /// it scores at least this much higher (0: the paper's rule, any score at least the other's)
    pub swap_margin: i32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            score_accessed: 2,
            score_dirty: 1,
            score_idle: -1,
            score_max: 20,
            min_scans: 10,
            fast_free_fraction: 0.05,
            max_migrate_bytes: 500 << 20,
            swap_margin: 0,
        }
    }
}

impl Config {
    /// The values that make sense, or which key does not.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..1.0).contains(&self.fast_free_fraction) {
            return Err(format!("fast_free_fraction must be in [0, 1), not {}", self.fast_free_fraction));
        }
        if self.score_max < 1 {
            return Err(format!("score_max must be at least 1, not {}", self.score_max));
        }
        if self.swap_margin < 0 {
            return Err(format!("swap_margin must be at least 0, not {}", self.swap_margin));
        }
        if self.score_accessed < 0 || self.score_dirty < 0 || self.score_idle > 0 {
            return Err("score_accessed and score_dirty must be >= 0, score_idle <= 0".into());
        }
        Ok(())
    }
}

/// What Ambix keeps per page.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PageState {
    score: i32,
    scans: u32,
    tier: Tier,
    /// the full-scan pass that last saw it (pages not seen in a whole pass are gone)
    pass: u64,
    /// within the cut of the last full scan's ranking
    hot: bool,
}

/// A page's key: process and address. Pages are kept sorted by it, so every decision is
/// deterministic and a round's scan (in address order) merges in one pass.
type Key = (u32, u64);

pub struct Ambix {
    cfg: Config,
    pages: Vec<(Key, PageState)>,
    /// scores above it are hot
    threshold: i32,
    pass: u64,
    /// the bytes of the fast tier kept free, when a combined policy sets them (else
    /// `fast_free_fraction` of it)
    reserve_bytes: Option<u64>,
    /// processes whose pages stay where they are this round (`set_held`)
    held: HashSet<u32>,
}

impl Ambix {
    pub fn new(cfg: Config) -> Ambix {
        // before the first full scan there is no ranking: new pages start in the middle
        let threshold = cfg.score_max / 2;
        Ambix { cfg, pages: Vec::new(), threshold, pass: 0, reserve_bytes: None, held: HashSet::new() }
    }

    /// Keep these bytes of the fast tier free instead of `fast_free_fraction` of it: a
    /// combined policy gives its pages part of the fast tier (a smaller capacity in the
    /// observations) and one headroom for the whole tier.
    pub fn set_reserve(&mut self, bytes: Option<u64>) {
        self.reserve_bytes = bytes;
    }

    /// Hold these processes' pages where they are: a combined policy's rule says they must not
    /// move now. Their scores go on; they are neither promoted nor demoted (nor placed anew).
    pub fn set_held(&mut self, pids: HashSet<u32>) {
        self.held = pids;
    }

    fn reserve(&self, fast: &TierObs) -> u64 {
        self.reserve_bytes.unwrap_or((fast.capacity_bytes as f64 * self.cfg.fast_free_fraction) as u64)
    }

    /// The partition threshold in force.
    pub fn threshold(&self) -> i32 {
        self.threshold
    }

    /// A page's score, if it is known.
    pub fn score(&self, pid: u32, addr: u64) -> Option<i32> {
        self.pages.binary_search_by_key(&(pid, addr), |e| e.0).ok().map(|i| self.pages[i].1.score)
    }

    /// Merge a round's scan into the pages (both in key order): known pages are updated in
    /// place, new ones start warm and are merged in, pages the scan did not reach are left as
    /// they are.
    fn update_scores(&mut self, obs: &Observations) {
        let c = &self.cfg;
        let mut sorted: Vec<&crate::PageObs> = Vec::new();
        let seen: &mut dyn Iterator<Item = &crate::PageObs> = if obs.pages.is_sorted_by_key(|p| (p.pid, p.addr)) {
            &mut obs.pages.iter()
        } else {
            sorted.extend(obs.pages.iter());
            sorted.sort_by_key(|p| (p.pid, p.addr));
            &mut sorted.iter().copied()
        };
        let score = |st: &mut PageState, p: &crate::PageObs, pass: u64| {
            let delta =
                if p.accessed { c.score_accessed + if p.dirty { c.score_dirty } else { 0 } } else { c.score_idle };
            st.score = (st.score + delta).clamp(0, c.score_max);
            st.scans = st.scans.saturating_add(1);
            st.tier = p.tier;
            st.pass = pass;
        };
        let mut fresh: Vec<(Key, PageState)> = Vec::new();
        let mut i = 0;
        for p in seen {
            let key = (p.pid, p.addr);
            while i < self.pages.len() && self.pages[i].0 < key {
                i += 1;
            }
            if self.pages.get(i).is_some_and(|e| e.0 == key) {
                score(&mut self.pages[i].1, p, self.pass);
            } else {
                // warm: neither hot nor cold
                let mut st =
                    PageState { score: self.threshold.max(0), scans: 0, tier: p.tier, pass: self.pass, hot: false };
                score(&mut st, p, self.pass);
                fresh.push((key, st));
            }
        }
        if !fresh.is_empty() {
            let old = std::mem::take(&mut self.pages);
            let mut merged = Vec::with_capacity(old.len() + fresh.len());
            let (mut a, mut b) = (old.into_iter().peekable(), fresh.into_iter().peekable());
            while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
                merged.extend(if x.0 < y.0 { a.next() } else { b.next() });
            }
            merged.extend(a);
            merged.extend(b);
            self.pages = merged;
        }
    }

    /// End of a full scan: forget pages it did not see, rank the rest, and cut the ranking where
    /// the pages fill the fast tier less its reserve: what is above the cut is hot.
    fn recompute_threshold(&mut self, obs: &Observations) {
        let pass = self.pass;
        self.pages.retain(|(_, s)| s.pass == pass);
        self.pass += 1;
        let Some(fast) = obs.tiers.iter().find(|t| t.tier == 0) else { return };
        let usable = fast.capacity_bytes.saturating_sub(self.reserve(fast)) / obs.page_bytes.max(1);
        // the ranking as a histogram of scores (they lie in [0, score_max]): hottest first;
        // among equals, pages already fast first (they keep their place), then by address
        let mut count = vec![0u64; self.cfg.score_max as usize + 1];
        for (_, s) in &self.pages {
            count[s.score as usize] += 1;
        }
        let mut above = 0u64; // pages scoring above the score being looked at
        let mut cut = None;
        for score in (0..count.len()).rev() {
            if above + count[score] > usable {
                cut = Some((score as i32, usable - above)); // the cut falls among these ties
                break;
            }
            above += count[score];
        }
        let Some((threshold, mut tie_slots)) = cut else {
            self.threshold = -1; // everything fits: every page is hot
            self.pages.iter_mut().for_each(|(_, s)| s.hot = true);
            return;
        };
        self.threshold = threshold;
        for fast_first in [true, false] {
            for (_, s) in self.pages.iter_mut().filter(|(_, s)| s.score == threshold && (s.tier == 0) == fast_first) {
                s.hot = tie_slots > 0;
                tie_slots = tie_slots.saturating_sub(1);
            }
        }
        self.pages.iter_mut().filter(|(_, s)| s.score != threshold).for_each(|(_, s)| s.hot = s.score > threshold);
    }

    fn moves(&mut self, obs: &Observations) -> Vec<Action> {
        let page = obs.page_bytes.max(1);
        let Some(fast) = obs.tiers.iter().find(|t| t.tier == 0) else { return Vec::new() };
        let slow: Tier = obs.tiers.iter().map(|t| t.tier).max().unwrap_or(1).max(1);
        let reserve = self.reserve(fast) as i64;
        // room: what is free, but never more than the tier's capacity less what these pages
        // hold of it (the same on a machine of its own; less where the engine gives this
        // policy a share of the fast tier that its pages overfill)
        let own = self.pages.iter().filter(|(_, s)| s.tier == 0).count() as i64 * page as i64;
        let mut room = (fast.free_bytes as i64).min(fast.capacity_bytes as i64 - own) - reserve;
        let mut budget = self.cfg.max_migrate_bytes as i64;
        let min_scans = self.cfg.min_scans;
        let held = &self.held;
        let eligible = |k: &Key, s: &PageState| s.scans >= min_scans && !held.contains(&k.0);
        // hot pages below the fast tier, hottest first; pages in it that are not hot, coldest
        // first
        let mut up: Vec<(Key, i32)> = self
            .pages
            .iter()
            .filter(|(k, s)| s.tier != 0 && eligible(k, s) && s.hot)
            .map(|(k, s)| (*k, s.score))
            .collect();
        up.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut down: Vec<(Key, i32)> = self
            .pages
            .iter()
            .filter(|(k, s)| s.tier == 0 && eligible(k, s) && !s.hot)
            .map(|(k, s)| (*k, s.score))
            .collect();
        down.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut down = down.into_iter().peekable();
        let mut moved: Vec<(Key, Tier, i32)> = Vec::new();
        // the reserve first
        while room < 0 && budget >= page as i64 {
            let Some((k, score)) = down.next() else { break };
            moved.push((k, slow, score));
            room += page as i64;
            budget -= page as i64;
        }
        for (k, score) in up {
            if room < page as i64 {
                // make room with a page that is not hot, if there is one
                match down.peek() {
                    Some(&(dk, dscore)) if dscore + self.cfg.swap_margin <= score && budget >= 2 * page as i64 => {
                        down.next();
                        moved.push((dk, slow, dscore));
                        room += page as i64;
                        budget -= page as i64;
                    }
                    _ => break,
                }
            }
            if budget < page as i64 {
                break;
            }
            moved.push((k, 0, score));
            room -= page as i64;
            budget -= page as i64;
        }
        for (k, to, _) in &moved {
            if let Ok(i) = self.pages.binary_search_by_key(k, |e| e.0) {
                let s = &mut self.pages[i].1;
                s.tier = *to; // as asked; the next scan says where it really is
                s.scans = 0; // placed anew: it must prove itself again before moving back
            }
        }
        coalesce(moved, page)
    }
}

/// Moves of neighbouring pages of one process to the same tier, as one range each (in address
/// order), with the highest score of the range as its priority.
fn coalesce(mut moved: Vec<(Key, Tier, i32)>, page: u64) -> Vec<Action> {
    moved.sort_by_key(|((pid, addr), to, _)| (*to, *pid, *addr));
    let mut out: Vec<Action> = Vec::new();
    for ((pid, addr), to, score) in moved {
        crate::push_page_move(&mut out, pid, addr, page, to, score as i64);
    }
    out
}

impl Policy for Ambix {
    fn name(&self) -> &'static str {
        "ambix"
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        self.update_scores(obs);
        if obs.scan_complete {
            self.recompute_threshold(obs);
        }
        self.moves(obs)
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, ..Needs::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PageObs, TierObs};

    const PAGE: u64 = 4096;

    /// A machine of `fast` and `slow` pages; `pages` says for each page its tier and whether it
    /// is accessed (and written) every round.
    struct World {
        fast_pages: u64,
        slow_pages: u64,
        /// (tier, accessed, dirty) per page, page i at address i * PAGE
        pages: Vec<(Tier, bool, bool)>,
    }

    impl World {
        fn obs(&self) -> Observations {
            let used = |t: Tier| self.pages.iter().filter(|p| p.0 == t).count() as u64;
            Observations {
                now_ns: 0,
                page_bytes: PAGE,
                tiers: vec![
                    TierObs {
                        tier: 0,
                        capacity_bytes: self.fast_pages * PAGE,
                        free_bytes: (self.fast_pages - used(0)) * PAGE,
                    },
                    TierObs {
                        tier: 1,
                        capacity_bytes: self.slow_pages * PAGE,
                        free_bytes: (self.slow_pages - used(1)) * PAGE,
                    },
                ],
                pages: self
                    .pages
                    .iter()
                    .enumerate()
                    .map(|(i, &(tier, accessed, dirty))| PageObs {
                        pid: 1,
                        addr: i as u64 * PAGE,
                        tier,
                        node: tier,
                        accessed,
                        dirty,
                    })
                    .collect(),
                scan_complete: true,
                ..Default::default()
            }
        }

        /// A round: the policy decides, the moves happen; the pages moved.
        fn round(&mut self, p: &mut Ambix) -> u64 {
            let actions = p.decide(&self.obs());
            self.apply(actions)
        }

        fn apply(&mut self, actions: Vec<Action>) -> u64 {
            let mut moved = 0;
            for a in actions {
                let Action::Move { addr, len, to, .. } = a else { panic!("only moves") };
                for i in addr / PAGE..(addr + len) / PAGE {
                    self.pages[i as usize].0 = to;
                    moved += 1;
                }
            }
            moved
        }

        fn in_fast(&self, range: std::ops::Range<usize>) -> usize {
            self.pages[range].iter().filter(|p| p.0 == 0).count()
        }
    }

    /// 20 fast and 40 slow pages of equal heat (each read in a round with odds 1 in 4, by a
    /// fixed generator), but for page 59, slow and read every round; a fast tier of 20 pages.
    /// The pages moved in 80 rounds, and whether page 59 ended fast.
    fn equal_heat(swap_margin: i32) -> (u64, bool) {
        let mut pages = vec![(0, false, false); 20];
        pages.extend(vec![(1, false, false); 40]);
        let mut w = World { fast_pages: 20, slow_pages: 100, pages };
        let mut p = Ambix::new(Config { min_scans: 3, swap_margin, ..Config::default() });
        let (mut x, mut moved) = (12345u64, 0);
        for _ in 0..80 {
            for (i, page) in w.pages.iter_mut().enumerate() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                page.1 = i == 59 || (x >> 33) % 4 == 0;
            }
            moved += w.round(&mut p);
        }
        (moved, w.pages[59].0 == 0)
    }

    #[test]
    fn with_a_swap_margin_pages_of_equal_heat_stay_and_a_hotter_one_still_comes_up() {
        let (paper, hot_up) = equal_heat(0);
        assert!(hot_up, "the hot page came up");
        let (margin, hot_up) = equal_heat(6);
        assert!(hot_up, "the hot page came up with the margin too");
        assert!(margin * 2 <= paper, "pages of equal heat traded places: {margin} moves against {paper}");
    }

    #[test]
    fn no_page_moves_before_it_has_been_scanned_ten_times() {
        // hot pages in the slow tier, an empty fast tier
        let mut w = World { fast_pages: 100, slow_pages: 100, pages: vec![(1, true, false); 20] };
        let mut p = Ambix::new(Config::default());
        for round in 1..10 {
            assert_eq!(w.round(&mut p), 0, "round {round}: a page moved before 10 scans");
        }
        assert_eq!(w.round(&mut p), 20, "the 10th scan makes them eligible");
        assert_eq!(w.in_fast(0..20), 20);
    }

    #[test]
    fn a_held_process_s_pages_stay_and_move_once_released() {
        // process 1's 20 hot pages in the slow tier, an empty fast tier; process 1 held for
        // rounds 1-15: its pages are scanned but not moved, and not placed anew, so they go up
        // in the first round after the hold
        let mut w = World { fast_pages: 100, slow_pages: 100, pages: vec![(1, true, false); 20] };
        let mut p = Ambix::new(Config::default());
        for round in 1..=15 {
            p.set_held(HashSet::from([1]));
            assert_eq!(w.round(&mut p), 0, "round {round}: a held page moved");
        }
        p.set_held(HashSet::new());
        assert_eq!(w.round(&mut p), 20, "released, the pages go up at once");
        assert_eq!(w.in_fast(0..20), 20);
    }

    #[test]
    fn five_percent_of_the_fast_tier_stays_free() {
        // 200 hot pages below a fast tier of 100: at most 95 go up
        let mut w = World { fast_pages: 100, slow_pages: 300, pages: vec![(1, true, true); 200] };
        let mut p = Ambix::new(Config { min_scans: 1, ..Config::default() });
        for _ in 0..20 {
            w.round(&mut p);
        }
        assert_eq!(w.in_fast(0..200), 95);
        // and a fast tier that first touch filled to the brim with cold pages is drained to 95 %
        let mut w = World { fast_pages: 100, slow_pages: 300, pages: vec![(0, false, false); 100] };
        let mut p = Ambix::new(Config { min_scans: 1, ..Config::default() });
        for _ in 0..3 {
            w.round(&mut p);
        }
        assert_eq!(w.in_fast(0..100), 95);
    }

    #[test]
    fn a_share_of_the_fast_tier_that_its_pages_overfill_is_drained_to_the_share_less_its_reserve() {
        // the engine gives this policy 40 pages of a 100-page fast tier its 80 hot pages fill;
        // the tier itself is full (other processes' pages)
        let mut w = World { fast_pages: 100, slow_pages: 300, pages: vec![(0, true, false); 80] };
        let mut p = Ambix::new(Config { min_scans: 1, ..Config::default() });
        for _ in 0..5 {
            let mut obs = w.obs();
            obs.tiers[0] = TierObs { tier: 0, capacity_bytes: 40 * PAGE, free_bytes: 0 };
            let actions = p.decide(&obs);
            w.apply(actions);
        }
        assert_eq!(w.in_fast(0..80), 38);
    }

    #[test]
    fn migration_per_round_is_capped() {
        let mut w = World { fast_pages: 1000, slow_pages: 1000, pages: vec![(1, true, false); 500] };
        let cfg = Config { min_scans: 1, max_migrate_bytes: 10 * PAGE, ..Config::default() };
        let mut p = Ambix::new(cfg);
        for _ in 0..5 {
            assert!(w.round(&mut p) <= 10, "more than the cap moved in a round");
        }
        assert_eq!(w.in_fast(0..500), 50);
    }

    #[test]
    fn scores_stay_within_bounds() {
        let mut w = World { fast_pages: 10, slow_pages: 10, pages: vec![(0, true, true), (0, false, false)] };
        let mut p = Ambix::new(Config::default());
        for _ in 0..100 {
            w.round(&mut p);
        }
        assert_eq!(p.score(1, 0), Some(20));
        assert_eq!(p.score(1, PAGE), Some(0));
    }

    #[test]
    fn a_new_page_starts_warm_at_the_threshold() {
        // 30 cold and 30 hot pages, all slow; a fast tier of 20 (19 usable): the cut falls among
        // hot pages
        let mut pages = vec![(1, false, false); 30];
        pages.extend(vec![(1, true, false); 30]);
        let mut w = World { fast_pages: 20, slow_pages: 100, pages };
        let mut p = Ambix::new(Config { min_scans: 100, ..Config::default() });
        assert_eq!(p.threshold(), 10, "before a full scan: the middle of the score range");
        w.round(&mut p);
        assert_eq!(p.score(1, 0), Some(9), "started at 10, then idle");
        assert_eq!(p.score(1, 30 * PAGE), Some(12), "started at 10, then accessed");
        for _ in 0..20 {
            w.round(&mut p);
        }
        let t = p.threshold();
        assert_eq!(t, 20, "the 20th-hottest page is one of the hot ones, at the top score");
        w.pages.push((1, false, false));
        w.round(&mut p);
        assert_eq!(p.score(1, 60 * PAGE), Some(t - 1), "a new page starts at the threshold");
    }

    #[test]
    fn hot_pages_below_a_full_fast_tier_trade_places_with_cold_ones() {
        // first touch put 100 cold pages in the fast tier (full); 50 hot ones are below it
        let mut pages = vec![(0, false, false); 100];
        pages.extend(vec![(1, true, false); 50]);
        let mut w = World { fast_pages: 100, slow_pages: 200, pages };
        let mut p = Ambix::new(Config::default());
        let mut moved = 0;
        for _ in 0..15 {
            moved += w.round(&mut p);
        }
        assert_eq!(w.in_fast(100..150), 50, "every hot page is fast");
        assert_eq!(w.in_fast(0..100), 45, "cold pages made room for them and for the reserve");
        assert_eq!(moved, 105, "each page moved once: 55 down, 50 up");
        for _ in 0..10 {
            assert_eq!(w.round(&mut p), 0, "and then nothing bounces");
        }
    }

    #[test]
    fn a_page_that_moved_stays_for_ten_scans() {
        // page 0 is hot and goes up at its 10th scan; then it turns idle, and hot newcomers need
        // its place: it goes back down only once it has been scanned 10 times since it moved
        let mut w = World { fast_pages: 10, slow_pages: 100, pages: vec![(1, true, false)] };
        let mut p = Ambix::new(Config::default());
        let mut up = None;
        for round in 1..=10 {
            w.round(&mut p);
            if up.is_none() && w.pages[0].0 == 0 {
                up = Some(round);
            }
        }
        assert_eq!(up, Some(10));
        w.pages[0].1 = false;
        w.pages.extend(vec![(1, true, true); 10]);
        let mut down = None;
        for round in 1..40 {
            w.round(&mut p);
            if down.is_none() && w.pages[0].0 == 1 {
                down = Some(round);
            }
        }
        assert!(down.is_some_and(|r| r >= 10), "demoted again {down:?} scans after it moved");
    }

    #[test]
    fn neighbouring_pages_move_as_one_range() {
        let a = coalesce(vec![((1, 0), 0, 3), ((1, PAGE), 0, 5), ((1, 3 * PAGE), 0, 1), ((2, 2 * PAGE), 1, 0)], PAGE);
        assert_eq!(
            a,
            vec![
                Action::Move { pid: 1, addr: 0, len: 2 * PAGE, to: 0, priority: 5 },
                Action::Move { pid: 1, addr: 3 * PAGE, len: PAGE, to: 0, priority: 1 },
                Action::Move { pid: 2, addr: 2 * PAGE, len: PAGE, to: 1, priority: 0 },
            ]
        );
    }
}
