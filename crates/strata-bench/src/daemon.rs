//! `strata bench daemon`: what the live daemon costs and how fast it acts (issue #22's targets).
//!
//! - **CPU, natively.** For each size, a program under Strata (this binary's hidden
//!   `daemon-workload`, preloaded with libstrata.so) holds a buffer of that size and writes a
//!   share of its pages every second; a `strata daemon` (the policy and period given) manages
//!   it on a socket of its own. After the daemon's first full pass, the daemon process's CPU
//!   time (utime + stime, /proc/PID/stat) over `--secs` of wall time is its share of one core;
//!   its rounds' own CPU time, from its statistics, gives the milliseconds a round costs, and
//!   a line through them against the size says how the cost scales with managed memory.
//! - **Promotion, in the two-tier guest** (`--vm`): the same program starts with a hot buffer on
//!   the slow node (STRATA_DIRECTIVE=slow) and writes all of it continually while a daemon with
//!   its defaults runs; the program reports, four times a second, where its pages are (its own
//!   move_pages): the time until half, and nine tenths, of the buffer is on the fast node, and
//!   the fraction there at the end. Timing in the guest is emulated (TCG): the seconds say how
//!   many rounds it took, not how fast a real machine would be.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_util::size::{format as bytes, parse as parse_size};
use strata_util::{find_built, Owned, Progress};

use crate::{ensure, failed, Error};

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Buffer sizes the managed program holds, one run each (the CPU figure's sizes)
    #[arg(long, value_delimiter = ',', default_value = "256M,1G,2G")]
    pub sizes: Vec<String>,
    /// Seconds of wall time the daemon's CPU is measured over, for each size
    #[arg(long, default_value_t = 20.0)]
    pub secs: f64,
    /// The daemon's round period, ms (its default: 1000)
    #[arg(long, default_value_t = 1000.0)]
    pub period_ms: f64,
    /// Share of its pages the program writes every second
    #[arg(long, default_value_t = 0.1)]
    pub write_fraction: f64,
    /// The daemon's policy
    #[arg(long, default_value = "ambix")]
    pub policy: String,
    /// Also measure promotion in the two-tier QEMU guest (a minute or two)
    #[arg(long)]
    pub vm: bool,
    /// --vm: the hot buffer, MiB
    #[arg(long, default_value_t = 64)]
    pub hot_mb: u64,
    /// --vm: how long the program runs in the guest, s
    #[arg(long, default_value_t = 60)]
    pub vm_secs: u64,
}

/// The daemon managing one program, natively.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuRow {
    /// the program's buffer
    pub managed_bytes: u64,
    /// how the daemon saw the program's writes
    pub tracker: String,
    /// the daemon process's CPU time over the wall time, percent of one core
    pub cpu_percent: f64,
    /// CPU time of one round (scan, policy, moves), ms
    pub ms_per_round: f64,
    /// pages the tracker reported a round
    pub pages_per_round: f64,
    pub rounds: u64,
    pub wall_s: f64,
}

/// How the cost of a round grows with managed memory: ms_per_round = intercept + slope * GiB.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scaling {
    pub ms_per_gib: f64,
    pub intercept_ms: f64,
}

/// Promotion of a hot set in the guest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Promotion {
    pub hot_bytes: u64,
    pub period_ms: f64,
    pub policy: String,
    /// seconds from the program's start until half, and nine tenths, of its hot buffer was on
    /// the fast node (None: never)
    pub half_s: Option<f64>,
    pub ninety_percent_s: Option<f64>,
    /// the fast node's share of the buffer at the end
    pub fraction_end: f64,
    /// (seconds, fast share) as the program reported them
    pub trace: Vec<(f64, f64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub policy: String,
    pub period_ms: f64,
    pub write_fraction: f64,
    pub cpu: Vec<CpuRow>,
    pub scaling: Option<Scaling>,
    pub promotion: Option<Promotion>,
}

