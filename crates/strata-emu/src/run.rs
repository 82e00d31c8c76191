//! Running a program on the emulated machine: the machine goes to it in $STRATA_EMU, and its
//! report comes back through the file named by $STRATA_EMU_REPORT.
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
/// Address-space randomisation is off and the stack pinned (`pin_stack`), so single-threaded
/// runs repeat exactly. The program gets this process's environment with `cmd`'s changes
/// (`pin_stack` sets it whole, so an `env_clear` before this call is not kept).
pub fn run_emulated(m: &Machine, cmd: &mut Command, capture: bool) -> Result<Run, Error> {
    if capture {
        // as Command::output: no stdin, stdout returned, stderr shown only when it fails
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    spawn_emulated(m, cmd)?.wait()
}

/// A program started on the emulated machine (a server, driven while it runs).
pub struct Emulated {
    child: Child,
    prog: String,
    report: PathBuf,
    started: Instant,
}

/// Start `cmd` on machine `m`, as `run_emulated` runs it; its stdio is what `cmd` says. The
/// program is killed when the calling thread ends (`strata_util::dies_with_parent`): wait for it
/// on this thread.
pub fn spawn_emulated(m: &Machine, cmd: &mut Command) -> Result<Emulated, Error> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let report = std::env::temp_dir().join(format!(
        "strata-emu-{}-{}.json",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&report);
    cmd.env("STRATA_EMU", m.env()).env("STRATA_EMU_REPORT", &report);
    pin_stack(cmd);
    strata_util::dies_with_parent(cmd);
    unsafe {
        cmd.pre_exec(|| {
            libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            Ok(())
        });
    }
    let prog = format!("{:?}", cmd.get_program());
    let started = Instant::now();
    let child = cmd.spawn().map_err(strata_util::io(format!("running {prog}")))?;
    Ok(Emulated { child, prog, report, started })
}

impl Emulated {
    /// The program's stdin, when `cmd` piped it.
    pub fn take_stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.child.stdin.take()
    }

    /// The program's stdout, when `cmd` piped it (`wait` then returns none of it).
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Ask the program to end (SIGTERM, which servers take as a clean shutdown; the report is
    /// written at exit).
    pub fn terminate(&self) {
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// Whether the program has ended (its status then).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The program's report so far (STRATA_EMU_SNAPSHOT_SIGNAL, include/strata_emu.h), waiting
    /// up to `timeout` for it. It counts every access up to the moment the signal arrives
    /// (give or take those in flight) and has no engine statistics.
    pub fn snapshot(&mut self, timeout: Duration) -> Result<Report, Error> {
        let path = PathBuf::from(format!("{}.snapshot", self.report.display()));
        let _ = std::fs::remove_file(&path);
        let signal = libc::SIGRTMIN() + SNAPSHOT_SIGNAL_OFFSET;
        if unsafe { libc::kill(self.child.id() as libc::pid_t, signal) } != 0 {
            return Err(Error::Failed(format!("{}: cannot signal it for a snapshot", self.prog)));
        }
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Ok(text) = std::fs::read_to_string(&path) {
                let _ = std::fs::remove_file(&path);
                return Report::parse(&text);
            }
            if let Some(s) = self.try_status() {
                return Err(Error::Failed(format!("{} ended ({s}) before its snapshot", self.prog)));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(Error::Failed(format!(
            "{} wrote no snapshot in {:.0} s: is it built with `strata emu cc`?",
            self.prog,
            timeout.as_secs_f64()
        )))
    }

    /// Wait for the program to end; its report.
    pub fn wait(self) -> Result<Run, Error> {
        let Emulated { child, prog, report, started } = self;
        let running = strata_util::io(format!("running {prog}"));
        let o = child.wait_with_output().map_err(running)?;
        let wall_s = started.elapsed().as_secs_f64();
        if !o.status.success() {
            eprint!("{}", String::from_utf8_lossy(&o.stderr));
        }
        let text = std::fs::read_to_string(&report).map_err(|_| {
            Error::Failed(format!(
                "{prog} did not run on the emulated machine (no report): build it with \
                 `strata emu cc` or `strata emu cargo` so it is linked with libstrata_emu.so"
            ))
        })?;
        let _ = std::fs::remove_file(&report);
        let _ = std::fs::remove_file(format!("{}.snapshot", report.display()));
        Ok(Run { status: o.status, stdout: o.stdout, report: Report::parse(&text)?, wall_s })
    }
}

/// STRATA_EMU_SNAPSHOT_SIGNAL is SIGRTMIN + this (include/strata_emu.h).
const SNAPSHOT_SIGNAL_OFFSET: i32 = 7;

/// Bytes the kernel copies to the top of a new program's stack (the file name, the argument
/// and environment strings) plus 8 per argument and variable (their pointers) that
/// `pin_stack` makes every emulated program start with.
const STACK_STRINGS: usize = 64 << 10;

/// Variables `pin_stack` adds: the filler, then empty ones for the count of pointers.
const PADS: [&str; 8] = [
    "STRATA_EMU_PAD",
    "STRATA_EMU_PAD1",
    "STRATA_EMU_PAD2",
    "STRATA_EMU_PAD3",
    "STRATA_EMU_PAD4",
    "STRATA_EMU_PAD5",
    "STRATA_EMU_PAD6",
    "STRATA_EMU_PAD7",
];

/// Make the stack of the program `cmd` starts independent of its environment and arguments.
///
/// The strings sit on the stack, so their size moves the stack's addresses, and with them
/// cache sets, the lines a bulk copy of a local touches, the simulated time and whatever the
/// program computes from it: the same program differed by a few accesses in 328 M from run to
/// run when a recalibrated `host` preset changed the length of $STRATA_EMU. Below the strings
/// the kernel (fs/binfmt_elf.c) aligns to 16 bytes, puts fixed-size data and then the pointer
/// arrays, and aligns again: with the strings' bytes plus 8 per pointer a constant and an even
/// count of pointers, the stack pointer at the program's entry is always the same. The
/// argument strings, lowest, then start 8 bytes a pointer higher; a count of pointers that is
/// a multiple of 8 keeps them where they were in their cache lines (a program copies them:
/// Rust's `std::env::args`). STRATA_EMU_PAD fills the strings up to `STACK_STRINGS` (beyond
/// it, a multiple of it), and up to seven empty STRATA_EMU_PADn round the count. What remains:
/// eight variables more or less move the argument strings by a line, into other cache sets,
/// which can change a miss and, through the simulated time, what a program that reads its
/// clock does (seen: 3 accesses in 5.2 M for 16 variables instead of 12).
fn pin_stack(cmd: &mut Command) {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => env.insert(k.to_owned(), v.to_owned()),
            None => env.remove(k),
        };
    }
    for p in PADS {
        env.remove(OsStr::new(p));
    }
    let file = exec_path(cmd.get_program(), env.get(OsStr::new("PATH")));
    let args: Vec<&OsStr> = std::iter::once(cmd.get_program()).chain(cmd.get_args()).collect();
    // every string with its NUL; a variable is KEY=VALUE
    let mut bytes = file.len() + 1 + args.iter().map(|a| a.len() + 1).sum::<usize>();
    bytes += env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    let pointers = (args.len() + env.len() + 1).next_multiple_of(8);
    for p in &PADS[1..pointers - args.len() - env.len()] {
        env.insert(p.into(), OsString::new());
        bytes += p.len() + 2;
    }
    let used = bytes + PADS[0].len() + 2 + 8 * pointers;
    let total = used.div_ceil(STACK_STRINGS) * STACK_STRINGS;
    env.insert(PADS[0].into(), "x".repeat(total - used).into());
    cmd.env_clear().envs(env);
}

/// The file name the kernel gets for `program`: as given if it has a slash, else the first
/// entry of PATH that has it (as execvp searches).
fn exec_path(program: &OsStr, path: Option<&OsString>) -> OsString {
    if program.as_bytes().contains(&b'/') {
        return program.to_owned();
    }
    let dirs = path.map(std::env::split_paths).into_iter().flatten();
    dirs.map(|d| d.join(program)).find(|p| p.is_file()).map_or_else(|| program.to_owned(), PathBuf::into_os_string)
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
