//! `strata bench tiering`: workloads x policies x fast-tier sizes on the emulated machine.
//!
//! For each workload ([`workloads`]), the `strata` binary built for the emulated machine runs it
//! (`strata bench tiering-workload`), once with everything fast (the upper bound, which also
//! measures the footprint), once with everything on the slow tier (the lower bound), and then
//! for each fast tier (a fraction of the footprint: MAT's 12.5, 25 and 50 %) under each policy:
//! `first-touch` (nothing moves), `tpp` (the emulated kernel's hint-fault tiering) and every
//! policy of the engine's registry (`ambix`, ...), which runs inside the program on its
//! simulated time (stratad-emu's libstratad_emu.so). The engine's rounds and tpp's scans share one
//! period (`--period-ms`), so the two see the program equally often. Real programs
//! ([`real`]: Debian's Redis, memcached and LIBLINEAR) run the same way, driven from here.
pub mod field;
pub mod nomad;
pub mod real;
pub mod workloads;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use strata_emu::{run_emulated, toolchain, Kernel, Machine, MachineArgs, Report as EmuReport, Tiering};
use strata_util::{io, Progress};
use stratad::emulated::EngineSpec;

use crate::{ensure, failed, plot, Error};
use workloads::{Outcome, WORKLOADS};

/// The default preset: m2t with a 4 MiB last-level cache, so that footprints of a hundred MiB
/// exceed the LLC many times over, as a server's do.
pub const DEFAULT_PRESET: &str = "m2t-4m";

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Workloads (cold-first, phase, gups-hot, gups-hot-ro, ycsb-c, ycsb-a, pagerank,
    /// multi-site), the field's (gapbs-bfs, gapbs-pr, gapbs-cc, gapbs-bc on a Kronecker graph,
    /// xsbench, btree, gups), and real programs built by `strata emu pkg build` (redis-ycsb-a,
    /// redis-ycsb-c, memcached-ycsb-c, liblinear) [default: the first eight]
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Policies: first-touch (nothing moves), linux (the kernel's own tiering, rule by rule),
    /// tpp and nomad (the mechanism alone, and the same with Nomad's transactional migration
    /// and shadows), the field's damon, memtierd and hybridtier, and the
    /// engine's: ambix, mat (mat:fifo, mat:lru, mat:apb), proactive, hmalloc, dram-first (with
    /// --preset dram-first), strata; an engine policy followed by /transactional
    /// (ambix/transactional) moves pages as libstrata's agent does, transactionally, and one
    /// followed by @KEY=VALUE (strata@hysteresis=0@min_streak=5) runs with those settings over
    /// its table of the configuration
    #[arg(long, value_delimiter = ',', default_value = "first-touch,tpp,ambix,mat:apb,hmalloc,strata")]
    pub policies: Vec<String>,
    /// The workloads' allocator: strata (transparent mode, LD_PRELOAD=libstrata.so, so that
    /// object and context policies see objects and contexts) or glibc
    #[arg(long, default_value = "strata", value_parser = ["strata", "glibc"])]
    pub allocator: String,
    /// Emulated machine preset (`strata emu settings` lists them)
    #[arg(long, default_value = DEFAULT_PRESET)]
    pub preset: String,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Each workload's footprint, MiB
    #[arg(long, default_value_t = 128)]
    pub size_mb: u64,
    /// Operations of each workload's measured phase [default: each workload's own, in
    /// proportion to --size-mb; pagerank: iterations]
    #[arg(long)]
    pub ops: Option<u64>,
    /// One time scale for every kernel mode and policy: the papers' and the kernel's periods
    /// and thresholds (1 s rounds and scans, the kernel's 1-60 s scan periods and 1 s hot
    /// threshold) times this. The papers' programs run for minutes; these runs last about a
    /// simulated second and `phase` changes every ~180 ms, so ten rounds (Ambix's delay) must
    /// fit well inside a phase: 0.005 makes a 1 s period 5 ms (docs/tiering.md)
    #[arg(long, default_value_t = DEFAULT_TIME_SCALE, value_name = "FACTOR")]
    pub time_scale: f64,
    /// The engine's round and the tpp mode's scan, every this many simulated ms [default:
    /// 1000 x --time-scale]
    #[arg(long, value_name = "MS")]
    pub period_ms: Option<f64>,
    /// One LLC miss in this many is sampled. MAT's 4,096 gives tens of thousands of samples a
    /// second on hardware that misses tens of millions of times a second; the emulated programs
    /// run for about a simulated second, so the benchmark samples more often (docs/tiering.md)
    #[arg(long, default_value_t = DEFAULT_SAMPLE_PERIOD)]
    pub sample_period: u64,
    /// MAT's record size (`split_mb` of mat and proactive), MB [default: the footprint / 512].
    /// The paper splits objects into 64 MiB records on machines with tens of GB of fast memory;
    /// a 64 MiB record here would be half a 128 MiB footprint (docs/tiering.md)
    #[arg(long, value_name = "MB")]
    pub split_mb: Option<f64>,
    /// The engine's configuration for every engine policy (examples/strata.toml); --period-ms
    /// and --sample-period set its scanner period and sampler, --split-mb MAT's records (where
    /// the file does not set them)
    #[arg(long, value_name = "FILE")]
    pub policy_config: Option<PathBuf>,
    /// Emulated runs at once [default: the host's CPUs]. Each run's figures are its own
    /// simulated time, the same however many run beside it; only the wall time changes
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// One more fast-tier ratio for the graph workloads (gapbs-*), which the field also runs at
    /// 1:16 (0.0625)
    #[arg(long, value_name = "R")]
    pub graph_ratio: Option<f64>,
    /// Sweep one setting of an engine policy in --policies: POLICY.KEY=V1,V2,... runs it once
    /// more with each value, as the setup POLICY@KEY=V (repeatable; one setting at a time, the
    /// others at the configuration's values). The report ends with the policy against its best
    /// point on every workload and ratio
    #[arg(long, value_name = "POLICY.KEY=V1,V2,...")]
    pub sweep: Vec<String>,
    /// Write each engine policy's round-by-round trace into DIR, a file a run
    /// (WORKLOAD-POLICY-FASTMiB.jsonl): a JSON line every round (simulated ms, bytes promoted and
    /// demoted so far, the fast tier's free bytes) and the workload's measured phase
    /// (docs/tiering.md "Tracing a run")
    #[arg(long, value_name = "DIR")]
    pub trace: Option<PathBuf>,
}

/// The setups of `--sweep`s: POLICY@KEY=V for each value, for a policy among `setups`.
fn sweep_setups(sweeps: &[String], setups: &[Setup]) -> Result<Vec<Setup>, Error> {
    let mut out: Vec<Setup> = Vec::new();
    for sweep in sweeps {
        let bad =
            || Error::Invalid(format!("--sweep '{sweep}': give POLICY.KEY=V1,V2,... (e.g. strata.hysteresis=0,0.5,1)"));
        let (setting, values) = sweep.split_once('=').ok_or_else(bad)?;
        let (policy, key) = setting.split_once('.').ok_or_else(bad)?;
        ensure(setups.iter().any(|s| matches!(s, Setup::Engine(p, false) if p == policy)), || {
            format!("--sweep '{sweep}': {policy} is not an engine policy of --policies")
        })?;
        for v in values.split(',').filter(|v| !v.is_empty()) {
            let setup = Setup::Engine(format!("{policy}@{key}={v}"), false);
            policy_settings(&setup.name())?;
            if !out.contains(&setup) {
                out.push(setup);
            }
        }
    }
    Ok(out)
}

/// `strata bench suite`: every workload (ours and the field's) under every baseline (the
/// kernel's tiering, Nomad, DAMON tiering, memtierd, HybridTier) and Strata's policies, at
/// fast:total 1:2, 1:4, 1:8 and, for graphs, 1:16.
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteOptions {
    /// The quick set: footprints of 32 MiB (about 10 minutes on 2 CPUs) instead of 128 MiB
    /// (a few hours)
    #[arg(long)]
    pub quick: bool,
    /// Every period and threshold of the kernel modes and policies times this
    #[arg(long, default_value_t = DEFAULT_TIME_SCALE, value_name = "FACTOR")]
    pub time_scale: f64,
    /// Emulated runs at once [default: the host's CPUs]
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
}

/// The suite's policies: first touch, the baselines, and Strata's.
pub const SUITE_POLICIES: &[&str] =
    &["first-touch", "linux", "nomad", "damon", "memtierd", "hybridtier", "ambix", "mat:apb", "hmalloc", "strata"];

impl SuiteOptions {
    /// Its name in results: quick or full.
    pub fn set(&self) -> &'static str {
        if self.quick {
            "quick"
        } else {
            "full"
        }
    }

    /// The matrix it runs.
    pub fn options(&self) -> Options {
        Options {
            workloads: WORKLOADS.iter().chain(field::FIELD).map(|w| w.to_string()).collect(),
            policies: SUITE_POLICIES.iter().map(|p| p.to_string()).collect(),
            allocator: "strata".into(),
            preset: DEFAULT_PRESET.into(),
            machine: MachineArgs { fast_ratio: vec![0.5, 0.25, 0.125], ..MachineArgs::default() },
            size_mb: if self.quick { 32 } else { 128 },
            ops: None,
            time_scale: self.time_scale,
            period_ms: None,
            sample_period: DEFAULT_SAMPLE_PERIOD,
            split_mb: None,
            policy_config: None,
            jobs: self.jobs,
            graph_ratio: Some(0.0625),
            sweep: Vec::new(),
            trace: None,
        }
    }
}

