//! The mover: carries out a policy's moves within a rate limit (MB/s, as tokens that accrue with
//! the machine's time) and a cap per round: moves to slower tiers first, since they make the room
//! that moves to faster ones need; among moves to one tier, the processes' priorities first
//! (promotions of the highest-priority processes, demotions of the lowest), then the actions'
//! own priorities. It counts, in all and per process, what was asked, moved and refused (by
//! reason), and ping-pong: a page moved back the other way within `pingpong_rounds` rounds.
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use strata_policy::{Action, Node, Tier};

use crate::config::MoverConfig;
use crate::machine::{Machine, Refusal};
use crate::stats::Stats;

pub struct Mover {
    cfg: MoverConfig,
    /// bytes it may still move
    tokens: f64,
    last_ns: Option<u64>,
    /// rounds applied so far
    round: u64,
    /// the pages moved in the last `pingpong_rounds` rounds: (pid, page) -> (round, promoted)
    recent: HashMap<(u32, u64), (u64, bool)>,
}

/// `n` pages of process `pid` refused for `why`, in all and for the process.
fn refuse(stats: &mut Stats, pid: u32, why: Refusal, n: u64) {
    if n == 0 {
        return;
    }
    *stats.refused_pages.entry(why.name()).or_default() += n;
    *stats.processes.entry(pid).or_default().refused_pages.entry(why.name()).or_default() += n;
}

impl Mover {
    pub fn new(cfg: MoverConfig) -> Mover {
        let tokens = cfg.max_bytes_per_round as f64;
        Mover { cfg, tokens, last_ns: None, round: 0, recent: HashMap::new() }
    }

    /// A page of `pid` moved up (`promoted`) or down this round: ping-pong when its last move,
    /// within the window, went the other way.
    fn note_move(&mut self, stats: &mut Stats, pid: u32, page: u64, promoted: bool) {
        let back = self
            .recent
            .insert((pid, page), (self.round, promoted))
            .is_some_and(|(r, up)| up != promoted && self.round - r <= self.cfg.pingpong_rounds);
        if back {
            stats.pingpong_pages += 1;
            stats.processes.entry(pid).or_default().pingpong_pages += 1;
        }
    }

