//! Running a program on the emulated machine: the machine goes to it in $STRATA_EMU, and its
//! report comes back through the file named by $STRATA_EMU_REPORT.
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::machine::{Kernel, Machine, ALL_FAST_BYTES};
use crate::report::Report;
use crate::Error;

/// One run: how the program ended, its stdout (when captured), what the emulator saw.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub report: Report,
    pub wall_s: f64,
}

/// Run `cmd` on machine `m`. With `capture`, its stdout is returned; otherwise inherited.
/// Address-space randomisation is off, so single-threaded runs repeat exactly.
pub fn run_emulated(m: &Machine, cmd: &mut Command, capture: bool) -> Result<Run, Error> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    // fixed-width names: the environment sits on the emulated program's stack, so its length
    // moves the stack's addresses, and with them cache sets and counts
    let path = std::env::temp_dir().join(format!(
        "strata-emu-{:010}-{:08}.json",
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
    let running = strata_util::io(format!("running {prog}"));
    let t = Instant::now();
    let (status, stdout) = if capture {
        let o = cmd.output().map_err(running)?;
        if !o.status.success() {
            eprint!("{}", String::from_utf8_lossy(&o.stderr));
        }
        (o.status, o.stdout)
    } else {
        (cmd.status().map_err(running)?, Vec::new())
    };
    let wall_s = t.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&path).map_err(|_| {
        Error::Invalid(format!(
            "{prog} did not run on the emulated machine (no report): build it with \
             `strata emu cc` or `strata emu cargo` so it is linked with libstrata_emu.so"
        ))
    })?;
    let _ = std::fs::remove_file(&path);
    Ok(Run { status, stdout, report: Report::parse(&text)?, wall_s })
}

/// The program's footprint: a run with everything fast and nothing moving, its stdout
/// discarded (what `--fast-ratio` sizes the fast tier from).
pub fn footprint_bytes(m: &Machine, program: &[String]) -> Result<u64, Error> {
    let mut probe = m.clone();
    probe.set_fast_bytes(ALL_FAST_BYTES)?;
    probe.set_kernel(Kernel::None);
    let mut c = Command::new(&program[0]);
    c.args(&program[1..]).stdout(std::process::Stdio::null());
    Ok(run_emulated(&probe, &mut c, false)?.report.footprint_bytes())
}

/// `strata emu run --json`: the report, and how it was run.
#[derive(Debug, Serialize)]
pub struct RunOutput {
    #[serde(flatten)]
    pub report: Report,
    pub machine: Machine,
    /// measured by the first pass when the fast tier was a ratio of it
    pub footprint_bytes: Option<u64>,
    pub exit_status: Option<i32>,
    pub wall_s: f64,
}
