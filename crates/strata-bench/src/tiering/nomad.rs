//! `strata bench nomad`: Nomad's micro-benchmark (Xiang et al., OSDI'24, section 4.1), at a
//! scaled size on the emulated machine, under no migration, the kernel's tiering, the TPP
//! mechanism and Nomad.
//!
//! The paper's machine has 16 GB of fast memory; its three scenarios, in GB:
//!
//! | scenario | resident | working set | placed before the run |
//! |---|---|---|---|
//! | small | 20 | 10 | 10 GB of cold data first (on the fast tier), then the working set: 6 GB fast, 4 GB slow |
//! | medium | 27 | 13.5 | 13.5 GB cold first, then the working set: 2.5 GB fast, 11 GB slow |
//! | large | 27 | 27 | the working set only: 16 GB fast, 11 GB slow |
//!
//! Here `--fast-mb` stands for the paper's 16 GB (64 MiB: 1 GB is 4 MiB). The paper's kernel
//! kept about 3-4 GB of the fast tier for itself, which is why its medium working set (13.5 GB)
//! thrashed; the program's fast tier here is the 16 GB less `--system-gb` (3.5), so the small
//! working set fits, the medium one just does not, the large one by far. First touch places
//! the cold data and then the working set, as the paper did. The program reads (or writes) 64-byte lines of
//! the working set, Zipf-distributed over its pages (theta 0.99, the hot pages scattered over
//! the working set), a line at random within the page. A round is one access per line of the
//! working set; the first round is the paper's "migration in progress", the last (after at
//! least four) its "stable" phase. The figure of a round is MB/s of lines over simulated time.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use strata_emu::{MachineArgs, Tiering};
use strata_util::Progress;
use strata_ycsb::zipf::{scramble, Rng, Zipf};

use super::workloads::Outcome;
use super::{row, setups, Matrix, Options as TieringOptions, Row, Setup, DEFAULT_PRESET, DEFAULT_TIME_SCALE};
use crate::{ensure, Error};

/// The scenarios: (name, resident GB, working set GB) on the paper's 16 GB fast tier.
pub const SCENARIOS: &[(&str, f64, f64)] = &[("small", 20.0, 10.0), ("medium", 27.0, 13.5), ("large", 27.0, 27.0)];

/// The paper's fast tier, GB.
const PAPER_FAST_GB: f64 = 16.0;

/// What the paper reports, Nomad against TPP (Figures 7-9, Table 2; section 4.1's text), per
/// scenario: (migration in progress, stable).
const PAPER: &[(&str, &str, &str)] = &[
    ("small", "well above TPP (platforms A, D), similar (C)", "about equal: both serve the working set from DRAM"),
    ("medium", "well above TPP", "reads: up to 4x TPP (shadows make thrashing's demotions free); writes: above TPP"),
    ("large", "2-5x TPP", "2-5x TPP; TPP thrashes, migration is counterproductive"),
];

/// The paper's Zipf exponent.
const THETA: f64 = 0.99;
const LINE: usize = 64;
const PAGE: usize = 4096;

/// The workload's name: nomad-SCENARIO-read or -write.
pub fn workload_name(scenario: &str, write: bool) -> String {
    format!("nomad-{scenario}-{}", if write { "write" } else { "read" })
}

/// Run `nomad-SCENARIO-ACCESS` here with a fast tier of `fast_mb` and `rounds` rounds (0: 6);
/// None when the name is not one.
pub fn run(workload: &str, fast_mb: u64, rounds: u64) -> Option<Outcome> {
    let rest = workload.strip_prefix("nomad-")?;
    let (scenario, access) = rest.rsplit_once('-')?;
    let write = match access {
        "read" => false,
        "write" => true,
        _ => return None,
    };
    let &(_, rss_gb, wss_gb) = SCENARIOS.iter().find(|s| s.0 == scenario)?;
    let mib_per_gb = fast_mb as f64 / PAPER_FAST_GB;
    let bytes = |gb: f64| (gb * mib_per_gb * 1048576.0) as usize / PAGE * PAGE;
    let rounds = if rounds == 0 { 6 } else { rounds };
    Some(micro(workload, bytes(rss_gb - wss_gb), bytes(wss_gb).max(PAGE), write, rounds))
}

