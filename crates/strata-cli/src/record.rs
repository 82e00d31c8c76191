//! `strata record PID` and `strata report FILE`: a process's heat over time, as the running
//! daemon sees it (stratad::heat), written round by round to a file, and drawn from it as a
//! heatmap (the watched pages in address order against time, the share of each bin accessed
//! that round) and a working-set curve (hot, warm, cold and the working set against time).
//!
//! The file is JSON lines, one per round: `{"t_s", "round", "hot_bytes", "warm_bytes",
//! "cold_bytes", "wss_bytes", "access_map": [64 shares]}`.
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use strata_bench::plot;

use crate::Usage;

#[derive(clap::Args)]
pub struct RecordArgs {
    /// The process (the daemon must manage it: under Strata, or attached)
    pid: u32,
    /// Stop after this long [default: when the process exits, or at Ctrl-C]
    #[arg(long)]
    seconds: Option<f64>,
    /// The file to write [default: strata-record.PID.jsonl]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The daemon's socket [default: $STRATA_DAEMON_SOCKET, else /run/strata/stratad.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// No progress lines on stderr
    #[arg(short, long)]
    quiet: bool,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// A file `strata record` wrote
    file: PathBuf,
    /// Where to write FILE's heatmap and working-set plots (SVG) [default: beside FILE]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// One round of a record.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    t_s: f64,
    round: u64,
    hot_bytes: u64,
    warm_bytes: u64,
    cold_bytes: u64,
    wss_bytes: u64,
    access_map: Vec<f32>,
}

pub fn record(a: RecordArgs) -> anyhow::Result<()> {
    if a.seconds.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
        bail!(Usage("--seconds must be positive".into()));
    }
    let socket = crate::config::socket(a.socket);
    let path = a.out.unwrap_or_else(|| PathBuf::from(format!("strata-record.{}.jsonl", a.pid)));
    let heat_of = |status: &strata_daemon::status::DaemonStatus| {
        status.processes.iter().find(|p| p.process.pid == a.pid).map(|p| p.heat.clone())
    };
    let first = strata_daemon::control::daemon_status(&socket)
        .with_context(|| format!("no daemon answers on {} (start one: strata daemon)", socket.display()))?;
    match heat_of(&first) {
        None => bail!("the daemon does not manage process {} (strata attach {} hands it over)", a.pid, a.pid),
        Some(None) => bail!(
            "the daemon's trackers do not see process {} (strata stats says which tracker it has, and why)",
            a.pid
        ),
        Some(Some(_)) => {}
    }
    let period = Duration::from_secs_f64((first.period_ms / 1e3).clamp(0.001, 60.0));
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?);
    let (start, mut said) = (Instant::now(), Instant::now());
    let mut last_round = None;
    let mut lines = 0;
    loop {
        if a.seconds.is_some_and(|s| start.elapsed().as_secs_f64() >= s) {
            break;
        }
        let Some(Some(Some(h))) = strata_daemon::control::daemon_status(&socket).map(|s| heat_of(&s)) else {
            break; // the process (or the daemon) is gone
        };
        if last_round != Some(h.rounds) {
            last_round = Some(h.rounds);
            let c = &h.classes;
            let line = Line {
                t_s: start.elapsed().as_secs_f64(),
                round: h.rounds,
                hot_bytes: c.hot_bytes,
                warm_bytes: c.warm_bytes,
                cold_bytes: c.cold_bytes,
                wss_bytes: h.wss_bytes,
                access_map: h.access_map,
            };
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
            lines += 1;
        }
        if !a.quiet && said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!("strata record: {lines} rounds of process {} in {}", a.pid, path.display());
        }
        std::thread::sleep(period / 2);
    }
    out.flush()?;
    eprintln!("strata record: {lines} rounds of process {} written to {}", a.pid, path.display());
    Ok(())
}

pub fn report(a: ReportArgs) -> anyhow::Result<()> {
    let f = std::fs::File::open(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let mut rounds = Vec::new();
    for (i, l) in std::io::BufReader::new(f).lines().enumerate() {
        let l = l.with_context(|| format!("reading {}", a.file.display()))?;
        let line: Line = serde_json::from_str(&l)
            .with_context(|| format!("{} line {}: not a round of strata record", a.file.display(), i + 1))?;
        rounds.push(line);
    }
    if rounds.is_empty() {
        bail!("{}: no rounds recorded", a.file.display());
    }
    let dir = a.out.unwrap_or_else(|| a.file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem = a.file.file_stem().map_or_else(|| "record".into(), |s| s.to_string_lossy().into_owned());
    let mib = |b: u64| b as f64 / 1048576.0;
    let curve = plot::lines(&plot::Lines {
        title: format!("{stem}: heat over time"),
        x_label: "seconds".into(),
        y_label: "MiB".into(),
        series: [
            ("working set", rounds.iter().map(|r| (r.t_s, mib(r.wss_bytes))).collect()),
            ("hot", rounds.iter().map(|r| (r.t_s, mib(r.hot_bytes))).collect()),
            ("warm", rounds.iter().map(|r| (r.t_s, mib(r.warm_bytes))).collect()),
            ("cold", rounds.iter().map(|r| (r.t_s, mib(r.cold_bytes))).collect()),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect(),
    })?;
    let map = plot::heatmap(&plot::Heatmap {
        title: format!("{stem}: pages accessed each round"),
        x_label: "seconds".into(),
        y_label: "watched pages, in address order".into(),
        times: rounds.iter().map(|r| r.t_s).collect(),
        columns: rounds.iter().map(|r| r.access_map.iter().map(|v| f64::from(*v)).collect()).collect(),
    })?;
    for (name, svg) in [("wss", curve), ("heatmap", map)] {
        let p = dir.join(format!("{stem}-{name}.svg"));
        std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
        println!("{}", p.display());
    }
    let last = rounds.last().expect("not empty");
    println!(
        "{} rounds over {:.1} s; at the end: working set {:.1} MiB, hot {:.1}, warm {:.1}, cold {:.1} MiB",
        rounds.len(),
        last.t_s,
        mib(last.wss_bytes),
        mib(last.hot_bytes),
        mib(last.warm_bytes),
        mib(last.cold_bytes)
    );
    Ok(())
}