    fn refill(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            let dt = now_ns.saturating_sub(last) as f64 * 1e-9;
            self.tokens = (self.tokens + dt * self.cfg.rate_mbps * 1e6).min(self.cfg.max_bytes_per_round as f64);
        }
        self.last_ns = Some(now_ns);
    }

    /// A new configuration; the budget carries on.
    pub fn reconfigure(&mut self, cfg: MoverConfig) {
        self.tokens = self.tokens.min(cfg.max_bytes_per_round as f64);
        self.cfg = cfg;
    }

    /// Apply one round's actions; `priority_of` gives processes' priorities (absent: 0).
    pub fn apply(
        &mut self,
        now_ns: u64,
        mut actions: Vec<Action>,
        m: &mut dyn Machine,
        stats: &mut Stats,
        priority_of: &BTreeMap<u32, i32>,
    ) {
        self.refill(now_ns);
        self.round += 1;
        let (round, window) = (self.round, self.cfg.pingpong_rounds);
        self.recent.retain(|_, (r, _)| round - *r <= window);
        let nodes = m.nodes();
        let tier_of = |n: Node| nodes.iter().find(|x| x.node == n).map_or(Tier::MAX, |x| x.tier);
        // moves to slower tiers first (they make the room the others need); to the fastest
        // tier, the highest-priority processes first, to the others the lowest first; then
        // the highest action priority; ties keep the policies' order
        let process = |pid: u32, to: Tier| {
            let p = i64::from(priority_of.get(&pid).copied().unwrap_or(0));
            if to == 0 {
                -p
            } else {
                p
            }
        };
        actions.sort_by_key(|a| match a {
            Action::Move { pid, to, priority, .. } => (Reverse(*to), process(*pid, *to), Reverse(*priority)),
            Action::MoveToNode { pid, node, priority, .. } => {
                let to = tier_of(*node);
                (Reverse(to), process(*pid, to), Reverse(*priority))
            }
            Action::SetDirective { .. } => (Reverse(u8::MAX), i64::MIN, Reverse(i64::MAX)),
        });
        let mut round =
            Round { free: nodes.iter().map(|n| (n.node, n.free_bytes)).collect(), cap: self.cfg.max_bytes_per_round };
        for a in actions {
            match a {
                Action::Move { pid, addr, len, to, .. } => {
                    // the tier's nodes, nearest first
                    let targets: Vec<Node> = nodes.iter().filter(|n| n.tier == to).map(|n| n.node).collect();
                    self.move_range(m, &mut round, stats, pid, (addr, len), &targets, &tier_of);
                }
                Action::MoveToNode { pid, addr, len, node, .. } => {
                    self.move_range(m, &mut round, stats, pid, (addr, len), &[node], &tier_of);
                }
                Action::SetDirective { pid, context, directive } => match m.set_directive(pid, context, directive) {
                    Ok(()) => stats.directives_set += 1,
                    Err(_) => stats.directives_refused += 1,
                },
            }
        }
    }

    /// Move the pages of a range that are not on one of `targets` to them: the first target
    /// while it has room, then the next; within the budget. A node's room is its free bytes
    /// as the machine gives them (above the kernel's watermarks on Linux) less what this
    /// round's moves have put there; what fits nowhere is refused as no_room.
    #[allow(clippy::too_many_arguments)]
    fn move_range(
        &mut self,
        m: &mut dyn Machine,
        round: &mut Round,
        stats: &mut Stats,
        pid: u32,
        (addr, len): (u64, u64),
        targets: &[Node],
        tier_of: &dyn Fn(Node) -> Tier,
    ) {
        let page = m.page_bytes();
        if targets.is_empty() {
            refuse(stats, pid, Refusal::BadTier, len.div_ceil(page));
            return;
        }
        // only the pages that are elsewhere spend the budget; pages not resident (an object's
        // pages never touched, or not yet) are first touch's to place, not a refusal
        let range: Vec<u64> = (addr / page..(addr + len).div_ceil(page)).map(|p| p * page).collect();
        let mut pages = Vec::with_capacity(range.len());
        for (p, at) in range.iter().zip(m.locate(pid, &range)) {
            match at {
                Some(n) if !targets.contains(&n) => pages.push((*p, n)),
                _ => {}
            }
        }
        stats.attempted_pages += pages.len() as u64;
        stats.processes.entry(pid).or_default().attempted_pages += pages.len() as u64;
        let affordable = ((self.tokens.max(0.0) as u64).min(round.cap) / page) as usize;
        if pages.len() > affordable {
            refuse(stats, pid, Refusal::Budget, (pages.len() - affordable) as u64);
            pages.truncate(affordable);
        }
        let mut rest: &[(u64, Node)] = &pages;
        for &to in targets {
            if rest.is_empty() {
                break;
            }
            // as much as the target has room for, as the round's moves leave it
            let room = (round.free(to) / page) as usize;
            let (go, next) = rest.split_at(room.min(rest.len()));
            rest = next;
            if go.is_empty() {
                continue;
            }
            let addrs: Vec<u64> = go.iter().map(|g| g.0).collect();
            for (st, &(addr, from)) in m.move_pages(pid, &addrs, to).into_iter().zip(go) {
                match st {
                    Ok(()) => {
                        self.tokens -= page as f64;
                        round.cap -= page;
                        round.moved(from, to, page);
                        let p = stats.processes.entry(pid).or_default();
                        let (tf, tt) = (tier_of(from), tier_of(to));
                        if tt < tf {
                            stats.promoted_pages += 1;
                            stats.promoted_bytes += page;
                            p.promoted_pages += 1;
                            p.promoted_bytes += page;
                        } else if tt > tf {
                            stats.demoted_pages += 1;
                            stats.demoted_bytes += page;
                            p.demoted_pages += 1;
                            p.demoted_bytes += page;
                        } else {
                            stats.rebalanced_pages += 1;
                        }
                        stats.migrated_bytes += page;
                        if tt != tf {
                            self.note_move(stats, pid, addr, tt < tf);
                        }
                    }
                    Err(r) => refuse(stats, pid, r, 1),
                }
            }
        }
        refuse(stats, pid, Refusal::NoRoom, rest.len() as u64);
    }
}

