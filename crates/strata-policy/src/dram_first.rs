//! dram-first (seed 002): on a machine whose fast tier has several nodes (DRAM on this socket
//! and on another), use all of it before the slow tier, and balance without overfilling the
//! local node.
//!
//! - Placement: each process's default directive becomes `fast` (through its channel), so its
//!   allocations fill the fast tier's nodes nearest first (the local node, then the remote one:
//!   Linux's MPOL_PREFERRED_MANY) and only then fall back to the slow tier. Linux's own order
//!   follows distance, and a slow node on the local socket (distance 17) comes before DRAM on
//!   the other (21).
//! - Balancing, from the accessed bits of each round's scan: a page accessed on a slow node
//!   moves to the fast tier when it has room (local node first); a page accessed on a remote
//!   fast node moves to the local node only while the local node has room above
//!   `local_reserve`: it is never pulled into a full local node while a remote fast node holds
//!   it (the AutoNUMA behaviour the paper measures as harmful). Nothing is demoted.
use std::collections::BTreeSet;

use serde::Deserialize;

use crate::{Action, Directive, Needs, Node, Observations, Policy};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// share of the local node kept free by the balancer (ours: Linux keeps a low watermark
    /// free; the paper gives no number)
    pub local_reserve: f64,
    /// promote accessed pages of the slow tier into free fast memory
    pub promote_slow: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { local_reserve: 0.02, promote_slow: true }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..1.0).contains(&self.local_reserve) {
            return Err(format!("local_reserve must be in [0, 1), not {}", self.local_reserve));
        }
        Ok(())
    }
}

pub struct DramFirst {
    cfg: Config,
    /// processes whose default directive has been set
    placed: BTreeSet<u32>,
}

impl DramFirst {
    pub fn new(cfg: Config) -> DramFirst {
        DramFirst { cfg, placed: BTreeSet::new() }
    }
}

/// Consecutive pages (of one process, in address order) as ranges: (pid, addr, len).
fn ranges(pages: &[(u32, u64)], page: u64) -> Vec<(u32, u64, u64)> {
    let mut out: Vec<(u32, u64, u64)> = Vec::new();
    for &(pid, addr) in pages {
        match out.last_mut() {
            Some(r) if r.0 == pid && r.1 + r.2 == addr => r.2 += page,
            _ => out.push((pid, addr, page)),
        }
    }
    out
}

impl Policy for DramFirst {
    fn name(&self) -> &'static str {
        "dram-first"
    }

    fn decide(&mut self, obs: &Observations) -> Vec<Action> {
        let mut actions = Vec::new();
        for p in &obs.pages {
            if self.placed.insert(p.pid) {
                actions.push(Action::SetDirective { pid: p.pid, context: 0, directive: Directive::Fast });
            }
        }
        let Some(local) = obs.nodes.first().filter(|n| n.tier == 0) else { return actions };
        let page = obs.page_bytes.max(1);
        let reserve = (local.capacity_bytes as f64 * self.cfg.local_reserve) as u64;
        let mut local_room = local.free_bytes.saturating_sub(reserve) / page;
        let mut fast_room: u64 = obs.nodes.iter().filter(|n| n.tier == 0).map(|n| n.free_bytes / page).sum();
        fast_room = fast_room.saturating_sub(reserve / page);
        let remote_fast: Vec<Node> =
            obs.nodes.iter().filter(|n| n.tier == 0 && n.node != local.node).map(|n| n.node).collect();
        let (mut to_local, mut to_fast) = (Vec::new(), Vec::new());
        for p in obs.pages.iter().filter(|p| p.accessed) {
            if remote_fast.contains(&p.node) {
                if local_room > 0 {
                    local_room -= 1;
                    to_local.push((p.pid, p.addr));
                }
            } else if p.tier > 0 && self.cfg.promote_slow && fast_room > 0 {
                fast_room -= 1;
                to_fast.push((p.pid, p.addr));
            }
        }
        for (pid, addr, len) in ranges(&to_fast, page) {
            actions.push(Action::Move { pid, addr, len, to: 0, priority: 1 });
        }
        for (pid, addr, len) in ranges(&to_local, page) {
            actions.push(Action::MoveToNode { pid, addr, len, node: local.node, priority: 0 });
        }
        actions
    }

    fn needs(&self) -> Needs {
        Needs { scan: true, ..Needs::default() }
    }

    fn process_directive(&self) -> Option<Directive> {
        Some(Directive::Fast)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeObs, PageObs};

    const PAGE: u64 = 4096;

    /// Local DRAM (node 0) and remote DRAM (node 1) in tier 0, slow memory (node 2) nearer than
    /// the remote DRAM, as seed 002's machine: nodes nearest first.
    fn nodes(local_free: u64) -> Vec<NodeObs> {
        vec![
            NodeObs { node: 0, tier: 0, distance: 10, capacity_bytes: 100 * PAGE, free_bytes: local_free * PAGE },
            NodeObs { node: 2, tier: 1, distance: 17, capacity_bytes: 1000 * PAGE, free_bytes: 900 * PAGE },
            NodeObs { node: 1, tier: 0, distance: 21, capacity_bytes: 100 * PAGE, free_bytes: 50 * PAGE },
        ]
    }

    fn page(k: u64, node: u8, accessed: bool) -> PageObs {
        PageObs { pid: 7, addr: k * PAGE, tier: if node == 2 { 1 } else { 0 }, node, accessed, dirty: false }
    }

    fn obs(local_free: u64, pages: Vec<PageObs>) -> Observations {
        let nodes = nodes(local_free);
        Observations { page_bytes: PAGE, tiers: crate::tiers_of(&nodes), nodes, pages, ..Default::default() }
    }

    #[test]
    fn a_process_is_sent_to_the_fast_tier_once_and_hot_slow_pages_are_promoted() {
        let mut p = DramFirst::new(Config::default());
        let a = p.decide(&obs(10, vec![page(0, 2, true), page(1, 2, true), page(2, 2, false)]));
        assert_eq!(
            a,
            vec![
                Action::SetDirective { pid: 7, context: 0, directive: Directive::Fast },
                Action::Move { pid: 7, addr: 0, len: 2 * PAGE, to: 0, priority: 1 },
            ]
        );
        let a = p.decide(&obs(10, vec![page(0, 0, true)]));
        assert!(a.is_empty(), "the directive is set once, and a local page stays: {a:?}");
    }

    #[test]
    fn a_remote_page_is_pulled_local_only_while_the_local_node_has_room() {
        let mut p = DramFirst::new(Config::default());
        p.placed.insert(7);
        let hot_remote = vec![page(0, 1, true), page(1, 1, true), page(2, 1, true), page(3, 1, true)];
        // 4 free pages, 2 of them the reserve (2 % of 100): two pages come local
        let a = p.decide(&obs(4, hot_remote.clone()));
        assert_eq!(a, vec![Action::MoveToNode { pid: 7, addr: 0, len: 2 * PAGE, node: 0, priority: 0 }]);
        // a full local node: the remote DRAM keeps them
        assert!(p.decide(&obs(2, hot_remote.clone())).is_empty());
        assert!(p.decide(&obs(0, hot_remote)).is_empty());
    }
}