impl Report {
    pub fn table(&self) -> String {
        let mut s = format!(
            "The daemon ({}, a round every {} ms) managing one program that writes {:.0} % of its pages a second\n\n",
            self.policy,
            self.period_ms,
            self.write_fraction * 100.0
        );
        s += &format!(
            "{:>10} {:<13} {:>10} {:>13} {:>15}\n",
            "managed", "tracker", "CPU (%)", "ms per round", "pages per round"
        );
        for r in &self.cpu {
            s += &format!(
                "{:>10} {:<13} {:>10.2} {:>13.2} {:>15.0}\n",
                bytes(r.managed_bytes),
                r.tracker,
                r.cpu_percent,
                r.ms_per_round,
                r.pages_per_round
            );
        }
        if let Some(k) = &self.scaling {
            s += &format!("\na round costs {:.2} ms + {:.2} ms per GiB managed\n", k.intercept_ms, k.ms_per_gib);
        }
        if let Some(p) = &self.promotion {
            let t = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.1} s"));
            s += &format!(
                "\nguest (emulated time): a {} hot set on the slow node, {} every {} ms: half fast after {}, 90 % after {}, {:.0} % at the end\n",
                bytes(p.hot_bytes),
                p.policy,
                p.period_ms,
                t(p.half_s),
                t(p.ninety_percent_s),
                p.fraction_end * 100.0
            );
        }
        s
    }
}

/// The managed program (`strata bench daemon-workload`): a buffer of `bytes`, every page
/// touched; then, every 100 ms, a tenth of `write_fraction` of its pages written (in turn) and
/// every page read, for `secs`. With `report_ms`, a JSON line every that many ms: seconds since
/// the start and the buffer's pages per node.
pub fn workload(bytes: u64, write_fraction: f64, secs: f64, report_ms: Option<u64>) -> Result<(), Error> {
    let pages = (bytes / 4096) as usize;
    ensure(pages > 0, || "--bytes: at least one page".into())?;
    let mut buf = vec![0u8; pages * 4096];
    for p in 0..pages {
        buf[p * 4096] = 1;
    }
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {}", std::process::id());
    let _ = out.flush();
    let per_tick = ((pages as f64 * write_fraction / 10.0).ceil() as usize).min(pages);
    let (mut cursor, mut sum, mut next_report) = (0usize, 0u64, Duration::ZERO);
    while start.elapsed().as_secs_f64() < secs {
        let tick = Instant::now();
        for _ in 0..per_tick {
            buf[cursor * 4096 + 8] = buf[cursor * 4096 + 8].wrapping_add(1);
            cursor = (cursor + 1) % pages;
        }
        for p in 0..pages {
            sum = sum.wrapping_add(u64::from(std::hint::black_box(buf[p * 4096])));
        }
        if let Some(every) = report_ms {
            if start.elapsed() >= next_report {
                next_report += Duration::from_millis(every);
                let line = serde_json::json!({ "t_s": start.elapsed().as_secs_f64(), "nodes": nodes_of(&buf) });
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
        std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
    }
    let _ = writeln!(out, "done {sum}");
    Ok(())
}

/// Pages of `buf` on each node (move_pages with no target), by node.
fn nodes_of(buf: &[u8]) -> std::collections::BTreeMap<i32, u64> {
    let pages: Vec<*mut libc::c_void> = buf.chunks(4096).map(|c| c.as_ptr() as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; pages.len()];
    let mut on = std::collections::BTreeMap::new();
    // SAFETY: the arrays have pages.len() elements; no target: only asks where they are
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc == 0 {
        for s in status.into_iter().filter(|&s| s >= 0) {
            *on.entry(s).or_default() += 1;
        }
    }
    on
}

/// utime + stime of a process, s.
fn cpu_seconds(pid: u32) -> Result<f64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| failed(format!("daemon gone: {e}")))?;
    let rest = stat.rsplit_once(')').map(|r| r.1).unwrap_or("");
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
    // SAFETY: sysconf has no preconditions
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(f.iter().sum::<u64>() as f64 / hz)
}

