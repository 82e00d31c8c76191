//! Real programs as tiering workloads: Debian's Redis, memcached and LIBLINEAR, built
//! unmodified for the emulated machine by `strata emu pkg build` (strata_emu::pkg).
//!
//! | workload | what runs | figure |
//! |---|---|---|
//! | `redis-ycsb-a`, `redis-ycsb-c` | redis-server on the emulated machine; strata-ycsb's RESP driver, native, loads records of ten 100-byte fields (a hash each, as YCSB's Redis binding stores them) filling the footprint, then runs YCSB A or C, Zipf 0.99 (Nomad's Redis experiment) | requests per simulated second of the server's own time, over the run phase |
//! | `memcached-ycsb-c` | memcached (one worker thread) with whole records as values, YCSB C (dram-first's store) | the same |
//! | `liblinear` | `train` (its default solver, dual coordinate descent) on a sparse two-class data set that we generate, seeded, in LIBSVM's format | the data set's nonzeros per simulated second of the whole run (parsing and training) |
//!
//! A server's time is the busiest of its threads' simulated clocks between two snapshots of
//! its report (strata_emu::Emulated::snapshot), one after the load and one after the run; the
//! emulator simulates computation and memory, not the time a thread spends blocked in the
//! kernel waiting for a request, so the figure is what the server could serve if requests
//! were always waiting. Servers are multi-threaded and time their own housekeeping by the
//! wall clock, so their runs do not repeat exactly as the single-threaded workloads do.
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_emu::{pkg, spawn_emulated, Machine, Run};
use strata_util::io;
use strata_ycsb::{Db, MemcachedDb, RespDb, Workload};

use super::workloads::{Outcome, Rng};
use crate::{failed, Error};

/// The real programs' workloads.
pub const REAL: &[&str] = &["redis-ycsb-a", "redis-ycsb-c", "memcached-ycsb-c", "liblinear"];

/// The Debian package a workload runs.
pub fn package(workload: &str) -> Option<&'static str> {
    match workload {
        "redis-ycsb-a" | "redis-ycsb-c" => Some("redis"),
        "memcached-ycsb-c" => Some("memcached"),
        "liblinear" => Some("liblinear"),
        _ => None,
    }
}

/// Bytes a record takes in each server, so that a load fills about `size_mb`. Estimates: at
/// the default 128 MiB the footprints came out at 160 MiB (Redis: a hash of ten fields costs
/// about 2,000 bytes) and 119 MiB (memcached), so Redis's runs are a quarter larger than asked.
fn record_bytes(package: &str) -> u64 {
    match package {
        "redis" => 1600,
        _ => 1300,
    }
}

/// The default run-phase operations: as many as records (YCSB's default proportion).
fn records(package: &str, size_mb: u64) -> u64 {
    ((size_mb << 20) / record_bytes(package)).max(100)
}

/// A real program's run: what the benchmark reports of it, the emulator's report, and the
/// program's name and version.
pub struct RealRun {
    pub outcome: Outcome,
    pub run: Run,
    pub program: String,
}

/// Run `workload` on machine `m` with `env` (the preload, the engine) added to the program's.
pub fn run(
    workload: &str,
    m: &Machine,
    env: &[(OsString, OsString)],
    size_mb: u64,
    ops: Option<u64>,
) -> Result<RealRun, Error> {
    let name = package(workload).ok_or_else(|| Error::Invalid(format!("{workload} is not a real program")))?;
    let built = pkg::require(name)?;
    let (outcome, run) = match workload {
        "liblinear" => liblinear(&built, m, env, size_mb)?,
        _ => server(workload, &built, m, env, size_mb, ops)?,
    };
    Ok(RealRun { outcome, run, program: built.program() })
}

/// A free TCP port on the loopback (free when asked; a server started at once gets it).
fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

