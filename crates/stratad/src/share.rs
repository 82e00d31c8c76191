//! One fast tier, many processes: who gets how much of it (seed 003 §5.5, as issue #22 puts it).
//!
//! Processes are grouped: those of equal priority share a group (and one instance of the
//! policy, which ranks their pages or objects together), and a process with a fast-tier limit
//! (`max_fast_bytes`) is a group of its own. Groups are served highest priority first. Each
//! group *wants* what its processes have resident (a process cannot use more fast memory than
//! it has memory), capped by the limits. At each priority level:
//!
//! - when what the level's groups want fits in what is left, each group's share is everything
//!   left but what its peers at the level want (so a group may grow into memory nobody above
//!   it needs), capped by its limit;
//! - when it does not fit, what is left is split between the level's groups in proportion to
//!   what they want, each capped by its limit.
//!
//! The next level gets what is left after what this level wants. So a high-priority process's
//! hot data is promoted first (the lower groups' shares shrink to make room), a low-priority
//! process's data is demoted first (its policy sees a fast tier of its share only), and the
//! fast memory a high-priority process does not use is not wasted: the lower groups fill it.
//! MAT's own scheme (every lower-priority object in the slow tier while a higher priority
//! runs) is this with high-priority processes big enough to want the whole tier.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A group's identity, kept from round to round so its policy keeps its state. In JSON:
/// {"priority": N} or {"limited": pid}.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKey {
    /// the processes of this priority without a limit
    Priority(i32),
    /// a process with a fast-tier limit, alone
    Limited(u32),
}

/// A process as the sharing sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Member {
    pub pid: u32,
    pub priority: i32,
    pub max_fast_bytes: Option<u64>,
    /// resident bytes in any tier, and in the fast tier
    pub resident_bytes: u64,
    pub fast_bytes: u64,
}

/// A group and its share of the fast tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub key: GroupKey,
    pub priority: i32,
    pub pids: Vec<u32>,
    /// fast-tier bytes its policy may use
    pub share_bytes: u64,
    /// fast-tier bytes its processes have resident now
    pub fast_bytes: u64,
    /// what it wants: its processes' resident bytes, capped by the limit
    pub want_bytes: u64,
}