fn me() -> Result<PathBuf, Error> {
    std::env::current_exe().map_err(|e| failed(format!("this program's path: {e}")))
}

/// One native run: the daemon managing a program of `size` bytes.
fn cpu_row(a: &Options, size: u64, lib: &Path, p: &Progress) -> Result<CpuRow, Error> {
    let dir = std::env::temp_dir().join(format!("strata-bench-daemon-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let socket = dir.join("sock");
    let mut program = Owned::spawn(
        Command::new(me()?)
            .args(["bench", "daemon-workload", "--bytes", &size.to_string()])
            .args(["--write-fraction", &a.write_fraction.to_string(), "--secs", &(a.secs * 4.0 + 60.0).to_string()])
            .env("LD_PRELOAD", lib)
            .env("STRATA_DAEMON_SOCKET", &socket)
            .stdout(Stdio::piped()),
    )
    .map_err(|e| failed(format!("starting the workload: {e}")))?;
    let mut ready = String::new();
    BufReader::new(program.0.stdout.take().expect("piped")).read_line(&mut ready).map_err(|e| failed(e.to_string()))?;
    ensure(ready.starts_with("ready"), || format!("the workload did not start: {ready}"))?;
    let pid = program.0.id();
    let daemon = Owned::spawn(
        Command::new(me()?)
            .args(["daemon", "-q", "--policy", &a.policy, "--period-ms", &a.period_ms.to_string()])
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null()),
    )
    .map_err(|e| failed(format!("starting the daemon: {e}")))?;
    // wait for the daemon's first whole pass over the program
    let deadline = Instant::now() + Duration::from_secs(60);
    let managed = loop {
        let st = strata_daemon::control::daemon_status(&socket);
        let me = st.as_ref().and_then(|s| s.processes.iter().find(|x| x.process.pid == pid).cloned());
        if let (Some(s), Some(m)) = (st, me) {
            if m.process.tracked_pages.is_some() {
                break (s, m);
            }
        }
        ensure(Instant::now() < deadline, || "the daemon did not manage the workload within 60 s".into())?;
        std::thread::sleep(Duration::from_millis(50));
    };
    let (s0, m) = managed;
    let (c0, t0) = (cpu_seconds(daemon.0.id())?, Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let (c1, wall) = (cpu_seconds(daemon.0.id())?, t0.elapsed().as_secs_f64());
    let s1 = strata_daemon::control::daemon_status(&socket).ok_or_else(|| failed("the daemon stopped answering"))?;
    drop(daemon);
    drop(program);
    let _ = std::fs::remove_dir_all(&dir);
    let rounds = s1.stats.rounds - s0.stats.rounds;
    ensure(rounds > 0, || "the daemon ran no round".into())?;
    let row = CpuRow {
        managed_bytes: size,
        tracker: serde_json::to_value(m.process.tracker)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        cpu_percent: (c1 - c0) / wall * 100.0,
        ms_per_round: (s1.stats.engine_cpu_ns - s0.stats.engine_cpu_ns) as f64 / 1e6 / rounds as f64,
        pages_per_round: (s1.stats.pages_scanned - s0.stats.pages_scanned) as f64 / rounds as f64,
        rounds,
        wall_s: wall,
    };
    p.say(&format!(
        "{}: {:.2} % of a core, {:.2} ms a round, {:.0} pages a round ({})",
        bytes(size),
        row.cpu_percent,
        row.ms_per_round,
        row.pages_per_round,
        row.tracker
    ));
    Ok(row)
}

/// Least squares of ms per round against GiB.
fn scaling(rows: &[CpuRow]) -> Option<Scaling> {
    if rows.len() < 2 {
        return None;
    }
    let xs: Vec<f64> = rows.iter().map(|r| r.managed_bytes as f64 / (1u64 << 30) as f64).collect();
    let ys: Vec<f64> = rows.iter().map(|r| r.ms_per_round).collect();
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum::<f64>() / sxx;
    Some(Scaling { ms_per_gib: slope, intercept_ms: my - slope * mx })
}

/// The promotion run in the guest.
fn promotion(a: &Options, lib: &Path, p: &Progress) -> Result<Promotion, Error> {
    let l = lib.to_str().ok_or_else(|| failed("libstrata.so's path is not UTF-8"))?;
    let hot = a.hot_mb << 20;
    let script = format!(
        "strata daemon -q --policy {} --period-ms {} > /dev/null & D=$!; sleep 1\n\
         STRATA_DIRECTIVE=slow LD_PRELOAD={l} strata bench daemon-workload --bytes {hot} --write-fraction 1 --secs {} --report-ms 250\n\
         kill $D",
        a.policy, a.period_ms, a.vm_secs
    );
    p.say(&format!("guest: a {} hot set on the slow node, {} s", bytes(hot), a.vm_secs));
    let mut guest = Command::new(me()?);
    guest.args(["vm", "run", "--timeout", &(a.vm_secs + 300).to_string(), "--file", l, "--", "sh", "-c", &script]);
    let out = strata_util::dies_with_parent(&mut guest).output().map_err(|e| failed(format!("strata vm run: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure(out.status.success(), || format!("the guest run failed: {text}{}", String::from_utf8_lossy(&out.stderr)))?;
    let trace: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let t = v["t_s"].as_f64()?;
            let n = v["nodes"].as_object()?;
            let all: u64 = n.values().filter_map(|x| x.as_u64()).sum();
            let fast = n.get("0").and_then(|x| x.as_u64()).unwrap_or(0);
            (all > 0).then_some((t, fast as f64 / all as f64))
        })
        .collect();
    ensure(!trace.is_empty(), || format!("the guest's program reported nothing: {text}"))?;
    let first = |share: f64| trace.iter().find(|(_, f)| *f >= share).map(|(t, _)| *t);
    Ok(Promotion {
        hot_bytes: hot,
        period_ms: a.period_ms,
        policy: a.policy.clone(),
        half_s: first(0.5),
        ninety_percent_s: first(0.9),
        fraction_end: trace.last().map_or(0.0, |x| x.1),
        trace,
    })
}

pub fn run(a: &Options, p: Progress) -> Result<Report, Error> {
    ensure(a.secs > 0.0 && a.period_ms > 0.0, || "--secs and --period-ms must be positive".into())?;
    ensure((0.0..=1.0).contains(&a.write_fraction), || "--write-fraction must be in [0, 1]".into())?;
    let lib = find_built("libstrata.so", Some("STRATA_LIB"), "make lib")?;
    let mut cpu = Vec::new();
    for s in &a.sizes {
        let size = parse_size(s).map_err(|e| Error::Invalid(format!("--sizes: {e}")))?;
        cpu.push(cpu_row(a, size, &lib, &p)?);
    }
    let promotion = if a.vm { Some(promotion(a, &lib, &p)?) } else { None };
    Ok(Report {
        policy: a.policy.clone(),
        period_ms: a.period_ms,
        write_fraction: a.write_fraction,
        scaling: scaling(&cpu),
        cpu,
        promotion,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_of_a_round_is_fitted_against_the_managed_size() {
        let row = |gib: u64, ms: f64| CpuRow {
            managed_bytes: gib << 30,
            tracker: String::new(),
            cpu_percent: 0.0,
            ms_per_round: ms,
            pages_per_round: 0.0,
            rounds: 1,
            wall_s: 1.0,
        };
        let k = scaling(&[row(1, 3.0), row(2, 5.0), row(4, 9.0)]).unwrap();
        assert!((k.ms_per_gib - 2.0).abs() < 1e-9 && (k.intercept_ms - 1.0).abs() < 1e-9, "{k:?}");
        assert!(scaling(&[row(1, 3.0)]).is_none());
    }
}
