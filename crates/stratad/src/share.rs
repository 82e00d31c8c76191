//! One fast tier, many processes: who gets how much of it (seed 003 §5.5, as issue #22 puts it).
//!
//! Processes are grouped: those of equal priority share a group (and one instance of the
//! policy, which ranks their pages or objects together); a process with fast-tier bounds of its
//! own (`max_fast_bytes`, `min_fast_bytes`) is a group of its own, and the processes of a rule
//! that names a cgroup are one group, with the cgroup's bounds. Each group *wants* what its
//! processes have resident (a process cannot use more fast memory than it has memory), capped
//! by its limit.
//!
//! First every group gets its guarantee (`min_fast_bytes`), as much of it as it wants; if the
//! guarantees add up to more than there is, each gets a part in proportion. Then what is left
//! goes to what the groups want beyond their guarantees, highest priority first. At each
//! priority level:
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
/// {"priority": N}, {"limited": pid} or {"cgroup": N}.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKey {
    /// the processes of this priority without a limit
    Priority(i32),
    /// a process with fast-tier bounds of its own, alone
    Limited(u32),
    /// the processes of the configuration's Nth rule, which names a cgroup
    Cgroup(usize),
}

/// A process as the sharing sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Member {
    pub pid: u32,
    pub priority: i32,
    /// its group when not its priority's: Limited(pid) or Cgroup(rule) (None: its priority's,
    /// or Limited when it has bounds)
    pub key: Option<GroupKey>,
    /// its group's bounds: fast-tier bytes at most, and at least (as much of it as it wants)
    pub max_fast_bytes: Option<u64>,
    pub min_fast_bytes: u64,
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
    /// the cgroup its rule names, for a Cgroup group
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// its bounds (from its rule or its cgroup)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fast_bytes: Option<u64>,
    #[serde(default)]
    pub min_fast_bytes: u64,
    /// fast-tier bytes its policy may use
    pub share_bytes: u64,
    /// fast-tier bytes its processes have resident now
    pub fast_bytes: u64,
    /// what it wants: its processes' resident bytes, capped by the limit
    pub want_bytes: u64,
}