/// Every period and threshold of the kernel modes and policies is its real value times this
/// (--time-scale): a 1 s period is 5 ms.
pub const DEFAULT_TIME_SCALE: f64 = 0.005;

/// One LLC miss in this many is sampled for the engine's policies (--sample-period).
pub const DEFAULT_SAMPLE_PERIOD: u64 = 256;

/// The fast-tier ratios when none are given: MAT's points.
pub const DEFAULT_FAST_RATIOS: [f64; 3] = [0.125, 0.25, 0.5];

/// How a run places and moves memory.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Setup {
    Bound(Tiering),
    FirstTouch,
    /// an emulated kernel mode: linux (the kernel's own tiering), tpp (the mechanism alone), or
    /// nomad (tpp with Nomad's transactional migration)
    Kernel(Kernel),
    /// an engine policy, and whether its mover is Strata's transactional one
    Engine(String, bool),
}

/// A run's trace in `dir` (`--trace`), created empty: WORKLOAD-POLICY-FASTMiB.jsonl, with a
/// policy's `/` as `_` (`ambix_transactional`); its absolute path.
fn trace_file(dir: &Path, workload: &str, setup: &Setup, fast_bytes: u64) -> Result<PathBuf, Error> {
    let name = format!("{workload}-{}-{}MiB.jsonl", setup.name().replace('/', "_"), fast_bytes >> 20);
    let file = std::path::absolute(dir.join(name)).map_err(|e| failed(e.to_string()))?;
    std::fs::File::create(&file).map_err(|e| failed(format!("--trace: {}: {e}", file.display())))?;
    Ok(file)
}

/// The suffix of an engine policy whose moves are transactional (`ambix/transactional`).
const TRANSACTIONAL: &str = "/transactional";

impl Setup {
    pub(crate) fn name(&self) -> String {
        match self {
            Setup::Bound(t) => t.name().into(),
            Setup::FirstTouch => "first-touch".into(),
            Setup::Kernel(k) => k.name().into(),
            Setup::Engine(p, false) => p.clone(),
            Setup::Engine(p, true) => format!("{p}{TRANSACTIONAL}"),
        }
    }

