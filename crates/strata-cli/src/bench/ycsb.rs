//! `strata bench ycsb`: M2T's key-value case study. YCSB workloads against strata-kv's
//! engine in its `std` and `nextto` variants, side by side in one run, with a table, JSON and
//! plots in the style of M2T's Fig. 2 (throughput per workload normalized to the baseline)
//! and Fig. 3 (workload C throughput against theta).
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
//! counts. The configurations are M2T's: `std` on far memory only (the baseline), `std` and
//! `nextto` with first touch and with the emulated `tpp` kernel, and everything fast (the
//! upper bound). The fast tier is a fraction of the footprint, measured by the all-fast run.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;
use strata_kv::{Store, Variant};
use strata_ycsb::{load, run as run_phase, Latency, MemcachedDb, RespDb, Workload};

use super::median;
use crate::emu::{fast_bytes_of, run_emulated, Machine};
use crate::output::{emit, emit_json, progress};

#[derive(clap::Args)]
pub struct Args {
    /// Workloads (YCSB core: a, b, c, d, f)
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,f")]
    workloads: Vec<String>,
    /// Zipfian theta; several values make a sweep (M2T: 0.25..2.0)
    #[arg(long, value_delimiter = ',', default_value = "0.99")]
    theta: Vec<f64>,
    /// Records loaded (YCSB recordcount) [default: 200000; emulated 100000]
    #[arg(long)]
    records: Option<u64>,
    /// Operations run (YCSB operationcount) [default: 1000000; emulated 100000]
    #[arg(long)]
    ops: Option<u64>,
    /// Client threads [default: 2; emulated 1]
    #[arg(long)]
    threads: Option<usize>,
    /// Hash buckets, rounded up to a power of two [default: records / 64, chains of about 50
    /// nodes; M2T's table has chains of thousands, see the README]
    #[arg(long)]
    buckets: Option<usize>,
    /// Engine variants: std, nextto, nextto-split (values in a second arena per bucket)
    #[arg(long, value_delimiter = ',', default_value = "std,nextto,nextto-split")]
    variants: Vec<String>,
    /// Rounds; the median throughput is reported, variants alternate which goes first
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Also run over the network: strata-kv servers (each variant), redis-server, memcached
    #[arg(long)]
    network: bool,
    /// Run on an emulated machine instead (preset m2t): far-only, first-touch, tpp and
    /// all-fast configurations; needs `make emu`
    #[arg(long, value_name = "PRESET")]
    emulate: Option<String>,
    /// Emulated: the fast tier as a fraction of the footprint (M2T's: 64 GB of ~109 GB)
    #[arg(long, default_value_t = 0.59, value_name = "R")]
    fast_ratio: f64,
    /// Emulated tpp: the scanner's period in simulated ms. The kernel's is 1000; the default
    /// is shorter because these runs last well under a simulated second (see the README)
    #[arg(long, default_value_t = 100.0, value_name = "MS")]
    tpp_scan_period_ms: f64,
    /// Emulated: any emulator setting, KEY=VALUE (repeatable; e.g. llc=8388608 for an 8 MiB
    /// last-level cache; keys in emu/api.c)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Also write ycsb.json, fig2-workloads.svg and (with several thetas) fig3-theta.svg here
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print JSON: {results: [{workload, variant, machine, config, ops_per_sec, ...}], ...}
    #[arg(long)]
    json: bool,
    /// Added to the client's random seed (rounds use seed-offset, seed-offset + 1, ...)
    #[arg(long, default_value_t = 0, hide = true)]
    seed_offset: usize,
    /// No progress lines on stderr
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Serialize, serde::Deserialize, Clone)]
struct Row {
    workload: String,
    variant: String,
    /// native, or the emulated preset (m2t)
    machine: String,
    /// native: in-process or network; emulated: far-only, first-touch, tpp or all-fast
    config: String,
    theta: f64,
    records: u64,
    operations: u64,
    threads: usize,
    buckets: usize,
    ops_per_sec: f64,
    load_ops_per_sec: f64,
    /// distinct 4 KiB pages holding one bucket's nodes, keys and values, after the run
    pages_per_bucket: f64,
    errors: u64,
    latency: BTreeMap<String, Latency>,
    /// emulated runs: what the emulator counted
    #[serde(skip_serializing_if = "Option::is_none")]
    emulated: Option<EmuStats>,
}