/// Cold data first, then the working set, both touched in order; then `rounds` rounds of
/// Zipf-distributed line accesses to the working set, each timed.
fn micro(name: &str, cold_bytes: usize, wss_bytes: usize, write: bool, rounds: u64) -> Outcome {
    let words = |b: usize| b / 8;
    let mut cold = Vec::with_capacity(words(cold_bytes));
    for i in 0..words(cold_bytes) as u64 {
        cold.push(i);
    }
    let mut wss = Vec::with_capacity(words(wss_bytes));
    for i in 0..words(wss_bytes) as u64 {
        wss.push(i ^ 0x5555);
    }
    let pages = (wss_bytes / PAGE) as u64;
    let lines_per_page = (PAGE / LINE) as u64;
    let per_round = (wss_bytes / LINE) as u64;
    let zipf = Zipf::new(pages, THETA);
    let mut rng = Rng::new(7);
    let mut figures = Vec::new();
    let (mut total_ns, mut sum) = (0u64, std::hint::black_box(cold.iter().step_by(PAGE / 8).sum::<u64>()));
    for round in 0..rounds {
        let t = strata::now_ns();
        for _ in 0..per_round {
            let page = scramble(zipf.sample(&mut rng) - 1, pages);
            let line = (page * lines_per_page + rng.next_u64() % lines_per_page) as usize * (LINE / 8);
            let words = &mut wss[line..line + LINE / 8];
            if write {
                for w in words.iter_mut() {
                    *w = w.wrapping_add(round + 1);
                }
            } else {
                for w in words.iter() {
                    sum = sum.wrapping_add(*w);
                }
            }
        }
        let ns = (strata::now_ns() - t).max(1);
        total_ns += ns;
        figures.push((per_round * LINE as u64) as f64 / (ns as f64 * 1e-9) / 1e6);
    }
    sum = sum.wrapping_add(wss.iter().step_by(PAGE / 8).fold(0, |a, w| a ^ w));
    let ops = per_round * rounds;
    Outcome {
        workload: name.into(),
        ops,
        ns: total_ns,
        figure: *figures.last().expect("at least one round"),
        unit: "MB/s".into(),
        allocated_bytes: (cold_bytes + wss_bytes) as u64,
        checksum: std::hint::black_box(sum),
        sites: Vec::new(),
        rounds: figures,
        placement: Vec::new(),
    }
}

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// The fast tier, MiB (the paper's 16 GB; every size scales with it)
    #[arg(long, default_value_t = 64)]
    pub fast_mb: u64,
    /// The paper's fast tier its kernel kept for itself, GB of the 16 ("approximately 3-4 GB",
    /// section 4.1): the program's fast tier is the rest
    #[arg(long, default_value_t = 3.5, value_name = "GB")]
    pub system_gb: f64,
    /// Scenarios: small, medium, large (working set below, near and above the fast tier)
    #[arg(long, value_delimiter = ',', default_value = "small,medium,large")]
    pub scenarios: Vec<String>,
    /// Accesses: read, write
    #[arg(long, value_delimiter = ',', default_value = "read,write")]
    pub access: Vec<String>,
    /// Policies: first-touch (the paper's "no migration"), linux (the kernel's tiering: TPP as
    /// merged), tpp (the mechanism alone), nomad
    #[arg(long, value_delimiter = ',', default_value = "first-touch,linux,tpp,nomad")]
    pub policies: Vec<String>,
    /// Rounds over the working set: the first is "migration in progress", the last "stable"
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(5..=100))]
    pub rounds: u64,
    /// Emulated machine preset (`strata emu settings` lists them)
    #[arg(long, default_value = DEFAULT_PRESET)]
    pub preset: String,
    /// Every period and threshold of the kernel modes times this
    #[arg(long, default_value_t = DEFAULT_TIME_SCALE, value_name = "FACTOR")]
    pub time_scale: f64,
    /// Emulated runs at once [default: the host's CPUs]
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
}

/// One scenario and access under one policy.
#[derive(Debug, Serialize, Deserialize)]
pub struct MicroRow {
    pub scenario: String,
    pub access: String,
    /// MB/s of each round
    pub rounds_mb_s: Vec<f64>,
    /// the first round's and the last's, over the same policy's all-fast run
    pub in_progress_of_all_fast: f64,
    pub stable_of_all_fast: f64,
    #[serde(flatten)]
    pub run: Row,
}

/// The benchmark (`--json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub preset: String,
    pub fast_mb: u64,
    pub system_gb: f64,
    pub time_scale: f64,
    pub rounds: u64,
    pub rows: Vec<MicroRow>,
}