/// The groups of `members`, highest priority first, with their shares of `available` bytes of
/// fast tier (its capacity less what processes outside Strata hold). `cgroups` names the cgroup
/// of each Cgroup key.
pub fn groups(members: &[Member], available: u64, cgroups: &BTreeMap<usize, String>) -> Vec<Group> {
    let mut by_key: BTreeMap<GroupKey, Group> = BTreeMap::new();
    for m in members {
        let key = match m.key {
            Some(k) => k,
            None if m.max_fast_bytes.is_some() || m.min_fast_bytes > 0 => GroupKey::Limited(m.pid),
            None => GroupKey::Priority(m.priority),
        };
        let g = by_key.entry(key).or_insert(Group {
            key,
            priority: m.priority,
            pids: Vec::new(),
            cgroup: match key {
                GroupKey::Cgroup(rule) => cgroups.get(&rule).cloned(),
                _ => None,
            },
            max_fast_bytes: m.max_fast_bytes,
            min_fast_bytes: m.min_fast_bytes,
            share_bytes: 0,
            fast_bytes: 0,
            want_bytes: 0,
        });
        g.pids.push(m.pid);
        g.priority = g.priority.max(m.priority);
        g.fast_bytes += m.fast_bytes;
        g.want_bytes += m.resident_bytes;
    }
    let mut out: Vec<Group> = by_key.into_values().collect();
    for g in &mut out {
        g.want_bytes = g.want_bytes.min(g.max_fast_bytes.unwrap_or(u64::MAX));
    }
    out.sort_by_key(|g| (std::cmp::Reverse(g.priority), g.key));
    // the guarantees first, in proportion when they do not all fit
    let guaranteed: Vec<u64> = out.iter().map(|g| g.min_fast_bytes.min(g.want_bytes)).collect();
    let all: u64 = guaranteed.iter().sum();
    let part = |x: u64, num: u64, den: u64| (x as u128 * num as u128 / den.max(1) as u128) as u64;
    let guaranteed: Vec<u64> =
        guaranteed.into_iter().map(|x| if all <= available { x } else { part(x, available, all) }).collect();
    let mut left = available - guaranteed.iter().sum::<u64>().min(available);
    // then what each wants beyond it, level by level
    let mut i = 0;
    while i < out.len() {
        let level = out[i].priority;
        let j = out[i..].iter().position(|g| g.priority != level).map_or(out.len(), |k| i + k);
        let beyond = |k: usize, g: &Group| g.want_bytes - guaranteed[k];
        let want: u64 = (i..j).map(|k| beyond(k, &out[k])).sum();
        for k in i..j {
            let g = &out[k];
            let more = if want <= left { left - (want - beyond(k, g)) } else { part(left, beyond(k, g), want) };
            out[k].share_bytes = (guaranteed[k] + more).min(g.max_fast_bytes.unwrap_or(u64::MAX));
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
        Member { pid, priority, max_fast_bytes: limit, resident_bytes: resident, fast_bytes: fast, ..Member::default() }
    }

    fn groups(members: &[Member], available: u64) -> Vec<Group> {
        super::groups(members, available, &BTreeMap::new())
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
            let m = member(pid, (pid % 4) as i32 * 5, (pid as u64 + 1) * G / 2, 0, limit);
            members.push(Member { min_fast_bytes: (pid % 5 == 1) as u64 * pid as u64 * G / 3, ..m });
        }
        for available in [0, G, 7 * G, 100 * G] {
            let gs = groups(&members, available);
            assert_eq!(gs.iter().map(|g| g.pids.len()).sum::<usize>(), 20);
            // at each level the shares of groups that do not fit add up to at most what was left
            for g in &gs {
                assert!(g.share_bytes <= available, "{g:?}");
                assert!(g.share_bytes <= g.max_fast_bytes.unwrap_or(u64::MAX), "{g:?}");
            }
            let guaranteed: u64 = gs.iter().map(|g| g.min_fast_bytes.min(g.want_bytes)).sum();
            if guaranteed <= available {
                for g in &gs {
                    let floor = g.min_fast_bytes.min(g.want_bytes).min(g.max_fast_bytes.unwrap_or(u64::MAX));
                    assert!(g.share_bytes >= floor, "a guarantee that fits is served: {g:?}");
                }
            }
            let wanted: u64 = gs.iter().map(|g| g.want_bytes).sum();
            if wanted > available {
                let lowest = gs.last().unwrap();
                assert!(lowest.share_bytes < lowest.want_bytes || lowest.want_bytes == 0, "{gs:?}");
            }
        }
    }

    #[test]
    fn a_guarantee_is_served_before_any_priority_and_only_as_far_as_it_is_wanted() {
        let cgroup = |pid, priority, resident, min| Member {
            key: Some(GroupKey::Cgroup(0)),
            min_fast_bytes: min,
            ..member(pid, priority, resident, 0, None)
        };
        // a low-priority cgroup guaranteed 2 GiB beside a high-priority process that wants all 4
        let gs =
            groups(&[member(1, 10, 8 * G, 0, None), cgroup(2, -10, 3 * G, 2 * G), cgroup(3, -10, G, 2 * G)], 4 * G);
        assert_eq!(gs.len(), 2, "the cgroup's processes are one group: {gs:?}");
        assert_eq!(share(&gs, GroupKey::Cgroup(0)), 2 * G, "its guarantee, and nothing more");
        assert_eq!(share(&gs, GroupKey::Priority(10)), 2 * G, "the rest");
        // a guarantee beyond what the group has resident leaves the rest to the others
        let gs = groups(&[member(1, 10, 8 * G, 0, None), cgroup(2, -10, G / 2, 2 * G)], 4 * G);
        assert_eq!(share(&gs, GroupKey::Cgroup(0)), G / 2);
        assert_eq!(share(&gs, GroupKey::Priority(10)), 4 * G - G / 2);
        // guarantees that do not fit are served in proportion
        let alone = |pid, min| Member { min_fast_bytes: min, ..member(pid, 0, 8 * G, 0, None) };
        let gs = groups(&[alone(1, 3 * G), alone(2, G)], 2 * G);
        assert_eq!((share(&gs, GroupKey::Limited(1)), share(&gs, GroupKey::Limited(2))), (3 * G / 2, G / 2));
        // a limit caps a guarantee
        let both = Member { max_fast_bytes: Some(G), ..alone(1, 3 * G) };
        assert_eq!(share(&groups(&[both], 4 * G), GroupKey::Limited(1)), G);
    }
}
