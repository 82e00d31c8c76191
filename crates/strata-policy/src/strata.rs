//! `strata`, the default: what no single paper does alone, from three of them, under one budget
//! of the fast tier: its capacity less one `headroom` (5 %, Ambix's reserve), shared by the three
//! parts so that no part overfills what another needs. While a process's footprint grew by more
//! than the headroom between the last two complete scans (a program building its data), nothing
//! of it moves (`build_hold`: both parts are told, and neither ranks nor moves it): it refills
//! the headroom faster than a round, so demoting to restore it only moves pages, and what the
//! build touched is the build's heat, not the run's (XSBench: docs/tiering.md#building). The
//! footprint is the process's present pages as the round's scan saw them, never the node's used
//! bytes: another user's allocations hold nothing. With `release_scans` N (0, off, by default),
//! after N complete scans in a row in which no process grew at all, the headroom is lent to the
//! parts (a budget of the whole tier) until one grows again: a steady program at a large fast
//! share gains what the headroom left slow, a phase change waits on demotions
//! (docs/tiering.md#release).
//!
//! 1. **Where objects are born** (hmalloc, [`crate::hmalloc`]): each context's new objects go to
//!    the tier its measured hotness earns in the knapsack, whose capacity is the budget, so most
//!    memory starts in the right place and the layers below have little to correct (M2T's point
//!    about semantic placement).
//! 2. **Known objects move as records** (MAT, [`crate::mat`], by accesses per byte): tracked
//!    objects are split into records of at most `record_max_fraction` (1/16) of the fast tier
//!    (MAT's 64 MiB records, scaled to the fast tier), ranked by their sampled LLC misses per
//!    byte and moved as units, with `hysteresis` (3): a record in the fast tier ranks as if
//!    four times as hot, so near-ties do not trade places every round, and `min_streak` (3): a record
//!    below the fast tier is promoted only once it has been sampled three rounds in a row (a
//!    burst, such as an array's first fill, is not heat), three more for each stay in the fast
//!    tier that did not pay (`unpaid_backoff`: a sweep's passing heat). Each record's residency is counted
//!    from the round's scan ([`mat::split_records`]). The records' fast set fills
//!    the budget first, whatever the pages hold: their samples say more than a page's bits, and
//!    a move of a whole record is one decision instead of hundreds. The arenas the program
//!    bound (hot, cold, a tier) are units of this part: all records of one arena are ranked
//!    together and move together, with the binding as a prior (`hints`, `hint_weight`;
//!    [`mat::Hints`]). An unbound arena has no hint to weigh and is paged (below): its heat
//!    lies within it, as in the key-value store's buckets, where moving arenas whole lost to
//!    paging them (docs/tiering.md). So is a bound arena larger than the budget, which can
//!    never be fast whole (`hinted` at 1:8: docs/tiering.md#two-channels), and a record under
//!    `record_min_kib` (1 MiB), such as a context's block of small objects (a 64 KiB span):
//!    few of its rounds are sampled, so it seldom meets `min_streak`, while its pages'
//!    accessed bits are seen every scan.
//! 3. **Everything else is paged** (Ambix, [`crate::ambix`]): pages outside tracked objects
//!    (small allocations, memory the allocator does not see) are scored from the accessed bits
//!    and moved with Ambix's rules (a ranking cut, `min_scans` scans between moves; 11, one more
//!    than Ambix's 10, so a moved page outlives the ping-pong window: docs/tiering.md#ping-pong) in what
//!    the records' fast set leaves of the budget, a slow page taking a fast one's place only when
//!    it scores `swap_margin` (6) more; when the records grow, the pages' part shrinks and Ambix
//!    demotes its coldest pages to make the room (the mover runs demotions first).
use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::{ambix, hmalloc, mat, object_at, Action, Directive, Needs, Observations, Policy, TierObs};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// tracked objects are ranked and moved in records of at most this share of the fast tier
    pub record_max_fraction: f64,
    /// an object in the fast tier ranks as if this much hotter
    pub hysteresis: f64,
    /// share of the fast tier kept free by all three parts together (Ambix's 5 %)
    pub headroom: f64,
    /// a record below the fast tier is promoted only once it has been sampled this many rounds
    /// in a row
    pub min_streak: u32,
    /// a record demoted after a stay in the fast tier that did not pay (sampled in fewer than
    /// half of its rounds there) needs `min_streak` more rounds in a row for each such stay
    pub unpaid_backoff: bool,
    /// the pages' part: scans of a page before it may move (11: Ambix's 10 is the ping-pong
    /// window's last period, so a page demoted at its first chance counts as ping-pong)
    pub min_scans: u32,
    /// the pages' part: a slow page takes a fast page's place only when it scores this much
    /// higher (Ambix's `swap_margin`; 6 here, so pages of near-equal heat do not trade places
    /// on one round's accessed bits)
    pub swap_margin: i32,
    /// the arenas the program bound: `prior` (each moves as one unit, its binding weighing its
    /// rank), `pin` (each stays where the program put it) or `ignore` (their pages are paged, as
    /// an unbound arena's always are)
    pub hints: mat::Hints,
    /// `prior`: a hot-bound arena ranks as if `1 + hint_weight` times hotter, a cold-bound one
    /// as if that many times colder
    pub hint_weight: f64,
    /// tracked objects shorter than this (KiB) are paged, not ranked as records
    pub record_min_kib: u64,
    /// no moves of a process whose footprint grew by more than the headroom between the last two
    /// complete scans (it is building: it refills the headroom within a round, and its heat is
    /// the build's)
    pub build_hold: bool,
    /// after this many complete scans in a row in which no managed process grew, the headroom
    /// is lent to the parts until one grows again; 0 (the default, Ambix's rule): never
    pub release_scans: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            record_max_fraction: 1.0 / 16.0,
            hysteresis: 3.0,
            headroom: 0.05,
            min_streak: 3,
            unpaid_backoff: true,
            min_scans: 11,
            swap_margin: 6,
            hints: mat::Hints::Prior,
            hint_weight: mat::Config::default().hint_weight,
            record_min_kib: 1024,
            build_hold: true,
            release_scans: 0,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if !(self.record_max_fraction > 0.0 && self.record_max_fraction <= 1.0) {
            return Err(format!("record_max_fraction must be in (0, 1], not {}", self.record_max_fraction));
        }
        if !(0.0..1.0).contains(&self.headroom) {
            return Err(format!("headroom must be in [0, 1), not {}", self.headroom));
        }
        let m = mat::Config { hysteresis: self.hysteresis, hint_weight: self.hint_weight, ..mat::Config::default() };
        m.check()
    }
}

