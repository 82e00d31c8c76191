//! `strata stats`: the tiers, the processes under Strata with their bytes on each tier (from
//! the kernel's numa_maps), their top contexts and objects, and the running daemon's
//! statistics (from its state file).
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use strata_util::size::format as bytes;
use stratad::status::{gather, Status, STATE_FILE};

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
    /// The daemon's state file
    #[arg(long, value_name = "FILE", default_value = STATE_FILE)]
    state: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.watch.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
        anyhow::bail!("--watch takes a positive number of seconds");
    }
    let mut m = stratad::linux::Linux::new();
    loop {
        let s = gather(&mut m, &a.state, a.top);
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
    let _ = writeln!(t, "processes under Strata: {}", s.processes.len());
    for p in &s.processes {
        let tiers: Vec<String> = p.tier_bytes.iter().map(|(k, v)| format!("tier {k} {}", bytes(*v))).collect();
        let _ = writeln!(
            t,
            "  {:>7} {:<16} {}; {} contexts, {} objects ({})",
            p.pid,
            p.command,
            tiers.join(", "),
            p.contexts,
            p.objects,
            bytes(p.tracked_bytes)
        );
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
    match &s.daemon {
        Some(d) => {
            let st = &d.stats;
            let _ = writeln!(
                t,
                "daemon {} ({}): {} rounds, {} pages scanned, promoted {}, demoted {}, refused {:?}",
                d.pid,
                st.policy,
                st.rounds,
                st.pages_scanned,
                bytes(st.promoted_bytes),
                bytes(st.demoted_bytes),
                st.refused_pages
            );
        }
        None => t += "no daemon running (strata daemon)\n",
    }
    t
}
