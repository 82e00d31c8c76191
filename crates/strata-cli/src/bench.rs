//! `strata bench ...`: benchmarks that print a table (or JSON) of ratios measured side by
//! side in one run (strata-bench does the measuring).
use std::path::PathBuf;

use strata_bench::{alloc, daemon, locality, migrate, results, summary, tiering, ycsb};

use crate::output::{emit, Output, Save};

#[derive(clap::Subcommand)]
pub enum Command {
    /// NextTo vs malloc: distinct pages touched per list traversal, and traversal speed
    Locality {
        #[command(flatten)]
        opts: locality::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// Allocation throughput of Strata (explicit and preloaded) next to glibc, jemalloc, mimalloc
    Alloc {
        #[command(flatten)]
        opts: alloc::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// YCSB on strata-kv: the std and nextto engines side by side (M2T's case study), natively
    /// or on the emulated machine (--emulate m2t)
    Ycsb {
        #[command(flatten)]
        opts: ycsb::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// Tiering policies on the emulated machine: workloads x policies x fast-tier sizes, with
    /// the all-fast and far-only bounds (needs `make emu`)
    Tiering {
        #[command(flatten)]
        opts: tiering::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// The comparison: every workload (ours, GAPBS, XSBench, btree, GUPS) under the kernel's
    /// tiering, Nomad, DAMON tiering, memtierd, HybridTier and Strata's policies at 1:2, 1:4, 1:8
    /// (graphs also 1:16) on the emulated machine, with plots (--out); `bench tiering` with
    /// these settings (needs `make emu`)
    Suite {
        #[command(flatten)]
        opts: tiering::SuiteOptions,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// Nomad's micro-benchmark (OSDI'24) at a scaled size on the emulated machine: a Zipf
    /// working set below, near and above the fast tier, read or written, under no migration,
    /// the kernel's tiering, the TPP mechanism and Nomad; each phase's MB/s beside the paper's
    /// findings (needs `make emu`)
    Nomad {
        #[command(flatten)]
        opts: tiering::nomad::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// Run one tiering workload here and print its result as JSON (what `bench tiering` runs
    /// on the emulated machine)
    #[command(hide = true)]
    TieringWorkload {
        #[arg(long)]
        workload: String,
        #[arg(long, default_value_t = 128)]
        size_mb: u64,
        #[arg(long, default_value_t = 0)]
        ops: u64,
    },
    /// The live daemon: its CPU against managed memory here, and (--vm) how fast it promotes
    /// a hot set in the two-tier guest
    Daemon {
        #[command(flatten)]
        opts: daemon::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// The program `bench daemon` runs under Strata: a buffer, part of it written every second
    #[command(hide = true)]
    DaemonWorkload {
        #[arg(long)]
        bytes: u64,
        #[arg(long, default_value_t = 0.1)]
        write_fraction: f64,
        #[arg(long, default_value_t = 60.0)]
        secs: f64,
        #[arg(long)]
        report_ms: Option<u64>,
    },
    /// Pages of a running program moved between the tiers, by move_pages and transactionally:
    /// the program's stall per page moved, aborts, copy-free demotions, lost writes (--vm: in
    /// the two-tier guest on Linux 6.12)
    Migrate {
        #[command(flatten)]
        opts: migrate::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
    /// The program `bench migrate` moves the pages of: random accesses, each timed and checked
    #[command(hide = true)]
    MigrateWorkload {
        #[arg(long)]
        bytes: u64,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 1)]
        write_every: u64,
        /// access thread t runs on CPU t only
        #[arg(long)]
        pin: bool,
    },
    /// The headline figures of every saved run (bench/results), as markdown
    Summary {
        /// Where the runs are [default: bench/results here, else the checkout's strata was
        /// built from]
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Write DIR/SUMMARY.md instead of printing
        #[arg(long)]
        write: bool,
    },
}

fn saved(
    save: &Save,
    path: impl FnOnce(&std::path::Path) -> Result<PathBuf, strata_bench::Error>,
    out: &Output,
) -> anyhow::Result<()> {
    if let Some(dir) = &save.out {
        let p = path(dir)?;
        out.progress("bench").say(&format!("wrote {}", p.display()));
    }
    Ok(())
}

pub fn run(c: Command) -> anyhow::Result<()> {
    match c {
        Command::Locality { opts, out, save } => {
            let r = locality::run(&opts, out.progress("locality"))?;
            saved(&save, |d| results::save(d, "locality", &r), &out)?;
            out.print(&r, locality::Report::table)
        }
        Command::Alloc { opts, out, save } => {
            if let Some(b) = &opts.child_rate {
                return emit(&format!("{}\n", alloc::child_rate(b, opts.ops)?));
            }
            let r = alloc::run(&opts, out.progress("alloc"))?;
            saved(&save, |d| results::save(d, "alloc", &r), &out)?;
            out.print(&r, alloc::Report::table)
        }
        Command::Ycsb { opts, out, save } => {
            let r = ycsb::run(&opts, out.progress("ycsb"))?;
            saved(&save, |d| r.save(d), &out)?;
            out.print(&r, ycsb::Report::table)
        }
        Command::Tiering { opts, out, save } => {
            let r = tiering::run(&opts, out.progress("tiering"))?;
            saved(&save, |d| r.save(d), &out)?;
            out.print(&r, tiering::Report::table)
        }
        Command::Suite { opts, out, save } => {
            let mut r = tiering::run(&opts.options(), out.progress("suite"))?;
            r.suite = Some(opts.set().into());
            saved(&save, |d| r.save(d), &out)?;
            out.print(&r, tiering::Report::table)
        }
        Command::Nomad { opts, out, save } => {
            let r = tiering::nomad::bench(&opts, out.progress("nomad"))?;
            saved(&save, |d| r.save(d), &out)?;
            out.print(&r, tiering::nomad::Report::table)
        }
        Command::TieringWorkload { workload, size_mb, ops } => {
            crate::output::emit_json(&tiering::workloads::run(&workload, size_mb, ops)?)
        }
        Command::Daemon { opts, out, save } => {
            let r = daemon::run(&opts, out.progress("daemon"))?;
            saved(&save, |d| results::save(d, "daemon", &r), &out)?;
            out.print(&r, daemon::Report::table)
        }
        Command::DaemonWorkload { bytes, write_fraction, secs, report_ms } => {
            Ok(daemon::workload(bytes, write_fraction, secs, report_ms)?)
        }
        Command::Migrate { opts, out, save } => {
            let r = migrate::run(&opts, out.progress("migrate"))?;
            saved(&save, |d| results::save(d, &r.benchmark(), &r), &out)?;
            out.print(&r, migrate::Report::table)
        }
        Command::MigrateWorkload { bytes, threads, write_every, pin } => {
            Ok(migrate::workload(bytes, threads, write_every, pin)?)
        }
        Command::Summary { dir, write } => {
            let dir = dir.unwrap_or_else(|| {
                let here = PathBuf::from("bench/results");
                if here.is_dir() {
                    here
                } else {
                    strata_util::repo_root().join("bench/results")
                }
            });
            let text = summary::summarize(&dir)?;
            if write {
                let p = dir.join("SUMMARY.md");
                std::fs::write(&p, text)?;
                eprintln!("[bench] wrote {}", p.display());
                Ok(())
            } else {
                emit(&text)
            }
        }
    }
}
