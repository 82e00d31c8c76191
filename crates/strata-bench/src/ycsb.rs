//! M2T's key-value case study: YCSB workloads against strata-kv's engine in its `std`,
//! `nextto` and `nextto-split` variants, side by side in one run, with a table, JSON and plots
//! in the style of M2T's Fig. 2 (throughput per workload normalized to the baseline) and Fig. 3
//! (workload C throughput against theta).
//!
//! Native configurations: `in-process` (the driver calls the engine) and, with `--network`,
//! `network`: the same workload over loopback TCP against strata-kv's server in each variant
//! and against Redis (Debian's redis-server, started on a free port with persistence off),
//! through one RESP client (strata-ycsb's RespDb), and against memcached (whole records,
//! gets/cas for updates: its protocol has no hashes).
//!
//! Emulated configurations (`--emulate PRESET`): the `strata` binary built for the emulated
//! machine (`make emu`) runs this same command in process, one configuration per run, and
//! reports operations per simulated second; the emulator's report adds cache, TLB and tier
//! counts. The configurations are M2T's ([`Tiering`]): `std` on far memory only (the
//! baseline), every variant under each of `--policies` (first touch and the emulated `tpp`
//! kernel by default; `nomad` and the engine's policies as `strata bench tiering` runs them),
//! and everything fast (the upper bound). The fast tier is a fraction of the footprint,
//! measured by the all-fast run.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_emu::{fast_bytes_of, run_emulated, toolchain, Machine, MachineArgs, Tiering};
use strata_kv::{Store, Variant};
use strata_util::{median, Progress};
use strata_ycsb::{load, run as run_phase, Latency, MemcachedDb, RespDb, Workload};

use strata_util::io;

use crate::tiering::{self, EngineFiles, Setup};
use crate::{ensure, failed, plot, Error};

/// Default fast tier of emulated runs: M2T's 64 GB of a ~109 GB footprint.
pub const DEFAULT_FAST_RATIO: f64 = 0.59;
/// Default tpp scan period of emulated runs, in simulated ms: the kernel's is 1000, but these
/// runs last well under a simulated second.
pub const DEFAULT_TPP_SCAN_MS: f64 = 100.0;

/// Buckets of `--scale m2t`: 100,000 records in chains of about 3,000 nodes.
pub const M2T_BUCKETS: usize = 32;
/// YCSB's Zipfian constant, M2T's default.
const DEFAULT_THETA: f64 = 0.99;

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Workloads (YCSB core: a, b, c, d, f)
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,f")]
    pub workloads: Vec<String>,
    /// Zipfian theta; several values make a sweep (M2T: 0.25..2.0)
    #[arg(long, value_delimiter = ',', default_values_t = [DEFAULT_THETA])]
    pub theta: Vec<f64>,
    /// Records loaded (YCSB recordcount) [default: 200000; emulated 100000]
    #[arg(long)]
    pub records: Option<u64>,
    /// Operations run (YCSB operationcount) [default: 1000000; emulated 100000]
    #[arg(long)]
    pub ops: Option<u64>,
    /// Client threads [default: 2; emulated 1]
    #[arg(long)]
    pub threads: Option<usize>,
    /// Hash buckets, rounded up to a power of two [default: records / 64, chains of about 50
    /// nodes; M2T's table has chains of thousands, see docs/benchmarks.md]
    #[arg(long)]
    pub buckets: Option<usize>,
    /// Sizes by name: `default`, or `m2t`: chains of thousands of nodes as M2T's table has
    /// (100,000 records in 32 buckets, 20,000 operations), so that an operation takes about
    /// the L1 and TLB misses of M2T's Table I; --records, --buckets and --ops still win
    #[arg(long, default_value = "default", value_parser = ["default", "m2t"])]
    pub scale: String,
    /// Engine variants: std, nextto, nextto-split (values in a second arena per bucket)
    #[arg(long, value_delimiter = ',', default_value = "std,nextto,nextto-split", value_parser = parse_variant)]
    pub variants: Vec<Variant>,
    /// Rounds; the median throughput is reported, variants alternate which goes first
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Also run over the network: strata-kv servers (each variant), redis-server, memcached
    #[arg(long)]
    pub network: bool,
    /// Run on an emulated machine instead (preset m2t): far-only and all-fast, and every
    /// variant under each of --policies; needs `make emu`
    #[arg(long, value_name = "PRESET")]
    pub emulate: Option<String>,
    /// With --emulate, the tiering of the variants' runs: first-touch, tpp, nomad, or an
    /// engine policy (ambix, mat:apb, proactive, hmalloc, strata; POLICY/transactional), as
    /// `strata bench tiering --policies` takes them; the engine's round is the tpp scan period
    /// [default: first-touch,tpp]
    #[arg(long, value_delimiter = ',')]
    pub policies: Option<Vec<String>>,
    /// With --emulate, the engine's configuration for every engine policy (examples/strata.toml;
    /// the tpp scan period and the sampler are set over it); a setup's own settings go in
    /// --policies as POLICY@KEY=VALUE
    #[arg(long, value_name = "FILE")]
    pub policy_config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Added to the client's random seed (rounds use seed-offset, seed-offset + 1, ...)
    #[arg(long, default_value_t = 0, hide = true)]
    pub seed_offset: usize,
}