/// One emulated run's counters (model outputs of the preset), like M2T's Table I and Fig. 5.
#[derive(Serialize, serde::Deserialize, Clone, Default)]
struct EmuStats {
    /// ops_per_sec / the far-only std run's
    speedup_over_far_only: f64,
    fast_bytes: u64,
    footprint_bytes: u64,
    sim_ms: f64,
    wall_s: f64,
    accesses: u64,
    l1_misses: u64,
    l2_misses: u64,
    llc_misses: u64,
    dtlb_misses: u64,
    stlb_misses: u64,
    /// memory accesses (LLC misses and write-backs) served by node 0 and by the others
    fast_accesses: u64,
    far_accesses: u64,
    hint_faults: u64,
    promoted_pages: u64,
    demoted_pages: u64,
    /// time the program's threads spent moving pages (faults, copies, shootdowns)
    migration_ms: f64,
}

#[derive(Serialize)]
struct Report {
    scale: String,
    results: Vec<Row>,
    /// nextto ops_per_sec / std ops_per_sec, per workload and theta
    ratios: Vec<Ratio>,
}

#[derive(Serialize)]
struct Ratio {
    workload: String,
    theta: f64,
    machine: String,
    config: String,
    nextto_over_std: f64,
    nextto_split_over_std: Option<f64>,
    /// network only: Redis ops_per_sec / strata-kv nextto ops_per_sec, same client
    redis_over_nextto: Option<f64>,
    /// network only: memcached ops_per_sec / strata-kv nextto ops_per_sec
    memcached_over_nextto: Option<f64>,
}

/// A peer server of our own (redis-server or memcached) on a free loopback port, persistence
/// off, stopped on drop.
struct Peer {
    child: std::process::Child,
    addr: String,
}

