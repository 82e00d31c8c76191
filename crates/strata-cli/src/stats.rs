//! `strata stats`: the tiers, the processes under Strata with their bytes on each tier (from
//! the kernel's numa_maps), their top contexts and objects, and the running daemon's status
//! (priorities, trackers, shares, moves; asked over its socket). `--metrics ADDR` serves the
//! same as Prometheus metrics instead.
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use strata_daemon::status::{gather, Status};
use strata_util::size::format as bytes;

use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// JSON: {tiers, processes, top_contexts, top_objects, daemon}
    #[arg(long)]
    json: bool,
    /// Print again every this many seconds, until interrupted
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// How many contexts and objects to list
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// The daemon's control socket [default: --config's daemon.socket, else $STRATA_DAEMON_SOCKET,
    /// else /run/strata/stratad.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Serve the same as Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)
    /// until interrupted, instead of printing
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["json", "watch"])]
    metrics: Option<std::net::SocketAddr>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.watch.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
        return Err(crate::Usage("--watch takes a positive number of seconds".into()).into());
    }
    if let Some(addr) = a.metrics {
        return strata_daemon::metrics::serve(
            strata_daemon::metrics::bind(addr)?,
            crate::config::socket(a.socket),
            a.top,
            "strata stats",
        );
    }
    let socket = crate::config::socket(a.socket);
    let mut m = strata_daemon::linux::Linux::new();
    loop {
        let s = gather(&mut m, strata_daemon::control::daemon_status(&socket), a.top);
        if a.json {
            emit_json(&s)?;
        } else {
            emit(&table(&s))?;
        }
        match a.watch {
            Some(secs) => std::thread::sleep(Duration::from_secs_f64(secs)),
            None => return Ok(()),
        }
    }
}

fn table(s: &Status) -> String {
    let mut t = String::from("tiers:\n");
    for x in &s.tiers {
        let _ = writeln!(
            t,
            "  tier {} (nodes {:?}): {} of {} free",
            x.tier,
            x.nodes,
            bytes(x.free_bytes),
            bytes(x.capacity_bytes)
        );
    }
    let _ = writeln!(t, "processes: {}", s.processes.len());
    for p in &s.processes {
        let tiers: Vec<String> = p.tier_bytes.iter().map(|(k, v)| format!("tier {k} {}", bytes(*v))).collect();
        let managed = match (p.priority, p.tracker) {
            (Some(prio), Some(tr)) => {
                format!(", priority {prio}, tracker {}", serde_json::to_value(tr).unwrap_or_default())
            }
            _ => String::new(),
        };
        let _ = writeln!(
            t,
            "  {:>7} {:<16} {}; {} contexts, {} objects ({}){managed}",
            p.pid,
            p.command,
            tiers.join(", "),
            p.contexts,
            p.objects,
            bytes(p.tracked_bytes)
        );
        if let Some(h) = &p.heat {
            let c = &h.classes;
            let _ = writeln!(
                t,
                "          hot {}, warm {}, cold {}; working set {} (over {} rounds{})",
                bytes(c.hot_bytes),
                bytes(c.warm_bytes),
                bytes(c.cold_bytes),
                bytes(h.wss_bytes),
                h.rounds,
                if p.tracker.is_some_and(|t| t.sees_reads()) { "" } else { "; writes only" }
            );
        }
    }
    if !s.top_contexts.is_empty() {
        t += "top contexts by live bytes:\n";
        for c in &s.top_contexts {
            let _ = writeln!(
                t,
                "  {:>7} {} {:>10} live, {} allocs, {} frees, {:?}",
                c.pid,
                c.id,
                bytes(c.live_bytes),
                c.allocs,
                c.frees,
                c.directive
            );
        }
    }
    if !s.top_objects.is_empty() {
        t += "top objects:\n";
        for o in &s.top_objects {
            let _ = writeln!(
                t,
                "  {:>7} {} {:>10}, {} resident, {} in tier 0",
                o.pid,
                o.addr,
                bytes(o.len),
                bytes(o.resident_bytes),
                bytes(o.fast_bytes)
            );
        }
    }
    let Some(d) = &s.daemon else {
        t += "no daemon answers (strata daemon)\n";
        return t;
    };
    let st = &d.stats;
    let _ = writeln!(
        t,
        "daemon {} ({}, a round every {} ms, up {:.0} s): {} rounds, {} pages scanned",
        d.pid, st.policy, d.period_ms, d.uptime_s, st.rounds, st.pages_scanned
    );
    let refused: u64 = st.refused_pages.values().sum();
    let _ = writeln!(
        t,
        "  migrations: promoted {} ({} pages), demoted {} ({} pages), {:.1} MB/s over the last 10 s, {refused} pages refused {:?}",
        bytes(st.promoted_bytes),
        st.promoted_pages,
        bytes(st.demoted_bytes),
        st.demoted_pages,
        d.migration_rate_mbps,
        st.refused_pages
    );
    for g in &st.groups {
        let whose = match &g.cgroup {
            Some(c) => format!("cgroup {c}, priority {}", g.priority),
            None => format!("priority {}", g.priority),
        };
        let mut bounds = String::new();
        if g.min_fast_bytes > 0 {
            bounds += &format!(", at least {}", bytes(g.min_fast_bytes));
        }
        if let Some(max) = g.max_fast_bytes {
            bounds += &format!(", at most {}", bytes(max));
        }
        let (share, used) = (bytes(g.share_bytes), bytes(g.fast_bytes));
        let _ = writeln!(t, "  fast-tier share, {whose} (pids {:?}{bounds}): {share} of which {used} used", g.pids);
    }
    for p in &d.processes {
        let health = match (&p.process.tracker_error, p.process.tracked_pages) {
            (Some(e), _) => format!("failing: {e}"),
            (None, Some(n)) => format!("{n} pages in its last pass"),
            (None, None) => "no pass yet".into(),
        };
        let _ = writeln!(
            t,
            "  tracker {} for {} ({}): {health}",
            serde_json::to_value(p.process.tracker).unwrap_or_default(),
            p.process.pid,
            p.process.command
        );
        if let Some(a) = p.process.agent {
            let _ = writeln!(
                t,
                "    agent: {} commits, {} aborts, {} copy-free demotions, {} shadows held ({} stale, {} reclaimed), {} by move_pages; {} pages sampled, {} touched",
                a.commits, a.aborts, a.shadow_demotions, a.shadows, a.shadows_stale, a.shadows_dropped, a.fallbacks,
                a.samples, a.samples_touched
            );
        }
    }
    for (pid, why) in &d.refused {
        let _ = writeln!(t, "  process {pid}: channel refused: {why}");
    }
    if let Some(r) = &d.last_reload {
        let _ = writeln!(t, "  last reload: {r}");
    }
    t
}