fn server(
    workload: &str,
    built: &pkg::Built,
    m: &Machine,
    env: &[(OsString, OsString)],
    size_mb: u64,
    ops: Option<u64>,
) -> Result<(Outcome, Run), Error> {
    let letter = workload.rsplit('-').next().unwrap_or("c");
    let records = records(&built.name, size_mb);
    let ops = ops.unwrap_or(records);
    let mut wl = Workload::core(letter).map_err(|e| failed(e.to_string()))?;
    for (k, v) in [("recordcount", records.to_string()), ("operationcount", ops.to_string())] {
        wl.set(k, &v).map_err(|e| failed(e.to_string()))?;
    }
    let port = free_port()?.to_string();
    let mut cmd = match built.name.as_str() {
        "redis" => {
            let mut c = Command::new(built.binary("redis-server").map_err(|e| failed(e.to_string()))?);
            c.args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]).args([
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
            ]);
            c
        }
        _ => {
            let mut c = Command::new(built.binary("memcached").map_err(|e| failed(e.to_string()))?);
            // one worker thread; room for every record (its default is 64 MB)
            let mb = (size_mb * 2).max(64).to_string();
            c.args(["-p", &port, "-l", "127.0.0.1", "-U", "0", "-t", "1", "-m", &mb]);
            if unsafe { libc::geteuid() } == 0 {
                c.args(["-u", "root"]);
            }
            c
        }
    };
    cmd.envs(env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).stdout(Stdio::null());
    let mut server = spawn_emulated(m, &mut cmd)?;
    let addr = format!("127.0.0.1:{port}");
    let driven = (|| -> Result<(u64, u64), Error> {
        let t = Instant::now();
        let db: Box<dyn Db> = loop {
            let db: std::io::Result<Box<dyn Db>> = match built.name.as_str() {
                "redis" => {
                    RespDb::new(&addr, wl.fieldlength).and_then(|d| d.call(&[b"PING"]).map(|_| Box::new(d) as _))
                }
                _ => MemcachedDb::new(&addr).map(|d| Box::new(d) as _),
            };
            match db {
                Ok(db) => break db,
                Err(e) => {
                    if let Some(s) = server.try_status() {
                        return Err(failed(format!("{} ended ({s}) before it listened", built.program())));
                    }
                    if t.elapsed() > Duration::from_secs(120) {
                        return Err(failed(format!("{} did not listen on {addr} in 120 s: {e}", built.program())));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        let l = strata_ycsb::load(db.as_ref(), &wl, 1, true);
        if l.errors > 0 {
            return Err(failed(format!("{workload}: {} of {records} inserts failed", l.errors)));
        }
        let before = server.snapshot(Duration::from_secs(60))?;
        let r = strata_ycsb::run(db.as_ref(), &wl, 1, 42, true);
        let after = server.snapshot(Duration::from_secs(60))?;
        if r.errors > 0 {
            return Err(failed(format!("{workload}: {} of {ops} operations failed", r.errors)));
        }
        Ok((after.sim_ns.saturating_sub(before.sim_ns).max(1), l.operations))
    })();
    server.terminate();
    let run = server.wait()?;
    let (ns, loaded) = driven?;
    Ok((
        Outcome {
            workload: workload.into(),
            ops,
            ns,
            figure: ops as f64 * 1e9 / ns as f64,
            unit: "requests/s".into(),
            allocated_bytes: records * wl.record_bytes() as u64,
            checksum: loaded,
            sites: Vec::new(),
            rounds: Vec::new(),
            placement: Vec::new(),
        },
        run,
    ))
}

/// Nonzeros per instance of the generated data set, and its features.
const NNZ_PER_INSTANCE: usize = 32;
const FEATURES: u64 = 1 << 17;

/// Write a two-class sparse data set in LIBSVM's format to `path`: instances of 32 nonzeros
/// whose features follow a power law (a few features in most instances, as words in text),
/// labelled by a hidden linear model with 5 % of the labels flipped. `train` holds a nonzero in
/// 16 bytes, so `nonzeros` = size_mb MiB / 16 fills the footprint. Returns the nonzeros.
pub fn write_dataset(path: &Path, size_mb: u64, seed: u64) -> Result<u64, Error> {
    let instances = instances(size_mb);
    let f = std::fs::File::create(path).map_err(io(format!("creating {}", path.display())))?;
    let mut w = BufWriter::new(f);
    let mut rng = Rng(seed);
    let weight = |feature: u64| -> f64 {
        let h = Rng(feature ^ 0x5EED).next();
        (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let mut feats: Vec<u64> = Vec::with_capacity(NNZ_PER_INSTANCE);
    let mut line = String::new();
    for _ in 0..instances {
        feats.clear();
        while feats.len() < NNZ_PER_INSTANCE {
            // u^3 puts most draws on low features: a power law over FEATURES
            let f = 1 + (FEATURES as f64 * rng.unit().powi(3)) as u64;
            if !feats.contains(&f) {
                feats.push(f);
            }
        }
        feats.sort_unstable();
        let values: Vec<f64> = feats.iter().map(|_| (rng.unit() * 1000.0).round() / 1000.0).collect();
        let score: f64 = feats.iter().zip(&values).map(|(f, v)| weight(*f) * v).sum();
        let flip = rng.unit() < 0.05;
        let label = if (score > 0.0) != flip { "+1" } else { "-1" };
        line.clear();
        line.push_str(label);
        for (f, v) in feats.iter().zip(&values) {
            line.push_str(&format!(" {f}:{v}"));
        }
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io(format!("writing {}", path.display())))?;
    }
    w.flush().map_err(io(format!("writing {}", path.display())))?;
    Ok(instances * NNZ_PER_INSTANCE as u64)
}

fn instances(size_mb: u64) -> u64 {
    ((size_mb << 20) / 16 / NNZ_PER_INSTANCE as u64).max(1)
}

/// The data set for size_mb, generated once into the package's folder and reused.
fn dataset(size_mb: u64) -> Result<(PathBuf, u64), Error> {
    let dir = pkg::root().join("liblinear/data");
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let path = dir.join(format!("sparse-{size_mb}m.svm"));
    let nonzeros = instances(size_mb) * NNZ_PER_INSTANCE as u64;
    if !path.is_file() {
        let tmp = dir.join(format!("sparse-{size_mb}m.svm.{}", std::process::id()));
        write_dataset(&tmp, size_mb, 42)?;
        std::fs::rename(&tmp, &path).map_err(io(format!("writing {}", path.display())))?;
    }
    Ok((path, nonzeros))
}

fn liblinear(
    built: &pkg::Built,
    m: &Machine,
    env: &[(OsString, OsString)],
    size_mb: u64,
) -> Result<(Outcome, Run), Error> {
    let (data, nonzeros) = dataset(size_mb)?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let model = std::env::temp_dir().join(format!("strata-liblinear-{}-{seq}.model", std::process::id()));
    let mut cmd = Command::new(built.binary("train").map_err(|e| failed(e.to_string()))?);
    cmd.arg("-q").arg(&data).arg(&model).envs(env.iter().map(|(k, v)| (k, v)));
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    let run = spawn_emulated(m, &mut cmd)?.wait()?;
    let written = std::fs::metadata(&model).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&model);
    if !run.status.success() || written == 0 {
        return Err(failed(format!("{}'s train failed ({}) on {}", built.program(), run.status, data.display())));
    }
    let ns = run.report.sim_ns.max(1);
    Ok((
        Outcome {
            workload: "liblinear".into(),
            ops: nonzeros,
            ns,
            figure: nonzeros as f64 * 1e9 / ns as f64,
            unit: "nonzeros/s".into(),
            allocated_bytes: nonzeros * 16,
            checksum: written,
            sites: Vec::new(),
            rounds: Vec::new(),
            placement: Vec::new(),
        },
        run,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datasets_are_seeded_sorted_and_sized() {
        let dir = std::env::temp_dir().join(format!("strata-dataset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        let n = write_dataset(&a, 1, 7).unwrap();
        write_dataset(&b, 1, 7).unwrap();
        assert_eq!(n, (1 << 20) / 16);
        let text = std::fs::read_to_string(&a).unwrap();
        assert_eq!(text, std::fs::read_to_string(&b).unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u64, n / NNZ_PER_INSTANCE as u64);
        let positive = lines.iter().filter(|l| l.starts_with("+1")).count();
        assert!(positive > lines.len() / 5 && positive < lines.len() * 4 / 5, "{positive} of {}", lines.len());
        for l in &lines {
            let idx: Vec<u64> = l.split(' ').skip(1).map(|p| p.split(':').next().unwrap().parse().unwrap()).collect();
            assert_eq!(idx.len(), NNZ_PER_INSTANCE);
            assert!(idx.windows(2).all(|w| w[0] < w[1]) && idx[0] >= 1, "{l}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn every_real_workload_names_its_package() {
        for w in REAL {
            assert!(pkg::recipe(package(w).unwrap()).is_ok(), "{w}");
        }
        assert_eq!(package("gups-hot"), None);
    }
}
