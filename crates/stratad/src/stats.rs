//! What the engine did, per policy, per tier and per process.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One tier at the last round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierStats {
    pub tier: u8,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
}

/// What the engine moved of one process (the fields after the pages are absent in older
/// reports).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    #[serde(default)]
    pub promoted_bytes: u64,
    #[serde(default)]
    pub demoted_bytes: u64,
    /// pages a policy asked to move that were resident elsewhere (moved or refused)
    #[serde(default)]
    pub attempted_pages: u64,
    /// of those, the ones that did not move, by reason
    #[serde(default)]
    pub refused_pages: BTreeMap<String, u64>,
    /// pages moved back the other way within `mover.pingpong_rounds` rounds of their last move
    #[serde(default)]
    pub pingpong_pages: u64,
}

/// The engine's statistics (`"engine"` in the emulator's report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub policy: String,
    pub rounds: u64,
    pub pages_scanned: u64,
    pub full_scans: u64,
    /// LLC-miss samples and hint faults the trackers read
    pub samples: u64,
    /// the machine has no LLC-miss sampler: the scan's accessed pages stand in for the samples
    /// the policy needs (one a page accessed that round)
    #[serde(default)]
    pub samples_from_pages: bool,
    pub hint_faults: u64,
    /// the most tracked objects and allocation contexts one round saw
    pub objects: u64,
    pub contexts: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    /// pages moved between nodes of one tier
    pub rebalanced_pages: u64,
    /// every byte moved
    pub migrated_bytes: u64,
    /// pages a policy asked to move that did not, by reason (no_room, gone, budget, ...)
    pub refused_pages: BTreeMap<String, u64>,
    /// pages a policy asked to move that were resident elsewhere (moved or refused)
    #[serde(default)]
    pub attempted_pages: u64,
    /// pages moved back the other way within `mover.pingpong_rounds` rounds of their last move
    #[serde(default)]
    pub pingpong_pages: u64,
    pub directives_set: u64,
    /// directives the machine could not set (no channel)
    pub directives_refused: u64,
    /// host CPU time spent in the policy's decisions, ns (not simulated; varies with the host)
    pub policy_cpu_ns: u64,
    /// host CPU time of whole rounds (scan, policy, moves), ns
    pub engine_cpu_ns: u64,
    pub tiers: Vec<TierStats>,
    pub processes: BTreeMap<u32, ProcessStats>,
    /// how the fast tier was shared at the last round, where processes of several priorities
    /// or with limits shared it (crate::share)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<crate::share::Group>,
}