impl Peer {
    fn start(which: &str, quiet: bool) -> Option<Peer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port().to_string();
        let mut cmd = match which {
            "redis" => {
                let mut c = std::process::Command::new("redis-server");
                c.args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"]);
                c
            }
            _ => {
                let mut c = std::process::Command::new("memcached");
                c.args(["-p", &port, "-l", "127.0.0.1", "-U", "0", "-m", "4096", "-t", "2"]);
                if unsafe { libc::geteuid() } == 0 {
                    c.args(["-u", "root"]); // memcached refuses to run as root otherwise
                }
                c
            }
        };
        let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn();
        let Ok(child) = child else {
            if !quiet {
                progress("ycsb", &format!("{which} not found: no {which} rows (apt-get install {})", if which == "redis" { "redis-server" } else { "memcached" }));
            }
            return None;
        };
        let p = Peer { child, addr: format!("127.0.0.1:{port}") };
        for _ in 0..100 {
            let up = if which == "redis" {
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

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    fn of(a: &Args) -> anyhow::Result<Scale> {
        let emulated = a.emulate.is_some();
        let records = a.records.unwrap_or(if emulated { 100_000 } else { 200_000 });
        let ops = a.ops.unwrap_or(if emulated { 100_000 } else { 1_000_000 });
        let threads = a.threads.unwrap_or(if emulated { 1 } else { 2 });
        anyhow::ensure!(records > 0 && threads > 0 && a.rounds > 0, "--records, --threads and --rounds must be positive");
        let buckets = a.buckets.unwrap_or((records / 64).max(1) as usize);
        anyhow::ensure!(buckets > 0, "--buckets must be positive");
        Ok(Scale { records, ops, threads, buckets })
    }
}

/// Load and run one workload on one native target.
#[allow(clippy::too_many_arguments)]
fn measure(label: &str, config: &str, wl: &Workload, a: &Args, sc: &Scale, redis: Option<&Peer>, memcached: Option<&Peer>, round: usize) -> anyhow::Result<Row> {
    let seed = 42 + round as u64;
    let threads = sc.threads;
    let (l, res, pages, nb) = if config == "in-process" {
        let store = Store::new(Variant::parse(label).expect("variant"), sc.buckets);
        let l = load(&store, wl, threads, a.quiet);
        let res = run_phase(&store, wl, threads, seed, a.quiet);
        (l, res, store.pages_per_bucket(), store.buckets())
    } else if label == "memcached" {
        let db = MemcachedDb::new(&memcached.expect("memcached").addr)?;
        db.with(|c| c.flush_all())?;
        let l = load(&db, wl, threads, a.quiet);
        let res = run_phase(&db, wl, threads, seed, a.quiet);
        (l, res, 0.0, 0)
    } else if label == "redis" {
        let db = RespDb::new(&redis.expect("redis").addr, wl.fieldlength)?;
        db.call(&[b"FLUSHALL"])?;
        let l = load(&db, wl, threads, a.quiet);
        let res = run_phase(&db, wl, threads, seed, a.quiet);
        (l, res, 0.0, 0)
    } else {
        let store = std::sync::Arc::new(Store::new(Variant::parse(label).expect("variant"), sc.buckets));
        let server = strata_kv::server::Server::bind("127.0.0.1:0", store.clone(), Default::default())?;
        let addr = server.local_addr()?.to_string();
        let stop = server.stopper();
        let handle = std::thread::spawn(move || server.serve());
        let db = RespDb::new(&addr, wl.fieldlength)?;
        let l = load(&db, wl, threads, a.quiet);
        let res = run_phase(&db, wl, threads, seed, a.quiet);
        drop(db);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(&addr); // wake the accept loop
        let _ = handle.join();
        (l, res, store.pages_per_bucket(), store.buckets())
    };
    anyhow::ensure!(res.errors == 0, "{} errors in workload {} ({label}, {config})", res.errors, wl.name);
    Ok(Row {
        workload: wl.name.clone(),
        variant: label.into(),
        // the in-process run inside the emulated machine says so; its parent names the preset
        machine: if strata::emulated() { "emulated" } else { "native" }.into(),
        config: config.into(),
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
    })
}

/// The emulated configurations, in the order they run: the all-fast std run comes first
/// because it measures the footprint that sizes the fast tier of the others.
fn emulated_targets(variants: &[Variant]) -> Vec<(&'static str, &'static str)> {
    let mut t = vec![("std", "all-fast"), ("std", "far-only")];
    for config in ["first-touch", "tpp"] {
        t.extend(variants.iter().map(|v| (v.name(), config)));
    }
    t.extend(variants.iter().filter(|v| **v != Variant::Std).map(|v| (v.name(), "all-fast")));
    t
}

/// One workload on the emulated machine in one configuration: the instrumented strata runs
/// `bench ycsb` in process, and the emulator's report is folded into its row.
fn measure_emulated(exe: &std::path::Path, machine: &Machine, variant: &str, config: &str, wl: &Workload, a: &Args, sc: &Scale, fast_bytes: u64, round: usize) -> anyhow::Result<Row> {
    let mut m = machine.clone();
    match config {
        "all-fast" => m.set_fast_bytes(1 << 50),
        "far-only" => m.set_fast_bytes(0),
        _ => m.set_fast_bytes(fast_bytes),
    }
    m.set("kernel", if config == "tpp" { "1" } else { "0" });
    m.set("tpp_scan_period_ns", &(a.tpp_scan_period_ms * 1e6).to_string());
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench", "ycsb", "--json", "--quiet", "--rounds", "1", "--variants", variant, "--workloads", &wl.name]);
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
    let (status, out, rep) = run_emulated(&m, &mut cmd, true)?;
    anyhow::ensure!(status.success(), "the emulated run of workload {} ({variant}, {config}) failed: {status}", wl.name);
    let inner: serde_json::Value = serde_json::from_slice(&out).context("the emulated run's JSON")?;
    let mut row: Row = serde_json::from_value(inner["results"][0].clone()).context("the emulated run's row")?;
    let nodes = rep.json["nodes"].as_array().cloned().unwrap_or_default();
    let node_acc = |first: bool| nodes.iter().filter(|n| (n["node"] == 0) == first).map(|n| n["memory_accesses"].as_u64().unwrap_or(0)).sum();
    let bg = |k: &str| rep.json["background"][k].as_u64().unwrap_or(0);
    row.machine = m.preset.clone();
    row.config = config.into();
    row.emulated = Some(EmuStats {
        speedup_over_far_only: 0.0, // filled in once the baseline is known
        fast_bytes: if config == "all-fast" { rep.peak_resident_pages() * 4096 } else if config == "far-only" { 0 } else { fast_bytes },
        footprint_bytes: rep.peak_resident_pages() * 4096,
        sim_ms: rep.json["sim_ns"].as_u64().unwrap_or(0) as f64 / 1e6,
        wall_s: rep.wall_s,
        accesses: rep.total("accesses"),
        l1_misses: rep.total("l1_misses"),
        l2_misses: rep.total("l2_misses"),
        llc_misses: rep.total("llc_misses"),
        dtlb_misses: rep.total("dtlb_misses"),
        stlb_misses: rep.total("stlb_misses"),
        fast_accesses: node_acc(true),
        far_accesses: node_acc(false),
        hint_faults: rep.total("hint_faults"),
        promoted_pages: rep.total("promoted_pages") + bg("promoted_pages"),
        demoted_pages: rep.total("demoted_pages") + bg("demoted_pages"),
        migration_ms: rep.total("migrate_ps") as f64 / 1e9,
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
fn run_emulated_matrix(preset: &str, variants: &[Variant], workloads: &[Workload], a: &Args, sc: &Scale) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(a.fast_ratio > 0.0 && a.fast_ratio < 1.0, "--fast-ratio must be between 0 and 1");
    anyhow::ensure!(a.tpp_scan_period_ms > 0.0, "--tpp-scan-period-ms must be positive");
    anyhow::ensure!(!a.network, "--network and --emulate: the emulated runs are in process only");
    let exe = crate::emu::emu_strata()?;
    let mut machine = Machine::preset(preset, a.quiet)?;
    for kv in &a.set {
        let (k, v) = kv.split_once('=').with_context(|| format!("--set {kv}: expected KEY=VALUE"))?;
        machine.set(k, v);
    }
    let targets = emulated_targets(variants);
    let mut rows = Vec::new();
    for wl in workloads {
        let mut fast_bytes = 0;
        let mut done: Vec<Row> = Vec::new();
        for (i, &(variant, config)) in targets.iter().enumerate() {
            let mut rs = Vec::new();
            for r in 0..a.rounds {
                if !a.quiet {
                    progress("ycsb", &format!("workload {} theta {} on emulated {preset}: {variant} {config} ({} of {}), round {}/{}", wl.name, wl.zipfianconstant, i + 1, targets.len(), r + 1, a.rounds));
                }
                let row = measure_emulated(&exe, &machine, variant, config, wl, a, sc, fast_bytes, r)?;
                if !a.quiet {
                    let e = row.emulated.as_ref().expect("emulated");
                    progress("ycsb", &format!("  {:.0} ops per simulated second ({:.1} s wall)", row.ops_per_sec, e.wall_s));
                }
                rs.push(row);
            }
            let row = median_row(rs);
            if (variant, config) == ("std", "all-fast") {
                let footprint = row.emulated.as_ref().map_or(0, |e| e.footprint_bytes);
                fast_bytes = fast_bytes_of(footprint, a.fast_ratio);
                if !a.quiet {
                    progress("ycsb", &format!("  footprint {} MiB: the fast tier is {} MiB ({:.0} %)", footprint >> 20, fast_bytes >> 20, a.fast_ratio * 100.0));
                }
            }
            done.push(row);
        }
        let base = done.iter().find(|r| r.config == "far-only").map_or(f64::NAN, |r| r.ops_per_sec);
        for r in &mut done {
            if let Some(e) = r.emulated.as_mut() {
                e.speedup_over_far_only = r.ops_per_sec / base;
            }
        }
        rows.extend(done);
    }
    Ok(rows)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let variants: Vec<Variant> = a
        .variants
        .iter()
        .map(|v| Variant::parse(v).with_context(|| format!("unknown variant '{v}' (std, nextto, nextto-split)")))
        .collect::<anyhow::Result<_>>()?;
    let sc = Scale::of(&a)?;
    anyhow::ensure!(a.set.is_empty() || a.emulate.is_some(), "--set is for the emulated machine (--emulate m2t)");
    let mut workloads = Vec::new();
    for w in &a.workloads {
        for &t in &a.theta {
            let mut wl = Workload::core(w)?;
            wl.set("recordcount", &sc.records.to_string())?;
            wl.set("operationcount", &sc.ops.to_string())?;
            wl.set("zipfianconstant", &t.to_string())?;
            workloads.push(wl);
        }
    }
    let rows = if let Some(preset) = &a.emulate {
        run_emulated_matrix(preset, &variants, &workloads, &a, &sc)?
    } else {
        run_native_matrix(&variants, &workloads, &a, &sc)?
    };
    let mut ratios = Vec::new();
    for wl in &workloads {
        let mut configs: Vec<(&str, &str)> = Vec::new();
        for r in &rows {
            if !configs.contains(&(r.machine.as_str(), r.config.as_str())) {
                configs.push((r.machine.as_str(), r.config.as_str()));
            }
        }
        for (machine, config) in configs {
            let get = |v: &str| {
                rows.iter()
                    .find(|r| r.workload == wl.name && r.theta == wl.zipfianconstant && r.variant == v && r.config == config)
                    .map(|r| r.ops_per_sec)
            };
            if let (Some(s), Some(n)) = (get("std"), get("nextto")) {
                ratios.push(Ratio {
                    workload: wl.name.clone(),
                    theta: wl.zipfianconstant,
                    machine: machine.into(),
                    config: config.into(),
                    nextto_over_std: n / s,
                    nextto_split_over_std: get("nextto-split").map(|x| x / s),
                    redis_over_nextto: get("redis").map(|r| r / n),
                    memcached_over_nextto: get("memcached").map(|m| m / n),
                });
            }
        }
    }
    let report = Report {
        scale: format!(
            "{} records of {} B, {} buckets, {} operations, {} thread(s){} (M2T: 85 M records, 170 M operations, ~109 GB, 32 threads)",
            sc.records,
            workloads.first().map_or(1000, |w| w.record_bytes()),
            sc.buckets.next_power_of_two(),
            sc.ops,
            sc.threads,
            a.emulate.as_ref().map_or(String::new(), |_| format!(", fast tier {:.0} % of the footprint, tpp scans every {} ms", a.fast_ratio * 100.0, a.tpp_scan_period_ms))
        ),
        results: rows,
        ratios,
    };
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("ycsb.json"), serde_json::to_string_pretty(&report)?)?;
        std::fs::write(dir.join("fig2-workloads.svg"), fig2(&report))?;
        if a.theta.len() > 1 {
            std::fs::write(dir.join("fig3-theta.svg"), fig3(&report))?;
        }
        if !a.quiet {
            progress("ycsb", &format!("wrote ycsb.json and plots to {}", dir.display()));
        }
    }
    if a.json {
        return emit_json(&report);
    }
    emit(&table(&report, a.emulate.as_deref()))
}

/// The native matrix: in process, and with --network over TCP against the peers.
fn run_native_matrix(variants: &[Variant], workloads: &[Workload], a: &Args, sc: &Scale) -> anyhow::Result<Vec<Row>> {
    let redis = if a.network { Peer::start("redis", a.quiet) } else { None };
    let memcached = if a.network { Peer::start("memcached", a.quiet) } else { None };
    // what to measure: (variant label, config)
    let mut targets: Vec<(&'static str, &'static str)> = variants.iter().map(|v| (v.name(), "in-process")).collect();
    if a.network {
        targets.extend(variants.iter().map(|v| (v.name(), "network")));
        if redis.is_some() {
            targets.push(("redis", "network"));
        }
        if memcached.is_some() {
            targets.push(("memcached", "network"));
        }
    }
    let mut rows = Vec::new();
    for wl in workloads {
        let mut per: BTreeMap<(&str, &str), Vec<Row>> = BTreeMap::new();
        for r in 0..a.rounds {
            for k in 0..targets.len() {
                let (label, config) = targets[(k + r) % targets.len()];
                if !a.quiet {
                    progress("ycsb", &format!("workload {} theta {} {label} ({config}) round {}/{}: loading {} records", wl.name, wl.zipfianconstant, r + 1, a.rounds, wl.recordcount));
                }
                let row = measure(label, config, wl, a, sc, redis.as_ref(), memcached.as_ref(), r + a.seed_offset)?;
                per.entry((label, config)).or_default().push(row);
            }
        }
        rows.extend(per.into_values().map(median_row));
    }
    Ok(rows)
}

fn table(report: &Report, emulated: Option<&str>) -> String {
    let mut s = match emulated {
        Some(p) => format!("YCSB on strata-kv, emulated {p} (model output; ops per simulated second): {}\n\n", report.scale),
        None => format!("YCSB on strata-kv, native: {}\n\n", report.scale),
    };
    if emulated.is_some() {
        let _ = writeln!(s, "{:<8} {:>6} {:<12} {:<12} {:>11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}", "workload", "theta", "variant", "config", "ops/s", "x far", "L1 miss", "LLC miss", "STLB miss", "fast acc", "far acc", "promoted", "demoted");
    } else {
        let _ = writeln!(s, "{:<8} {:>6} {:<12} {:<10} {:>12} {:>10} {:>10} {:>10}", "workload", "theta", "variant", "config", "ops/s", "p50 us", "p99 us", "pages/bkt");
    }
    for r in &report.results {
        if let Some(e) = &r.emulated {
            let _ = writeln!(
                s,
                "{:<8} {:>6} {:<12} {:<12} {:>11.0} {:>8.2} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
                r.workload, r.theta, r.variant, r.config, r.ops_per_sec, e.speedup_over_far_only, e.l1_misses, e.llc_misses, e.stlb_misses, e.fast_accesses, e.far_accesses, e.promoted_pages, e.demoted_pages
            );
            continue;
        }
        let lat = r.latency.get("read").or_else(|| r.latency.values().next());
        let _ = writeln!(
            s,
            "{:<8} {:>6} {:<12} {:<10} {:>12.0} {:>10.2} {:>10.2} {:>10.1}",
            r.workload,
            r.theta,
            r.variant,
            r.config,
            r.ops_per_sec,
            lat.map_or(0.0, |l| l.p50_us),
            lat.map_or(0.0, |l| l.p99_us),
            r.pages_per_bucket
        );
    }
    if !report.ratios.is_empty() {
        let _ = writeln!(s, "\nthroughput ratios:");
        for r in &report.ratios {
            let redis = r.redis_over_nextto.map_or(String::new(), |x| format!("; Redis / strata-kv nextto {x:.2}x"))
                + &r.memcached_over_nextto.map_or(String::new(), |x| format!("; memcached / strata-kv nextto {x:.2}x"));
            let split = r.nextto_split_over_std.map_or(String::new(), |x| format!("; nextto-split / std {x:.2}x"));
            let _ = writeln!(s, "  workload {} theta {} ({}): nextto / std {:.2}x{split}{redis}", r.workload, r.theta, r.config, r.nextto_over_std);
        }
    }
    if emulated.is_some() {
        let _ = writeln!(s, "\nx far: throughput over std on far memory only (M2T's baseline; M2T reports 3.39-4.69x for nextto with tiering)");
    }
    s
}

const W: f64 = 640.0;
const H: f64 = 360.0;
const COLORS: [&str; 10] = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"];

/// What the plots draw: native in-process rows by variant, normalized to std; or emulated rows
/// by variant and configuration, normalized to std on far memory only (M2T's Fig. 2).
struct Series<'a> {
    rows: Vec<&'a Row>,
    names: Vec<String>,
    emulated: bool,
}

impl<'a> Series<'a> {
    fn of(r: &'a Report) -> Series<'a> {
        let emulated = r.results.iter().any(|x| x.emulated.is_some());
        let rows: Vec<&Row> = r.results.iter().filter(|x| emulated || x.config == "in-process").collect();
        let mut names = Vec::new();
        for x in &rows {
            let n = Self::name(x, emulated);
            if !names.contains(&n) {
                names.push(n);
            }
        }
        if emulated {
            // the baseline first, the upper bound last
            names.sort_by_key(|n| (!n.ends_with("far-only"), n.ends_with("all-fast")));
        } else {
            names.sort_by_key(|n| n != "std");
        }
        Series { rows, names, emulated }
    }
    fn name(x: &Row, emulated: bool) -> String {
        if emulated {
            format!("{} {}", x.variant, x.config)
        } else {
            x.variant.clone()
        }
    }
    fn get(&self, workload: &str, theta: f64, name: &str) -> Option<&'a Row> {
        self.rows.iter().copied().find(|x| x.workload == workload && x.theta == theta && Self::name(x, self.emulated) == name)
    }
    fn where_(&self) -> &'static str {
        if self.emulated {
            "emulated, model output"
        } else {
            "native"
        }
    }
}