fn parse_variant(s: &str) -> Result<Variant, String> {
    Variant::parse(s).ok_or_else(|| format!("unknown variant '{s}' (std, nextto, nextto-split)"))
}

/// What served the requests: a strata-kv variant, or a peer server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    Std,
    Nextto,
    #[serde(rename = "nextto-split")]
    NextToSplit,
    Redis,
    Memcached,
}

impl Target {
    fn of(v: Variant) -> Target {
        match v {
            Variant::Std => Target::Std,
            Variant::NextTo => Target::Nextto,
            Variant::NextToSplit => Target::NextToSplit,
        }
    }
    fn variant(self) -> Option<Variant> {
        match self {
            Target::Std => Some(Variant::Std),
            Target::Nextto => Some(Variant::NextTo),
            Target::NextToSplit => Some(Variant::NextToSplit),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Target::Redis => "redis",
            Target::Memcached => "memcached",
            t => t.variant().expect("a strata-kv variant").name(),
        }
    }
}

/// How a row was measured: natively (in process or over TCP) or on an emulated machine, in
/// the order tables list them (the baseline first, the upper bound last). Written as its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Config {
    InProcess,
    Network,
    FarOnly,
    FirstTouch,
    Tpp,
    /// another emulated tiering: nomad, or an engine policy (`ambix`, `ambix/transactional`)
    Policy(String),
    AllFast,
}

impl Config {
    fn of(setup: &Setup) -> Config {
        Config::from(setup.name())
    }
    pub fn name(&self) -> &str {
        match self {
            Config::InProcess => "in-process",
            Config::Network => "network",
            Config::FarOnly => "far-only",
            Config::FirstTouch => "first-touch",
            Config::Tpp => "tpp",
            Config::Policy(p) => p,
            Config::AllFast => "all-fast",
        }
    }
}

impl From<String> for Config {
    fn from(s: String) -> Config {
        match s.as_str() {
            "in-process" => Config::InProcess,
            "network" => Config::Network,
            "far-only" => Config::FarOnly,
            "first-touch" => Config::FirstTouch,
            "tpp" => Config::Tpp,
            "all-fast" => Config::AllFast,
            _ => Config::Policy(s),
        }
    }
}

impl From<Config> for String {
    fn from(c: Config) -> String {
        c.name().into()
    }
}

/// One workload on one target in one configuration (the median of its rounds).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Row {
    pub workload: String,
    pub variant: Target,
    /// native, or the emulated preset (m2t); "emulated" inside the emulated run itself
    pub machine: String,
    pub config: Config,
    pub theta: f64,
    pub records: u64,
    pub operations: u64,
    pub threads: usize,
    pub buckets: usize,
    pub ops_per_sec: f64,
    pub load_ops_per_sec: f64,
    /// distinct 4 KiB pages holding one bucket's nodes, keys and values, after the run
    pub pages_per_bucket: f64,
    pub errors: u64,
    pub latency: BTreeMap<String, Latency>,
    /// emulated runs: what the emulator counted
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub emulated: Option<EmuStats>,
    /// emulated runs with one client thread: the run phase alone, without the load (M2T's
    /// Table I and Fig. 5)
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub run_phase: Option<RunPhase>,
}

/// The emulator's counts over a run phase: misses per operation, from the counters of the
/// thread that ran it, and the pages the tiering layer moved meanwhile (every thread's and
/// the background's).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct RunPhase {
    pub l1_misses_per_op: f64,
    pub llc_misses_per_op: f64,
    /// page walks
    pub stlb_misses_per_op: f64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
}

/// The emulator's counters that `RunPhase` is made of (None natively).
fn run_phase_counters() -> Option<[i64; 5]> {
    Some([
        strata::emulated_counter("l1_misses")?,
        strata::emulated_counter("llc_misses")?,
        strata::emulated_counter("stlb_misses")?,
        strata::emulated_counter("process.promoted_pages")?,
        strata::emulated_counter("process.demoted_pages")?,
    ])
}

/// One emulated run's counters (model outputs of the preset), like M2T's Table I and Fig. 5.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct EmuStats {
    /// ops_per_sec / the far-only std run's
    pub speedup_over_far_only: f64,
    pub fast_bytes: u64,
    pub footprint_bytes: u64,
    pub sim_ms: f64,
    pub wall_s: f64,
    pub accesses: u64,
    pub l1_misses: u64,
    pub l2_misses: u64,
    pub llc_misses: u64,
    pub dtlb_misses: u64,
    pub stlb_misses: u64,
    /// memory accesses (LLC misses and write-backs) served by node 0 and by the others
    pub fast_accesses: u64,
    pub far_accesses: u64,
    pub hint_faults: u64,
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    /// time the program's threads spent moving pages (faults, copies, shootdowns)
    pub migration_ms: f64,
    /// the engine's statistics under an engine policy (what it saw: `samples`, `objects`, ...;
    /// what it did), as `bench tiering`'s rows carry them
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<serde_json::Value>,
}