    /// The machine of a run under this setup, with a fast tier of `fast_bytes` where it has
    /// one, and the environment that loads the engine for an engine policy.
    pub(crate) fn prepare(
        &self,
        machine: &Machine,
        fast_bytes: u64,
        engine: &EngineFiles,
    ) -> Result<(Machine, Vec<(OsString, OsString)>), Error> {
        let tiering = match self {
            Setup::Bound(t) => *t,
            _ => Tiering::FirstTouch,
        };
        let mut m = tiering.apply(machine, fast_bytes)?;
        if let Setup::Kernel(k) = self {
            m.set_kernel(*k);
        }
        let mut env = Vec::new();
        if let Setup::Engine(spec, _) = self {
            let (policy, _) = policy_settings(spec)?;
            let spec = EngineSpec::new(policy, Some(engine.path(&self.name())?)).map_err(|e| failed(e.to_string()))?;
            env.extend(spec.env().into_iter().map(|(k, v)| (k.into(), v)));
        }
        Ok((m, env))
    }
}

/// The engine's configuration for every engine policy of a matrix: one file per setup, the
/// configuration as given with the setup's own settings over its policy's table
/// (`strata@hysteresis=0`), its mover (`POLICY/transactional`) and, for a policy that runs at
/// its own tracker's period (the field's: `Policy::round_ms`), that period. The files go when
/// this does.
pub(crate) struct EngineFiles {
    pub config: stratad::Config,
    /// (setup's name, its file)
    files: Vec<(String, PathBuf)>,
}

/// A setup's own settings of its policy: (key, value) in order.
pub(crate) type Settings = Vec<(String, toml::Value)>;

