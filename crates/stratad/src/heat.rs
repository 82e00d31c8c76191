//! How much of each process is hot, warm and cold, and how large its working set is: the first
//! question an evaluator asks (damo answers it with `report wss`, memtierd with heat classes).
//!
//! From what the round's trackers saw, each page keeps the round it was last seen accessed (or,
//! never seen accessed, the round it was first seen). Its idle age is the rounds since. A page
//! is hot when accessed in the last `hot_rounds` rounds, cold when idle for `cold_rounds` or
//! more, warm in between; the working set is the bytes accessed in the last `cold_rounds`
//! rounds. What "accessed" means is the tracker's: pagemap-scan and soft-dirty see writes only,
//! DAMON and hint-fault samples reads too (docs/daemon.md). A page the scans stop reporting
//! (freed, or the process gone) is forgotten at the end of the pass. Tracked objects give the
//! same per allocation context. The live daemon keeps this; emulated runs do not.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_policy::Observations;

/// The heat classes' bounds, in rounds (`[heat]` in the configuration).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeatConfig {
    /// a page accessed within this many rounds is hot
    pub hot_rounds: u64,
    /// a page idle for this many rounds or more is cold; the working set is what was accessed
    /// within them
    pub cold_rounds: u64,
}

impl Default for HeatConfig {
    fn default() -> HeatConfig {
        HeatConfig { hot_rounds: 1, cold_rounds: 10 }
    }
}

/// Bytes by heat class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classes {
    pub hot_bytes: u64,
    pub warm_bytes: u64,
    pub cold_bytes: u64,
}

/// One process's heat.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessHeat {
    #[serde(flatten)]
    pub classes: Classes,
    /// bytes accessed within the last `cold_rounds` rounds
    pub wss_bytes: u64,
    /// bytes idle for at least 1, 2, 4, 8, ... rounds (key: the rounds)
    pub idle_bytes: BTreeMap<u64, u64>,
    /// rounds the process has been watched: while fewer than `cold_rounds`, nothing is cold yet
    pub rounds: u64,
    /// its tracked objects' pages, by allocation context (the channel's index)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contexts: BTreeMap<u32, Classes>,
    /// where the last round's accesses were: the watched pages in address order, cut in
    /// `MAP_BINS` bins of as many pages each, and the share of each bin's pages accessed (what
    /// `strata record` keeps, a column of `strata report`'s heatmap)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_map: Vec<f32>,
}

/// Bins of `ProcessHeat::access_map`.
pub const MAP_BINS: usize = 64;

/// What the passes know of one process's pages: (address, the round it was last accessed, or
/// first seen when never accessed), in address order, as the last whole pass found them and as
/// this one does so far, with how far this pass has read the first. The view now is this pass's
/// pages and the last pass's beyond where this one got ([`Process::view`]): no map, no sort, a
/// merge per pass, as the scan reports each process's pages in address order.
#[derive(Default)]
struct Process {
    last: Vec<(u64, u64)>,
    now: Vec<(u64, u64)>,
    at: usize,
    first_round: u64,
    /// its tracked objects at the last round: (addr, len, context), by address
    objects: Vec<(u64, u64, u32)>,
}

impl Process {
    /// A page of this pass (in address order, as scans report them; out of order it is found
    /// or placed by search), accessed this round or not.
    fn see(&mut self, addr: u64, accessed: bool, round: u64) {
        if self.now.last().is_some_and(|l| l.0 >= addr) {
            match self.now.binary_search_by_key(&addr, |e| e.0) {
                Ok(i) if accessed => self.now[i].1 = round,
                Ok(_) => {}
                Err(i) => {
                    let before = self.last.binary_search_by_key(&addr, |e| e.0).ok().map(|k| self.last[k].1);
                    self.now.insert(i, (addr, if accessed { round } else { before.unwrap_or(round) }));
                }
            }
            return;
        }
        while self.at < self.last.len() && self.last[self.at].0 < addr {
            self.at += 1;
        }
        let before = self.last.get(self.at).filter(|e| e.0 == addr).map(|e| e.1);
        if before.is_some() {
            self.at += 1;
        }
        self.now.push((addr, if accessed { round } else { before.unwrap_or(round) }));
    }

