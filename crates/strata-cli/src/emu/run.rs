//! `strata emu run`: run an instrumented program on an emulated machine, then print the
//! emulator's report (written by libstrata_emu.so at exit to $STRATA_EMU_REPORT).
use std::os::unix::process::CommandExt;
use std::process::Command as Proc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::{fast_bytes_of, parse_bytes, Machine};
use crate::output::{emit, emit_json, progress};

#[derive(clap::Args)]
pub struct Args {
    /// Machine preset: m2t (local 84.6 ns / 176 GB/s, far 156 ns / 55 GB/s) or host (this
    /// machine, measured first: one tier)
    #[arg(long, default_value = "m2t")]
    preset: String,
    /// Fast tier (node 0) size, e.g. 256M
    #[arg(long, value_name = "BYTES", conflicts_with = "fast_ratio")]
    fast_bytes: Option<String>,
    /// Fast tier as a fraction of the program's footprint (measured by a first run with
    /// everything fast, so the program runs twice)
    #[arg(long, value_name = "R")]
    fast_ratio: Option<f64>,
    /// Emulated kernel: none (first touch, no migration) or tpp (hint-fault promotion,
    /// watermark demotion: Linux's memory tiering mode)
    #[arg(long, default_value = "none", value_parser = ["none", "tpp"])]
    kernel: String,
    /// tpp: the scanner's period in simulated ms (the kernel's numa_balancing default: 1000)
    #[arg(long, value_name = "MS")]
    tpp_scan_period_ms: Option<f64>,
    /// Any emulator setting, KEY=VALUE (repeatable; keys in emu/api.c, e.g. l2=0, mlp=4)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the report as JSON (the program's own stdout then goes to stderr)
    #[arg(long)]
    json: bool,
    /// No progress lines
    #[arg(long, short)]
    quiet: bool,
    /// The instrumented program and its arguments
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// What the emulator wrote, plus the wall time of the run.
pub struct EmuReport {
    pub json: Value,
    pub wall_s: f64,
}

impl EmuReport {
    pub fn total(&self, key: &str) -> u64 {
        self.json["totals"][key].as_u64().unwrap_or(0)
    }
    /// The most pages resident at once (all nodes): the program's footprint as the emulator
    /// saw it (pages unmapped before exit included).
    pub fn peak_resident_pages(&self) -> u64 {
        self.json["peak_resident_pages"].as_u64().unwrap_or(0)
    }
}

/// Run `cmd` on machine `m`. With capture, its stdout is returned; otherwise it is inherited.
/// Address-space randomisation is off, so single-threaded runs repeat exactly.
pub fn run_emulated(
    m: &Machine,
    cmd: &mut Proc,
    capture: bool,
) -> anyhow::Result<(std::process::ExitStatus, Vec<u8>, EmuReport)> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "strata-emu-{}-{}.json",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    cmd.env("STRATA_EMU", m.env()).env("STRATA_EMU_REPORT", &path);
    unsafe {
        cmd.pre_exec(|| {
            libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            Ok(())
        });
    }
    let prog = format!("{:?}", cmd.get_program());
    let t = Instant::now();
    let (status, out) = if capture {
        let o = cmd.output().with_context(|| format!("running {prog}"))?;
        if !o.status.success() {
            eprint!("{}", String::from_utf8_lossy(&o.stderr));
        }
        (o.status, o.stdout)
    } else {
        (cmd.status().with_context(|| format!("running {prog}"))?, Vec::new())
    };
    let wall_s = t.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&path).map_err(|_| {
        anyhow::anyhow!(
            "{prog} did not run on the emulated machine (no report): build it with \
             `strata emu cc` or `strata emu cargo` so it is linked with libstrata_emu.so"
        )
    })?;
    let _ = std::fs::remove_file(&path);
    let json: Value = serde_json::from_str(&text).context("the emulator's report")?;
    if let Some(e) = json["error"].as_str() {
        bail!("{e}");
    }
    Ok((status, out, EmuReport { json, wall_s }))
}