/// An engine setup's policy and its own settings: `strata@hysteresis=0@min_streak=5` is the
/// `strata` policy with `hysteresis = 0` and `min_streak = 5` over its table (each value TOML;
/// a bare word is a string, so `strata@hints=pin` needs no quotes).
pub(crate) fn policy_settings(spec: &str) -> Result<(&str, Settings), Error> {
    let mut parts = spec.split('@');
    let policy = parts.next().unwrap_or_default();
    let settings = parts
        .map(|kv| {
            let bad = || Error::Invalid(format!("'{spec}': each @ must be followed by KEY=VALUE, not '{kv}'"));
            let (k, v) = kv.split_once('=').filter(|(k, _)| !k.is_empty()).ok_or_else(bad)?;
            let word = !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            let value = match format!("v = {v}").parse::<toml::Table>() {
                Ok(t) => t["v"].clone(),
                Err(_) if word => toml::Value::String(v.to_string()),
                Err(_) => return Err(bad()),
            };
            Ok((k.to_string(), value))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((policy, settings))
}

impl EngineFiles {
    /// Write `config`, checked for every engine setup of `setups` with its own settings, to
    /// the temporary directory.
    pub(crate) fn write(config: stratad::Config, setups: &[Setup]) -> Result<EngineFiles, Error> {
        let dir = std::env::temp_dir();
        let tag = format!("{:010}-{}", std::process::id(), ENGINE_FILES.fetch_add(1, Ordering::Relaxed));
        let mut files = EngineFiles { config, files: Vec::new() };
        for s in setups {
            let Setup::Engine(spec, tx) = s else { continue };
            let (policy, settings) = policy_settings(spec)?;
            let mut own = files.config.clone();
            let entry = own.policy.entry(strata_policy::base_name(policy)).or_insert_with(|| toml::Table::new().into());
            let table = entry.as_table_mut().ok_or_else(|| Error::Config(format!("policy.{policy} is not a table")))?;
            for (k, v) in settings {
                table.insert(k, v);
            }
            own.check(policy).map_err(|e| Error::Config(format!("{spec}: {e}")))?;
            let made = strata_policy::create(
                policy,
                own.policy.get(strata_policy::base_name(policy)).and_then(|v| v.as_table()),
            )
            .map_err(|e| Error::Config(e.to_string()))?;
            if let Some(ms) = made.round_ms() {
                own.scanner.period_ms = ms;
            }
            if *tx {
                own.mover.mechanism = stratad::config::Mechanism::Transactional;
            }
            let path = dir.join(format!("strata-engine-{tag}-{}.toml", files.files.len()));
            let text = toml::to_string(&own).map_err(|e| failed(e.to_string()))?;
            std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
            files.files.push((s.name(), path));
        }
        Ok(files)
    }

    /// The file of the engine setup named `setup`.
    fn path(&self, setup: &str) -> Result<&Path, Error> {
        self.files
            .iter()
            .find(|(name, _)| name == setup)
            .map(|(_, p)| p.as_path())
            .ok_or_else(|| failed(format!("no engine configuration written for {setup}")))
    }
}

impl Drop for EngineFiles {
    fn drop(&mut self) {
        for (_, p) in &self.files {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Numbers the engine files of one process.
static ENGINE_FILES: AtomicUsize = AtomicUsize::new(0);

/// One workload under one policy and fast tier.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub workload: String,
    /// first-touch, tpp, an engine policy, or a bound: all-fast, far-only
    pub policy: String,
    /// the fast tier over the footprint (none for the bounds)
    pub fast_ratio: Option<f64>,
    pub preset: String,
    /// operations per simulated second of the measured phase
    pub figure: f64,
    pub unit: String,
    pub speedup_over_first_touch: Option<f64>,
    pub speedup_over_tpp: Option<f64>,
    /// figure / the all-fast figure
    pub fraction_of_all_fast: f64,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    pub migrated_bytes: u64,
    /// the engine's policy decisions, host CPU ms (not simulated)
    pub policy_cpu_ms: f64,
    pub hint_faults: u64,
    pub footprint_bytes: u64,
    pub fast_bytes: u64,
    pub sim_ms: f64,
    pub wall_s: f64,
    pub llc_misses: u64,
    /// memory accesses served by the fast tier and by the others
    pub fast_accesses: u64,
    pub far_accesses: u64,
    /// pages an engine's walks read, and the moves it asked for that did not happen
    pub scanned_pages: u64,
    pub refused_pages: u64,
    /// pages demoted within ten of the engine's periods of their promotion, in bytes, whoever
    /// moved them (the emulator's pingpong_window_ms)
    /// (absent from runs before it was counted)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pingpong_bytes: Option<u64>,
    /// nomad and transactional movers: commits, aborts, copy-free demotions, shadows
    #[serde(default)]
    pub transactional: strata_emu::Transactional,
    /// the linux kernel mode's counters (scans, candidates, refusals, kswapd and direct
    /// demotions)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux: Option<strata_emu::Linux>,
    /// simulated time the program's threads spent in the kernel's tiering work (hint faults,
    /// NUMA scans) and in moves they waited for, ms
    #[serde(default)]
    pub thread_kernel_ms: f64,
    #[serde(default)]
    pub thread_migrate_ms: f64,
    pub engine: Option<serde_json::Value>,
    /// a real program's name and versions: "redis 7.0.15 (Debian 5:7.0.15-1~deb12u7)"
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
}

/// The matrix (`--json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub preset: String,
    pub machine: Machine,
    pub size_mb: u64,
    /// every period and threshold of the kernel modes and policies times this
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    pub period_ms: f64,
    /// the workloads' allocator: strata (transparent mode) or glibc
    #[serde(default)]
    pub allocator: String,
    /// the engine's configuration every engine policy ran with
    pub engine_config: stratad::Config,
    pub rows: Vec<Row>,
    /// `strata bench suite`'s set ("quick" or "full"), when it ran this
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// with --sweep: each swept policy against its best point, per workload and ratio
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<SweepRow>,
}

/// A swept policy on one workload and fast tier: its own figure (the configuration's values)
/// against the best of its points.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SweepRow {
    pub workload: String,
    pub fast_ratio: Option<f64>,
    pub policy: String,
    /// the setup with the highest figure: the policy itself or one of its POLICY@KEY=V
    pub best: String,
    /// the policy's figure over the best one's (1: no point beats it)
    pub of_best: f64,
}

/// Each swept policy (one with POLICY@KEY=V setups among `rows`) against its best point.
pub fn sweep_rows(rows: &[Row]) -> Vec<SweepRow> {
    let mut out = Vec::new();
    for r in rows
        .iter()
        .filter(|r| !r.policy.contains('@') && rows.iter().any(|v| v.policy.starts_with(&format!("{}@", r.policy))))
    {
        let points = rows.iter().filter(|v| {
            v.workload == r.workload
                && v.fast_ratio == r.fast_ratio
                && (v.policy == r.policy || v.policy.starts_with(&format!("{}@", r.policy)))
        });
        let best = points.fold(r, |b, v| if v.figure > b.figure { v } else { b });
        out.push(SweepRow {
            workload: r.workload.clone(),
            fast_ratio: r.fast_ratio,
            policy: r.policy.clone(),
            best: best.policy.clone(),
            of_best: r.figure / best.figure,
        });
    }
    out
}

fn default_time_scale() -> f64 {
    DEFAULT_TIME_SCALE
}

/// The setups of `--policies` names, checked.
pub(crate) fn setups(policies: &[String]) -> Result<Vec<Setup>, Error> {
    let mut out = Vec::new();
    for p in policies {
        out.push(match p.as_str() {
            "first-touch" => Setup::FirstTouch,
            "tpp" => Setup::Kernel(Kernel::Tpp),
            "nomad" => Setup::Kernel(Kernel::Nomad),
            "linux" => Setup::Kernel(Kernel::Linux),
            spec if strata_policy::POLICIES
                .contains(&strata_policy::base_name(policy_settings(spec.trim_end_matches(TRANSACTIONAL))?.0)) =>
            {
                let name = spec.trim_end_matches(TRANSACTIONAL);
                strata_policy::create(policy_settings(name)?.0, None).map_err(|e| Error::Invalid(e.to_string()))?;
                Setup::Engine(name.into(), spec.ends_with(TRANSACTIONAL))
            }
            name => {
                return Err(Error::Invalid(format!(
                    "unknown policy '{name}' (first-touch, linux, tpp, nomad, {}; an engine policy with \
                     {TRANSACTIONAL} moves as libstrata's agent does)",
                    strata_policy::POLICIES
                        .iter()
                        .filter(|p| **p != "first-touch")
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        });
    }
    Ok(out)
}

/// One run: the workload's result, the emulator's report, the wall time.
struct Ran {
    outcome: Outcome,
    report: EmuReport,
    wall_s: f64,
    /// a real program's name and versions
    program: Option<String>,
}

/// Everything one run needs.
struct Matrix<'a> {
    /// the emulated runs at once (--jobs)
    pool: rayon::ThreadPool,
    opts: &'a Options,
    exe: PathBuf,
    machine: Machine,
    /// the engine's configuration (with --period-ms)
    engine: EngineFiles,
    /// libstrata.so, preloaded into every run (--allocator strata)
    preload: Option<PathBuf>,
    progress: Progress,
    /// the engine's round and tpp's scan period, ms
    period_ms: f64,
}

impl<'a> Matrix<'a> {
    /// The machine, the engine's files and the pool of `a`'s runs, checked.
    fn new(a: &'a Options, setups: &[Setup], progress: Progress) -> Result<Matrix<'a>, Error> {
        ensure(a.time_scale > 0.0 && a.time_scale.is_finite(), || "--time-scale must be positive".into())?;
        let period_ms = a.period_ms.unwrap_or(1000.0 * a.time_scale);
        ensure(period_ms > 0.0, || "--period-ms must be positive".into())?;
        ensure(a.size_mb > 0, || "--size-mb must be positive".into())?;
        let mut machine = Machine::preset(&a.preset, progress.quiet())?;
        machine.set_tpp_scan_period_ms(a.machine.tpp_scan_period_ms.unwrap_or(period_ms));
        machine.set("time_scale", &a.time_scale.to_string());
        // ping-pong: demoted within ten of the engine's rounds of a promotion (#35's measure)
        machine.set("pingpong_window_ms", &(10.0 * period_ms).to_string());
        a.machine.apply(&mut machine)?;
        ensure(a.sample_period > 0, || "--sample-period must be positive".into())?;
        let preload = match a.allocator.as_str() {
            "strata" => Some(strata_util::find_built("libstrata.so", Some("STRATA_LIB"), "make lib")?),
            _ => None,
        };
        let cfg = engine_config(
            a.policy_config.as_deref(),
            period_ms,
            a.time_scale,
            a.sample_period,
            a.split_mb,
            a.size_mb as f64,
        )?;
        let engine = EngineFiles::write(cfg, setups)?;
        if let Some(dir) = &a.trace {
            std::fs::create_dir_all(dir).map_err(|e| failed(format!("--trace {}: {e}", dir.display())))?;
        }
        let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        ensure(jobs > 0, || "--jobs must be positive".into())?;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build().map_err(|e| failed(e.to_string()))?;
        Ok(Matrix { pool, opts: a, exe: toolchain::emu_strata()?, machine, engine, preload, progress, period_ms })
    }

    fn run(&self, workload: &str, setup: &Setup, fast_bytes: u64) -> Result<Ran, Error> {
        let (m, mut env) = setup.prepare(&self.machine, fast_bytes, &self.engine)?;
        if let (Some(dir), Setup::Engine(..)) = (&self.opts.trace, setup) {
            env.push((stratad::emulated::TRACE_ENV.into(), trace_file(dir, workload, setup, fast_bytes)?.into()));
        }
        if let Some(lib) = &self.preload {
            env.push(("LD_PRELOAD".into(), lib.into()));
        }
        if real::package(workload).is_some() {
            let r = real::run(workload, &m, &env, self.opts.size_mb, self.opts.ops)?;
            return Ok(Ran {
                outcome: r.outcome,
                report: r.run.report,
                wall_s: r.run.wall_s,
                program: Some(r.program),
            });
        }
        let mut cmd = Command::new(&self.exe);
        cmd.args(["bench", "tiering-workload", "--workload", workload, "--size-mb", &self.opts.size_mb.to_string()]);
        if let Some(ops) = self.opts.ops {
            cmd.args(["--ops", &ops.to_string()]);
        }
        cmd.envs(env);
        let r = run_emulated(&m, &mut cmd, true)?;
        if !r.status.success() {
            return Err(failed(format!(
                "{workload} under {} failed on the emulated machine: {}",
                setup.name(),
                r.status
            )));
        }
        let outcome: Outcome =
            serde_json::from_slice(&r.stdout).map_err(|e| failed(format!("{workload}'s result: {e}")))?;
        Ok(Ran { outcome, report: r.report, wall_s: r.wall_s, program: None })
    }
}

fn row(workload: &str, setup: &Setup, ratio: Option<f64>, preset: &str, ran: &Ran, fast_bytes: u64) -> Row {
    let (o, rep, wall_s) = (&ran.outcome, &ran.report, ran.wall_s);
    let (fast_accesses, far_accesses) = rep.fast_and_far_accesses();
    let engine_n = |k: &str| rep.engine.as_ref().and_then(|e| e[k].as_u64()).unwrap_or(0);
    let refused = rep
        .engine
        .as_ref()
        .and_then(|e| e["refused_pages"].as_object())
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
    Row {
        workload: workload.into(),
        policy: setup.name(),
        fast_ratio: ratio,
        preset: preset.into(),
        figure: o.figure,
        unit: o.unit.clone(),
        speedup_over_first_touch: None,
        speedup_over_tpp: None,
        fraction_of_all_fast: 0.0,
        promoted_bytes: rep.promoted_pages() * 4096,
        demoted_bytes: rep.demoted_pages() * 4096,
        migrated_bytes: (rep.promoted_pages() + rep.demoted_pages()) * 4096,
        policy_cpu_ms: engine_n("policy_cpu_ns") as f64 / 1e6,
        hint_faults: rep.totals.hint_faults,
        footprint_bytes: rep.footprint_bytes(),
        fast_bytes,
        sim_ms: rep.sim_ns as f64 / 1e6,
        wall_s,
        llc_misses: rep.totals.llc_misses,
        fast_accesses,
        far_accesses,
        scanned_pages: rep.background.scanned_pages,
        refused_pages: refused,
        pingpong_bytes: Some(rep.pingpong_pages * 4096),
        transactional: rep.transactional.clone(),
        linux: rep.linux.clone(),
        thread_kernel_ms: rep.totals.kernel_ps as f64 / 1e9,
        thread_migrate_ms: rep.totals.migrate_ps as f64 / 1e9,
        engine: rep.engine.clone(),
        program: ran.program.clone(),
    }
}

/// The engine's configuration for emulated runs: `policy_config`'s (or the defaults), with
/// `period_ms` as the scanner's period, one LLC miss in `sample_period` sampled, and MAT's
/// records of `split_mb` (else the file's, else the footprint / 512).
pub(crate) fn engine_config(
    policy_config: Option<&Path>,
    period_ms: f64,
    time_scale: f64,
    sample_period: u64,
    split_mb: Option<f64>,
    footprint_mb: f64,
) -> Result<stratad::Config, Error> {
    let mut cfg = match policy_config {
        Some(p) => stratad::Config::load(p, "first-touch").map_err(|e| Error::Config(e.to_string()))?,
        None => stratad::Config::default(),
    };
    cfg.scanner.period_ms = period_ms;
    cfg.sampler.period_misses = sample_period;
    // the field's policies keep their own periods, times the one time scale
    for policy in strata_policy::PEERS {
        let t = cfg.policy.entry(*policy).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let Some(t) = t.as_table_mut() {
            t.entry("time_scale").or_insert(toml::Value::Float(time_scale));
        }
    }
    let scaled = (footprint_mb / 512.0).max(4096.0 / 1048576.0);
    for policy in ["mat", "proactive"] {
        let t = cfg.policy.entry(policy).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let Some(t) = t.as_table_mut() {
            match split_mb {
                Some(mb) => drop(t.insert("split_mb".into(), toml::Value::Float(mb))),
                None => drop(t.entry("split_mb").or_insert(toml::Value::Float(scaled))),
            }
        }
    }
    Ok(cfg)
}

/// Run the matrix.
pub fn run(a: &Options, progress: Progress) -> Result<Report, Error> {
    let workloads: Vec<String> =
        if a.workloads.is_empty() { WORKLOADS.iter().map(|w| w.to_string()).collect() } else { a.workloads.clone() };
    for w in &workloads {
        ensure(
            WORKLOADS.contains(&w.as_str()) || field::FIELD.contains(&w.as_str()) || real::REAL.contains(&w.as_str()),
            || {
                format!(
                    "unknown workload '{w}' (known: {}; the field's: {}; real programs: {})",
                    WORKLOADS.join(", "),
                    field::FIELD.join(", "),
                    real::REAL.join(", ")
                )
            },
        )?;
        if let Some(p) = real::package(w) {
            strata_emu::pkg::require(p)?;
        }
    }
    let mut setups = setups(&a.policies)?;
    setups.extend(sweep_setups(&a.sweep, &setups)?);
    let ratios: Vec<f64> =
        if a.machine.fast_ratio.is_empty() { DEFAULT_FAST_RATIOS.to_vec() } else { a.machine.fast_ratio.clone() };
    ensure(ratios.iter().all(|r| *r < 1.0), || "--fast-ratio: below 1 (all-fast is one of the bounds)".into())?;
    let mx = Matrix::new(a, &setups, progress)?;
    let period_ms = mx.period_ms;
    let machine = mx.machine.clone();
    let result = (|| -> Result<Vec<Row>, Error> {
        let mut rows = Vec::new();
        for w in &workloads {
            let mut ratios = ratios.clone();
            if let (true, Some(g)) = (w.starts_with("gapbs-"), a.graph_ratio) {
                ratios.push(g);
            }
            rows.extend(run_workload(&mx, w, &setups, &ratios)?);
        }
        Ok(rows)
    })();
    let rows = result?;
    Ok(Report {
        preset: a.preset.clone(),
        machine,
        size_mb: a.size_mb,
        time_scale: a.time_scale,
        period_ms,
        allocator: a.allocator.clone(),
        engine_config: mx.engine.config.clone(),
        sweep: sweep_rows(&rows),
        rows,
        suite: None,
    })
}

fn run_workload(mx: &Matrix, w: &str, setups: &[Setup], ratios: &[f64]) -> Result<Vec<Row>, Error> {
    let preset = &mx.opts.preset;
    let total = 2 + ratios.len() * setups.len();
    let done = AtomicUsize::new(0);
    let say = |what: &str| {
        let k = done.fetch_add(1, Ordering::Relaxed) + 1;
        mx.progress.say(&format!("{w}: {what} ({k} of {total})"));
    };
    // everything fast first: it measures the footprint the fast tiers are shares of
    let all_fast = Setup::Bound(Tiering::AllFast);
    let ran = mx.run(w, &all_fast, 0)?;
    say(&format!(
        "all-fast, {:.3} M ops/s, a footprint of {} MiB",
        ran.outcome.figure / 1e6,
        ran.report.footprint_bytes() >> 20
    ));
    let footprint = ran.report.footprint_bytes();
    let mut rows = vec![row(w, &all_fast, None, preset, &ran, footprint)];
    let mut jobs: Vec<(Setup, Option<f64>, u64)> = vec![(Setup::Bound(Tiering::FarOnly), None, 0)];
    for &ratio in ratios {
        let fast = strata_emu::fast_bytes_of(footprint, ratio);
        jobs.extend(setups.iter().map(|s| (s.clone(), Some(ratio), fast)));
    }
    let ran: Vec<Result<Row, Error>> = mx.pool.install(|| {
        jobs.par_iter()
            .map(|(s, ratio, fast)| {
                let ran = mx.run(w, s, *fast)?;
                let r = row(w, s, *ratio, preset, &ran, *fast);
                let share = ratio.map_or(String::new(), |x| format!(" with {:.1} % fast", x * 100.0));
                say(&format!(
                    "{}{share}: {:.3} M ops/s, {} MiB migrated, {:.1} s",
                    s.name(),
                    r.figure / 1e6,
                    r.migrated_bytes >> 20,
                    r.wall_s
                ));
                Ok(r)
            })
            .collect()
    });
    for r in ran {
        rows.push(r?);
    }
    let all_fast = rows[0].figure;
    let at = |ratio: f64, policy: &str| {
        rows.iter().find(|r| r.fast_ratio == Some(ratio) && r.policy == policy).map(|r| r.figure)
    };
    let (ft, tpp): (Vec<Option<f64>>, Vec<Option<f64>>) =
        rows.iter().map(|r| r.fast_ratio.map_or((None, None), |x| (at(x, "first-touch"), at(x, "tpp")))).unzip();
    for ((r, f), t) in rows.iter_mut().zip(ft).zip(tpp) {
        r.fraction_of_all_fast = r.figure / all_fast;
        r.speedup_over_first_touch = f.map(|f| r.figure / f);
        r.speedup_over_tpp = t.map(|t| r.figure / t);
    }
    Ok(rows)
}

/// How much of the footprint a policy can leave in the slow tier (#35's savings): for
/// `workload` under `policy`, the largest slow share (1 - fast ratio) among the measured ratios
/// at which it runs at `within` of all-fast or better (0.98: a 2 % slowdown); None where no
/// measured ratio does.
pub fn slow_share(rows: &[Row], workload: &str, policy: &str, within: f64) -> Option<f64> {
    rows.iter()
        .filter(|r| r.workload == workload && r.policy == policy && r.fraction_of_all_fast >= within)
        .filter_map(|r| r.fast_ratio)
        .map(|f| 1.0 - f)
        .max_by(f64::total_cmp)
}

impl Report {
    /// The human table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "Tiering on the emulated machine, preset {} (model output; ops per simulated second), footprints of about {} MiB, time scale {} (engine rounds and tpp scans every {} ms)\n\n",
            self.preset, self.size_mb, self.time_scale, self.period_ms
        );
        let _ = writeln!(
            s,
            "{:<12} {:>6} {:<12} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>9} {:>9}",
            "workload",
            "fast",
            "policy",
            "M ops/s",
            "x first",
            "x tpp",
            "of fast",
            "promo MiB",
            "demo MiB",
            "hint flt",
            "refused",
            "pol ms"
        );
        let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2}"));
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<12} {:>6} {:<12} {:>10.3} {:>8} {:>8} {:>8.2} {:>10.1} {:>10.1} {:>10} {:>9} {:>9.1}",
                r.workload,
                r.fast_ratio.map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
                r.policy,
                r.figure / 1e6,
                opt(r.speedup_over_first_touch),
                opt(r.speedup_over_tpp),
                r.fraction_of_all_fast,
                r.promoted_bytes as f64 / (1u64 << 20) as f64,
                r.demoted_bytes as f64 / (1u64 << 20) as f64,
                r.hint_faults,
                r.refused_pages,
                r.policy_cpu_ms
            );
        }
        s += "\nx first, x tpp: throughput over first-touch and over tpp with the same fast tier; of fast: over all-fast\n";
        if !self.sweep.is_empty() {
            let _ = writeln!(
                s,
                "\nsweep: each swept policy against its best point\n{:<12} {:>6} {:<12} {:>8}  best",
                "workload", "fast", "policy", "of best"
            );
            for w in &self.sweep {
                let fast = w.fast_ratio.map_or("-".into(), |x| format!("{:.1}%", x * 100.0));
                let _ = writeln!(s, "{:<12} {:>6} {:<12} {:>8.3}  {}", w.workload, fast, w.policy, w.of_best, w.best);
            }
            let worst = self.sweep.iter().map(|w| w.of_best).fold(f64::INFINITY, f64::min);
            let within = self.sweep.iter().filter(|w| w.of_best >= 0.97).count();
            let _ = writeln!(s, "within 3 % of the best point: {within} of {}; the worst {worst:.3}", self.sweep.len());
        }
        s
    }

    /// One plot per workload: each policy's share of the all-fast throughput, grouped by
    /// fast-tier size, with the slow-only bound beside them. (file name, SVG) pairs.
    pub fn plots(&self) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        let mut workloads: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !workloads.contains(&r.workload.as_str()) {
                workloads.push(&r.workload);
            }
        }
        for w in workloads {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.workload == w).collect();
            let mut ratios: Vec<f64> = rows.iter().filter_map(|r| r.fast_ratio).collect();
            ratios.sort_by(f64::total_cmp);
            ratios.dedup();
            let mut policies: Vec<&str> = Vec::new();
            for r in rows.iter().filter(|r| r.fast_ratio.is_some()) {
                if !policies.contains(&r.policy.as_str()) {
                    policies.push(&r.policy);
                }
            }
            let far = rows.iter().find(|r| r.policy == "far-only").map_or(f64::NAN, |r| r.fraction_of_all_fast);
            let mut series: Vec<(String, Vec<f64>)> = vec![("far-only".into(), vec![far; ratios.len()])];
            for p in policies {
                let vals = ratios
                    .iter()
                    .map(|x| {
                        rows.iter()
                            .find(|r| r.policy == p && r.fast_ratio == Some(*x))
                            .map_or(f64::NAN, |r| r.fraction_of_all_fast)
                    })
                    .collect();
                series.push((p.to_string(), vals));
            }
            let b = plot::Bars {
                title: format!("{w}: throughput over all-fast (emulated {}, model output)", self.preset),
                y_label: "throughput / all-fast".into(),
                groups: ratios.iter().map(|x| format!("{:.1} % fast", x * 100.0)).collect(),
                series,
            };
            out.push((format!("tiering-{w}.svg"), plot::bars(&b)?));
        }
        Ok(out)
    }

    /// The benchmark's name in results files: tiering-PRESET, with -real when every workload
    /// is a real program, -field when every one is the field's, -sweep for a --sweep (so that
    /// those runs keep a file of their own).
    pub fn benchmark(&self) -> String {
        if let Some(set) = &self.suite {
            return format!("suite-{}-{set}", self.preset);
        }
        if !self.sweep.is_empty() {
            return format!("tiering-{}-sweep", self.preset);
        }
        let all = |f: &dyn Fn(&Row) -> bool| !self.rows.is_empty() && self.rows.iter().all(f);
        let kind = if all(&|r| r.program.is_some()) {
            "-real"
        } else if all(&|r| field::FIELD.contains(&r.workload.as_str())) {
            "-field"
        } else {
            ""
        };
        format!("tiering-{}{kind}", self.preset)
    }

    /// The report (BENCHMARK.json) and its plots into dir.
    pub fn save(&self, dir: &Path) -> Result<PathBuf, Error> {
        let path = crate::results::save(dir, &self.benchmark(), self)?;
        if !self.sweep.is_empty() {
            return Ok(path); // a bar a point would not read: the sweep's table says it
        }
        for (name, svg) in self.plots()? {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(io(format!("writing {}", p.display())))?;
        }
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_checked_by_name() {
        assert_eq!(
            setups(&["first-touch".into(), "tpp".into(), "nomad".into(), "ambix".into(), "ambix/transactional".into()])
                .unwrap(),
            vec![
                Setup::FirstTouch,
                Setup::Kernel(Kernel::Tpp),
                Setup::Kernel(Kernel::Nomad),
                Setup::Engine("ambix".into(), false),
                Setup::Engine("ambix".into(), true)
            ]
        );
        assert_eq!(Setup::Engine("ambix".into(), true).name(), "ambix/transactional");
        let e = setups(&["nosuch".into()]).unwrap_err().to_string();
        assert!(e.contains("unknown policy 'nosuch'") && e.contains("ambix"), "{e}");
    }

    #[test]
    fn the_suite_runs_every_workload_under_every_baseline_at_the_fields_ratios() {
        let quick = SuiteOptions { quick: true, time_scale: DEFAULT_TIME_SCALE, jobs: None };
        let o = quick.options();
        for w in WORKLOADS.iter().chain(field::FIELD) {
            assert!(o.workloads.iter().any(|x| x == w), "{w} missing");
        }
        let s = setups(&o.policies).unwrap();
        for k in [Kernel::Linux, Kernel::Nomad] {
            assert!(s.contains(&Setup::Kernel(k)), "{k:?}");
        }
        for p in strata_policy::PEERS.iter().chain(&["strata"]) {
            assert!(s.contains(&Setup::Engine(p.to_string(), false)), "{p}");
        }
        assert_eq!(o.machine.fast_ratio, vec![0.5, 0.25, 0.125]);
        assert_eq!((o.graph_ratio, o.size_mb), (Some(0.0625), 32));
        assert_eq!(SuiteOptions { quick: false, ..quick }.options().size_mb, 128);
    }
    /// A row of workload `w` under `policy` at `ratio`, whose figure and share of all-fast are
    /// `of_fast`.
    fn row(policy: &str, ratio: f64, of_fast: f64) -> Row {
        serde_json::from_value(serde_json::json!({
            "workload": "w", "policy": policy, "fast_ratio": ratio, "preset": "p", "figure": of_fast,
            "unit": "ops/s", "speedup_over_first_touch": null, "speedup_over_tpp": null,
            "fraction_of_all_fast": of_fast, "promoted_bytes": 0, "demoted_bytes": 0, "migrated_bytes": 0,
            "policy_cpu_ms": 0.0, "hint_faults": 0, "footprint_bytes": 0, "fast_bytes": 0, "sim_ms": 0.0,
            "wall_s": 0.0, "llc_misses": 0, "fast_accesses": 0, "far_accesses": 0, "scanned_pages": 0,
            "refused_pages": 0, "engine": null
        }))
        .unwrap()
    }

    #[test]
    fn a_setup_may_give_its_policy_settings_of_its_own() {
        let (p, set) = policy_settings("strata@hysteresis=0@min_streak=5").unwrap();
        assert_eq!(p, "strata");
        assert_eq!(
            set,
            vec![("hysteresis".into(), toml::Value::Integer(0)), ("min_streak".into(), toml::Value::Integer(5))]
        );
        assert_eq!(policy_settings("mat:apb").unwrap(), ("mat:apb", vec![]));
        // a bare word is a string, quoted or not
        for spec in ["strata@hints=pin", "strata@hints=\"pin\""] {
            assert_eq!(policy_settings(spec).unwrap().1, vec![("hints".into(), toml::Value::String("pin".into()))]);
        }
        for bad in ["strata@hysteresis", "strata@=1", "strata@x=not toml", "strata@x=1.5.2"] {
            assert!(policy_settings(bad).is_err(), "{bad}");
        }
        // each setup's file holds its settings, checked: an unknown key or a value out of range
        // is refused before anything runs
        let s = setups(&["strata".into(), "strata@hysteresis=2".into()]).unwrap();
        let files = EngineFiles::write(stratad::Config::default(), &s).unwrap();
        let read = |name: &str| std::fs::read_to_string(files.path(name).unwrap()).unwrap();
        assert!(read("strata@hysteresis=2").contains("hysteresis = 2"), "{}", read("strata@hysteresis=2"));
        assert!(!read("strata").contains("hysteresis"), "the plain setup keeps the defaults");
        for bad in ["strata@nokey=1", "strata@record_max_fraction=2"] {
            let s = setups(&[bad.into()]).unwrap();
            let e = EngineFiles::write(stratad::Config::default(), &s).err().expect(bad).to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn a_sweep_adds_a_setup_a_value_and_finds_the_best_point() {
        let base = setups(&["first-touch".into(), "strata".into()]).unwrap();
        let swept = sweep_setups(&["strata.hysteresis=0,1".into(), "strata.min_streak=1,1".into()], &base).unwrap();
        let names: Vec<String> = swept.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["strata@hysteresis=0", "strata@hysteresis=1", "strata@min_streak=1"]);
        for bad in ["strata", "strata.x", "ambix.x=1", "first-touch.x=1"] {
            assert!(sweep_setups(&[bad.into()], &base).is_err(), "{bad}");
        }
        let rows = vec![
            row("strata", 0.5, 0.90),
            row("strata@hysteresis=0", 0.5, 0.95),
            row("strata@hysteresis=1", 0.5, 0.80),
            row("strata", 0.25, 0.70),
            row("strata@hysteresis=0", 0.25, 0.60),
            row("first-touch", 0.25, 0.99),
        ];
        let sweep = sweep_rows(&rows);
        assert_eq!(sweep.len(), 2, "one row per workload and ratio of the swept policy: {sweep:?}");
        assert_eq!((sweep[0].best.as_str(), sweep[0].of_best), ("strata@hysteresis=0", 0.90 / 0.95));
        assert_eq!((sweep[1].best.as_str(), sweep[1].of_best), ("strata", 1.0), "another policy is not a point");
    }

    #[test]
    fn the_slow_share_is_the_largest_measured_one_within_the_slowdown() {
        let rows = vec![row("a", 0.5, 0.99), row("a", 0.25, 0.97), row("a", 0.125, 0.90), row("b", 0.5, 0.94)];
        assert_eq!(slow_share(&rows, "w", "a", 0.98), Some(0.5));
        assert_eq!(slow_share(&rows, "w", "a", 0.95), Some(0.75));
        assert_eq!(slow_share(&rows, "w", "b", 0.95), None);
        assert_eq!(slow_share(&rows, "w", "c", 0.5), None);
    }
}
