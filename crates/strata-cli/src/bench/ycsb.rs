//! `strata bench ycsb`: M2T's key-value case study. YCSB workloads against strata-kv's
//! engine in its `std` and `nextto` variants, side by side in one run, with a table, JSON and
//! plots in the style of M2T's Fig. 2 (throughput per workload normalized to the baseline)
//! and Fig. 3 (workload C throughput against theta).
//!
//! Native configurations: `in-process` (the driver calls the engine) and, with `--network`,
//! `network`: the same workload over loopback TCP against strata-kv's server in each variant
//! and against Redis (Debian's redis-server, started on a free port with persistence off),
//! through one RESP client (strata-ycsb's RespDb), and against memcached (whole records,
//! gets/cas for updates: its protocol has no hashes). The emulated half (`--emulate`) is not
//! built yet.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;
use strata_kv::{Store, Variant};
use strata_ycsb::{load, run as run_phase, Latency, MemcachedDb, RespDb, Workload};

use super::median;
use crate::output::{emit, emit_json, progress};

#[derive(clap::Args)]
pub struct Args {
    /// Workloads (YCSB core: a, b, c, d, f)
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d,f")]
    workloads: Vec<String>,
    /// Zipfian theta; several values make a sweep (M2T: 0.25..2.0)
    #[arg(long, value_delimiter = ',', default_value = "0.99")]
    theta: Vec<f64>,
    /// Records loaded (YCSB recordcount)
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Operations run (YCSB operationcount)
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Client threads
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Hash buckets (default: records / 4, about a page of records per bucket)
    #[arg(long)]
    buckets: Option<usize>,
    /// Engine variants
    #[arg(long, value_delimiter = ',', default_value = "std,nextto")]
    variants: Vec<String>,
    /// Rounds; the median throughput is reported, variants alternate which goes first
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Also run over the network: strata-kv servers (each variant), redis-server, memcached
    #[arg(long)]
    network: bool,
    /// Run on an emulated machine (not available yet: needs the emulator)
    #[arg(long, value_name = "PRESET")]
    emulate: Option<String>,
    /// Also write ycsb.json, fig2-workloads.svg and (with several thetas) fig3-theta.svg here
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print JSON: {results: [{workload, variant, machine, config, ops_per_sec, ...}], ...}
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Serialize, Clone)]
struct Row {
    workload: String,
    variant: &'static str,
    /// in-process or network
    machine: &'static str,
    config: &'static str,
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
    latency: BTreeMap<&'static str, Latency>,
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
    machine: &'static str,
    config: &'static str,
    nextto_over_std: f64,
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

/// Load and run one workload on one target.
#[allow(clippy::too_many_arguments)]
fn measure(label: &'static str, config: &'static str, wl: &Workload, a: &Args, buckets: usize, redis: Option<&Peer>, memcached: Option<&Peer>, round: usize) -> anyhow::Result<Row> {
    let seed = 42 + round as u64;
    let (l, res, pages, nb) = if config == "in-process" {
        let store = Store::new(Variant::parse(label).expect("variant"), buckets);
        let l = load(&store, wl, a.threads, a.quiet);
        let res = run_phase(&store, wl, a.threads, seed, a.quiet);
        (l, res, store.pages_per_bucket(), store.buckets())
    } else if label == "memcached" {
        let db = MemcachedDb::new(&memcached.expect("memcached").addr)?;
        db.with(|c| c.flush_all())?;
        let l = load(&db, wl, a.threads, a.quiet);
        let res = run_phase(&db, wl, a.threads, seed, a.quiet);
        (l, res, 0.0, 0)
    } else if label == "redis" {
        let db = RespDb::new(&redis.expect("redis").addr, wl.fieldlength)?;
        db.call(&[b"FLUSHALL"])?;
        let l = load(&db, wl, a.threads, a.quiet);
        let res = run_phase(&db, wl, a.threads, seed, a.quiet);
        (l, res, 0.0, 0)
    } else {
        let store = std::sync::Arc::new(Store::new(Variant::parse(label).expect("variant"), buckets));
        let server = strata_kv::server::Server::bind("127.0.0.1:0", store.clone(), Default::default())?;
        let addr = server.local_addr()?.to_string();
        let stop = server.stopper();
        let handle = std::thread::spawn(move || server.serve());
        let db = RespDb::new(&addr, wl.fieldlength)?;
        let l = load(&db, wl, a.threads, a.quiet);
        let res = run_phase(&db, wl, a.threads, seed, a.quiet);
        drop(db);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(&addr); // wake the accept loop
        let _ = handle.join();
        (l, res, store.pages_per_bucket(), store.buckets())
    };
    anyhow::ensure!(res.errors == 0, "{} errors in workload {} ({label}, {config})", res.errors, wl.name);
    Ok(Row {
        workload: wl.name.clone(),
        variant: label,
        machine: "native",
        config,
        theta: wl.zipfianconstant,
        records: wl.recordcount,
        operations: wl.operationcount,
        threads: a.threads,
        buckets: nb,
        ops_per_sec: res.ops_per_sec,
        load_ops_per_sec: l.ops_per_sec,
        pages_per_bucket: pages,
        errors: res.errors,
        latency: res.latency,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if let Some(p) = &a.emulate {
        anyhow::bail!("--emulate {p}: the emulated machine is not built yet (the emulator issue); run natively without --emulate");
    }
    let variants: Vec<Variant> = a
        .variants
        .iter()
        .map(|v| Variant::parse(v).with_context(|| format!("unknown variant '{v}' (std, nextto)")))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(a.records > 0 && a.threads > 0 && a.rounds > 0, "--records, --threads and --rounds must be positive");
    let mut workloads = Vec::new();
    for w in &a.workloads {
        for &t in &a.theta {
            let mut wl = Workload::core(w)?;
            wl.set("recordcount", &a.records.to_string())?;
            wl.set("operationcount", &a.ops.to_string())?;
            wl.set("zipfianconstant", &t.to_string())?;
            workloads.push(wl);
        }
    }
    let buckets = a.buckets.unwrap_or((a.records / 4).max(1) as usize);
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
    for wl in &workloads {
        let mut per: BTreeMap<(&str, &str), Vec<Row>> = BTreeMap::new();
        for r in 0..a.rounds {
            for k in 0..targets.len() {
                let (label, config) = targets[(k + r) % targets.len()];
                if !a.quiet {
                    progress("ycsb", &format!("workload {} theta {} {label} ({config}) round {}/{}: loading {} records", wl.name, wl.zipfianconstant, r + 1, a.rounds, wl.recordcount));
                }
                let row = measure(label, config, wl, &a, buckets, redis.as_ref(), memcached.as_ref(), r)?;
                per.entry((label, config)).or_default().push(row);
            }
        }
        for (_, mut rs) in per {
            let med = median(rs.iter().map(|r| r.ops_per_sec).collect());
            rs.sort_by(|x, y| (x.ops_per_sec - med).abs().total_cmp(&(y.ops_per_sec - med).abs()));
            let mut row = rs.swap_remove(0); // the round closest to the median, latencies and all
            row.ops_per_sec = med;
            rows.push(row);
        }
    }
    drop(redis);
    drop(memcached);
    let mut ratios = Vec::new();
    for wl in &workloads {
        for config in ["in-process", "network"] {
            let get = |v: &str| rows.iter().find(|r| r.workload == wl.name && r.theta == wl.zipfianconstant && r.variant == v && r.config == config).map(|r| r.ops_per_sec);
            if let (Some(s), Some(n)) = (get("std"), get("nextto")) {
                ratios.push(Ratio { workload: wl.name.clone(), theta: wl.zipfianconstant, machine: "native", config, nextto_over_std: n / s, redis_over_nextto: get("redis").map(|r| r / n), memcached_over_nextto: get("memcached").map(|m| m / n) });
            }
        }
    }
    let report = Report {
        scale: format!(
            "{} records of {} B, {} operations, {} threads (M2T: 85 M records, 170 M operations, ~109 GB, 32 threads)",
            a.records,
            workloads.first().map_or(1000, |w| w.record_bytes()),
            a.ops,
            a.threads
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
    let mut s = format!("YCSB on strata-kv, native: {}\n\n", report.scale);
    let _ = writeln!(s, "{:<8} {:>6} {:<8} {:<10} {:>12} {:>10} {:>10} {:>10}", "workload", "theta", "variant", "config", "ops/s", "p50 us", "p99 us", "pages/bkt");
    for r in &report.results {
        let lat = r.latency.get("read").or_else(|| r.latency.values().next());
        let _ = writeln!(
            s,
            "{:<8} {:>6} {:<8} {:<10} {:>12.0} {:>10.2} {:>10.2} {:>10.1}",
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
        let _ = writeln!(s, "\nnextto / std throughput:");
        for r in &report.ratios {
            let redis = r.redis_over_nextto.map_or(String::new(), |x| format!("; Redis / strata-kv nextto {x:.2}x"))
                + &r.memcached_over_nextto.map_or(String::new(), |x| format!("; memcached / strata-kv nextto {x:.2}x"));
            let _ = writeln!(s, "  workload {} theta {} ({}): {:.2}x{redis}", r.workload, r.theta, r.config, r.nextto_over_std);
        }
    }
    emit(&s)
}

const W: f64 = 640.0;
const H: f64 = 360.0;
const COLORS: [&str; 4] = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"];

fn svg_frame(title: &str, ylabel: &str, body: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n\
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

/// Fig. 2: throughput per workload, normalized to std, one bar per variant.
fn fig2(r: &Report) -> String {
    let theta = r.results.first().map_or(0.99, |x| x.theta);
    let rows: Vec<&Row> = r.results.iter().filter(|x| x.theta == theta && x.config == "in-process").collect();
    let mut wls: Vec<&str> = rows.iter().map(|x| x.workload.as_str()).collect();
    wls.dedup();
    // the baseline first
    let variants: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).filter(|v| rows.iter().any(|x| x.variant == *v)).collect();
    let norm = |w: &str, v: &str| {
        let base = rows.iter().find(|x| x.workload == w && x.variant == "std").map_or(1.0, |x| x.ops_per_sec);
        rows.iter().find(|x| x.workload == w && x.variant == v).map_or(0.0, |x| x.ops_per_sec / base)
    };
    let top = wls.iter().flat_map(|w| variants.iter().map(move |v| (w, v))).map(|(w, v)| norm(w, v)).fold(1.0, f64::max) * 1.15;
    let (x0, y0, pw, ph) = (60.0, H - 40.0, W - 80.0, H - 80.0);
    let group = pw / wls.len().max(1) as f64;
    let bar = group * 0.8 / variants.len().max(1) as f64;
    let mut b = String::new();
    for (i, w) in wls.iter().enumerate() {
        for (j, v) in variants.iter().enumerate() {
            let val = norm(w, v);
            let h = val / top * ph;
            let x = x0 + i as f64 * group + group * 0.1 + j as f64 * bar;
            let _ = writeln!(b, "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"/>", y0 - h, bar * 0.95, COLORS[j % 4]);
            let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{val:.2}</text>", x + bar / 2.0, y0 - h - 3.0);
        }
        let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>", x0 + (i as f64 + 0.5) * group, y0 + 16.0, w.to_uppercase());
    }
    for (j, v) in variants.iter().enumerate() {
        let _ = writeln!(b, "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{v}</text>", 70.0 + j as f64 * 80.0, 30.0, COLORS[j % 4], 85.0 + j as f64 * 80.0, 39.0);
    }
    svg_frame(&format!("YCSB throughput normalized to std (theta {theta}, native)"), "throughput / std", &b)
}

/// Fig. 3: workload C throughput against theta, one line per variant.
fn fig3(r: &Report) -> String {
    let rows: Vec<&Row> = r.results.iter().filter(|x| x.workload == "c" && x.config == "in-process").collect();
    let mut thetas: Vec<f64> = rows.iter().map(|x| x.theta).collect();
    thetas.sort_by(f64::total_cmp);
    thetas.dedup();
    let variants: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).filter(|v| rows.iter().any(|x| x.variant == *v)).collect();
    let top = rows.iter().map(|x| x.ops_per_sec).fold(1.0, f64::max) * 1.1;
    let (x0, y0, pw, ph) = (60.0, H - 40.0, W - 80.0, H - 80.0);
    let (tmin, tmax) = (thetas.first().copied().unwrap_or(0.0), thetas.last().copied().unwrap_or(1.0));
    let xs = |t: f64| x0 + if tmax > tmin { (t - tmin) / (tmax - tmin) * pw } else { pw / 2.0 };
    let mut b = String::new();
    for (j, v) in variants.iter().enumerate() {
        let pts: Vec<String> = thetas
            .iter()
            .filter_map(|t| rows.iter().find(|x| x.variant == *v && x.theta == *t))
            .map(|x| format!("{:.1},{:.1}", xs(x.theta), y0 - x.ops_per_sec / top * ph))
            .collect();
        let _ = writeln!(b, "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", pts.join(" "), COLORS[j % 4]);
        let _ = writeln!(b, "<text x=\"{}\" y=\"{}\" fill=\"{}\">{v}</text>", 70.0 + j as f64 * 80.0, 39.0, COLORS[j % 4]);
    }
    for t in &thetas {
        let _ = writeln!(b, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}</text>", xs(*t), y0 + 16.0);
    }
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = y0 - frac * ph;
        let _ = writeln!(b, "<line x1=\"56\" y1=\"{y:.1}\" x2=\"60\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"54\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{:.2}</text>", y + 3.0, frac * top / 1e6);
    }
    svg_frame("Workload C throughput vs Zipfian theta (native)", "M ops/s", &b)
}
