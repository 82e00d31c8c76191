//! How the daemon sees a process's accesses: one module per tracker, each with its probe (is
//! it in this kernel?), what it sees, its state and its scan of a process. [`Trackers`] holds
//! the configured ones, preferred first, and gives each process the first that can see it.
//!
//! | tracker | module | sees |
//! |---|---|---|
//! | `damon-vaddr` | [`damon_vaddr`] | reads and writes, by DAMON region (its kernel threads sample) |
//! | `hint-fault` | [`hint_fault`] | pagemap-scan's writes, and reads of a sampled page per 2 MiB |
//! | `pagemap-scan` | [`pagemap_scan`] | writes to the memory a process registered (Linux 6.7+) |
//! | `soft-dirty` | [`soft_dirty`] | writes to all anonymous memory (kernels built with soft-dirty) |
//!
//! A new tracker is a module here with a [`Tracker`], a line in that table, a [`TrackerKind`]
//! and its place in [`Trackers::new`].
use std::time::Duration;

use strata_policy::Node;
use stratad::config::TrackerKind;

use crate::agent::Agent;

pub mod damon_vaddr;
pub mod hint_fault;
pub mod pagemap_scan;
pub mod soft_dirty;

/// A page counts as read when DAMON or a sample saw it read within this long (the last reads,
/// one a round): one aggregation sees a buffer read in sweeps longer than it only now and then
/// (each page of it is touched once a sweep, and DAMON samples one page of a region every 5
/// ms), so a hot set read in sweeps of about a second looked idle half the time in the guest
/// and was promoted and demoted by turns.
pub const READ_WINDOW: Duration = Duration::from_secs(2);

/// The rounds of `round` that READ_WINDOW covers (at least one).
fn window_rounds(round: Duration) -> usize {
    (READ_WINDOW.as_micros() as u64).div_ceil(round.as_micros().max(1) as u64).max(1) as usize
}

/// What a scan of one process found: its present pages (address, accessed and written since
/// their last scan), the pages it took of the round's budget, and where it stopped (None: it
/// reached the end of the process).
pub type Scanned = (Vec<(u64, bool, bool)>, u64, Option<u64>);

/// What a process offers the trackers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Offers {
    /// it registered Strata's memory for asynchronous write-protect (its channel says so)
    pub wp_async: bool,
    /// its agent is connected (samples, transactional moves)
    pub agent: bool,
}

/// A process a tracker watches, at the start of a pass.
pub struct Target<'a> {
    pub pid: u32,
    /// its present pages in address order, as the last pass found them
    pub pages: &'a [(u64, Node)],
    /// its agent, which a tracker drops (None) when it stops answering
    pub agent: &'a mut Option<Agent>,
    /// why the tracker failed on it, if it did
    pub error: &'a mut Option<String>,
}

