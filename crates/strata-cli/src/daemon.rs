//! `strata daemon`: the live tiering daemon, in the foreground. It manages the processes
//! running under Strata (found by their channels, or announcing themselves on its socket) and
//! those attached with `strata attach`, runs a policy of the engine on them every period,
//! shares the fast tier between them by priority, and moves their pages with move_pages(2) or
//! through their agents (transactionally). SIGHUP reads the configuration again; `--probe`
//! prints which access trackers and movers this machine offers.
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_util::size::format as bytes;

use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// Print the trackers and movers a daemon could use on this machine (available, used, and why
    /// or why not)
    #[arg(long)]
    probe: bool,
    /// The policy [default: the configuration's daemon.policy, strata]. Where the machine has
    /// no PMU, the page scan's accessed pages stand in for the LLC-miss samples a policy needs
    #[arg(long)]
    policy: Option<String>,
    /// A round every this many ms [default: the configuration's scanner.period_ms, 1000]
    #[arg(long)]
    period_ms: Option<f64>,
    /// The control socket [default: the configuration's daemon.socket, /run/strata/stratad.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Stop after this many rounds (else at SIGINT or SIGTERM)
    #[arg(long)]
    rounds: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics from the daemon itself [default: the
    /// configuration's metrics.listen; unset: not served]
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// JSON: with --probe the trackers and movers, else the statistics at exit
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(a: Args, config: Option<&Path>) -> anyhow::Result<()> {
    if a.probe {
        return probe(a.json);
    }
    if let Some(p) = &a.policy {
        crate::known_policy(p)?;
    }
    let options = strata_daemon::daemon::Options {
        config: config.map(Path::to_path_buf),
        policy: a.policy,
        period_ms: a.period_ms,
        socket: a.socket,
        rounds: a.rounds,
    };
    // each round builds and drops vectors of tens of MB (a page's observation and its
    // policy's state, for every managed page): keep what malloc gets rather than hand it back
    // to the kernel and have it zeroed again next round (measured: a quarter of the daemon's
    // CPU at 2 GiB managed went to clear_page)
    // SAFETY: mallopt has no preconditions; before any thread is started
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
    // the endpoint is bound before the first round, so a taken address stops the start
    let (cfg, _) = options.load()?;
    let listen = a.metrics.or_else(|| cfg.metrics.listen.as_deref().and_then(|l| l.parse().ok()));
    if let Some(addr) = listen {
        let listener = strata_daemon::metrics::bind(addr)?;
        let (socket, top) = (cfg.daemon.socket.clone(), cfg.metrics.top_contexts.unwrap_or(20));
        std::thread::Builder::new().name("metrics".into()).spawn(move || {
            if let Err(e) = strata_daemon::metrics::serve(listener, socket, top, "strata daemon") {
                eprintln!("strata daemon: metrics: {e:#}");
            }
        })?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))?;
    let mut said = Instant::now();
    let start = Instant::now();
    let quiet = a.quiet;
    let stats = strata_daemon::daemon::run(options, &stop, &reload, |s| {
        let st = &s.stats;
        if !quiet && (st.rounds == 1 || said.elapsed() >= Duration::from_secs(10)) {
            said = Instant::now();
            eprintln!(
                "[daemon] {:.0} s, round {}: {} processes, {} pages scanned, {} promoted, {} demoted, {:.1} MB/s, {} refused",
                start.elapsed().as_secs_f64(),
                st.rounds,
                s.processes.len(),
                st.pages_scanned,
                bytes(st.promoted_bytes),
                bytes(st.demoted_bytes),
                s.migration_rate_mbps,
                st.refused_pages.values().sum::<u64>()
            );
        }
    })?;
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
        "promoted {} pages, demoted {}, migrated {}",
        stats.promoted_pages,
        stats.demoted_pages,
        bytes(stats.migrated_bytes)
    );
    for (why, n) in &stats.refused_pages {
        let _ = writeln!(s, "refused {n} pages: {why}");
    }
    emit(&s)
}

fn probe(json: bool) -> anyhow::Result<()> {
    let trackers = strata_daemon::probe::probe();
    let movers = strata_daemon::probe::movers();
    if json {
        return emit_json(&serde_json::json!({ "trackers": trackers, "movers": movers }));
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut s = String::from("Trackers on this machine (tried on this process's own memory):\n\n");
    let _ = writeln!(s, "{:<13} {:<9} {:<5} sees", "tracker", "available", "used");
    for t in &trackers {
        let used = if !t.used {
            "no"
        } else if t.available {
            "yes"
        } else {
            "-"
        };
        let _ = writeln!(s, "{:<13} {:<9} {:<5} {}", t.name, yes(t.available), used, t.sees);
        let _ = writeln!(s, "{:<29} {}", "", t.reason);
    }
    s += "\n(used: the daemon tracks with it where it is available; the others are probed only)\n";
    s += "\nMovers (mover.mechanism; tried on this process's own pages):\n\n";
    let _ = writeln!(s, "{:<13} {:<9} how", "mover", "available");
    for m in &movers {
        let _ = writeln!(s, "{:<13} {:<9} {}", m.name, yes(m.available), m.how);
        let _ = writeln!(s, "{:<23} {}", "", m.reason);
    }
    s += "\n(transactional also needs each process's own userfaultfd to offer it: a process that cannot \
          open one is moved by move_pages, and strata stats shows which processes have an agent)\n";
    emit(&s)
}