/// Run every scenario x access x policy, with each scenario's all-fast bound.
pub fn bench(a: &Options, progress: Progress) -> Result<Report, Error> {
    for s in &a.scenarios {
        ensure(SCENARIOS.iter().any(|x| x.0 == s), || format!("unknown scenario '{s}' (small, medium, large)"))?;
    }
    for x in &a.access {
        ensure(x == "read" || x == "write", || format!("unknown access '{x}' (read, write)"))?;
    }
    ensure(a.fast_mb >= 4, || "--fast-mb: at least 4".into())?;
    ensure((0.0..PAPER_FAST_GB).contains(&a.system_gb), || "--system-gb: from 0 to below 16".into())?;
    let setups = setups(&a.policies)?;
    ensure(setups.iter().all(|s| matches!(s, Setup::FirstTouch | Setup::Kernel(_))), || {
        "--policies: first-touch and the kernel modes (linux, tpp, nomad)".into()
    })?;
    let opts = TieringOptions {
        workloads: Vec::new(),
        policies: a.policies.clone(),
        allocator: "glibc".into(),
        preset: a.preset.clone(),
        machine: MachineArgs::default(),
        size_mb: a.fast_mb,
        ops: Some(a.rounds),
        time_scale: a.time_scale,
        period_ms: None,
        sample_period: super::DEFAULT_SAMPLE_PERIOD,
        split_mb: None,
        policy_config: None,
        jobs: a.jobs,
        graph_ratio: None,
        sweep: Vec::new(),
        trace: None,
    };
    let mx = Matrix::new(&opts, &setups, progress)?;
    let fast = ((a.fast_mb << 20) as f64 * (1.0 - a.system_gb / PAPER_FAST_GB)) as u64 / 4096 * 4096;
    let mut jobs = Vec::new();
    for s in &a.scenarios {
        for x in &a.access {
            let w = workload_name(s, x == "write");
            jobs.push((w.clone(), Setup::Bound(Tiering::AllFast), 0));
            jobs.extend(setups.iter().map(|p| (w.clone(), p.clone(), fast)));
        }
    }
    let (total, done) = (jobs.len(), AtomicUsize::new(0));
    let ran: Vec<Result<(Row, Vec<f64>), Error>> = mx.pool.install(|| {
        jobs.par_iter()
            .map(|(w, setup, fast)| {
                let ran = mx.run(w, setup, *fast)?;
                let r = row(w, setup, None, &a.preset, &ran, *fast);
                let k = done.fetch_add(1, Ordering::Relaxed) + 1;
                let rounds = &ran.outcome.rounds;
                mx.progress.say(&format!(
                    "{w}: {} in progress {:.0} MB/s, stable {:.0} MB/s, {} MiB migrated ({k} of {total})",
                    setup.name(),
                    rounds[0],
                    rounds[rounds.len() - 1],
                    r.migrated_bytes >> 20
                ));
                Ok((r, ran.outcome.rounds))
            })
            .collect()
    });
    let ran = ran.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    for (w, setup, _) in &jobs {
        let (r, rounds) = ran.iter().find(|(r, _)| &r.workload == w && r.policy == setup.name()).expect("ran");
        let (_, bound) = ran.iter().find(|(b, _)| &b.workload == w && b.policy == "all-fast").expect("bound ran");
        let rest = w.strip_prefix("nomad-").expect("a nomad workload");
        let (scenario, access) = rest.rsplit_once('-').expect("scenario-access");
        rows.push(MicroRow {
            scenario: scenario.into(),
            access: access.into(),
            in_progress_of_all_fast: rounds[0] / bound[0],
            stable_of_all_fast: rounds[rounds.len() - 1] / bound[bound.len() - 1],
            rounds_mb_s: rounds.clone(),
            run: r.clone(),
        });
    }
    Ok(Report {
        preset: a.preset.clone(),
        fast_mb: a.fast_mb,
        system_gb: a.system_gb,
        time_scale: a.time_scale,
        rounds: a.rounds,
        rows,
    })
}

impl Report {
    fn at(&self, scenario: &str, access: &str, policy: &str) -> Option<&MicroRow> {
        self.rows.iter().find(|r| r.scenario == scenario && r.access == access && r.run.policy == policy)
    }