/// One way of seeing accesses.
pub trait Tracker: Send {
    fn kind(&self) -> TrackerKind;
    /// Why it can never see a process that offers `p` (its kernel, or what the process does
    /// not offer), if it cannot.
    fn cannot_see(&self, p: Offers) -> Option<&'static str>;
    /// Whether it watches process `pid` now (DAMON: only as many as it monitors).
    fn watches(&self, _pid: u32, p: Offers) -> bool {
        self.cannot_see(p).is_none()
    }
    /// At the start of a pass, with the processes it is the first tracker able to see (those
    /// it watches among them, if not all).
    fn start_pass(&mut self, _targets: &mut [Target<'_>], _pass: u64) {}
    /// Scan process `pid` from address `from`: at most `max` pages.
    fn scan(&self, pid: u32, from: u64, max: u64) -> Result<Scanned, String>;
    /// At the end of a whole pass, with the processes it watched.
    fn end_pass(&mut self, _pids: &[u32]) {}
    /// Forget the processes that are gone.
    fn forget(&mut self, _live: &dyn Fn(u32) -> bool) {}
}

/// The trackers of the configuration, preferred first.
#[derive(Default)]
pub struct Trackers {
    list: Vec<Box<dyn Tracker>>,
}

impl Trackers {
    /// Those of `kinds`, in that order. DAMON (for at most `damon_max` processes, a round `round`
    /// long) is taken only here, by the daemon, never by a tool that only reads; returns why it
    /// cannot be used, if it was asked for and cannot (the others go on without it).
    pub fn new(kinds: &[TrackerKind], damon_max: usize, round: Duration) -> (Trackers, Option<String>) {
        let mut list: Vec<Box<dyn Tracker>> = Vec::new();
        let mut damon_error = None;
        for &k in kinds {
            match k {
                TrackerKind::DamonVaddr if damon_max > 0 => {
                    let (d, e) = damon_vaddr::DamonVaddr::open(damon_max, round);
                    list.push(Box::new(d));
                    damon_error = e;
                }
                TrackerKind::DamonVaddr | TrackerKind::None => {}
                TrackerKind::HintFault => list.push(Box::new(hint_fault::HintFault::new(round))),
                TrackerKind::PagemapScan => list.push(Box::new(pagemap_scan::PagemapScan::here())),
                TrackerKind::SoftDirty => list.push(Box::new(soft_dirty::SoftDirty::here())),
            }
        }
        (Trackers { list }, damon_error)
    }

    /// The kinds in use, preferred first.
    pub fn kinds(&self) -> Vec<TrackerKind> {
        self.list.iter().map(|t| t.kind()).collect()
    }

    /// Whether any of them can see anything on this kernel.
    pub fn any(&self) -> bool {
        let all = Offers { wp_async: true, agent: true };
        self.list.iter().any(|t| t.cannot_see(all).is_none())
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The first of them that can see a process that offers `p`.
    pub fn first_able(&self, p: Offers) -> Option<usize> {
        self.list.iter().position(|t| t.cannot_see(p).is_none())
    }

    /// The one that watches process `pid` (None: none can).
    pub fn of(&self, pid: u32, p: Offers) -> Option<&dyn Tracker> {
        self.list.iter().find(|t| t.watches(pid, p)).map(|t| t.as_ref())
    }

    /// Why none of them can ever see a process that offers `p`, each with its reason (None: one
    /// can).
    pub fn unseen_because(&self, p: Offers) -> Option<Vec<String>> {
        let mut why = Vec::new();
        for t in &self.list {
            match t.cannot_see(p) {
                None => return None,
                Some(because) => why.push(format!("{}: {because}", t.kind().name())),
            }
        }
        Some(why)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn Tracker>> {
        self.list.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tracker that sees processes offering `needs`, and watches at most the pids in `watch`.
    struct Fake {
        kind: TrackerKind,
        needs_wp: bool,
        watch: Option<Vec<u32>>,
    }

    impl Tracker for Fake {
        fn kind(&self) -> TrackerKind {
            self.kind
        }
        fn cannot_see(&self, p: Offers) -> Option<&'static str> {
            (self.needs_wp && !p.wp_async).then_some("it needs the process's own userfaultfd")
        }
        fn watches(&self, pid: u32, p: Offers) -> bool {
            self.cannot_see(p).is_none() && self.watch.as_ref().is_none_or(|w| w.contains(&pid))
        }
        fn scan(&self, _pid: u32, _from: u64, _max: u64) -> Result<Scanned, String> {
            Ok((Vec::new(), 0, None))
        }
    }

    fn trackers(list: Vec<Fake>) -> Trackers {
        Trackers { list: list.into_iter().map(|f| Box::new(f) as Box<dyn Tracker>).collect() }
    }

    #[test]
    fn each_process_gets_the_first_tracker_that_watches_it_and_an_unseen_one_is_told_why() {
        let damon = Fake { kind: TrackerKind::DamonVaddr, needs_wp: false, watch: Some(vec![1]) };
        let scan = Fake { kind: TrackerKind::PagemapScan, needs_wp: true, watch: None };
        let t = trackers(vec![damon, scan]);
        let strata = Offers { wp_async: true, agent: false };
        let other = Offers::default();
        assert_eq!(t.of(1, strata).map(|t| t.kind()), Some(TrackerKind::DamonVaddr), "the first");
        assert_eq!(t.of(2, strata).map(|t| t.kind()), Some(TrackerKind::PagemapScan), "DAMON is full");
        assert!(t.of(2, other).is_none(), "none watches a process that offers nothing beyond DAMON's limit");
        assert_eq!(t.first_able(other), Some(0), "DAMON could see it: it is its candidate at a pass");
        assert!(t.unseen_because(other).is_none(), "DAMON can see any process");
        let t = trackers(vec![Fake { kind: TrackerKind::PagemapScan, needs_wp: true, watch: None }]);
        assert_eq!(t.unseen_because(other), Some(vec!["pagemap-scan: it needs the process's own userfaultfd".into()]));
        assert!(t.any(), "it sees processes that offer what it needs");
        assert!(!Trackers::default().any());
    }

    #[test]
    fn the_configured_kinds_come_in_their_order_and_damon_says_why_it_cannot_be_used() {
        let kinds = [TrackerKind::SoftDirty, TrackerKind::PagemapScan, TrackerKind::HintFault];
        let (t, why) = Trackers::new(&kinds, 8, Duration::from_millis(100));
        assert_eq!(t.kinds(), kinds, "every kind is there, usable here or not");
        assert!(why.is_none(), "no DAMON was asked for");
        let (t, _) = Trackers::new(&[TrackerKind::DamonVaddr, TrackerKind::PagemapScan], 0, Duration::from_millis(100));
        assert_eq!(t.kinds(), [TrackerKind::PagemapScan], "DAMON for no process is not DAMON");
        // DAMON asked for: used, or (here: another tool's kdamond, or no vaddr operations) said
        // why not, and then no process is seen by it, with that reason
        let (t, why) = Trackers::new(&[TrackerKind::DamonVaddr], 8, Duration::from_millis(100));
        assert_eq!(t.kinds(), [TrackerKind::DamonVaddr]);
        match why {
            None => assert!(t.unseen_because(Offers::default()).is_none(), "DAMON sees any process"),
            Some(why) => {
                assert!(!why.is_empty());
                let unseen = t.unseen_because(Offers::default()).unwrap();
                assert!(unseen[0].starts_with("damon-vaddr: ") && !t.any(), "{unseen:?}");
            }
        }
        assert_eq!(window_rounds(Duration::from_millis(500)), 4);
        assert_eq!(window_rounds(Duration::from_secs(5)), 1);
    }
}
