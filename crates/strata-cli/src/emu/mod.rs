//! `strata emu`: the emulated tiered machine (strata-emu, C in emu/).
//!
//!   cc / cargo   build a program with load/store hooks, linked with libstrata_emu.so
//!   run          run it on an emulated machine (a preset) and report what it did
//!   calibrate    measure this machine: the `host` preset
//!   validate     the emulator against cachegrind and against native runs
use std::path::{Path, PathBuf};
use std::process::Command as Proc;

use anyhow::{bail, Context};

mod calibrate;
mod run;
mod validate;

pub use run::run_emulated;

#[derive(clap::Subcommand)]
pub enum EmuCommand {
    /// Compile C or C++ for the emulated machine: clang with the SanitizerCoverage load/store
    /// hooks, linked with libstrata_emu.so (arguments go to clang, e.g. `-O2 x.c -o x`)
    Cc {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Build Rust for the emulated machine: cargo with the SanitizerCoverage pass, for the host
    /// target, into target/emu (e.g. `strata emu cargo build --release -p strata-cli`)
    Cargo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Run an instrumented program on the emulated machine and report caches, TLBs, tiers,
    /// faults and migrations
    Run(run::Args),
    /// Measure this machine (pointer chase, streaming): the `host` preset's figures
    Calibrate(calibrate::Args),
    /// Fidelity checks: cache misses vs cachegrind, layout speed-up vs native, emulator speed
    Validate(validate::Args),
}

pub fn run(c: EmuCommand) -> anyhow::Result<i32> {
    match c {
        EmuCommand::Cc { args } => cc(&args),
        EmuCommand::Cargo { args } => cargo(&args),
        EmuCommand::Run(a) => run::run(a),
        EmuCommand::Calibrate(a) => calibrate::run(a).map(|()| 0),
        EmuCommand::Validate(a) => validate::run(a).map(|()| 0),
    }
}

/// The coverage flags clang needs: a coverage type must be given for the hooks to be emitted.
pub const CLANG_FLAGS: &[&str] = &["-fsanitize-coverage=inline-8bit-counters,trace-loads,trace-stores"];
/// The same pass through rustc's LLVM.
pub const RUSTC_FLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=3",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-trace-loads",
    "-Cllvm-args=-sanitizer-coverage-trace-stores",
];

fn emu_lib() -> anyhow::Result<PathBuf> {
    crate::run::find_built("libstrata_emu.so", Some("STRATA_EMU_LIB"), "make emu")
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include")
}

/// clang-14 as Debian ships it, or $STRATA_EMU_CC.
pub fn clang() -> String {
    if let Ok(c) = std::env::var("STRATA_EMU_CC") {
        return c;
    }
    for c in ["clang-14", "clang"] {
        if Proc::new(c).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return c.into();
        }
    }
    "clang-14".into()
}

fn status_code(s: std::process::ExitStatus) -> i32 {
    s.code().unwrap_or(1)
}

/// The clang command line of `strata emu cc ARGS`.
pub fn cc_command(args: &[String]) -> anyhow::Result<Proc> {
    let lib = emu_lib()?;
    let dir = lib.parent().context("libstrata_emu.so's folder")?;
    let mut c = Proc::new(clang());
    c.args(CLANG_FLAGS)
        .arg(format!("-I{}", include_dir().display()))
        .args(args)
        .arg(format!("-L{}", dir.display()))
        .arg("-lstrata_emu")
        .arg(format!("-Wl,-rpath,{}", dir.display()));
    Ok(c)
}

fn cc(args: &[String]) -> anyhow::Result<i32> {
    let mut c = cc_command(args)?;
    let s = c.status().with_context(|| format!("running {} (install clang-14)", clang()))?;
    Ok(status_code(s))
}

/// The host target triple, from rustc.
pub fn host_triple() -> anyhow::Result<String> {
    let out = Proc::new("rustc").arg("-vV").output().context("running rustc -vV")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV printed no host")
}

/// Where `strata emu cargo` puts its output: target/emu/<host>/<profile>.
pub fn cargo_target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/emu")
}

