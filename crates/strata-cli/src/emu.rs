//! `strata emu ...`: the emulated tiered machine (the model in emu/, its host side in
//! strata-emu).
use std::process::Command as Proc;

use anyhow::Context;
use strata_emu::{
    calibrate, config, footprint_bytes, run_emulated, toolchain, validate, Kernel, Machine, MachineArgs, RunOutput,
};

use crate::output::{emit, emit_json, Output, Save};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Compile C or C++ for the emulated machine: clang with the SanitizerCoverage load/store
    /// hooks, linked with libstrata_emu.so (arguments go to clang, e.g. `-O2 x.c -o x`)
    Cc {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Compile and link C++ for the emulated machine: `cc` through clang++, with libstdc++
    #[command(name = "c++")]
    Cxx {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Build Rust for the emulated machine: cargo with the SanitizerCoverage pass, for the host
    /// target, into target/emu (e.g. `strata emu cargo build --release -p strata-cli`)
    Cargo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Real programs for the emulated machine, built from Debian's source packages
    #[command(subcommand)]
    Pkg(PkgCommand),
    /// Run an instrumented program on the emulated machine and report caches, TLBs, tiers,
    /// faults and migrations. Address randomisation is off and the program's environment gains
    /// STRATA_EMU, STRATA_EMU_REPORT and STRATA_EMU_PAD* (which pin its stack), so a
    /// single-threaded program repeats exactly
    Run(RunArgs),
    /// Every setting of the emulated machine (unit, default, meaning) and the presets
    Settings {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Measure this machine (pointer chases in random order, through strides and of growing
    /// size for the part of the LLC this program can use; streaming): the `host` preset's
    /// figures (docs/emulator.md, Presets), kept in ~/.cache/strata/host-preset.json so that runs on
    /// the preset repeat (measure again after a change of the machine's setup)
    Calibrate {
        #[command(flatten)]
        out: Output,
    },
    /// Fidelity checks: cache misses vs cachegrind, layout speed-up vs native, emulator speed
    Validate {
        #[command(flatten)]
        opts: validate::Options,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        save: Save,
    },
}

#[derive(clap::Subcommand)]
pub enum PkgCommand {
    /// Fetch the Debian source package of the running release (an apt configuration of its
    /// own under build/emu-pkg/.apt), unpack the upstream tarball, build it with `strata emu cc`
    /// and keep the binaries in build/emu-pkg/NAME/bin with the exact versions in
    /// package.json. Built once, reused
    #[command(after_help = PKG_HELP)]
    Build {
        /// redis, memcached or liblinear
        name: String,
        /// Build again even when a build is there
        #[arg(long)]
        rebuild: bool,
        #[command(flatten)]
        out: Output,
    },
    /// The packages built, with their versions and binaries
    List {
        #[command(flatten)]
        out: Output,
    },
}

const PKG_HELP: &str = "Examples:
  strata emu pkg build redis       Redis from Debian's sources, instrumented
  strata emu run --fast-bytes 64M -- build/emu-pkg/redis/bin/redis-server --port 7001 --save ''
  strata emu pkg list --json

$STRATA_EMU_PKG_DIR moves build/emu-pkg; $STRATA_DEBIAN_MIRROR and $STRATA_DEBIAN_RELEASE
choose where and which release's sources come from.";

#[derive(clap::Args)]
pub struct RunArgs {
    /// Machine preset (`strata emu settings` lists them): m2t (local 84.6 ns / 176 GB/s, far
    /// 156 ns / 55 GB/s) or host (this machine, measured first: one tier)
    #[arg(long, default_value = "m2t")]
    preset: String,
    /// Fast tier (node 0) size, e.g. 256M
    #[arg(long, value_name = "BYTES", conflicts_with = "fast_ratio", value_parser = strata_util::size::parse)]
    fast_bytes: Option<u64>,
    /// Emulated kernel's tiering (linux is Linux's own, rule by rule; `--set time_scale=F`
    /// scales its periods and thresholds, e.g. 0.005 for a run of a simulated second)
    #[arg(long, value_enum, default_value = "none")]
    kernel: Kernel,
    #[command(flatten)]
    machine: MachineArgs,
    /// Run a tiering policy inside the program on its simulated time: first-touch, ambix, mat
    /// (mat:fifo, mat:lru, mat:apb), proactive, hmalloc, dram-first, strata, or the field's damon,
    /// memtierd, hybridtier. The engine (libstratad_emu.so) observes the program every round and
    /// moves its pages (docs/tiering.md)
    #[arg(long, value_name = "NAME")]
    policy: Option<String>,
    /// The engine's configuration: scanner, mover, the policy's parameters (TOML;
    /// examples/strata.toml documents every key)
    #[arg(long, value_name = "FILE", requires = "policy")]
    policy_config: Option<std::path::PathBuf>,
    /// The program's allocator under --policy: strata (libstrata.so preloaded, transparent
    /// mode, so that the engine sees its objects and allocation contexts, as `bench tiering`
    /// runs its workloads) or glibc (page policies only see it). Without --policy nothing is
    /// preloaded
    #[arg(long, value_parser = ["strata", "glibc"], default_value = "strata", requires = "policy")]
    allocator: String,
    /// Write the engine's trace to FILE: a JSON line every round (simulated ms, bytes promoted
    /// and demoted so far, the fast tier's free bytes; docs/tiering.md "Tracing a run")
    #[arg(long, value_name = "FILE", requires = "policy")]
    trace: Option<std::path::PathBuf>,
    #[command(flatten)]
    out: Output,
    /// The instrumented program and its arguments
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn status_code(s: std::process::ExitStatus) -> i32 {
    s.code().unwrap_or(1)
}

fn pkg(c: PkgCommand) -> anyhow::Result<i32> {
    use strata_emu::pkg;
    match c {
        PkgCommand::Build { name, rebuild, out } => {
            let b = pkg::build(&name, rebuild, out.quiet)?;
            if out.json {
                emit_json(&b)?;
            } else {
                let bins: Vec<String> = b.binaries.iter().map(|p| p.display().to_string()).collect();
                emit(&format!("{} (Debian {}): {}\n", b.program(), b.release, bins.join(" ")))?;
            }
        }
        PkgCommand::List { out } => {
            let all = pkg::list()?;
            if out.json {
                emit_json(&all)?;
            } else {
                let mut s = format!("Programs built for the emulated machine ({}):\n", pkg::root().display());
                for r in pkg::RECIPES {
                    let state = match all.iter().find(|b| b.name == r.name) {
                        Some(b) => {
                            format!("{} {} (Debian {}, built {})", b.name, b.upstream_version, b.debian_version, b.date)
                        }
                        None => format!("{}: not built (strata emu pkg build {})", r.name, r.name),
                    };
                    s += &format!("  {state}\n      {}\n", r.about);
                }
                emit(&s)?;
            }
        }
    }
    Ok(0)
}

fn compile(args: &[String], cxx: bool) -> anyhow::Result<i32> {
    let s = toolchain::cc_command(args, cxx)?
        .status()
        .with_context(|| format!("running {} (install clang-14)", toolchain::clang()))?;
    Ok(status_code(s))
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Cc { args } => compile(&args, false),
        Command::Cxx { args } => compile(&args, true),
        Command::Cargo { args } => Ok(status_code(toolchain::cargo_command(&args)?.status().context("running cargo")?)),
        Command::Pkg(c) => pkg(c),
        Command::Run(a) => emu_run(a),
        Command::Settings { json } => {
            let t = config::table();
            if json {
                emit_json(&t)?;
            } else {
                let mut s = String::from("Emulated machine settings (strata emu run --set KEY=VALUE; sizes take K/M/G; per-node lists are comma separated, node 0 first)\n\n");
                for d in &t.settings {
                    s += &format!("  {:<20} {:<16} default {:<22} {}\n", d.key, d.unit, d.default.to_string(), d.doc);
                }
                s += "\nPresets (--preset, or bench ycsb --emulate):\n";
                for p in &t.presets {
                    s += &format!("  {:<6} {}\n", p.name, p.doc);
                }
                emit(&s)?;
            }
            Ok(0)
        }
        Command::Calibrate { out } => {
            let c = calibrate::measure(out.quiet)?;
            if let Some(p) = calibrate::saved_path() {
                calibrate::save(&c, &p)?;
                out.progress("calibrate").say(&format!("kept for the host preset in {}", p.display()));
            }
            out.print(&c, calibrate::Calibration::table)?;
            Ok(0)
        }
        Command::Validate { opts, out, save } => {
            let r = validate::run(&opts, out.quiet)?;
            if let Some(dir) = &save.out {
                let p = strata_bench::results::save(dir, "emu-validate", &r)?;
                out.progress("validate").say(&format!("wrote {}", p.display()));
            }
            out.print(&r, validate::Report::table)?;
            match r.passed {
                true => Ok(0),
                false => Err(strata_emu::Error::Failed(format!(
                    "the emulator is outside its bounds on {}: {}",
                    r.cpu_model,
                    r.failures().join("; ")
                ))
                .into()),
            }
        }
    }
}

fn emu_run(a: RunArgs) -> anyhow::Result<i32> {
    let progress = a.out.progress("emu");
    let mut m = Machine::preset(&a.preset, a.out.quiet)?;
    if let Some(b) = a.fast_bytes {
        m.set_fast_bytes(b)?;
    }
    m.set_kernel(a.kernel);
    if let Some(ms) = a.machine.tpp_scan_period_ms {
        m.set_tpp_scan_period_ms(ms);
    }
    a.machine.apply(&mut m)?;
    // a policy the engine does not know is refused before anything runs
    if let Some(p) = &a.policy {
        crate::known_policy(p)?;
    }
    let engine =
        a.policy.as_deref().map(|p| stratad::emulated::EngineSpec::new(p, a.policy_config.as_deref())).transpose()?;
    let mut footprint = None;
    if let Some(r) = a.machine.one_fast_ratio()? {
        progress.say("pass 1 of 2: measuring the footprint with everything fast");
        let bytes = footprint_bytes(&m, &a.command)?;
        let fast = strata_emu::fast_bytes_of(bytes, r);
        m.set_fast_bytes(fast)?;
        footprint = Some(bytes);
        progress.say(&format!("footprint {} MiB; fast tier {} MiB; pass 2 of 2", bytes >> 20, fast >> 20));
    }
    let mut c = Proc::new(&a.command[0]);
    c.args(&a.command[1..]);
    if let Some(e) = &engine {
        c.envs(e.env());
        if let Some(t) = &a.trace {
            std::fs::File::create(t).with_context(|| format!("--trace {}", t.display()))?;
            c.env(stratad::emulated::TRACE_ENV, std::fs::canonicalize(t)?);
        }
        if a.allocator == "strata" && std::env::var_os("LD_PRELOAD").is_none() {
            let lib = strata_util::find_built("libstrata.so", Some("STRATA_LIB"), "make lib")?;
            c.env("LD_PRELOAD", lib);
        }
    }
    if a.out.json {
        // the program's output goes to stderr, so stdout is the report alone
        use std::os::fd::AsFd;
        c.stdout(std::io::stderr().as_fd().try_clone_to_owned()?);
    }
    let r = run_emulated(&m, &mut c, false)?;
    if let (Some(e), Some(stats)) = (&engine, &r.report.engine) {
        if stats["rounds"].as_u64() == Some(0) {
            let period = e.period_ms();
            progress.say(&format!(
                "the engine ran no round: its period ({period} simulated ms) is longer than the program's {:.1} ms; \
                 give a shorter [scanner] period_ms in --policy-config",
                r.report.sim_ns as f64 / 1e6
            ));
        }
    }
    let accesses = r.report.totals.accesses;
    let out = RunOutput {
        report: r.report,
        machine: m,
        footprint_bytes: footprint,
        exit_status: r.status.code(),
        wall_s: r.wall_s,
    };
    a.out.print(&out, |o| o.report.table(o.wall_s))?;
    anyhow::ensure!(
        accesses > 0,
        "the emulator saw no loads or stores: was {} built with `strata emu cc`?",
        a.command[0]
    );
    Ok(r.status.code().unwrap_or(1))
}