    /// The human table: each phase's MB/s, Nomad over the kernel's tiering and over TPP, and
    /// what the paper found.
    pub fn table(&self) -> String {
        let mut s = format!(
            "Nomad's micro-benchmark on the emulated machine, preset {} (model output: MB/s of simulated time), {} MiB for the paper's 16 GB fast tier ({} GB of it the kernel's), time scale {}, {} rounds\n\n",
            self.preset, self.fast_mb, self.system_gb, self.time_scale, self.rounds
        );
        let _ = writeln!(
            s,
            "{:<7} {:<6} {:<12} {:>12} {:>10} {:>9} {:>9} {:>10} {:>10}",
            "wss", "access", "policy", "in progress", "stable", "of fast", "of fast", "promo MiB", "demo MiB"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<7} {:<6} {:<12} {:>12.0} {:>10.0} {:>9.2} {:>9.2} {:>10.1} {:>10.1}",
                r.scenario,
                r.access,
                r.run.policy,
                r.rounds_mb_s[0],
                r.rounds_mb_s[r.rounds_mb_s.len() - 1],
                r.in_progress_of_all_fast,
                r.stable_of_all_fast,
                r.run.promoted_bytes as f64 / 1048576.0,
                r.run.demoted_bytes as f64 / 1048576.0
            );
        }
        s += "\nNomad over the kernel's tiering (linux) and over the TPP mechanism, beside the paper's Nomad over TPP:\n\n";
        let _ = writeln!(
            s,
            "{:<7} {:<6} {:>16} {:>16}  paper (in progress; stable)",
            "wss", "access", "in progress", "stable"
        );
        for &(scenario, in_progress, stable) in PAPER {
            for access in ["read", "write"] {
                let Some(n) = self.at(scenario, access, "nomad") else { continue };
                let ratio = |base: &str, phase: fn(&MicroRow) -> f64| {
                    self.at(scenario, access, base).map_or("-".into(), |b| format!("{:.2}", phase(n) / phase(b)))
                };
                let first = |r: &MicroRow| r.rounds_mb_s[0];
                let last = |r: &MicroRow| r.rounds_mb_s[r.rounds_mb_s.len() - 1];
                let _ = writeln!(
                    s,
                    "{scenario:<7} {access:<6} {:>16} {:>16}  {in_progress}; {stable}",
                    format!("{} / {}", ratio("linux", first), ratio("tpp", first)),
                    format!("{} / {}", ratio("linux", last), ratio("tpp", last)),
                );
            }
        }
        s += "\nof fast: the phase's MB/s over the same phase with everything fast; ratios are linux / tpp\n";
        s
    }

    /// Each phase over all-fast, per scenario, access and policy, as markdown (`bench summary`).
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "{} MiB for the paper's 16 GB fast tier ({} GB of it the kernel's), time scale {}; in progress / stable, over all-fast:\n\n| working set | access | {} |\n|---|---|{}\n",
            self.fast_mb,
            self.system_gb,
            self.time_scale,
            self.policies().join(" | "),
            "---|".repeat(self.policies().len())
        );
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for r in &self.rows {
            let key = (r.scenario.as_str(), r.access.as_str());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let cells: Vec<String> = self
                .policies()
                .iter()
                .map(|p| {
                    self.at(key.0, key.1, p).map_or("-".into(), |x| {
                        format!("{:.2} / {:.2}", x.in_progress_of_all_fast, x.stable_of_all_fast)
                    })
                })
                .collect();
            let _ = writeln!(s, "| {} | {} | {} |", key.0, key.1, cells.join(" | "));
        }
        s + "\n"
    }

    /// The policies run, in order (the bound excluded).
    fn policies(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.rows.iter().filter(|r| r.run.policy != "all-fast") {
            if !out.contains(&r.run.policy.as_str()) {
                out.push(&r.run.policy);
            }
        }
        out
    }

    /// The report into dir as nomad-micro-PRESET.json.
    pub fn save(&self, dir: &Path) -> Result<PathBuf, Error> {
        crate::results::save(dir, &format!("nomad-micro-{}", self.preset), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenarios_place_what_the_paper_placed_and_a_run_repeats() {
        let a = run("nomad-small-read", 16, 5).unwrap();
        // 16 MiB fast for 16 GB: 20 MiB resident
        assert_eq!(a.allocated_bytes, 20 << 20);
        assert_eq!(a.rounds.len(), 5);
        assert_eq!(a.ops, 5 * ((10 << 20) / 64));
        let b = run("nomad-small-read", 16, 5).unwrap();
        assert_eq!(a.checksum, b.checksum);
        let w = run("nomad-large-write", 16, 5).unwrap();
        assert_eq!(w.allocated_bytes, 27 << 20);
        assert!(run("nomad-huge-read", 16, 5).is_none() && run("nomad-small-scan", 16, 5).is_none());
        assert!(run("gups", 16, 5).is_none());
    }
}