/// What a round has left: each node's free bytes as the moves change them, and the cap.
struct Round {
    free: Vec<(Node, u64)>,
    cap: u64,
}

impl Round {
    fn free(&self, n: Node) -> u64 {
        self.free.iter().find(|f| f.0 == n).map_or(0, |f| f.1)
    }
    fn moved(&mut self, from: Node, to: Node, bytes: u64) {
        for f in &mut self.free {
            if f.0 == from {
                f.1 += bytes;
            } else if f.0 == to {
                f.1 = f.1.saturating_sub(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{MoveStatus, Refusal};
    use strata_policy::NodeObs;

    /// Nodes of `cap` pages each in `tier`s (nearest first: node 0, 1, ...); page i is on node
    /// `node[i]`.
    struct Fake {
        cap: Vec<u64>,
        tier: Vec<Tier>,
        node: Vec<Node>,
    }

    impl Fake {
        /// Two nodes, one a tier, of these capacities; pages start on node 1.
        fn two(cap: [u64; 2], node: Vec<Node>) -> Fake {
            Fake { cap: cap.to_vec(), tier: vec![0, 1], node }
        }
        fn on(&self, n: Node) -> usize {
            self.node.iter().filter(|x| **x == n).count()
        }
    }

    impl Machine for Fake {
        fn page_bytes(&self) -> u64 {
            4096
        }
        fn now_ns(&self) -> u64 {
            0
        }
        fn nodes(&mut self) -> Vec<NodeObs> {
            (0..self.cap.len())
                .map(|n| NodeObs {
                    node: n as Node,
                    tier: self.tier[n],
                    distance: 10 + n as u8,
                    capacity_bytes: self.cap[n] * 4096,
                    free_bytes: (self.cap[n] - self.on(n as Node) as u64) * 4096,
                })
                .collect()
        }
        fn scan(&mut self, _: u64, _: &mut Vec<strata_policy::PageObs>) -> bool {
            true
        }
        fn locate(&mut self, _pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
            pages.iter().map(|&a| self.node.get((a / 4096) as usize).copied()).collect()
        }
        fn move_pages(&mut self, _pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus> {
            pages
                .iter()
                .map(|&a| {
                    let i = (a / 4096) as usize;
                    if i >= self.node.len() {
                        Err(Refusal::Gone)
                    } else if self.node[i] != to && self.on(to) as u64 >= self.cap[to as usize] {
                        Err(Refusal::NoRoom)
                    } else {
                        self.node[i] = to;
                        Ok(())
                    }
                })
                .collect()
        }
    }

    impl Mover {
        /// apply, every process at the same priority
        fn apply_all(&mut self, now_ns: u64, actions: Vec<Action>, m: &mut dyn Machine, stats: &mut Stats) {
            self.apply(now_ns, actions, m, stats, &BTreeMap::new());
        }
    }

    #[test]
    fn a_higher_priority_process_is_promoted_first_and_a_lower_one_demoted_first() {
        // room for 2 pages a round; process 1 (low) and 2 (high) each want 2 pages promoted,
        // and each offers 2 pages for demotion
        let mut m = Fake::two([100, 100], vec![1; 8]);
        let mut mover =
            Mover::new(MoverConfig { rate_mbps: 1e6, max_bytes_per_round: 2 * 4096, ..MoverConfig::default() });
        let mut stats = Stats::default();
        let prio = BTreeMap::from([(1, -10), (2, 10)]);
        let up = |pid, addr: u64| Action::Move { pid, addr: addr * 4096, len: 2 * 4096, to: 0, priority: 0 };
        mover.apply(0, vec![up(1, 0), up(2, 2)], &mut m, &mut stats, &prio);
        assert_eq!((stats.processes[&1].promoted_pages, stats.processes[&2].promoted_pages), (0, 2));
        assert_eq!(stats.processes[&1].refused_pages["budget"], 2, "asked, and refused for the budget");
        // now both have 2 pages fast (pages 2, 3 are process 2's; move process 1's up by hand)
        m.node[0] = 0;
        m.node[1] = 0;
        let down = |pid, addr: u64| Action::Move { pid, addr: addr * 4096, len: 2 * 4096, to: 1, priority: 0 };
        let mut mover =
            Mover::new(MoverConfig { rate_mbps: 1e6, max_bytes_per_round: 2 * 4096, ..MoverConfig::default() });
        let mut stats = Stats::default();
        mover.apply(0, vec![down(2, 2), down(1, 0)], &mut m, &mut stats, &prio);
        assert_eq!((stats.processes[&1].demoted_pages, stats.processes[&2].demoted_pages), (2, 0));
    }

    fn promote(addr: u64, pages: u64) -> Action {
        Action::Move { pid: 1, addr: addr * 4096, len: pages * 4096, to: 0, priority: 1 }
    }

    #[test]
    fn a_move_beyond_the_tiers_capacity_is_refused_and_counted() {
        let mut m = Fake::two([10, 100], vec![1; 50]);
        let mut mover =
            Mover::new(MoverConfig { rate_mbps: 1e6, max_bytes_per_round: 1 << 30, ..MoverConfig::default() });
        let mut stats = Stats::default();
        mover.apply_all(0, vec![promote(0, 30), promote(60, 2)], &mut m, &mut stats);
        assert_eq!(stats.promoted_pages, 10);
        assert_eq!(stats.refused_pages["no_room"], 20);
        assert!(!stats.refused_pages.contains_key("gone"), "pages not resident are skipped, not refused");
        assert_eq!(m.on(0), 10);
    }

    #[test]
    fn each_process_gets_its_attempts_refusals_and_bytes() {
        let mut m = Fake::two([10, 100], vec![1; 50]);
        let mut mover =
            Mover::new(MoverConfig { rate_mbps: 1e6, max_bytes_per_round: 1 << 30, ..MoverConfig::default() });
        let mut stats = Stats::default();
        let up = |pid, addr: u64, n: u64| Action::Move { pid, addr: addr * 4096, len: n * 4096, to: 0, priority: 0 };
        mover.apply_all(0, vec![up(1, 0, 8), up(2, 20, 5)], &mut m, &mut stats);
        let (p1, p2) = (&stats.processes[&1], &stats.processes[&2]);
        assert_eq!((p1.attempted_pages, p1.promoted_pages, p1.promoted_bytes), (8, 8, 8 * 4096));
        assert!(p1.refused_pages.is_empty(), "{:?}", p1.refused_pages);
        assert_eq!((p2.attempted_pages, p2.promoted_pages, p2.refused_pages["no_room"]), (5, 2, 3));
        assert_eq!((stats.attempted_pages, stats.refused_pages["no_room"]), (13, 3));
    }

    #[test]
    fn a_page_moved_back_within_the_window_is_ping_pong() {
        let mut m = Fake::two([100, 100], vec![1; 4]);
        let mut mover = Mover::new(MoverConfig { pingpong_rounds: 2, ..MoverConfig::default() });
        let mut stats = Stats::default();
        let to = |addr: u64, tier: Tier| Action::Move { pid: 1, addr: addr * 4096, len: 4096, to: tier, priority: 0 };
        mover.apply_all(0, vec![to(0, 0), to(1, 0)], &mut m, &mut stats); // round 1: both up
        mover.apply_all(0, vec![to(0, 1)], &mut m, &mut stats); // round 2: page 0 back down
        assert_eq!(stats.pingpong_pages, 1);
        mover.apply_all(0, vec![to(0, 0)], &mut m, &mut stats); // round 3: and up again
        assert_eq!(stats.pingpong_pages, 2);
        mover.apply_all(0, vec![], &mut m, &mut stats); // rounds 4 and 5: nothing
        mover.apply_all(0, vec![], &mut m, &mut stats);
        mover.apply_all(0, vec![to(1, 1)], &mut m, &mut stats); // round 6: page 1, up at round 1, down
        assert_eq!(stats.pingpong_pages, 2, "outside the window: not ping-pong");
        mover.apply_all(0, vec![to(2, 0)], &mut m, &mut stats);
        mover.apply_all(0, vec![to(2, 0)], &mut m, &mut stats); // already there: no move
        assert_eq!((stats.pingpong_pages, stats.processes[&1].pingpong_pages), (2, 2));
    }

    #[test]
    fn pages_already_in_place_spend_no_budget() {
        // an object of 8 pages, 6 of them in the fast tier already, and a budget of 2 pages
        let mut m = Fake::two([100, 100], vec![0, 0, 0, 1, 0, 0, 0, 1]);
        let mut mover =
            Mover::new(MoverConfig { rate_mbps: 1e6, max_bytes_per_round: 2 * 4096, ..MoverConfig::default() });
        let mut stats = Stats::default();
        mover.apply_all(0, vec![promote(0, 8)], &mut m, &mut stats);
        assert_eq!(stats.promoted_pages, 2);
        assert!(stats.refused_pages.is_empty(), "{:?}", stats.refused_pages);
        assert_eq!(m.on(0), 8);
    }

    #[test]
    fn the_rate_limit_and_the_round_cap_hold() {
        let mut m = Fake::two([1000, 1000], vec![1; 500]);
        // 4 pages a round at most; 1 page's worth of tokens a millisecond
        let mut mover = Mover::new(MoverConfig {
            rate_mbps: 4096.0 / 1e3,
            max_bytes_per_round: 4 * 4096,
            ..MoverConfig::default()
        });
        let mut stats = Stats::default();
        mover.apply_all(0, vec![promote(0, 100)], &mut m, &mut stats);
        assert_eq!(stats.promoted_pages, 4, "the cap of the first round");
        assert_eq!(stats.refused_pages["budget"], 96);
        mover.apply_all(2_000_000, vec![promote(4, 100)], &mut m, &mut stats);
        assert_eq!(stats.promoted_pages, 6, "2 ms later: two pages' worth of tokens");
        mover.apply_all(1_000_000_000, vec![promote(6, 100)], &mut m, &mut stats);
        assert_eq!(stats.promoted_pages, 10, "tokens never exceed one round's cap");
    }

    #[test]
    fn demotions_go_first_to_make_room() {
        // a full fast tier: the promotion only fits after the demotion, whatever the priorities
        let mut m = Fake::two([2, 10], vec![0, 0, 1]);
        let mut mover = Mover::new(MoverConfig::default());
        let mut stats = Stats::default();
        let acts = vec![
            Action::Move { pid: 1, addr: 2 * 4096, len: 4096, to: 0, priority: 20 },
            Action::Move { pid: 1, addr: 0, len: 4096, to: 1, priority: 0 },
        ];
        mover.apply_all(0, acts, &mut m, &mut stats);
        assert_eq!((stats.promoted_pages, stats.demoted_pages), (1, 1));
        assert!(stats.refused_pages.is_empty(), "{:?}", stats.refused_pages);
    }

    #[test]
    fn a_tier_of_several_nodes_fills_the_nearest_first_and_moves_within_a_tier_are_rebalances() {
        // nodes 0 and 1 (tier 0) of 4 pages each, node 2 (tier 1); ten pages on node 2
        let mut m = Fake { cap: vec![4, 4, 100], tier: vec![0, 0, 1], node: vec![2; 10] };
        let mut mover = Mover::new(MoverConfig::default());
        let mut stats = Stats::default();
        mover.apply_all(0, vec![promote(0, 6)], &mut m, &mut stats);
        assert_eq!((m.on(0), m.on(1)), (4, 2), "node 0 filled first, then node 1");
        assert_eq!(stats.promoted_pages, 6);
        let to_node =
            |addr: u64, node: Node| Action::MoveToNode { pid: 1, addr: addr * 4096, len: 4096, node, priority: 0 };
        mover.apply_all(0, vec![to_node(4, 0)], &mut m, &mut stats);
        assert_eq!(stats.refused_pages["no_room"], 1, "node 0 is full");
        mover.apply_all(0, vec![to_node(0, 1), to_node(4, 0)], &mut m, &mut stats);
        assert_eq!((m.node[0], m.node[4]), (1, 0), "{:?}", m.node);
        assert_eq!((stats.rebalanced_pages, stats.promoted_pages, stats.demoted_pages), (2, 6, 0));
    }
}