/// The groups of `members`, highest priority first, with their shares of `available` bytes of
/// fast tier (its capacity less what processes outside Strata hold).
pub fn groups(members: &[Member], available: u64) -> Vec<Group> {
    let mut by_key: BTreeMap<GroupKey, Group> = BTreeMap::new();
    for m in members {
        let key = match m.max_fast_bytes {
            Some(_) => GroupKey::Limited(m.pid),
            None => GroupKey::Priority(m.priority),
        };
        let g = by_key.entry(key).or_insert(Group {
            key,
            priority: m.priority,
            pids: Vec::new(),
            share_bytes: 0,
            fast_bytes: 0,
            want_bytes: 0,
        });
        g.pids.push(m.pid);
        g.fast_bytes += m.fast_bytes;
        g.want_bytes += m.resident_bytes.min(m.max_fast_bytes.unwrap_or(u64::MAX));
    }
    let mut out: Vec<Group> = by_key.into_values().collect();
    out.sort_by_key(|g| (std::cmp::Reverse(g.priority), g.key));
    let limit_of = |g: &Group| match g.key {
        GroupKey::Limited(pid) => members.iter().find(|m| m.pid == pid).and_then(|m| m.max_fast_bytes),
        GroupKey::Priority(_) => None,
    };
    let mut left = available;
    let mut i = 0;
    while i < out.len() {
        let level = out[i].priority;
        let j = out[i..].iter().position(|g| g.priority != level).map_or(out.len(), |k| i + k);
        let want: u64 = out[i..j].iter().map(|g| g.want_bytes).sum();
        for g in &mut out[i..j] {
            let limit = limit_of(g).unwrap_or(u64::MAX);
            g.share_bytes = if want <= left {
                (left - (want - g.want_bytes)).min(limit)
            } else {
                ((left as u128 * g.want_bytes as u128 / want.max(1) as u128) as u64).min(limit)
            };
        }
        left = left.saturating_sub(want);
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn member(pid: u32, priority: i32, resident: u64, fast: u64, limit: Option<u64>) -> Member {
        Member { pid, priority, max_fast_bytes: limit, resident_bytes: resident, fast_bytes: fast }
    }

    fn share(gs: &[Group], key: GroupKey) -> u64 {
        gs.iter().find(|g| g.key == key).unwrap().share_bytes
    }

    #[test]
    fn a_higher_priority_is_served_first_and_what_it_does_not_use_goes_down() {
        // fast tier of 4 GiB; high wants 1, low wants 6
        let gs = groups(&[member(1, 10, 6 * G, 3 * G, None), member(2, 0, G, G / 2, None)], 4 * G);
        assert_eq!(gs.iter().map(|g| g.key).collect::<Vec<_>>(), [GroupKey::Priority(10), GroupKey::Priority(0)]);
        let gs = groups(&[member(1, 0, 6 * G, 3 * G, None), member(2, 10, G, G / 2, None)], 4 * G);
        assert_eq!(gs[0].pids, [2], "highest priority first");
        assert_eq!(share(&gs, GroupKey::Priority(10)), 4 * G, "everything its peers (none) do not want");
        assert_eq!(share(&gs, GroupKey::Priority(0)), 3 * G, "what the high group does not want");
    }

    #[test]
    fn a_high_priority_process_that_wants_everything_leaves_nothing_below() {
        let gs = groups(&[member(1, 10, 8 * G, 0, None), member(2, 0, 2 * G, 2 * G, None)], 4 * G);
        assert_eq!(share(&gs, GroupKey::Priority(10)), 4 * G);
        assert_eq!(share(&gs, GroupKey::Priority(0)), 0, "MAT's scheme: all of it to the slow tier");
    }

    #[test]
    fn equal_priorities_share_one_group_and_limits_are_groups_of_their_own() {
        let gs = groups(
            &[member(1, 0, 3 * G, 0, None), member(2, 0, 3 * G, 0, None), member(3, 0, 6 * G, 0, Some(G))],
            4 * G,
        );
        assert_eq!(gs.len(), 2);
        let all = gs.iter().find(|g| g.key == GroupKey::Priority(0)).unwrap();
        assert_eq!(all.pids, [1, 2]);
        // the level wants 6 + 1 GiB of 4: shared in proportion, the limited one capped
        assert_eq!(all.share_bytes, 4 * G * 6 / 7);
        assert_eq!(share(&gs, GroupKey::Limited(3)), 4 * G / 7);
        let gs = groups(&[member(3, 0, 6 * G, 0, Some(G))], 4 * G);
        assert_eq!(share(&gs, GroupKey::Limited(3)), G, "a limit holds even with the tier to itself");
    }

    #[test]
    fn shares_never_exceed_what_is_available() {
        let mut members = Vec::new();
        for pid in 0..20u32 {
            let limit = (pid % 3 == 0).then_some(pid as u64 * G / 4);
            members.push(member(pid, (pid % 4) as i32 * 5, (pid as u64 + 1) * G / 2, 0, limit));
        }
        for available in [0, G, 7 * G, 100 * G] {
            let gs = groups(&members, available);
            assert_eq!(gs.iter().map(|g| g.pids.len()).sum::<usize>(), 20);
            // at each level the shares of groups that do not fit add up to at most what was left
            for g in &gs {
                assert!(g.share_bytes <= available, "{g:?}");
            }
            let wanted: u64 = gs.iter().map(|g| g.want_bytes).sum();
            if wanted > available {
                let lowest = gs.last().unwrap();
                assert!(lowest.share_bytes < lowest.want_bytes || lowest.want_bytes == 0, "{gs:?}");
            }
        }
    }
}