/// `cargo ARGS` with the pass on for the program (an explicit --target keeps build scripts
/// and proc macros, which cargo builds for the host, uninstrumented).
pub fn cargo_command(args: &[String]) -> anyhow::Result<Proc> {
    let lib = emu_lib()?;
    let dir = lib.parent().context("libstrata_emu.so's folder")?;
    let mut flags: Vec<String> = RUSTC_FLAGS.iter().map(|s| s.to_string()).collect();
    // `-l` (not a link-arg) puts the library before std's -lc on the link line, so its
    // memcpy, memmove and memset come first in symbol lookup and bulk copies are counted
    flags.push(format!("-L{}", dir.display()));
    flags.push("-ldylib=strata_emu".into());
    flags.push(format!("-Clink-arg=-Wl,-rpath,{}", dir.display()));
    let mut c = Proc::new("cargo");
    let (sub, rest) = args.split_first().context("strata emu cargo: which cargo command?")?;
    c.arg(sub)
        .arg("--target")
        .arg(host_triple()?)
        .args(rest)
        .env("CARGO_TARGET_DIR", cargo_target_dir())
        .env("RUSTFLAGS", flags.join(" "));
    Ok(c)
}

fn cargo(args: &[String]) -> anyhow::Result<i32> {
    let s = cargo_command(args)?.status().context("running cargo")?;
    Ok(status_code(s))
}

/// The `strata` binary built for the emulated machine by `make emu`.
pub fn emu_strata() -> anyhow::Result<PathBuf> {
    let p = cargo_target_dir().join(host_triple()?).join("release/strata");
    if !p.is_file() {
        bail!("{} not found: build it with `make emu`", p.display());
    }
    Ok(p)
}

/// An emulated machine: a preset's settings, then overrides, as STRATA_EMU wants them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    pub preset: String,
    /// key=value settings in order (later ones win); see emu/api.c for the keys
    pub settings: Vec<(String, String)>,
}

impl Machine {
    /// `m2t` (tiers from strata-topo's preset; the Ice Lake caches and TLBs built into the
    /// emulator) or `host` (one tier, this machine's caches and measured latencies).
    pub fn preset(name: &str, quiet: bool) -> anyhow::Result<Machine> {
        let mut m = Machine { preset: name.into(), settings: vec![("preset".into(), name.into())] };
        if name == "host" {
            let c = calibrate::measure(quiet)?;
            for (k, v) in c.settings() {
                m.set(&k, &v);
            }
            return Ok(m);
        }
        let p = strata_topo::find_preset(name).map_err(|e| anyhow::anyhow!("{e} (or host)"))?;
        let list = |f: &dyn Fn(&strata_topo::PresetTier) -> String| {
            p.tiers.iter().map(f).collect::<Vec<_>>().join(",")
        };
        m.set("nodes", &p.tiers.len().to_string());
        m.set("read_ns", &list(&|t| t.read_latency_ns.to_string()));
        m.set("write_ns", &list(&|t| t.write_latency_ns.to_string()));
        m.set("read_mbps", &list(&|t| t.read_bandwidth_mbps.to_string()));
        m.set("write_mbps", &list(&|t| t.write_bandwidth_mbps.to_string()));
        m.set("capacity", &list(&|t| t.bytes.to_string()));
        Ok(m)
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.settings.retain(|(k, _)| k != key);
        self.settings.push((key.into(), value.into()));
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Set the fast tier's (node 0's) capacity, keeping the others.
    pub fn set_fast_bytes(&mut self, bytes: u64) {
        let caps = self.get("capacity").unwrap_or("0").to_string();
        let mut v: Vec<String> = caps.split(',').map(str::to_string).collect();
        v[0] = bytes.to_string();
        self.set("capacity", &v.join(","));
    }

    pub fn env(&self) -> String {
        self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

/// A fast tier of `ratio` of a footprint, at least a page (`--fast-ratio`).
pub fn fast_bytes_of(footprint_bytes: u64, ratio: f64) -> u64 {
    ((footprint_bytes as f64 * ratio) as u64).max(4096)
}

/// Parse "1G", "512M", "4096" into bytes.
pub fn parse_bytes(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: f64 = num.parse().with_context(|| format!("'{s}' is not a size (e.g. 512M, 2G)"))?;
    if !(v > 0.0) {
        bail!("'{s}': a size must be positive");
    }
    Ok((v * mul as f64) as u64)
}
