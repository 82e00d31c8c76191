//! The report the emulator writes at exit (emu/report.c), as typed values. A change of its
//! shape bumps `version` there and here; counters unknown to this side are an error, so the two
//! cannot drift apart unnoticed.
use serde::{Deserialize, Serialize};

use crate::machine::Kernel;
use crate::Error;

/// The report's version this side reads.
pub const REPORT_VERSION: u32 = 4;

/// Counters of a thread, or summed over threads (emu/emu.h's EMU_COUNTERS, in its order).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    pub accesses: u64,
    pub loads: u64,
    pub stores: u64,
    /// bytes copied or set by memcpy, memmove, memset
    pub bulk_bytes: u64,
    pub l1_hits: u64,
    pub l1_misses: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub llc_hits: u64,
    pub llc_misses: u64,
    /// L2 misses that continued a sequential stream (prefetched)
    pub stream_misses: u64,
    /// L2 misses that repeated their instruction's constant stride (prefetched; not counted
    /// again when they also continued a stream)
    pub stride_misses: u64,
    pub dtlb_misses: u64,
    /// page walks
    pub stlb_misses: u64,
    /// first touches
    pub page_faults: u64,
    pub hint_faults: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub moved_pages: u64,
    pub shootdowns: u64,
    /// simulated time the thread spent moving pages, in picoseconds
    pub migrate_ps: u64,
    /// simulated time the emulated kernel's tiering took on the thread besides moves: hint
    /// faults, and the linux mode's NUMA scanner (task work, run by the program's threads)
    pub kernel_ps: u64,
}

/// Work done outside the program's threads: moves (an engine's mover, the tpp mode's
/// demotion) and an engine's page walks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Background {
    /// simulated time of background moves
    pub ns: u64,
    pub moved_pages: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub shootdowns: u64,
    /// simulated time of an engine's page walks (`scan_ns` a page)
    pub scan_ns: u64,
    pub scanned_pages: u64,
}

/// Transactional moves (the nomad kernel mode, or an engine's transactional mover) and the
/// shadows they keep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transactional {
    /// copies committed: no store hit the page while it was copied
    pub commits: u64,
    /// copies thrown away because a store hit the page
    pub aborts: u64,
    /// demotions by remapping a page onto its shadow: no copy
    pub shadow_demotions: u64,
    /// shadows held at the end
    pub shadows: u64,
    /// shadows dropped because their page was written
    pub shadows_written: u64,
    /// shadows freed because their slow node ran out of room
    pub shadows_reclaimed: u64,
}

/// The linux kernel mode's own counters (emu/linux.c's rules at work).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Linux {
    /// every period and threshold was the sysctl's value times this
    pub time_scale: f64,
    /// NUMA scans (task_numa_work) and completed passes over the address space
    pub scans: u64,
    pub passes: u64,
    /// slow-tier pages marked for a hint fault
    pub marked_pages: u64,
    /// the scan period and the hot threshold at the end
    pub scan_period_ns: u64,
    pub hot_threshold_ns: u64,
    /// hint faults that passed the hot threshold (PGPROMOTE_CANDIDATE)
    pub candidates: u64,
    pub promoted_pages: u64,
    /// hint faults refused: over the hot threshold, over the rate limit, or the fast node below
    /// its high watermark (which wakes kswapd)
    pub refused_cold: u64,
    pub refused_rate: u64,
    pub refused_unbalanced: u64,
    pub kswapd_wakeups: u64,
    /// pages kswapd demoted (background) and pages threads demoted while allocating (direct)
    pub kswapd_demoted_pages: u64,
    pub direct_demoted_pages: u64,
    /// first touches that went to a slower node because the faster one was at its watermark
    pub spilled_allocations: u64,
}

/// One emulated node (tier).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    pub node: u32,
    pub resident_pages: u64,
    pub capacity_pages: u64,
    /// LLC misses and write-backs this node served
    pub memory_accesses: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadReport {
    pub thread: u32,
    pub sim_ns: u64,
    #[serde(flatten)]
    pub counters: Counters,
}

/// What the emulated machine saw of one run (model outputs of its preset).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub version: u32,
    pub preset: String,
    pub kernel: Kernel,
    /// the slowest thread's simulated clock
    pub sim_ns: u64,
    pub threads: u32,
    /// the most pages resident at once, all nodes: the program's footprint as the emulator saw
    /// it (pages unmapped before exit included)
    pub peak_resident_pages: u64,
    pub totals: Counters,
    pub background: Background,
    /// pages demoted within `pingpong_window_ms` of their last promotion, whoever moved them
    #[serde(default)]
    pub pingpong_pages: u64,
    #[serde(default)]
    pub pingpong_window_ms: f64,
    #[serde(default)]
    pub transactional: Transactional,
    /// the linux kernel mode's counters (only under it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux: Option<Linux>,
    pub nodes: Vec<NodeReport>,
    pub samples_lost: u64,
    pub hint_fault_events_lost: u64,
    pub per_thread: Vec<ThreadReport>,
    /// a tiering engine's statistics, when one ran in the program (stratad::Stats)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<serde_json::Value>,
}