pub struct Strata {
    cfg: Config,
    births: hmalloc::Hmalloc,
    objects: mat::Mat,
    pages: ambix::Ambix,
    /// each process's footprint: its present pages' bytes at the last complete scan, what the
    /// scan under way has counted so far, and the processes that grew by more than the headroom
    /// between the last two complete scans (their moves are held)
    footprint: HashMap<u32, u64>,
    counting: HashMap<u32, u64>,
    building: HashSet<u32>,
    /// complete scans in a row in which no process's footprint grew (a new process grows)
    steady_scans: u32,
}

impl Strata {
    pub fn new(cfg: Config) -> Strata {
        let m = mat::Config {
            priority: mat::Priority::Apb,
            hysteresis: cfg.hysteresis,
            min_streak: cfg.min_streak,
            unpaid_backoff: cfg.unpaid_backoff,
            hints: cfg.hints,
            hint_weight: cfg.hint_weight,
            // the records are split here, each with its own residency: MAT must not split them
            // again (a record above its 64 MiB, with a fast tier above 1 GiB, was cut into
            // pieces that shared the record's residency in proportion)
            split_mb: f64::MAX,
            ..mat::Config::default()
        };
        let pages =
            ambix::Config { min_scans: cfg.min_scans, swap_margin: cfg.swap_margin, ..ambix::Config::default() };
        Strata {
            cfg,
            births: hmalloc::Hmalloc::new(hmalloc::Config::default()),
            objects: mat::Mat::new(m, "strata"),
            pages: ambix::Ambix::new(pages),
            footprint: HashMap::new(),
            counting: HashMap::new(),
            building: HashSet::new(),
            steady_scans: 0,
        }
    }