/// The benchmark's figures (`--json`).
#[derive(Serialize, Deserialize, Debug)]
pub struct Report {
    pub scale: String,
    /// --scale: "default" or "m2t"
    #[serde(default = "default_scale")]
    pub scale_name: String,
    /// libstrata coloured its pages (STRATA_COLOUR=1; docs/allocator.md)
    #[serde(default)]
    pub colour: bool,
    pub results: Vec<Row>,
    /// nextto ops_per_sec / std ops_per_sec, per workload and theta
    pub ratios: Vec<Ratio>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Ratio {
    pub workload: String,
    pub theta: f64,
    pub machine: String,
    pub config: Config,
    pub nextto_over_std: f64,
    pub nextto_split_over_std: Option<f64>,
    /// network only: Redis ops_per_sec / strata-kv nextto ops_per_sec, same client
    pub redis_over_nextto: Option<f64>,
    /// network only: memcached ops_per_sec / strata-kv nextto ops_per_sec
    pub memcached_over_nextto: Option<f64>,
}

/// A peer server of our own (redis-server or memcached) on a free loopback port, persistence
/// off, killed on drop or when the thread that started it ends.
struct Peer {
    _child: strata_util::Owned,
    addr: String,
}

impl Peer {
    fn start(which: Target, progress: Progress) -> Option<Peer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port().to_string();
        let (mut cmd, package) = match which {
            Target::Redis => {
                let mut c = std::process::Command::new("redis-server");
                c.args([
                    "--port",
                    &port,
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                ]);
                (c, "redis-server")
            }
            _ => {
                let mut c = std::process::Command::new("memcached");
                c.args(["-p", &port, "-l", "127.0.0.1", "-U", "0", "-m", "4096", "-t", "2"]);
                if unsafe { libc::geteuid() } == 0 {
                    c.args(["-u", "root"]); // memcached refuses to run as root otherwise
                }
                (c, "memcached")
            }
        };
        let child =
            strata_util::Owned::spawn(cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()));
        let Ok(child) = child else {
            progress.say(&format!("{} not found: no {} rows (apt-get install {package})", which.name(), which.name()));
            return None;
        };
        let p = Peer { _child: child, addr: format!("127.0.0.1:{port}") };
        for _ in 0..100 {
            let up = if which == Target::Redis {
                RespDb::new(&p.addr, 1).and_then(|c| c.call(&[b"PING"])).is_ok()
            } else {
                MemcachedDb::new(&p.addr).is_ok()
            };
            if up {
                return Some(p);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

/// The sizes of this run, defaults filled in.
struct Scale {
    records: u64,
    ops: u64,
    threads: usize,
    buckets: usize,
}

impl Scale {
    fn of(a: &Options) -> Result<Scale, Error> {
        let emulated = a.emulate.is_some();
        let m2t = a.scale == "m2t";
        let records = a.records.unwrap_or(if emulated || m2t { 100_000 } else { 200_000 });
        let ops = a.ops.unwrap_or(if m2t {
            20_000
        } else if emulated {
            100_000
        } else {
            1_000_000
        });
        let threads = a.threads.unwrap_or(if emulated { 1 } else { 2 });
        ensure(records > 0 && threads > 0 && a.rounds > 0, || {
            "--records, --threads and --rounds must be positive".into()
        })?;
        let buckets = a.buckets.unwrap_or(if m2t { M2T_BUCKETS } else { (records / 64).max(1) as usize });
        ensure(buckets > 0, || "--buckets must be positive".into())?;
        Ok(Scale { records, ops, threads, buckets })
    }
}

fn db_error(e: std::io::Error) -> Error {
    Error::Io(io("talking to the server")(e))
}

/// Load and run one workload on one native target.
fn measure(
    target: Target,
    config: Config,
    wl: &Workload,
    sc: &Scale,
    peers: &Peers,
    round: usize,
    progress: Progress,
) -> Result<Row, Error> {
    let seed = 42 + round as u64;
    let (threads, quiet) = (sc.threads, progress.quiet());
    let mut phase = None;
    let (l, res, pages, nb) = match (target, &config) {
        (t, Config::InProcess) => {
            let store = Store::new(t.variant().expect("in-process targets are variants"), sc.buckets);
            let l = load(&store, wl, threads, quiet);
            let before = run_phase_counters();
            let res = run_phase(&store, wl, threads, seed, quiet);
            // (a quiet phase with one worker runs on this thread: its counters are the phase's)
            if let (Some(b), Some(a), true) = (before, run_phase_counters(), threads == 1 && quiet) {
                let per_op = |i: usize| (a[i] - b[i]) as f64 / wl.operationcount.max(1) as f64;
                phase = Some(RunPhase {
                    l1_misses_per_op: per_op(0),
                    llc_misses_per_op: per_op(1),
                    stlb_misses_per_op: per_op(2),
                    promoted_pages: (a[3] - b[3]) as u64,
                    demoted_pages: (a[4] - b[4]) as u64,
                });
            }
            (l, res, store.pages_per_bucket(), store.buckets())
        }
        (Target::Memcached, _) => {
            let db = MemcachedDb::new(&peers.memcached.as_ref().expect("memcached").addr).map_err(db_error)?;
            db.with(|c| c.flush_all()).map_err(db_error)?;
            let l = load(&db, wl, threads, quiet);
            let res = run_phase(&db, wl, threads, seed, quiet);
            (l, res, 0.0, 0)
        }
        (Target::Redis, _) => {
            let db = RespDb::new(&peers.redis.as_ref().expect("redis").addr, wl.fieldlength).map_err(db_error)?;
            db.call(&[b"FLUSHALL"]).map_err(db_error)?;
            let l = load(&db, wl, threads, quiet);
            let res = run_phase(&db, wl, threads, seed, quiet);
            (l, res, 0.0, 0)
        }
        (t, _) => {
            let store = Store::new(t.variant().expect("a strata-kv variant"), sc.buckets);
            let store = std::sync::Arc::new(store);
            let server = strata_kv::server::Server::bind("127.0.0.1:0", store.clone(), Default::default())
                .map_err(io("starting strata-kv"))?;
            let addr = server.local_addr().map_err(io("strata-kv's address"))?.to_string();
            let stop = server.stopper();
            let handle = std::thread::spawn(move || server.serve());
            let db = RespDb::new(&addr, wl.fieldlength).map_err(db_error)?;
            let l = load(&db, wl, threads, quiet);
            let res = run_phase(&db, wl, threads, seed, quiet);
            drop(db);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = std::net::TcpStream::connect(&addr); // wake the accept loop
            let _ = handle.join();
            (l, res, store.pages_per_bucket(), store.buckets())
        }
    };
    if res.errors != 0 {
        return Err(failed(format!(
            "{} errors in workload {} ({}, {})",
            res.errors,
            wl.name,
            target.name(),
            config.name()
        )));
    }
    Ok(Row {
        workload: wl.name.clone(),
        variant: target,
        // the in-process run inside the emulated machine says so; its parent names the preset
        machine: if strata::emulated() { "emulated" } else { "native" }.into(),
        config,
        theta: wl.zipfianconstant,
        records: wl.recordcount,
        operations: wl.operationcount,
        threads,
        buckets: nb,
        ops_per_sec: res.ops_per_sec,
        load_ops_per_sec: l.ops_per_sec,
        pages_per_bucket: pages,
        errors: res.errors,
        latency: res.latency.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        emulated: None,
        run_phase: phase,
    })
}

/// The emulated configurations, in the order they run: the all-fast std run comes first
/// because it measures the footprint that sizes the fast tier of the others.
fn emulated_targets(variants: &[Variant], setups: &[Setup]) -> Vec<(Variant, Setup)> {
    let mut t = vec![(Variant::Std, Setup::Bound(Tiering::AllFast)), (Variant::Std, Setup::Bound(Tiering::FarOnly))];
    for setup in setups {
        t.extend(variants.iter().map(|v| (*v, setup.clone())));
    }
    t.extend(variants.iter().filter(|v| **v != Variant::Std).map(|v| (*v, Setup::Bound(Tiering::AllFast))));
    t
}

/// One workload on the emulated machine in one configuration: the instrumented strata runs
/// `bench ycsb` in process, and the emulator's report is folded into its row.
#[allow(clippy::too_many_arguments)]
fn measure_emulated(
    exe: &Path,
    machine: &Machine,
    variant: Variant,
    setup: &Setup,
    engine: &EngineFiles,
    wl: &Workload,
    sc: &Scale,
    fast_bytes: u64,
    round: usize,
) -> Result<Row, Error> {
    let (m, env) = setup.prepare(machine, fast_bytes, engine)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "bench",
        "ycsb",
        "--json",
        "--quiet",
        "--rounds",
        "1",
        "--variants",
        variant.name(),
        "--workloads",
        &wl.name,
    ]);
    for (flag, v) in [
        ("--theta", wl.zipfianconstant.to_string()),
        ("--records", sc.records.to_string()),
        ("--ops", sc.ops.to_string()),
        ("--threads", sc.threads.to_string()),
        ("--buckets", sc.buckets.to_string()),
        ("--seed-offset", round.to_string()),
    ] {
        cmd.args([flag, &v]);
    }
    cmd.envs(env);
    let r = run_emulated(&m, &mut cmd, true)?;
    if !r.status.success() {
        return Err(failed(format!(
            "the emulated run of workload {} ({}, {}) failed: {}",
            wl.name,
            variant.name(),
            setup.name(),
            r.status
        )));
    }
    let inner: Report =
        serde_json::from_slice(&r.stdout).map_err(|e| failed(format!("the emulated run's JSON: {e}")))?;
    let mut row = inner.results.into_iter().next().ok_or_else(|| failed("the emulated run gave no row"))?;
    let rep = &r.report;
    let (fast_accesses, far_accesses) = rep.fast_and_far_accesses();
    row.machine = m.preset.clone();
    row.config = Config::of(setup);
    row.emulated = Some(EmuStats {
        speedup_over_far_only: 0.0, // filled in once the baseline is known
        fast_bytes: match setup {
            Setup::Bound(t) => t.fast_bytes(fast_bytes, rep.footprint_bytes()),
            _ => fast_bytes,
        },
        footprint_bytes: rep.footprint_bytes(),
        sim_ms: rep.sim_ns as f64 / 1e6,
        wall_s: r.wall_s,
        accesses: rep.totals.accesses,
        l1_misses: rep.totals.l1_misses,
        l2_misses: rep.totals.l2_misses,
        llc_misses: rep.totals.llc_misses,
        dtlb_misses: rep.totals.dtlb_misses,
        stlb_misses: rep.totals.stlb_misses,
        fast_accesses,
        far_accesses,
        hint_faults: rep.totals.hint_faults,
        promoted_pages: rep.promoted_pages(),
        demoted_pages: rep.demoted_pages(),
        migration_ms: rep.totals.migrate_ps as f64 / 1e9,
        engine: rep.engine.clone(),
    });
    Ok(row)
}

/// The rounds of one target: the row closest to the median, with the median throughput.
fn median_row(mut rs: Vec<Row>) -> Row {
    let med = median(rs.iter().map(|r| r.ops_per_sec).collect());
    rs.sort_by(|x, y| (x.ops_per_sec - med).abs().total_cmp(&(y.ops_per_sec - med).abs()));
    let mut row = rs.swap_remove(0); // latencies and counters of a real round
    row.ops_per_sec = med;
    row
}

/// The emulated matrix: every workload in every configuration on the preset.
fn run_emulated_matrix(
    preset: &str,
    workloads: &[Workload],
    a: &Options,
    sc: &Scale,
    progress: Progress,
) -> Result<Vec<Row>, Error> {
    ensure(!a.network, || "--network and --emulate: the emulated runs are in process only".into())?;
    let fast_ratio = a.machine.one_fast_ratio()?.unwrap_or(DEFAULT_FAST_RATIO);
    ensure(fast_ratio < 1.0, || "--fast-ratio must be below 1 (all-fast is one of the configurations)".into())?;
    let exe = toolchain::emu_strata()?;
    let mut machine = Machine::preset(preset, progress.quiet())?;
    machine.set_tpp_scan_period_ms(a.machine.tpp_scan_period_ms.unwrap_or(DEFAULT_TPP_SCAN_MS));
    a.machine.apply(&mut machine)?;
    let setups = tiering::setups(a.policies.as_deref().unwrap_or(&["first-touch".into(), "tpp".into()]))?;
    let period_ms = a.machine.tpp_scan_period_ms.unwrap_or(DEFAULT_TPP_SCAN_MS);
    // one time scale: a 1 s period of the kernel modes and the field's policies is period_ms
    let time_scale = period_ms / 1000.0;
    if machine.get("time_scale").is_none() {
        machine.set("time_scale", &time_scale.to_string());
    }
    let engine_config = |footprint: u64| {
        let cfg = tiering::engine_config(
            a.policy_config.as_deref(),
            period_ms,
            time_scale,
            tiering::DEFAULT_SAMPLE_PERIOD,
            None,
            footprint as f64 / 1048576.0,
        )?;
        EngineFiles::write(cfg, &setups)
    };
    let mut engine = engine_config(0)?; // checks the policies before anything runs
    let targets = emulated_targets(&a.variants, &setups);
    let mut rows = Vec::new();
    for wl in workloads {
        let mut fast_bytes = 0;
        let mut done: Vec<Row> = Vec::new();
        for (i, (variant, setup)) in targets.iter().enumerate() {
            let mut rs = Vec::new();
            for r in 0..a.rounds {
                progress.say(&format!(
                    "workload {} theta {} on emulated {preset}: {} {} ({} of {}), round {}/{}",
                    wl.name,
                    wl.zipfianconstant,
                    variant.name(),
                    setup.name(),
                    i + 1,
                    targets.len(),
                    r + 1,
                    a.rounds
                ));
                let row =
                    measure_emulated(&exe, &machine, *variant, setup, &engine, wl, sc, fast_bytes, r + a.seed_offset)?;
                let e = row.emulated.as_ref().expect("emulated");
                progress.say(&format!("  {:.0} ops per simulated second ({:.1} s wall)", row.ops_per_sec, e.wall_s));
                rs.push(row);
            }
            let row = median_row(rs);
            if i == 0 {
                // std all-fast: the footprint sizes the fast tier and MAT's records
                let footprint = row.emulated.as_ref().map_or(0, |e| e.footprint_bytes);
                fast_bytes = fast_bytes_of(footprint, fast_ratio);
                engine = engine_config(footprint)?;
                progress.say(&format!(
                    "  footprint {} MiB: the fast tier is {} MiB ({:.0} %)",
                    footprint >> 20,
                    fast_bytes >> 20,
                    fast_ratio * 100.0
                ));
            }
            done.push(row);
        }
        let base = done.iter().find(|r| r.config == Config::FarOnly).map_or(f64::NAN, |r| r.ops_per_sec);
        for r in &mut done {
            if let Some(e) = r.emulated.as_mut() {
                e.speedup_over_far_only = r.ops_per_sec / base;
            }
        }
        rows.extend(done);
    }
    Ok(rows)
}

/// The peer servers of a network run.
struct Peers {
    redis: Option<Peer>,
    memcached: Option<Peer>,
}

/// The native matrix: in process, and with --network over TCP against the peers.
fn run_native_matrix(workloads: &[Workload], a: &Options, sc: &Scale, progress: Progress) -> Result<Vec<Row>, Error> {
    ensure(
        a.machine.set.is_empty()
            && a.machine.fast_ratio.is_empty()
            && a.machine.tpp_scan_period_ms.is_none()
            && a.policies.is_none(),
        || {
            "--set, --fast-ratio, --tpp-scan-period-ms and --policies are for the emulated machine (--emulate m2t)"
                .into()
        },
    )?;
    let peers = Peers {
        redis: if a.network { Peer::start(Target::Redis, progress) } else { None },
        memcached: if a.network { Peer::start(Target::Memcached, progress) } else { None },
    };
    let mut targets: Vec<(Target, Config)> = a.variants.iter().map(|v| (Target::of(*v), Config::InProcess)).collect();
    if a.network {
        targets.extend(a.variants.iter().map(|v| (Target::of(*v), Config::Network)));
        if peers.redis.is_some() {
            targets.push((Target::Redis, Config::Network));
        }
        if peers.memcached.is_some() {
            targets.push((Target::Memcached, Config::Network));
        }
    }
    let mut rows = Vec::new();
    for wl in workloads {
        let mut per: BTreeMap<(Target, Config), Vec<Row>> = BTreeMap::new();
        for r in 0..a.rounds {
            for k in 0..targets.len() {
                let (target, config) = targets[(k + r) % targets.len()].clone();
                progress.say(&format!(
                    "workload {} theta {} {} ({}) round {}/{}: loading {} records",
                    wl.name,
                    wl.zipfianconstant,
                    target.name(),
                    config.name(),
                    r + 1,
                    a.rounds,
                    wl.recordcount
                ));
                let row = measure(target, config.clone(), wl, sc, &peers, r + a.seed_offset, progress)?;
                per.entry((target, config)).or_default().push(row);
            }
        }
        rows.extend(per.into_values().map(median_row));
    }
    Ok(rows)
}

/// Run the matrix (native, or emulated with --emulate).
pub fn run(a: &Options, progress: Progress) -> Result<Report, Error> {
    let sc = Scale::of(a)?;
    let mut workloads = Vec::new();
    for w in &a.workloads {
        for &t in &a.theta {
            let mut wl = Workload::core(w).map_err(|e| Error::Invalid(e.to_string()))?;
            for (k, v) in [
                ("recordcount", sc.records.to_string()),
                ("operationcount", sc.ops.to_string()),
                ("zipfianconstant", t.to_string()),
            ] {
                wl.set(k, &v).map_err(|e| Error::Invalid(e.to_string()))?;
            }
            workloads.push(wl);
        }
    }
    let rows = match &a.emulate {
        Some(preset) => run_emulated_matrix(preset, &workloads, a, &sc, progress)?,
        None => run_native_matrix(&workloads, a, &sc, progress)?,
    };
    let ratios = ratios(&workloads, &rows);
    let emulated = a.emulate.as_ref().map_or(String::new(), |_| {
        format!(
            ", fast tier {:.0} % of the footprint, tpp scans every {} ms",
            a.machine.fast_ratio.first().copied().unwrap_or(DEFAULT_FAST_RATIO) * 100.0,
            a.machine.tpp_scan_period_ms.unwrap_or(DEFAULT_TPP_SCAN_MS)
        )
    });
    Ok(Report {
        scale: format!(
            "{} records of {} B, {} buckets, {} operations, {} thread(s){emulated} (M2T: 85 M records, 170 M operations, ~109 GB, 32 threads)",
            sc.records,
            workloads.first().map_or(1000, |w| w.record_bytes()),
            sc.buckets.next_power_of_two(),
            sc.ops,
            sc.threads,
        ),
        scale_name: a.scale.clone(),
        colour: strata::option("colour").is_some_and(|v| v == "1"),
        results: rows,
        ratios,
    })
}

fn default_scale() -> String {
    "default".into()
}

/// nextto (and the peers) over std, per workload, theta and configuration.
fn ratios(workloads: &[Workload], rows: &[Row]) -> Vec<Ratio> {
    let mut configs: Vec<(&str, &Config)> = Vec::new();
    for r in rows {
        if !configs.contains(&(r.machine.as_str(), &r.config)) {
            configs.push((r.machine.as_str(), &r.config));
        }
    }
    let mut out = Vec::new();
    for wl in workloads {
        for &(machine, config) in &configs {
            let get = |v: Target| {
                rows.iter()
                    .find(|r| {
                        r.workload == wl.name && r.theta == wl.zipfianconstant && r.variant == v && r.config == *config
                    })
                    .map(|r| r.ops_per_sec)
            };
            if let (Some(s), Some(n)) = (get(Target::Std), get(Target::Nextto)) {
                out.push(Ratio {
                    workload: wl.name.clone(),
                    theta: wl.zipfianconstant,
                    machine: machine.into(),
                    config: config.clone(),
                    nextto_over_std: n / s,
                    nextto_split_over_std: get(Target::NextToSplit).map(|x| x / s),
                    redis_over_nextto: get(Target::Redis).map(|r| r / n),
                    memcached_over_nextto: get(Target::Memcached).map(|m| m / n),
                });
            }
        }
    }
    out
}

impl Report {
    /// The preset of an emulated run, None for a native one.
    pub fn emulated(&self) -> Option<&str> {
        self.results.iter().find(|r| r.emulated.is_some()).map(|r| r.machine.as_str())
    }

