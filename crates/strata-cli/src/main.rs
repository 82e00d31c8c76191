//! `strata`: Strata's command-line tool.
//!
//! Exit codes: 0 success, 1 an error (the message says what), 2 a usage error. A closed
//! output pipe (`strata topo | head -1`) ends the command quietly with 0.
mod attach;
mod bench;
mod config;
mod daemon;
mod emu;
mod kv;
mod output;
mod record;
mod run;
mod stats;
mod topo;
mod vm;

use clap::{CommandFactory, Parser, Subcommand};

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 error, 2 usage error.
Every command that prints data takes --json.

Examples:
  strata topo                      the nodes, tiers and where each fact came from
  strata topo --emulate m2t --json the M2T testbed as an emulated topology
  strata bench locality            NextTo vs malloc: pages per list traversal, speed-up
  strata bench alloc               strata_malloc vs glibc malloc throughput
  strata run --report -- python3 x.py   run a program under Strata; its contexts in a report file
  strata kv serve --variant nextto   the M2T key-value store on 127.0.0.1:6380 (redis-cli works)
  strata bench ycsb                YCSB on strata-kv: std vs nextto
  strata vm run -- strata topo     run a command in a QEMU guest with a real slow tier
  strata emu cc -O2 x.c -o x       build a C program for the emulated machine
  strata emu run --preset m2t --fast-ratio 0.25 --kernel linux -- ./x
                                   run it on emulated tiers under the kernel's own tiering
  strata bench suite --quick       Strata against the kernel's tiering, DAMON, memtierd, HybridTier
  strata emu settings              every emulator setting and preset
  strata emu validate              the emulator vs cachegrind and vs native runs
  strata bench summary             the saved runs in bench/results, as tables
  strata daemon --probe            the access trackers this kernel and hardware offer
  strata daemon                    move the pages of every process under Strata (policy strata)
  strata run --priority high -- ./server   a program whose hot data the daemon promotes first
  strata attach 1234 --priority low        hand a running process to the daemon
  strata stats --watch 2           tiers, processes, contexts, objects, the daemon's moves
  strata stats --metrics 127.0.0.1:9464    the same for Prometheus";

#[derive(Parser)]
#[command(name = "strata", version, about = "Place and move memory across memory tiers", after_help = AFTER_HELP)]
struct Cli {
    /// Configuration file (TOML): topology, the engine, the policies, the daemon and its
    /// process rules; examples/strata.toml documents every key. Unknown keys are errors
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show NUMA nodes, memory tiers, HMAT attributes, distances and Strata's tier order
    Topo(topo::Args),
    /// Run a program under Strata (LD_PRELOAD), optionally with rules and a context report
    Run(run::Args),
    /// The strata-kv key-value server (M2T's case study), speaking the Redis protocol
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Run a benchmark (ratios measured side by side; native or on the emulated machine)
    #[command(subcommand)]
    Bench(bench::Command),
    /// The emulated tiered machine: build programs for it, run them, validate it
    #[command(subcommand)]
    Emu(emu::Command),
    /// A two-tier Linux guest in QEMU (fast node + CPU-less slow node) for end-to-end tests
    #[command(subcommand)]
    Vm(vm::Command),
    /// The live tiering daemon (foreground): manages processes under Strata, moves their pages
    Daemon(daemon::Args),
    /// Hand a running process to the daemon, set its priority, or let it go
    Attach(attach::Args),
    /// Tiers, processes under Strata (bytes per tier), top contexts and objects, the daemon's moves
    Stats(stats::Args),
    /// Write a process's heat (hot, warm, cold, working set, where it was accessed) round by
    /// round, as the running daemon sees it, to a file for `strata report`
    Record(record::RecordArgs),
    /// Draw a file of `strata record` as a heatmap and a working-set curve (SVG)
    Report(record::ReportArgs),
    /// Print a completion script for a shell (`make install` puts them where shells look):
    /// `strata completions bash > /etc/bash_completion.d/strata`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write a man page for strata and each of its commands into DIR (what `make install` runs)
    #[command(hide = true)]
    Manpages { dir: std::path::PathBuf },
}

/// A usage error the CLI finds itself, after clap: exit code 2, as clap's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// A `--policy` name the registry knows (with its variant), or a usage error naming the known
/// ones: checked before anything starts.
pub fn known_policy(name: &str) -> Result<(), Usage> {
    strata_policy::create(name, None).map(drop).map_err(|e| Usage(format!("--policy: {e}")))
}

/// Whether an error is a usage error (exit code 2, as clap's): an option that makes no sense,
/// a value out of range, an unknown name. Everything else (a file, the machine, a run) is 1.
fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<Usage>().is_some()
            || matches!(
                c.downcast_ref::<strata_bench::Error>(),
                Some(strata_bench::Error::Invalid(_) | strata_bench::Error::Emu(strata_emu::Error::Invalid(_)))
            )
            || matches!(c.downcast_ref::<strata_emu::Error>(), Some(strata_emu::Error::Invalid(_)))
    })
}

fn main() {
    let cli = Cli::parse();
    let result = config::load(cli.config.as_deref()).and_then(|_| match cli.command {
        Command::Topo(a) => topo::run(a).map(|()| 0),
        Command::Bench(b) => bench::run(b).map(|()| 0),
        Command::Run(a) => run::run(a),
        Command::Kv(k) => kv::run(k),
        Command::Vm(v) => vm::run(v),
        Command::Emu(e) => emu::run(e),
        Command::Daemon(a) => daemon::run(a, cli.config.as_deref()).map(|()| 0),
        Command::Attach(a) => attach::run(a).map(|()| 0),
        Command::Stats(a) => stats::run(a).map(|()| 0),
        Command::Record(a) => record::record(a).map(|()| 0),
        Command::Report(a) => record::report(a).map(|()| 0),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "strata", &mut script);
            output::emit(&String::from_utf8_lossy(&script)).map(|()| 0)
        }
        Command::Manpages { dir } => {
            std::fs::create_dir_all(&dir).map_err(anyhow::Error::from)?;
            clap_mangen::generate_to(Cli::command(), &dir)?;
            Ok(0)
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
                std::process::exit(0);
            }
            eprintln!("strata: {e:#}");
            std::process::exit(if is_usage(&e) { 2 } else { 1 });
        }
    }
}