/// The machine of these arguments (without the fast-ratio, which needs a run).
fn machine(a: &Args) -> anyhow::Result<Machine> {
    let mut m = Machine::preset(&a.preset, a.quiet)?;
    if let Some(b) = &a.fast_bytes {
        m.set_fast_bytes(parse_bytes(b)?);
    }
    m.set("kernel", if a.kernel == "tpp" { "1" } else { "0" });
    if let Some(ms) = a.tpp_scan_period_ms {
        anyhow::ensure!(ms > 0.0, "--tpp-scan-period-ms must be positive");
        m.set("tpp_scan_period_ns", &(ms * 1e6).to_string());
    }
    for s in &a.set {
        let (k, v) = s.split_once('=').with_context(|| format!("--set {s}: expected KEY=VALUE"))?;
        m.set(k, v);
    }
    Ok(m)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut m = machine(&a)?;
    let mut footprint = None;
    if let Some(r) = a.fast_ratio {
        anyhow::ensure!(r > 0.0 && r <= 1.0, "--fast-ratio must be in (0, 1]");
        if !a.quiet {
            progress("emu", "pass 1 of 2: measuring the footprint with everything fast");
        }
        let mut probe = m.clone();
        probe.set_fast_bytes(1 << 50);
        probe.set("kernel", "0");
        let mut c = Proc::new(&a.command[0]);
        c.args(&a.command[1..]).stdout(std::process::Stdio::null());
        let (_, _, rep) = run_emulated(&probe, &mut c, false)?;
        let bytes = rep.peak_resident_pages() * 4096;
        footprint = Some(bytes);
        let fast = fast_bytes_of(bytes, r);
        m.set_fast_bytes(fast);
        if !a.quiet {
            progress("emu", &format!("footprint {} MiB; fast tier {} MiB; pass 2 of 2", bytes >> 20, fast >> 20));
        }
    }
    let mut c = Proc::new(&a.command[0]);
    c.args(&a.command[1..]);
    if a.json {
        // the program's output goes to stderr, so stdout is the report alone
        use std::os::fd::AsFd;
        c.stdout(std::io::stderr().as_fd().try_clone_to_owned()?);
    }
    let (status, _, rep) = run_emulated(&m, &mut c, false)?;
    let mut out = rep.json.clone();
    out["machine"] = json!(m);
    out["footprint_bytes"] = json!(footprint);
    out["exit_status"] = json!(status.code());
    out["wall_s"] = json!(rep.wall_s);
    if a.json {
        emit_json(&out)?;
    } else {
        emit(&table(&out, &m))?;
    }
    if rep.total("accesses") == 0 {
        bail!("the emulator saw no loads or stores: was {} built with `strata emu cc`?", a.command[0]);
    }
    Ok(status.code().unwrap_or(1))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.2}%", 100.0 * part as f64 / whole as f64)
    }
}

/// The human report.
pub fn table(r: &Value, m: &Machine) -> String {
    let t = &r["totals"];
    let g = |k: &str| u(&t[k]);
    let mut s = format!(
        "emulated machine: preset {} (model output), kernel {}, {} thread(s)\n",
        m.preset,
        r["kernel"].as_str().unwrap_or("?"),
        u(&r["threads"])
    );
    s += &format!(
        "simulated time {:.3} ms (wall {:.2} s)\n\n",
        u(&r["sim_ns"]) as f64 / 1e6,
        r["wall_s"].as_f64().unwrap_or(0.0)
    );
    s += &format!(
        "accesses {} (loads {}, stores {}; bulk copies {} B)\n",
        g("accesses"),
        g("loads"),
        g("stores"),
        g("bulk_bytes")
    );
    s += &format!("{:<6} {:>14} {:>14} {:>10}\n", "level", "hits", "misses", "miss rate");
    for (name, h, mi) in [("L1D", "l1_hits", "l1_misses"), ("L2", "l2_hits", "l2_misses"), ("LLC", "llc_hits", "llc_misses")] {
        s += &format!("{:<6} {:>14} {:>14} {:>10}\n", name, g(h), g(mi), pct(g(mi), g(h) + g(mi)));
    }
    s += &format!(
        "L2 misses continuing a sequential stream (prefetched): {}\nDTLB misses {}, STLB misses (page walks) {}\n",
        g("stream_misses"),
        g("dtlb_misses"),
        g("stlb_misses")
    );
    s += &format!("page faults (first touch) {}, hint faults {}\n\n", g("page_faults"), g("hint_faults"));
    s += &format!("{:<5} {:>16} {:>16} {:>16}\n", "node", "memory accesses", "resident pages", "capacity pages");
    if let Some(nodes) = r["nodes"].as_array() {
        for n in nodes {
            s += &format!(
                "{:<5} {:>16} {:>16} {:>16}\n",
                u(&n["node"]),
                u(&n["memory_accesses"]),
                u(&n["resident_pages"]),
                u(&n["capacity_pages"])
            );
        }
    }
    let b = &r["background"];
    s += &format!(
        "\nmigration: promoted {} pages, demoted {} pages ({} MiB moved); by the program's threads {:.3} ms, in the background {:.3} ms; {} shootdowns\n",
        g("promoted_pages") + u(&b["promoted_pages"]),
        g("demoted_pages") + u(&b["demoted_pages"]),
        (g("moved_pages") + u(&b["moved_pages"])) * 4096 >> 20,
        g("migrate_ps") as f64 / 1e9,
        u(&b["ns"]) as f64 / 1e6,
        g("shootdowns") + u(&b["shootdowns"])
    );
    if let Some(th) = r["per_thread"].as_array().filter(|t| t.len() > 1) {
        s += &format!("\n{:<7} {:>14} {:>14} {:>12}\n", "thread", "sim ms", "accesses", "LLC misses");
        for x in th {
            s += &format!(
                "{:<7} {:>14.3} {:>14} {:>12}\n",
                u(&x["thread"]),
                u(&x["sim_ns"]) as f64 / 1e6,
                u(&x["accesses"]),
                u(&x["llc_misses"])
            );
        }
    }
    s
}