impl Report {
    /// Parse the emulator's file, which holds a report or {"error": ...}.
    pub fn parse(text: &str) -> Result<Report, Error> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::Failed(format!("the emulator's report: {e}")))?;
        if let Some(e) = v["error"].as_str() {
            return Err(Error::Invalid(e.to_string()));
        }
        let version = v["version"].as_u64().unwrap_or(0);
        if version != REPORT_VERSION as u64 {
            return Err(Error::Failed(format!(
                "the emulator wrote a version {version} report; this strata reads version {REPORT_VERSION} (rebuild with make emu)"
            )));
        }
        serde_json::from_value(v).map_err(|e| Error::Failed(format!("the emulator's report: {e}")))
    }

    pub fn footprint_bytes(&self) -> u64 {
        self.peak_resident_pages * 4096
    }

    /// Memory accesses served by node 0 (the fast tier) and by the others.
    pub fn fast_and_far_accesses(&self) -> (u64, u64) {
        let fast = self.nodes.iter().filter(|n| n.node == 0).map(|n| n.memory_accesses).sum();
        let far = self.nodes.iter().filter(|n| n.node != 0).map(|n| n.memory_accesses).sum();
        (fast, far)
    }

    pub fn promoted_pages(&self) -> u64 {
        self.totals.promoted_pages + self.background.promoted_pages
    }

    pub fn demoted_pages(&self) -> u64 {
        self.totals.demoted_pages + self.background.demoted_pages
    }

    /// The human table of `strata emu run`.
    pub fn table(&self, wall_s: f64) -> String {
        let t = &self.totals;
        let pct = |part: u64, whole: u64| {
            if whole == 0 {
                "-".into()
            } else {
                format!("{:.2}%", 100.0 * part as f64 / whole as f64)
            }
        };
        let mut s = format!(
            "emulated machine: preset {} (model output), kernel {}, {} thread(s)\n",
            self.preset,
            self.kernel.name(),
            self.threads
        );
        s += &format!("simulated time {:.3} ms (wall {:.2} s)\n\n", self.sim_ns as f64 / 1e6, wall_s);
        s += &format!(
            "accesses {} (loads {}, stores {}; bulk copies {} B)\n",
            t.accesses, t.loads, t.stores, t.bulk_bytes
        );
        s += &format!("{:<6} {:>14} {:>14} {:>10}\n", "level", "hits", "misses", "miss rate");
        for (name, h, m) in
            [("L1D", t.l1_hits, t.l1_misses), ("L2", t.l2_hits, t.l2_misses), ("LLC", t.llc_hits, t.llc_misses)]
        {
            s += &format!("{:<6} {:>14} {:>14} {:>10}\n", name, h, m, pct(m, h + m));
        }
        s += &format!(
            "L2 misses prefetched: continuing a sequential stream {}, repeating a stride {}\nDTLB misses {}, STLB misses (page walks) {}\n",
            t.stream_misses, t.stride_misses, t.dtlb_misses, t.stlb_misses
        );
        s += &format!("page faults (first touch) {}, hint faults {}\n\n", t.page_faults, t.hint_faults);
        s += &format!("{:<5} {:>16} {:>16} {:>16}\n", "node", "memory accesses", "resident pages", "capacity pages");
        for n in &self.nodes {
            s +=
                &format!("{:<5} {:>16} {:>16} {:>16}\n", n.node, n.memory_accesses, n.resident_pages, n.capacity_pages);
        }
        let b = &self.background;
        s += &format!(
            "\nmigration: promoted {} pages, demoted {} pages ({} MiB moved); by the program's threads {:.3} ms, in the background {:.3} ms; {} shootdowns\n",
            self.promoted_pages(),
            self.demoted_pages(),
            ((t.moved_pages + b.moved_pages) * 4096) >> 20,
            t.migrate_ps as f64 / 1e9,
            b.ns as f64 / 1e6,
            t.shootdowns + b.shootdowns
        );
        if self.pingpong_pages > 0 {
            s += &format!(
                "ping-pong: {} pages demoted within {} ms of their promotion\n",
                self.pingpong_pages, self.pingpong_window_ms
            );
        }
        let x = &self.transactional;
        if x.commits + x.aborts + x.shadow_demotions > 0 {
            s += &format!(
                "transactional: {} commits, {} aborts (written while copied), {} demotions by remapping a shadow; shadows: {} at the end, {} dropped on write, {} reclaimed\n",
                x.commits, x.aborts, x.shadow_demotions, x.shadows, x.shadows_written, x.shadows_reclaimed
            );
        }
        if let Some(e) = &self.engine {
            let n = |k: &str| e[k].as_u64().unwrap_or(0);
            s += &format!(
                "\nengine: policy {}, {} rounds ({} full scans, {} pages read, {:.3} ms of background walks), promoted {} pages, demoted {}, refused {}; policy CPU {:.1} ms on this host\n",
                e["policy"].as_str().unwrap_or("?"),
                n("rounds"),
                n("full_scans"),
                n("pages_scanned"),
                self.background.scan_ns as f64 / 1e6,
                n("promoted_pages"),
                n("demoted_pages"),
                e["refused_pages"].as_object().map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum::<u64>()),
                n("policy_cpu_ns") as f64 / 1e6
            );
        }
        if self.per_thread.len() > 1 {
            s += &format!("\n{:<7} {:>14} {:>14} {:>12}\n", "thread", "sim ms", "accesses", "LLC misses");
            for x in &self.per_thread {
                s += &format!(
                    "{:<7} {:>14.3} {:>14} {:>12}\n",
                    x.thread,
                    x.sim_ns as f64 / 1e6,
                    x.counters.accesses,
                    x.counters.llc_misses
                );
            }
        }
        s
    }
}
