//! `strata daemon`: the live tiering daemon, in the foreground. It finds the processes running
//! under Strata (their channels), runs a policy of the engine on them every period, and moves
//! their pages with move_pages(2); `--probe` prints which access trackers this machine offers.
use std::fmt::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// Print the trackers a daemon could use on this machine (available, and why or why not)
    #[arg(long)]
    probe: bool,
    /// The policy (ambix: pages by accessed/dirty bits; others as in docs/tiering.md). Policies
    /// that need LLC-miss samples are refused on machines without a PMU
    #[arg(long, default_value = "ambix")]
    policy: String,
    /// The engine's configuration (TOML; examples/engine.toml documents every key)
    #[arg(long, value_name = "FILE")]
    policy_config: Option<PathBuf>,
    /// A round every this many ms [default: the configuration's scanner.period_ms, 1000]
    #[arg(long)]
    period_ms: Option<f64>,
    /// Stop after this many rounds (else at SIGINT or SIGTERM)
    #[arg(long)]
    rounds: Option<u64>,
    /// JSON: with --probe the trackers, else the statistics at exit
    #[arg(long)]
    json: bool,
    /// Where the daemon writes its statistics after every round, for `strata stats`
    #[arg(long, value_name = "FILE", default_value = stratad::status::STATE_FILE)]
    state: PathBuf,
    /// No progress lines on stderr
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.probe {
        return probe(a.json);
    }
    let mut cfg = match &a.policy_config {
        Some(p) => stratad::Config::load(p, &a.policy)?,
        None => stratad::Config::parse("", &a.policy)?,
    };
    if let Some(ms) = a.period_ms {
        cfg.scanner.period_ms = ms;
        cfg.check(&a.policy)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let mut said = Instant::now();
    let start = Instant::now();
    let mut state_failed = false;
    let stats = stratad::daemon::run(&a.policy, cfg, &stop, a.rounds, |s, m| {
        if let Err(e) = stratad::status::write_state(&a.state, s) {
            if !state_failed {
                eprintln!("[daemon] cannot write {} ({e}); strata stats will not see this daemon", a.state.display());
                state_failed = true;
            }
        }
        if !a.quiet && (s.rounds == 1 || said.elapsed() >= Duration::from_secs(10)) {
            said = Instant::now();
            eprintln!(
                "[daemon] {:.0} s, round {}: {} processes, {} pages scanned, {:.1} MiB promoted, {:.1} MiB demoted, {} refused",
                start.elapsed().as_secs_f64(),
                s.rounds,
                m.processes().len(),
                s.pages_scanned,
                s.promoted_bytes as f64 / (1 << 20) as f64,
                s.demoted_bytes as f64 / (1 << 20) as f64,
                s.refused_pages.values().sum::<u64>()
            );
        }
    })?;
    let _ = std::fs::remove_file(&a.state);
    if stop.load(Ordering::Relaxed) && !a.quiet {
        eprintln!("[daemon] stopped; the programs keep their pages where they are");
    }
    if a.json {
        return emit_json(&stats);
    }
    let mut s = format!("policy {}: {} rounds\n", stats.policy, stats.rounds);
    let _ = writeln!(s, "pages scanned {}, full scans {}", stats.pages_scanned, stats.full_scans);
    let _ = writeln!(
        s,
        "promoted {} pages, demoted {}, migrated {:.1} MiB",
        stats.promoted_pages,
        stats.demoted_pages,
        stats.migrated_bytes as f64 / (1 << 20) as f64
    );
    for (why, n) in &stats.refused_pages {
        let _ = writeln!(s, "refused {n} pages: {why}");
    }
    emit(&s)
}

fn probe(json: bool) -> anyhow::Result<()> {
    let trackers = stratad::probe::probe();
    if json {
        return emit_json(&trackers);
    }
    let mut s = String::from("Trackers on this machine (tried on this process's own memory):\n\n");
    for t in &trackers {
        let _ = writeln!(s, "{:<13} {:<3} {}", t.name, if t.available { "yes" } else { "no" }, t.sees);
        let _ = writeln!(s, "{:<17} {}", "", t.reason);
    }
    emit(&s)
}