    /// A page accessed out of the scan's order (a hint fault): where it is known.
    fn touched(&mut self, addr: u64, round: u64) {
        for v in [&mut self.now, &mut self.last] {
            if let Ok(i) = v.binary_search_by_key(&addr, |e| e.0) {
                v[i].1 = round;
            }
        }
    }

    /// A whole pass ended: what it saw is what the next one starts from (pages it did not see
    /// are gone).
    fn end_pass(&mut self) {
        std::mem::swap(&mut self.last, &mut self.now);
        self.now.clear();
        self.at = 0;
    }

    /// Every page known now, in address order.
    fn view(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.now.iter().chain(&self.last[self.at..])
    }
}

pub struct Heat {
    cfg: HeatConfig,
    round: u64,
    page_bytes: u64,
    processes: BTreeMap<u32, Process>,
}

impl Heat {
    pub fn new(cfg: HeatConfig) -> Heat {
        Heat { cfg, round: 0, page_bytes: 4096, processes: BTreeMap::new() }
    }

    /// New class bounds; what was seen stays.
    pub fn reconfigure(&mut self, cfg: HeatConfig) {
        self.cfg = cfg;
    }

    /// One round's observations; `alive` are the processes that still run.
    pub fn update(&mut self, obs: &Observations, alive: &[u32]) {
        self.round += 1;
        self.page_bytes = obs.page_bytes.max(1);
        let round = self.round;
        self.processes.retain(|pid, _| alive.contains(pid));
        for &pid in alive {
            self.processes.entry(pid).or_insert_with(|| Process { first_round: round, ..Default::default() });
        }
        for p in &obs.pages {
            if let Some(h) = self.processes.get_mut(&p.pid) {
                h.see(p.addr, p.accessed || p.dirty, round);
            }
        }
        let page = self.page_bytes;
        for f in &obs.hint_faults {
            if let Some(h) = self.processes.get_mut(&f.pid) {
                h.touched(f.addr / page * page, round);
            }
        }
        if obs.scan_complete {
            for p in self.processes.values_mut() {
                p.end_pass();
            }
        }
        if !obs.objects.is_empty() {
            for p in self.processes.values_mut() {
                p.objects.clear();
            }
            for o in &obs.objects {
                if let Some(p) = self.processes.get_mut(&o.pid) {
                    p.objects.push((o.addr, o.len, o.context));
                }
            }
            for p in self.processes.values_mut() {
                p.objects.sort_unstable();
            }
        }
    }

    /// Which class a page idle for `age` rounds is in.
    fn class(&self, age: u64) -> usize {
        if age < self.cfg.hot_rounds {
            0
        } else if age < self.cfg.cold_rounds {
            1
        } else {
            2
        }
    }

    /// A process's heat, None when it is not watched.
    pub fn of(&self, pid: u32) -> Option<ProcessHeat> {
        let p = self.processes.get(&pid)?;
        let mut h = ProcessHeat { rounds: self.round + 1 - p.first_round, ..Default::default() };
        let add = |c: &mut Classes, class: usize, bytes: u64| match class {
            0 => c.hot_bytes += bytes,
            1 => c.warm_bytes += bytes,
            _ => c.cold_bytes += bytes,
        };
        // accessed this round, each page in address order
        let mut accessed: Vec<bool> = Vec::with_capacity(p.now.len() + p.last.len() - p.at);
        // pages by the highest power of two their idle age reaches (index: its log2)
        let mut by_log2 = [0u64; 64];
        let mut k = 0; // the tracked object holding a page, if any: pages and objects both by address
        for &(addr, since) in p.view() {
            accessed.push(since == self.round);
            let age = self.round - since;
            let class = self.class(age);
            add(&mut h.classes, class, self.page_bytes);
            if age < self.cfg.cold_rounds {
                h.wss_bytes += self.page_bytes;
            }
            if age > 0 {
                by_log2[age.ilog2() as usize] += 1;
            }
            while k < p.objects.len() && p.objects[k].0 + p.objects[k].1 <= addr {
                k += 1;
            }
            if let Some(&(_, _, ctx)) = p.objects.get(k).filter(|o| o.0 <= addr && o.2 != 0) {
                add(h.contexts.entry(ctx).or_default(), class, self.page_bytes);
            }
        }
        // idle for at least 2^i rounds: every page whose age reaches 2^i or more
        let mut at_least = 0;
        for i in (0..64).rev() {
            at_least += by_log2[i];
            if at_least > 0 {
                h.idle_bytes.insert(1 << i, at_least * self.page_bytes);
            }
        }
        h.access_map = access_map(&accessed);
        Some(h)
    }
}