    /// The benchmark's name in results files: ycsb-native, or ycsb-emulated-PRESET, then
    /// -m2t-scale at --scale m2t, -theta with thetas other than 0.99 alone (a sweep),
    /// -policies with engine policies or nomad, and -colour when libstrata coloured its pages (STRATA_COLOUR=1), so that these runs do
    /// not overwrite the headline's file.
    pub fn benchmark(&self) -> String {
        let mut name = self.emulated().map_or_else(|| "ycsb-native".into(), |p| format!("ycsb-emulated-{p}"));
        if self.scale_name != "default" {
            name += &format!("-{}-scale", self.scale_name);
        }
        if self.results.iter().any(|r| r.theta != DEFAULT_THETA) {
            name += "-theta";
        }
        if self.results.iter().any(|r| matches!(r.config, Config::Policy(_))) {
            name += "-policies";
        }
        if self.colour {
            name += "-colour";
        }
        name
    }

    /// The human table.
    pub fn table(&self) -> String {
        let emulated = self.emulated();
        let mut s = match emulated {
            Some(p) => {
                format!("YCSB on strata-kv, emulated {p} (model output; ops per simulated second): {}\n\n", self.scale)
            }
            None => format!("YCSB on strata-kv, native: {}\n\n", self.scale),
        };
        if emulated.is_some() {
            let _ = writeln!(
                s,
                "{:<8} {:>6} {:<12} {:<21} {:>11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>9}",
                "workload",
                "theta",
                "variant",
                "config",
                "ops/s",
                "x far",
                "L1 miss",
                "LLC miss",
                "STLB miss",
                "fast acc",
                "far acc",
                "promoted",
                "demoted",
                "L1/op",
                "walks/op",
                "run prom",
                "run dem"
            );
        } else {
            let _ = writeln!(
                s,
                "{:<8} {:>6} {:<12} {:<10} {:>12} {:>10} {:>10} {:>10}",
                "workload", "theta", "variant", "config", "ops/s", "p50 us", "p99 us", "pages/bkt"
            );
        }
        for r in &self.results {
            if let Some(e) = &r.emulated {
                let _ = writeln!(
                    s,
                    "{:<8} {:>6} {:<12} {:<21} {:>11.0} {:>8.2} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>9}",
                    r.workload,
                    r.theta,
                    r.variant.name(),
                    r.config.name(),
                    r.ops_per_sec,
                    e.speedup_over_far_only,
                    e.l1_misses,
                    e.llc_misses,
                    e.stlb_misses,
                    e.fast_accesses,
                    e.far_accesses,
                    e.promoted_pages,
                    e.demoted_pages,
                    r.run_phase.map_or("-".into(), |p| format!("{:.0}", p.l1_misses_per_op)),
                    r.run_phase.map_or("-".into(), |p| format!("{:.0}", p.stlb_misses_per_op)),
                    r.run_phase.map_or("-".into(), |p| p.promoted_pages.to_string()),
                    r.run_phase.map_or("-".into(), |p| p.demoted_pages.to_string())
                );
                continue;
            }
            let lat = r.latency.get("read").or_else(|| r.latency.values().next());
            let _ = writeln!(
                s,
                "{:<8} {:>6} {:<12} {:<10} {:>12.0} {:>10.2} {:>10.2} {:>10.1}",
                r.workload,
                r.theta,
                r.variant.name(),
                r.config.name(),
                r.ops_per_sec,
                lat.map_or(0.0, |l| l.p50_us),
                lat.map_or(0.0, |l| l.p99_us),
                r.pages_per_bucket
            );
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(s, "\nthroughput ratios:");
            for r in &self.ratios {
                let peers =
                    r.redis_over_nextto.map_or(String::new(), |x| format!("; Redis / strata-kv nextto {x:.2}x"))
                        + &r.memcached_over_nextto
                            .map_or(String::new(), |x| format!("; memcached / strata-kv nextto {x:.2}x"));
                let split = r.nextto_split_over_std.map_or(String::new(), |x| format!("; nextto-split / std {x:.2}x"));
                let _ = writeln!(
                    s,
                    "  workload {} theta {} ({}): nextto / std {:.2}x{split}{peers}",
                    r.workload,
                    r.theta,
                    r.config.name(),
                    r.nextto_over_std
                );
            }
        }
        if emulated.is_some() {
            let _ = writeln!(s, "\nx far: throughput over std on far memory only (M2T's baseline; M2T reports 3.39-4.69x for nextto with tiering)");
        }
        s
    }