    /// Count the round's pages to each process's footprint; at the end of a complete scan, the
    /// processes that grew by more than `reserve` since the one before are building (with
    /// `build_hold`), and the steady scans are counted again from 0 if any grew at all. The pages are the managed
    /// processes' own: what other processes allocate or free (the node's used bytes) cannot
    /// hold a managed one's moves, nor take its headroom back.
    fn count_footprints(&mut self, obs: &Observations, reserve: u64) {
        for run in obs.pages.chunk_by(|a, b| a.pid == b.pid) {
            *self.counting.entry(run[0].pid).or_default() += run.len() as u64 * obs.page_bytes;
        }
        if !obs.scan_complete {
            return;
        }
        let now = std::mem::take(&mut self.counting);
        let before = &self.footprint;
        let held =
            |(pid, &bytes): &(&u32, &u64)| bytes.saturating_sub(before.get(pid).copied().unwrap_or(bytes)) > reserve;
        self.building =
            if self.cfg.build_hold { now.iter().filter(held).map(|(&pid, _)| pid).collect() } else { HashSet::new() };
        let grew = now.iter().any(|(pid, &bytes)| bytes > before.get(pid).copied().unwrap_or(0));
        self.steady_scans = if grew { 0 } else { self.steady_scans.saturating_add(1) };
        self.footprint = now;
    }
}

impl Policy for Strata {
    fn name(&self) -> &'static str {
        "strata"
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let Some(fast) = obs.tiers.iter().find(|t| t.tier == 0).copied() else { return Vec::new() };
        let headroom = (fast.capacity_bytes as f64 * self.cfg.headroom) as u64;
        if self.cfg.build_hold || self.cfg.release_scans > 0 {
            self.count_footprints(obs, headroom);
        }
        // the headroom is kept for a program's new pages and the next promotions; with
        // `release_scans`, once none has grown for that many scans, the parts may fill it
        // (docs/tiering.md#release)
        let released = self.cfg.release_scans > 0 && self.steady_scans >= self.cfg.release_scans;
        let reserve = if released { 0 } else { headroom };
        let budget = fast.capacity_bytes - reserve;

        // births: the knapsack fills the budget
        self.births.set_capacity(Some(budget));
        let mut actions = self.births.decide(obs);

        // tracked objects, as records: their fast set fills the budget first
        let record =
            ((fast.capacity_bytes as f64 * self.cfg.record_max_fraction) as u64) & !(obs.page_bytes.max(4096) - 1);
        let mut records = mat::split_records(&obs.objects, record, obs);
        // the program's arenas: one it bound is a unit of the records' part (its binding pinned
        // or a prior); an unbound one has no hint to weigh, and is paged: its heat lies within
        // it (a bucket's chain head), which a unit moved whole cannot follow. An object under
        // record_min_kib (a block of a context's small objects) is paged too: its few samples
        // seldom make a streak, while its pages' bits are seen every scan.
        // A bound arena larger than the budget can never be fast whole: it is no unit, its
        // heat lies within it as an unbound one's does, and it is paged.
        let min = self.cfg.record_min_kib << 10;
        let mut arena_bytes: HashMap<(u32, u32), u64> = HashMap::new();
        for o in records.iter().filter(|o| o.arena != 0) {
            *arena_bytes.entry((o.pid, o.arena)).or_default() += o.len;
        }
        records.retain(|o| {
            if o.arena == 0 {
                o.len >= min
            } else {
                self.cfg.hints != mat::Hints::Ignore
                    && o.hint != Directive::Default
                    && arena_bytes[&(o.pid, o.arena)] <= budget
            }
        });
        let records_fast: u64 = records.iter().map(|o| o.fast_bytes).sum();
        // each part gets what it reads of the round, not a copy of all of it (the pages are
        // most of it: a page a 4 KiB of every managed process)
        let shared = Observations {
            now_ns: obs.now_ns,
            page_bytes: obs.page_bytes,
            tiers: obs.tiers.clone(),
            nodes: obs.nodes.clone(),
            scan_complete: obs.scan_complete,
            counters: obs.counters,
            ..Default::default()
        };
        let object_obs = Observations {
            objects: records,
            samples: obs.samples.clone(),
            contexts: obs.contexts.clone(),
            ..shared.clone()
        };
        // a building process's records and pages stay where they are: neither part ranks or
        // moves them (no stay begins or ends, no page is placed anew), their estimates go on
        self.objects.set_held(self.building.clone());
        self.pages.set_held(self.building.clone());
        self.objects.set_budget(Some(budget));
        actions.extend(self.objects.decide(&object_obs));
        let planned = self.objects.fast_set_bytes().max(records_fast);