/// The share of pages accessed in each of `MAP_BINS` bins of `accessed` (address order).
fn access_map(accessed: &[bool]) -> Vec<f32> {
    if accessed.is_empty() {
        return Vec::new();
    }
    let n = accessed.len();
    (0..MAP_BINS)
        .map(|j| {
            let bin = &accessed[j * n / MAP_BINS..((j + 1) * n / MAP_BINS).max(j * n / MAP_BINS + 1).min(n)];
            bin.iter().filter(|a| **a).count() as f32 / bin.len() as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_policy::{ObjectObs, PageObs};

    fn round(pages: &[(u64, bool)], complete: bool) -> Observations {
        Observations {
            page_bytes: 4096,
            scan_complete: complete,
            pages: pages
                .iter()
                .map(|&(i, accessed)| PageObs { pid: 7, addr: i * 4096, tier: 0, node: 0, accessed, dirty: false })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn pages_are_hot_warm_or_cold_by_the_rounds_since_their_last_access() {
        let mut h = Heat::new(HeatConfig { hot_rounds: 1, cold_rounds: 4 });
        // pages 0-1 written every round, page 2 every third, pages 3-9 once at the start
        for r in 0..8u64 {
            let pages: Vec<(u64, bool)> = (0..10).map(|i| (i, i < 2 || (i == 2 && r % 3 == 0) || r == 0)).collect();
            h.update(&round(&pages, true), &[7]);
        }
        let p = h.of(7).unwrap();
        // after round 8: page 2 last written in round 7 (r = 6): idle 1, warm
        assert_eq!(p.classes, Classes { hot_bytes: 2 * 4096, warm_bytes: 4096, cold_bytes: 7 * 4096 });
        assert_eq!(p.wss_bytes, 3 * 4096);
        assert_eq!(p.idle_bytes[&1], 8 * 4096);
        assert_eq!(p.idle_bytes[&4], 7 * 4096, "idle 7 rounds: counted at 1, 2 and 4");
        assert!(!p.idle_bytes.contains_key(&8));
        assert_eq!(p.rounds, 8);
        assert!(h.of(8).is_none(), "not watched");
        // the map: 10 pages in 64 bins, the first two pages (the first 12 or 13 bins) accessed
        assert_eq!(p.access_map.len(), MAP_BINS);
        assert!(p.access_map[..12].iter().all(|v| *v == 1.0) && p.access_map[14..].iter().all(|v| *v == 0.0));
    }

    #[test]
    fn a_page_no_longer_reported_is_forgotten_at_the_end_of_the_pass_and_so_is_a_gone_process() {
        let mut h = Heat::new(HeatConfig::default());
        h.update(&round(&[(0, true), (1, true)], false), &[7]);
        h.update(&round(&[(2, false)], true), &[7]); // the pass: pages 0, 1, 2
        assert_eq!(h.of(7).unwrap().classes.hot_bytes + h.of(7).unwrap().classes.warm_bytes, 3 * 4096);
        h.update(&round(&[(0, true)], true), &[7]); // a whole pass: only page 0 left
        let p = h.of(7).unwrap();
        assert_eq!(p.classes, Classes { hot_bytes: 4096, ..Default::default() });
        h.update(&round(&[], true), &[]);
        assert!(h.of(7).is_none());
    }

    #[test]
    fn a_tracked_objects_pages_count_for_its_context() {
        let mut h = Heat::new(HeatConfig { hot_rounds: 1, cold_rounds: 2 });
        let mut obs = round(&[(0, true), (1, false), (2, true), (5, true)], true);
        obs.objects = vec![
            ObjectObs { pid: 7, addr: 0, len: 2 * 4096, context: 3, ..Default::default() },
            ObjectObs { pid: 7, addr: 2 * 4096, len: 4096, context: 4, ..Default::default() },
        ];
        h.update(&obs, &[7]);
        let mut obs = round(&[(0, true), (1, false), (2, false), (5, true)], true);
        obs.objects.clear(); // objects are kept from the last round that read them
        h.update(&obs, &[7]);
        h.update(&round(&[(0, true), (1, false), (2, false), (5, true)], true), &[7]);
        let p = h.of(7).unwrap();
        assert_eq!(p.contexts[&3], Classes { hot_bytes: 4096, warm_bytes: 0, cold_bytes: 4096 });
        assert_eq!(p.contexts[&4], Classes { cold_bytes: 4096, ..Default::default() });
        assert_eq!(p.contexts.len(), 2, "page 5 is in no object");
    }

    #[test]
    fn a_pass_over_several_rounds_keeps_the_last_pass_s_rest_and_drops_pages_no_longer_seen() {
        use strata_policy::{HintFault, PageObs};
        let page = |addr: u64, accessed: bool| PageObs { pid: 1, addr, tier: 0, node: 0, accessed, dirty: false };
        let round = |pages: Vec<PageObs>, complete: bool| Observations {
            pages,
            page_bytes: 4096,
            scan_complete: complete,
            ..Default::default()
        };
        let mut h = Heat::new(HeatConfig { hot_rounds: 1, cold_rounds: 3 });
        let bytes = |h: &Heat| {
            let p = h.of(1).unwrap();
            (p.classes.hot_bytes / 4096, p.classes.warm_bytes / 4096, p.classes.cold_bytes / 4096)
        };
        h.update(&round(vec![page(0, true), page(4096, true), page(8192, true)], true), &[1]);
        assert_eq!(bytes(&h), (3, 0, 0));
        // half a pass: the first page, idle; the others still as the last pass left them
        h.update(&round(vec![page(0, false)], false), &[1]);
        assert_eq!(bytes(&h), (0, 3, 0));
        // the rest of the pass: the second page is gone (not seen), the third accessed
        h.update(&round(vec![page(8192, true)], true), &[1]);
        let p = h.of(1).unwrap();
        assert_eq!(bytes(&h), (1, 1, 0), "{p:?}");
        assert_eq!(p.wss_bytes, 2 * 4096);
        // pages out of the scan's order keep what the last pass knew of them
        h.update(&round(vec![page(8192, false), page(0, false)], false), &[1]);
        assert_eq!(bytes(&h), (0, 1, 1), "the first idle 3 rounds, the third 1");
        // a hint fault marks a known page accessed
        let faults = vec![HintFault { pid: 1, addr: 8192 + 12, tier: 0, time_ns: 0 }];
        h.update(&Observations { hint_faults: faults, page_bytes: 4096, ..Default::default() }, &[1]);
        assert_eq!(bytes(&h), (1, 0, 1));
        h.update(&round(vec![], false), &[]);
        assert!(h.of(1).is_none(), "a process gone is forgotten");
    }

    /// What a round costs for a process of 2 GiB (524,288 pages, a third accessed a round):
    /// printed, not asserted (`cargo test --release -p stratad heat::tests::cost -- --ignored
    /// --nocapture`; docs/daemon.md quotes it).
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn cost_of_a_round_of_a_2_gib_process() {
        use strata_policy::PageObs;
        let n = 524_288u64;
        let page =
            |i: u64| PageObs { pid: 1, addr: i * 4096, tier: 0, node: 0, accessed: i.is_multiple_of(3), dirty: false };
        let obs = Observations {
            pages: (0..n).map(page).collect(),
            page_bytes: 4096,
            scan_complete: true,
            ..Default::default()
        };
        let mut h = Heat::new(HeatConfig::default());
        let t = std::time::Instant::now();
        for _ in 0..5 {
            h.update(&obs, &[1]);
        }
        let update = t.elapsed() / 5;
        let t = std::time::Instant::now();
        for _ in 0..5 {
            std::hint::black_box(h.of(1));
        }
        eprintln!("heat of 2 GiB: update {update:?} a round, figures {:?}", t.elapsed() / 5);
    }
}
