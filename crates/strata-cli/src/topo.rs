//! `strata topo`: the machine's nodes and tiers, or an emulated preset's.
use std::fmt::Write;

use strata_emu::topology::{topology, Size};
use strata_topo::Topology;
use strata_util::size::{format as bytes, parse as parse_size};

use crate::config::set_default_env;
use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON: {nodes: [{id, tier, ...}], tiers: [...], tier_source, notes, ...}
    #[arg(long)]
    json: bool,
    /// Show an emulated topology instead of this machine's (`strata emu settings` lists the presets)
    #[arg(long, value_name = "PRESET")]
    emulate: Option<String>,
    /// With --emulate: multiply every tier's size by this factor
    #[arg(long, requires = "emulate")]
    scale: Option<f64>,
    /// With --emulate: the fast tier's size (e.g. 1G)
    #[arg(long, requires = "emulate", value_parser = parse_size)]
    fast_bytes: Option<u64>,
    /// Tier override, fastest first: "0;1" or "0,2;1,3" (as STRATA_TIERS)
    #[arg(long, value_name = "SPEC")]
    tiers: Option<String>,
    /// Read topology from this sysfs tree instead of /sys
    #[arg(long, value_name = "DIR")]
    sysfs: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let topo = match &a.emulate {
        Some(p) => topology(p, Size { scale: a.scale, fast_bytes: a.fast_bytes })?,
        None => {
            if let Some(t) = &a.tiers {
                std::env::set_var("STRATA_TIERS", t);
            }
            set_default_env("STRATA_SYSFS", a.sysfs.as_deref());
            // an explicit override is checked, not quietly ignored as libstrata must
            let root = std::env::var("STRATA_SYSFS").unwrap_or_else(|_| "/sys".into());
            let tiers = std::env::var("STRATA_TIERS").ok();
            strata_topo::discover_at(std::path::Path::new(&root), tiers.as_deref()).map_err(|e| match e {
                // --tiers is an argument: a bad one is a usage error
                strata_topo::TopoError::BadOverride(_) if a.tiers.is_some() => {
                    anyhow::Error::from(crate::Usage(e.to_string()))
                }
                e => e.into(),
            })?;
            strata_topo::process()
        }
    };
    if a.json {
        emit_json(&topo)
    } else {
        emit(&table(&topo))
    }
}

fn opt(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(x) if x.fract() == 0.0 => format!("{x:.0}{unit}"),
        Some(x) => format!("{x}{unit}"),
        None => "-".into(),
    }
}

pub fn table(t: &Topology) -> String {
    let mut s = String::new();
    let what = match &t.emulated {
        Some(p) => format!("emulated topology, preset {p}"),
        None => "this machine".into(),
    };
    let _ = writeln!(s, "Topology of {what}\nnodes from: {}\n", t.nodes_source);
    let _ = writeln!(
        s,
        "{:<5} {:<6} {:<10} {:>11} {:>11} {:>12} {:>9} {:>9} {:>10} {:>10}",
        "node", "tier", "cpus", "total", "free", "kernel tier", "read lat", "write lat", "read bw", "write bw"
    );
    for n in &t.nodes {
        let _ = writeln!(
            s,
            "{:<5} {:<6} {:<10} {:>11} {:>11} {:>12} {:>9} {:>9} {:>10} {:>10}",
            n.id,
            n.tier,
            if n.cpus.is_empty() { "(none)" } else { &n.cpus },
            bytes(n.total_bytes),
            bytes(n.free_bytes),
            n.kernel_tier.map_or("-".into(), |k| format!("memory_tier{k}")),
            opt(n.read_latency_ns, " ns"),
            opt(n.write_latency_ns, " ns"),
            opt(n.read_bandwidth_mbps.map(|b| b / 1000.0), " GB/s"),
            opt(n.write_bandwidth_mbps.map(|b| b / 1000.0), " GB/s"),
        );
    }
    if t.nodes.iter().any(|n| !n.distances.is_empty()) {
        let _ = writeln!(s, "\ndistances (SLIT):");
        for n in &t.nodes {
            let d: Vec<String> = n.distances.iter().map(|(to, d)| format!("{to}:{d}")).collect();
            let _ = writeln!(s, "  node {}: {}", n.id, d.join(" "));
        }
    }
    let _ = writeln!(s, "\ntier order (from {}):", t.tier_source);
    for tier in &t.tiers {
        let nodes: Vec<String> = tier.nodes.iter().map(|n| n.to_string()).collect();
        let role = if tier.tier == 0 {
            " (hot)"
        } else if tier.tier as usize + 1 == t.tiers.len() {
            " (cold)"
        } else {
            ""
        };
        let _ = writeln!(s, "  tier {}{role}: nodes {}  {}", tier.tier, nodes.join(","), bytes(tier.total_bytes));
    }
    for note in &t.notes {
        let _ = writeln!(s, "\nnote: {note}");
    }
    s
}