fn svg_frame(title: &str, ylabel: &str, body: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"16\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n\
         <text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">{ylabel}</text>\n\
         <line x1=\"60\" y1=\"40\" x2=\"60\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"60\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n{body}</svg>\n",
        W / 2.0,
        H / 2.0,
        H / 2.0,
        H - 40.0,
        H - 40.0,
        W - 20.0,
        H - 40.0
    )
}

/// Fig. 2: throughput per workload, normalized to the baseline, one bar per series.
fn fig2(r: &Report) -> String {
    let theta = r.results.first().map_or(0.99, |x| x.theta);
    let sr = Series::of(r);
    let mut wls: Vec<&str> = sr.rows.iter().filter(|x| x.theta == theta).map(|x| x.workload.as_str()).collect();
    wls.dedup();
    let base_name = sr.names.first().cloned().unwrap_or_default();
    let norm = |w: &str, n: &str| {
        let base = sr.get(w, theta, &base_name).map_or(1.0, |x| x.ops_per_sec);
        sr.get(w, theta, n).map_or(0.0, |x| x.ops_per_sec / base)
    };
    let top = wls.iter().flat_map(|w| sr.names.iter().map(move |n| (w, n))).map(|(w, n)| norm(w, n)).fold(1.0, f64::max) * 1.15;
    let (x0, y0, pw, ph) = (60.0, H - 40.0, W - 80.0, H - 80.0);
    let group = pw / wls.len().max(1) as f64;
    let bar = group * 0.8 / sr.names.len().max(1) as f64;
    let mut b = String::new();
    for (i, w) in wls.iter().enumerate() {
        for (j, n) in sr.names.iter().enumerate() {
            let val = norm(w, n);
            let h = val / top * ph;
            let x = x0 + i as f64 * group + group * 0.1 + j as f64 * bar;
            let _ = writeln!(b, "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"/>", y0 - h, bar * 0.95, COLORS[j % COLORS.len()]);
            let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{val:.2}</text>", x + bar / 2.0, y0 - h - 3.0);
        }
        let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>", x0 + (i as f64 + 0.5) * group, y0 + 16.0, w.to_uppercase());
    }
    b += &legend(&sr.names);
    svg_frame(&format!("YCSB throughput normalized to {base_name} (theta {theta}, {})", sr.where_()), &format!("throughput / {base_name}"), &b)
}

/// The series' names and colours, in rows of four along the top.
fn legend(names: &[String]) -> String {
    let mut b = String::new();
    for (j, n) in names.iter().enumerate() {
        let (x, y) = (70.0 + (j % 4) as f64 * 140.0, 33.0 + (j / 4) as f64 * 14.0);
        let _ = writeln!(b, "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{n}</text>", y - 9.0, COLORS[j % COLORS.len()], x + 15.0, y);
    }
    b
}

/// Fig. 3: workload C throughput against theta, one line per series.
fn fig3(r: &Report) -> String {
    let sr = Series::of(r);
    let mut thetas: Vec<f64> = sr.rows.iter().filter(|x| x.workload == "c").map(|x| x.theta).collect();
    thetas.sort_by(f64::total_cmp);
    thetas.dedup();
    let top = sr.rows.iter().filter(|x| x.workload == "c").map(|x| x.ops_per_sec).fold(1.0, f64::max) * 1.1;
    let (x0, y0, pw, ph) = (60.0, H - 40.0, W - 80.0, H - 80.0);
    let (tmin, tmax) = (thetas.first().copied().unwrap_or(0.0), thetas.last().copied().unwrap_or(1.0));
    let xs = |t: f64| x0 + if tmax > tmin { (t - tmin) / (tmax - tmin) * pw } else { pw / 2.0 };
    let mut b = String::new();
    for (j, n) in sr.names.iter().enumerate() {
        let pts: Vec<String> = thetas
            .iter()
            .filter_map(|t| sr.get("c", *t, n))
            .map(|x| format!("{:.1},{:.1}", xs(x.theta), y0 - x.ops_per_sec / top * ph))
            .collect();
        let _ = writeln!(b, "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts.join(" "), COLORS[j % COLORS.len()]);
    }
    b += &legend(&sr.names);
    for t in &thetas {
        let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}</text>", xs(*t), y0 + 16.0);
    }
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = y0 - frac * ph;
        let _ = writeln!(b, "<line x1=\"56\" y1=\"{y:.1}\" x2=\"60\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"54\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{:.2}</text>", y + 3.0, frac * top / 1e6);
    }
    svg_frame(&format!("Workload C throughput vs Zipfian theta ({})", sr.where_()), "M ops/s", &b)
}