    /// M2T's plots: Fig. 2 (throughput per workload over the baseline) and, with several
    /// thetas, Fig. 3 (workload C against theta). (file name, SVG) pairs.
    pub fn plots(&self) -> Result<Vec<(String, String)>, Error> {
        let emulated = self.emulated().is_some();
        let rows: Vec<&Row> = self.results.iter().filter(|x| emulated || x.config == Config::InProcess).collect();
        let name = |x: &Row| {
            if emulated {
                format!("{} {}", x.variant.name(), x.config.name())
            } else {
                x.variant.name().to_string()
            }
        };
        let mut names: Vec<String> = Vec::new();
        for x in &rows {
            let n = name(x);
            if !names.contains(&n) {
                names.push(n);
            }
        }
        // the baseline first, the upper bound last
        if emulated {
            names.sort_by_key(|n| (!n.ends_with("far-only"), n.ends_with("all-fast")));
        } else {
            names.sort_by_key(|n| n != "std");
        }
        let base = names.first().cloned().unwrap_or_default();
        let where_ = if emulated { "emulated, model output" } else { "native" };
        let theta = rows.first().map_or(DEFAULT_THETA, |x| x.theta);
        let mut workloads: Vec<String> = Vec::new();
        for x in rows.iter().filter(|x| x.theta == theta) {
            if !workloads.contains(&x.workload) {
                workloads.push(x.workload.clone());
            }
        }
        let get = |w: &str, t: f64, n: &str| {
            rows.iter().find(|x| x.workload == w && x.theta == t && name(x) == n).map(|x| x.ops_per_sec)
        };
        let fig2 = plot::Bars {
            title: format!("YCSB throughput normalized to {base} (theta {theta}, {where_})"),
            y_label: format!("throughput / {base}"),
            groups: workloads.iter().map(|w| w.to_uppercase()).collect(),
            series: names
                .iter()
                .map(|n| {
                    let vals = workloads
                        .iter()
                        .map(|w| get(w, theta, n).unwrap_or(0.0) / get(w, theta, &base).unwrap_or(f64::NAN))
                        .collect();
                    (n.clone(), vals)
                })
                .collect(),
        };
        let mut out = vec![("fig2-workloads.svg".to_string(), plot::bars(&fig2)?)];
        let mut thetas: Vec<f64> = rows.iter().filter(|x| x.workload == "c").map(|x| x.theta).collect();
        thetas.sort_by(f64::total_cmp);
        thetas.dedup();
        if thetas.len() > 1 {
            let fig3 = plot::Lines {
                title: format!("Workload C throughput vs Zipfian theta ({where_})"),
                x_label: "theta".into(),
                y_label: "M ops/s".into(),
                series: names
                    .iter()
                    .map(|n| {
                        (n.clone(), thetas.iter().filter_map(|t| get("c", *t, n).map(|v| (*t, v / 1e6))).collect())
                    })
                    .collect(),
            };
            out.push(("fig3-theta.svg".to_string(), plot::lines(&fig3)?));
        }
        Ok(out)
    }

    /// The report and its plots into dir: BENCHMARK.json (see [`crate::results`]) and
    /// BENCHMARK-fig2-workloads.svg (and -fig3-theta.svg with several thetas).
    pub fn save(&self, dir: &Path) -> Result<PathBuf, Error> {
        let bench = self.benchmark();
        let path = crate::results::save(dir, &bench, self)?;
        for (name, svg) in self.plots()? {
            let p = dir.join(format!("{bench}-{name}"));
            std::fs::write(&p, svg).map_err(io(format!("writing {}", p.display())))?;
        }
        Ok(path)
    }
}