        // the rest, paged, in what the records' fast set leaves: the tier as the pages see it
        // is the fast tier less the records' share, and its free bytes less what the records'
        // promotions this round will take
        let pages =
            obs.pages.iter().filter(|p| object_at(&object_obs.objects, p.pid, p.addr).is_none()).copied().collect();
        let tiers: Vec<TierObs> = obs
            .tiers
            .iter()
            .map(|t| match t.tier {
                0 => TierObs {
                    capacity_bytes: t.capacity_bytes.saturating_sub(planned),
                    free_bytes: t.free_bytes.saturating_sub(planned - records_fast),
                    ..*t
                },
                _ => *t,
            })
            .collect();
        let page_obs = Observations { pages, tiers, ..shared };
        self.pages.set_reserve(Some(reserve));
        actions.extend(self.pages.decide(&page_obs));
        actions
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, samples: true, objects: true, contexts: true, counters: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextObs, ObjectObs, PageObs, Sample};

    const PAGE: u64 = 4096;
    const MB: u64 = 1 << 20;

    /// An object of process 1, all of it resident in the slow tier.
    fn slow_object(addr: u64, len: u64, context: u32) -> ObjectObs {
        ObjectObs { pid: 1, addr, len, context, resident_bytes: len, ..Default::default() }
    }

    /// A fast tier of 32 MiB (records of 2 MiB); a small object (1 MiB at 0, context 1, slow,
    /// sampled most), a large one (40 MiB at 16 MiB, context 2, slow) whose first record is
    /// sampled, and a page outside any object, accessed every round.
    fn obs(round: u64) -> Observations {
        let objects = vec![slow_object(0, MB, 1), slow_object(16 * MB, 40 * MB, 2)];
        let mut pages = Vec::new();
        for k in 0..(MB / PAGE) {
            pages.push(PageObs { pid: 1, addr: k * PAGE, tier: 1, node: 1, accessed: true, dirty: false });
        }
        for k in 0..16 {
            pages.push(PageObs { pid: 1, addr: 16 * MB + k * PAGE, tier: 1, node: 1, accessed: true, dirty: false });
        }
        pages.push(PageObs { pid: 1, addr: 64 * MB, tier: 1, node: 1, accessed: true, dirty: true });
        let at =
            |addr: u64, n: usize| (0..n).map(move |_| Sample { pid: 1, addr, tier: 1, time_ns: round, store: false });
        let samples = at(4096, 50).chain(at(16 * MB + 4096, 30)).collect();
        let ctx = |index: u32, bytes: u64| ContextObs {
            pid: 1,
            index,
            id: index as u64,
            size_class: 0,
            allocs: 1000 * round,
            frees: 0,
            live_bytes: bytes,
            bytes_allocated: bytes,
            directive: Directive::Default,
        };
        Observations { contexts: vec![ctx(1, MB), ctx(2, 40 * MB)], ..round_obs(round, pages, objects, samples) }
    }

    /// A round of a machine with a fast tier of 32 MiB, empty, and a whole scan.
    fn round_obs(round: u64, pages: Vec<PageObs>, objects: Vec<ObjectObs>, samples: Vec<Sample>) -> Observations {
        Observations {
            now_ns: round,
            page_bytes: PAGE,
            tiers: vec![
                TierObs { tier: 0, capacity_bytes: 32 * MB, free_bytes: 32 * MB },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
            ],
            pages,
            scan_complete: true,
            objects,
            samples,
            ..Default::default()
        }
    }

    #[test]
    fn objects_move_as_records_the_rest_is_paged_and_contexts_get_directives() {
        let mut p = Strata::new(Config::default());
        let mut all = Vec::new();
        for round in 1..=12 {
            all.extend(p.decide(&obs(round)));
        }
        // (the synthetic machine never carries the moves out, so each round asks again)
        let mut moves: Vec<(u64, u64)> = all
            .iter()
            .filter_map(|a| match a {
                Action::Move { addr, len, to: 0, .. } => Some((*addr, *len)),
                _ => None,
            })
            .collect();
        moves.sort_unstable();
        moves.dedup();
        // the small object as one range, the large one as records of 2 MiB (32 MiB / 16)
        assert!(moves.contains(&(0, MB)), "{moves:?}");
        assert!(moves.contains(&(16 * MB, 2 * MB)), "the sampled record: {moves:?}");
        assert!(moves.iter().filter(|m| m.0 >= 16 * MB && m.0 < 56 * MB).all(|m| m.1 == 2 * MB), "{moves:?}");
        // the records fill at most the budget: the fast tier less the 5 % headroom
        let records: u64 = moves.iter().filter(|m| m.0 < 56 * MB).map(|m| m.1).sum();
        assert!(records <= 32 * MB * 19 / 20, "{records} bytes of records promoted");
        // the page outside any object, by Ambix after its ten scans
        assert!(moves.contains(&(64 * MB, PAGE)), "{moves:?}");
        let fast_context =
            all.iter().any(|a| matches!(a, Action::SetDirective { context: 1, directive: Directive::Fast, .. }));
        assert!(fast_context, "the sampled context starts fast: {all:?}");
    }

    #[test]
    fn a_small_record_is_paged() {
        // a 64 KiB object (a context's block of small objects), slow, every page accessed and
        // the object sampled every round: it is moved by the pages' part, after Ambix's ten
        // scans; ranked as a record it would move after `min_streak`'s three rounds
        let obs = |round: u64| {
            let pages =
                (0..16).map(|k| PageObs { pid: 1, addr: k * PAGE, tier: 1, node: 1, accessed: true, dirty: false });
            let samples = (0..20).map(|_| Sample { pid: 1, addr: 0, tier: 1, time_ns: round, store: false }).collect();
            round_obs(round, pages.collect(), vec![slow_object(0, 16 * PAGE, 1)], samples)
        };
        let first_move = |cfg: Config| {
            let mut p = Strata::new(cfg);
            (1..=12u64).find(|&round| p.decide(&obs(round)).iter().any(|a| matches!(a, Action::Move { to: 0, .. })))
        };
        let paged = first_move(Config::default());
        assert!(paged.is_some_and(|r| r >= 10), "{paged:?}");
        let ranked = first_move(Config { record_min_kib: 0, ..Config::default() });
        assert!(ranked.is_some_and(|r| r < 10), "{ranked:?}");
    }

    #[test]
    fn an_arena_the_program_bound_moves_as_a_unit_and_an_unbound_one_is_paged() {
        // two arenas of two 1 MiB records, all slow: arena 1 bound cold, arena 2 unbound; the
        // first 16 pages of each accessed and sampled every round
        let obs = |round: u64| {
            let rec = |mb: u64, arena: u32, hint: Directive| ObjectObs { arena, hint, ..slow_object(mb * MB, MB, 0) };
            let objects = vec![
                rec(0, 1, Directive::Slow),
                rec(1, 1, Directive::Slow),
                rec(8, 2, Directive::Default),
                rec(9, 2, Directive::Default),
            ];
            let mut pages = Vec::new();
            for base in [0, 8 * MB] {
                for k in 0..(2 * MB / PAGE) {
                    let accessed = k < 16;
                    pages.push(PageObs { pid: 1, addr: base + k * PAGE, tier: 1, node: 1, accessed, dirty: false });
                }
            }
            let samples = [0, 8 * MB]
                .iter()
                .flat_map(|&a| (0..20).map(move |_| Sample { pid: 1, addr: a, tier: 1, time_ns: round, store: false }))
                .collect();
            round_obs(round, pages, objects, samples)
        };
        // (round, address, length) of every promotion in 14 rounds
        let promotions = |obs: &dyn Fn(u64) -> Observations| -> Vec<(u64, u64, u64)> {
            let mut p = Strata::new(Config::default());
            (1..=14)
                .flat_map(|r| p.decide(&obs(r)).into_iter().map(move |a| (r, a)))
                .filter_map(|(r, a)| match a {
                    Action::Move { addr, len, to: 0, .. } => Some((r, addr, len)),
                    _ => None,
                })
                .collect()
        };
        let moves = promotions(&obs);
        let first = |lo: u64, hi: u64| moves.iter().find(|m| (lo..hi).contains(&m.1)).copied();
        // the bound arena: both records (the one never sampled too) in the round its samples
        // make a streak of three (`min_streak`)
        assert_eq!(first(0, 2 * MB), Some((3, 0, MB)), "{moves:?}");
        assert!(moves.contains(&(3, MB, MB)), "{moves:?}");
        // the unbound one by the pages' part, once its pages have had Ambix's ten scans
        assert!(first(8 * MB, 10 * MB).is_some_and(|m| m.0 >= 10), "{moves:?}");
        // with `ignore`, the bound arena is paged too
        let mut p = Strata::new(Config { hints: mat::Hints::Ignore, ..Config::default() });
        let whole =
            (1..=14).flat_map(|r| p.decide(&obs(r))).any(|a| matches!(a, Action::Move { len, .. } if len == MB));
        assert!(!whole, "no arena moves whole");
        // and so is a bound arena larger than the budget: a fast tier of 2 MiB, 1.9 MiB of it
        // the budget, against the arena's 2 MiB
        let small = |r: u64| {
            let mut o = obs(r);
            o.tiers[0] = TierObs { tier: 0, capacity_bytes: 2 * MB, free_bytes: 2 * MB };
            o
        };
        let moves = promotions(&small);
        // by the pages' part (after its scans, as ranges of pages), not as a unit in round 3
        assert!(moves.iter().any(|m| m.1 < 2 * MB), "{moves:?}");
        assert!(moves.iter().all(|m| m.0 >= 10), "{moves:?}");
    }

    /// The round in which the page outside any object (at 64 MiB) is first promoted.
    fn first_page_promotion(cfg: Config) -> Option<u64> {
        let mut p = Strata::new(cfg);
        (1..=20).find(|&round| {
            p.decide(&obs(round)).iter().any(|a| matches!(a, Action::Move { addr, to: 0, .. } if *addr == 64 * MB))
        })
    }

    #[test]
    fn the_pages_part_waits_min_scans_before_a_move() {
        let eleven = first_page_promotion(Config::default()).expect("promoted within 20 rounds");
        let three = first_page_promotion(Config { min_scans: 3, ..Config::default() }).expect("promoted");
        assert_eq!(eleven - three, 8, "eleven scans against three: rounds {eleven} and {three}");
    }

    /// A fast tier of 32 MiB (headroom 1.6 MiB) full of process 1's 32 MiB object, sampled
    /// evenly, and its 4 MiB object in the slow tier sampled eight times as densely; `grower`'s
    /// present pages grow 4 MiB a round for rounds 1-8 (a program still building: its new memory
    /// lands in the headroom as soon as there is one), then stay, and so do the node's used
    /// bytes whoever grows. The rounds in which something of process 1 is demoted, and promoted.
    fn rounds_moving(cfg: Config, grower: u32) -> (Vec<u64>, Vec<u64>) {
        let obs = |round: u64| {
            let fast = ObjectObs { fast_bytes: 32 * MB, ..slow_object(0, 32 * MB, 1) };
            let hot = slow_object(64 * MB, 4 * MB, 2);
            let at = |from: u64, to: u64, step: u64, tier: u8| {
                (from..to).step_by(step as usize).map(move |a| Sample {
                    pid: 1,
                    addr: a,
                    tier,
                    time_ns: round,
                    store: false,
                })
            };
            let samples = at(0, 32 * MB, MB, 0).chain(at(64 * MB, 68 * MB, MB / 8, 1)).collect();
            let page =
                |pid: u32, addr: u64, tier: u8| PageObs { pid, addr, tier, node: tier, accessed: false, dirty: false };
            let grown = 4 * MB * round.min(8);
            let mut pages: Vec<PageObs> = (0..32 * MB).step_by(PAGE as usize).map(|a| page(1, a, 0)).collect();
            pages.extend((64 * MB..68 * MB).step_by(PAGE as usize).map(|a| page(1, a, 1)));
            let built = (1 << 30..(1 << 30) + grown).step_by(PAGE as usize).map(|a| page(grower, a, 1));
            pages.extend(built);
            pages.sort_by_key(|p| (p.pid, p.addr));
            let mut o = round_obs(round, pages, vec![fast, hot], samples);
            o.tiers = vec![
                TierObs { tier: 0, capacity_bytes: 32 * MB, free_bytes: 0 },
                TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: (1 << 40) - grown },
            ];
            o
        };
        let mut p = Strata::new(cfg);
        let rounds: Vec<(u64, Vec<Action>)> = (1..=14).map(|r| (r, p.decide(&obs(r)))).collect();
        let to = |tier: u8| {
            let of_1 = |a: &Action| matches!(a, Action::Move { pid: 1, to, .. } if *to == tier);
            rounds.iter().filter(|(_, a)| a.iter().any(of_1)).map(|(r, _)| *r).collect()
        };
        (to(1), to(0))
    }

    #[test]
    fn nothing_moves_while_the_program_builds() {
        let (down, up) = rounds_moving(Config::default(), 1);
        assert!(!down.is_empty() && down.iter().all(|&r| r > 8), "demoted in rounds {down:?}");
        assert!(!up.is_empty() && up.iter().all(|&r| r > 8), "promoted in rounds {up:?}");
        let (down, up) = rounds_moving(Config { build_hold: false, ..Config::default() }, 1);
        assert!(down.iter().any(|&r| r <= 8), "demoted in rounds {down:?}");
        assert!(up.iter().any(|&r| r <= 8), "promoted in rounds {up:?}");
    }

    /// Another process growing (another user's program, or another managed one: the node's used
    /// bytes grow the same) holds nothing of process 1: the hold is no lever on the daemon.
    #[test]
    fn another_process_building_holds_nothing_of_this_one() {
        let (down, up) = rounds_moving(Config::default(), 2);
        assert!(down.iter().any(|&r| r <= 8), "demoted in rounds {down:?}");
        assert!(up.iter().any(|&r| r <= 8), "promoted in rounds {up:?}");
    }

    /// A small machine that carries the moves out: demotions first (as the engine's mover),
    /// a promotion only into free room.
    struct Machine {
        fast_cap: u64,
        /// every page: address, tier
        pages: std::collections::BTreeMap<u64, u8>,
    }

    impl Machine {
        fn fast_used(&self) -> u64 {
            self.pages.values().filter(|t| **t == 0).count() as u64 * PAGE
        }

        fn fast_in(&self, from: u64, to: u64) -> u64 {
            self.pages.range(from..to).filter(|(_, t)| **t == 0).count() as u64 * PAGE
        }

        fn apply(&mut self, mut actions: Vec<Action>) {
            actions.sort_by_key(|a| match a {
                Action::Move { to, .. } => std::cmp::Reverse(*to),
                _ => std::cmp::Reverse(u8::MAX),
            });
            let mut room = self.fast_cap - self.fast_used();
            for a in actions {
                let Action::Move { addr, len, to, .. } = a else { continue };
                for (_, t) in self.pages.range_mut(addr..addr + len) {
                    if *t == to || (to == 0 && room < PAGE) {
                        continue; // a promotion beyond the tier's room is refused
                    }
                    room = if to == 0 { room - PAGE } else { room + PAGE };
                    *t = to;
                }
            }
        }
    }

    /// A fast tier of 32 MiB (records of 2 MiB, budget 30.4 MiB); a 64 MiB object (context 1)
    /// sampled evenly, slow; 8 MiB of pages outside it, accessed every round, fast. In the
    /// rounds `grows` says, the process's footprint grows by 1 MiB of new slow pages (less than
    /// the headroom: no build hold). The machine after `rounds` rounds, the fast bytes in use
    /// and the object's fast bytes after each round, and the directives set.
    #[allow(clippy::type_complexity)]
    fn one_budget_run(
        cfg: Config,
        rounds: u64,
        grows: impl Fn(u64) -> bool,
    ) -> (Machine, Vec<(u64, u64)>, Vec<Action>) {
        let obj = slow_object(0, 64 * MB, 1);
        let outside = 128 * MB;
        let mut m = Machine { fast_cap: 32 * MB, pages: Default::default() };
        for k in 0..(64 * MB / PAGE) {
            m.pages.insert(k * PAGE, 1);
        }
        for k in 0..(8 * MB / PAGE) {
            m.pages.insert(outside + k * PAGE, 0);
        }
        let mut p = Strata::new(cfg);
        let mut directives = Vec::new();
        let mut used = Vec::new();
        let mut grown = 0;
        for round in 1..=rounds {
            if grows(round) {
                for k in 0..(MB / PAGE) {
                    m.pages.insert(256 * MB + grown + k * PAGE, 1);
                }
                grown += MB;
            }
            let fast_used = m.fast_used();
            let pages = m
                .pages
                .iter()
                .map(|(a, t)| PageObs { pid: 1, addr: *a, tier: *t, node: *t, accessed: true, dirty: false })
                .collect();
            let samples = (0..64 * MB)
                .step_by((MB / 4) as usize)
                .map(|a| Sample { pid: 1, addr: a, tier: m.pages[&a], time_ns: round, store: false })
                .collect();
            let o = ObjectObs { fast_bytes: m.fast_in(0, 64 * MB), ..obj };
            let obs = Observations {
                now_ns: round,
                page_bytes: PAGE,
                tiers: vec![
                    TierObs { tier: 0, capacity_bytes: 32 * MB, free_bytes: 32 * MB - fast_used },
                    TierObs { tier: 1, capacity_bytes: 1 << 40, free_bytes: 1 << 39 },
                ],
                pages,
                scan_complete: true,
                objects: vec![o],
                samples,
                contexts: vec![ContextObs {
                    pid: 1,
                    index: 1,
                    id: 1,
                    size_class: 0,
                    allocs: round,
                    frees: 0,
                    live_bytes: 64 * MB,
                    bytes_allocated: 64 * MB,
                    directive: Directive::Default,
                }],
                ..Default::default()
            };
            let actions = p.decide(&obs);
            directives.extend(actions.iter().filter(|a| matches!(a, Action::SetDirective { .. })).cloned());
            m.apply(actions);
            used.push((m.fast_used(), m.fast_in(0, 64 * MB)));
        }
        (m, used, directives)
    }

    const BUDGET: u64 = 32 * MB - (32 * MB) / 20;

    #[test]
    fn the_records_pages_and_births_share_one_budget() {
        // the headroom never lent: the parts share the budget for good
        let (m, used, directives) = one_budget_run(Config::default(), 40, |_| false);
        // never more in the fast tier than the budget, once the pages have made way
        for (round, &(bytes, _)) in used.iter().enumerate().skip(20) {
            assert!(bytes <= BUDGET, "round {}: {} MiB fast", round + 1, bytes / MB);
        }
        // the records took the budget (15 records of 2 MiB), the pages gave way to them
        assert_eq!(m.fast_in(0, 64 * MB), 30 * MB, "the records' fast bytes");
        assert!(m.fast_in(128 * MB, 136 * MB) <= BUDGET - 30 * MB, "the pages' fast bytes");
        // the context's 64 MiB do not fit the budget's knapsack: its new objects start slow
        assert!(
            directives.iter().any(|a| matches!(a, Action::SetDirective { context: 1, directive: Directive::Slow, .. })),
            "{directives:?}"
        );
    }

    /// With `release_scans` 10, ten complete scans without growth lend the headroom to the
    /// parts (the records fill the whole tier); growing again takes it back (the parts give up
    /// the budget's excess) until ten more scans pass without growth. (By default it is never
    /// lent: `the_records_pages_and_births_share_one_budget`.)
    #[test]
    fn the_headroom_is_lent_after_ten_steady_scans_and_taken_back_on_growth() {
        let lend = || Config { release_scans: 10, ..Config::default() };
        let (m, _, _) = one_budget_run(lend(), 40, |_| false);
        assert_eq!(m.fast_in(0, 64 * MB), 32 * MB, "the records' fast bytes, the headroom lent");
        let (m, used, _) = one_budget_run(lend(), 70, |r| (41..=44).contains(&r));
        assert_eq!(used[39].0, 32 * MB, "lent by round 40: {used:?}");
        // rounds 41-53 (used[40..53]): taken back; lent again at round 54, the tenth complete
        // scan after the last growth (round 44), not one sooner
        assert!(used[40..53].iter().all(|&(b, _)| b <= BUDGET), "taken back in rounds 41-53: {used:?}");
        assert_eq!(used[53].0, 32 * MB, "lent again in round 54: {used:?}");
        assert_eq!(m.fast_in(0, 64 * MB), 32 * MB, "the records' fast bytes, lent again");
        // a process that keeps growing never gets it
        let (m, _, _) = one_budget_run(lend(), 40, |r| r % 5 == 0);
        assert_eq!(m.fast_in(0, 64 * MB), 30 * MB, "the records' fast bytes, growing every five rounds");
    }
}
