//! `strata run`: run a program under Strata's transparent mode (LD_PRELOAD=libstrata.so),
//! optionally with placement rules, and report its allocation contexts at exit.
//!
//! The program's output is its own: the report goes to a file or a descriptor the user names,
//! never to stdout or stderr, where it would land in the program's output (`gzip -c > x.gz`).
//! The signals a service manager stops a service with reach the program: `strata run` passes
//! them on and waits, so stopping it never leaves the program running without it.
use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

use strata_util::find_built;
use strata_util::size::format as bytes;

#[derive(clap::Args)]
pub struct Args {
    /// Write a per-context report when the program exits (totals; top contexts by bytes
    /// allocated and by peak live bytes, with stacks, directives, and where tracked objects are;
    /// a legend; the rules that place each context where it ended, for --rules) to FILE, by
    /// default strata-report.COMMAND.PID.txt (.json with --json) in the current folder; its path
    /// is said on stderr. Never written into the program's output
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    report: Option<Option<PathBuf>>,
    /// Write the report to this open descriptor instead of a file (e.g. `--report-fd 3 3>r.txt`)
    #[arg(long, value_name = "FD", conflicts_with = "report")]
    report_fd: Option<i32>,
    /// Placement rules for allocation contexts (see examples/rules.txt)
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// With --report: the report as JSON
    #[arg(long)]
    json: bool,
    /// Contexts shown per ranking in the report
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Do not track allocation contexts (Strata's allocator only)
    #[arg(long)]
    no_contexts: bool,
    /// The program's claim on the fast tier, for a running daemon: high, normal, low or
    /// -1000..1000 (higher is promoted first and demoted last; STRATA_PRIORITY)
    #[arg(long, value_parser = stratad::config::parse_priority, allow_hyphen_values = true)]
    priority: Option<i32>,
    /// libstrata.so to preload (default: $STRATA_LIB, next to this binary, or build/)
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// The program and its arguments
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Where libstrata.so is: --lib, $STRATA_LIB, beside the binary, the repository's build/.
pub fn find_lib(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    match given {
        Some(g) if g.is_file() => Ok(std::fs::canonicalize(g)?),
        Some(g) => bail!("libstrata.so not found at {} (--lib)", g.display()),
        None => Ok(find_built("libstrata.so", Some("STRATA_LIB"), "make lib")?),
    }
}

/// Check a rules file with libstrata's own parser.
pub fn check_rules(path: &Path) -> anyhow::Result<usize> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).context("rules path")?;
    let mut err = vec![0 as std::ffi::c_char; 512];
    let n = unsafe { strata_sys::strata_rules_check(c.as_ptr(), err.as_mut_ptr(), err.len()) };
    if n < 0 {
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        bail!("rules file {}: {msg}", path.display());
    }
    Ok(n as usize)
}

/// The program's path as exec would find it (through $PATH for a bare name).
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Why the kernel will run `program` in secure mode, dropping LD_PRELOAD (so without Strata):
/// it is setuid or setgid to someone this process is not, or carries file capabilities.
fn drops_preload(program: &Path) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(program).ok()?;
    // SAFETY: these cannot fail
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if m.mode() & libc::S_ISUID != 0 && m.uid() != euid {
        return Some("setuid");
    }
    if m.mode() & libc::S_ISGID != 0 && m.gid() != egid {
        return Some("setgid");
    }
    let path = CString::new(program.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: NUL-terminated strings; a size query only (no buffer)
    let caps = unsafe { libc::getxattr(path.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) };
    (caps > 0).then_some("given file capabilities")
}

/// A folder only this user can enter, for the programs' reports: its name is random, so no
/// other user can make it first.
fn private_dir() -> anyhow::Result<PathBuf> {
    let template = std::env::temp_dir().join("strata-run-XXXXXX");
    let mut raw = CString::new(template.as_os_str().as_encoded_bytes())?.into_bytes_with_nul();
    // SAFETY: a NUL-terminated template that mkdtemp rewrites in place (mode 0700)
    if unsafe { libc::mkdtemp(raw.as_mut_ptr() as *mut libc::c_char) }.is_null() {
        bail!("cannot make a folder for the report in {}: {}", template.display(), std::io::Error::last_os_error());
    }
    raw.pop();
    Ok(PathBuf::from(String::from_utf8(raw)?))
}

/// Where the report goes, chosen before the program starts (so a bad choice costs no run).
enum ReportTo {
    /// a file (None: the default name)
    File(Option<PathBuf>),
    Fd(std::fs::File),
}

impl ReportTo {
    fn of(a: &Args) -> anyhow::Result<Option<ReportTo>> {
        use std::os::fd::FromRawFd;
        if let Some(fd) = a.report_fd {
            // SAFETY: dup of a descriptor checked open; the copy is this File's own
            let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if fd < 0 || copy < 0 {
                return Err(crate::Usage(format!("--report-fd {fd}: not an open descriptor")).into());
            }
            return Ok(Some(ReportTo::Fd(unsafe { std::fs::File::from_raw_fd(copy) })));
        }
        Ok(a.report.clone().map(ReportTo::File))
    }

    /// Write the report; the file's default name has the program's command and pid.
    fn write(self, text: &str, command: &str, pid: u32, json: bool) -> anyhow::Result<()> {
        use std::io::Write as _;
        match self {
            ReportTo::Fd(mut f) => f.write_all(text.as_bytes()).context("writing the report")?,
            ReportTo::File(path) => {
                let path = path.unwrap_or_else(|| {
                    let name = Path::new(command).file_name().map_or("program".into(), |n| n.to_string_lossy());
                    PathBuf::from(format!("strata-report.{name}.{pid}.{}", if json { "json" } else { "txt" }))
                });
                std::fs::write(&path, text).with_context(|| format!("writing the report to {}", path.display()))?;
                eprintln!("strata: report written to {}", path.display());
            }
        }
        Ok(())
    }
}

/// The signals `strata run` passes on to the program: those a service manager or a user sends
/// the wrapper to stop, reload or poke the service. One the kernel sent (the terminal's Ctrl-C
/// or hang-up) reached the program's process group already and is not sent twice.
const FORWARDED: [i32; 6] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// Pass the FORWARDED signals on to the program whose pid `child` will hold (one that comes
/// before it starts is passed on once it has).
fn forward_signals(
    child: std::sync::Arc<std::sync::atomic::AtomicI32>,
) -> anyhow::Result<signal_hook::iterator::Handle> {
    use signal_hook::iterator::exfiltrator::WithRawSiginfo;
    use std::sync::atomic::Ordering;
    let mut signals = signal_hook::iterator::SignalsInfo::<WithRawSiginfo>::new(FORWARDED)?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        for info in signals.forever() {
            if info.si_code > 0 {
                continue; // the kernel's (a terminal's), to the whole process group
            }
            let mut pid = child.load(Ordering::Acquire);
            while pid == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
                pid = child.load(Ordering::Acquire);
            }
            if pid > 0 {
                // SAFETY: a signal to the program this process started and has not reaped
                unsafe { libc::kill(pid, info.si_signo) };
            }
        }
    });
    Ok(handle)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let lib = find_lib(a.lib.as_deref())?;
    if let Some(why) = resolve(&a.command[0]).as_deref().and_then(drops_preload) {
        eprintln!(
            "strata: {} is {why}: the kernel drops LD_PRELOAD when it starts, so it runs without Strata",
            a.command[0]
        );
    }
    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", lib.display()),
        _ => lib.display().to_string(),
    };
    cmd.env("LD_PRELOAD", preload);
    if let Some(r) = &a.rules {
        check_rules(r)?;
        cmd.env("STRATA_RULES", std::fs::canonicalize(r)?);
    }
    if a.no_contexts {
        cmd.env("STRATA_CONTEXTS", "0");
    }
    if let Some(p) = a.priority {
        cmd.env("STRATA_PRIORITY", p.to_string());
    }
    let report_to = ReportTo::of(&a)?;
    let mut dir = PathBuf::new();
    if report_to.is_some() {
        anyhow::ensure!(!a.no_contexts, "--report needs contexts (drop --no-contexts)");
        dir = private_dir()?;
        cmd.env("STRATA_REPORT", dir.join("report.%p.json"));
    }
    let child_pid = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let signals = forward_signals(std::sync::Arc::clone(&child_pid))?;
    let spawned = cmd.spawn().with_context(|| format!("starting {}", a.command[0]));
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            child_pid.store(-1, std::sync::atomic::Ordering::Release);
            return Err(e);
        }
    };
    let pid = child.id();
    child_pid.store(pid as i32, std::sync::atomic::Ordering::Release);
    let status = child.wait()?;
    child_pid.store(-1, std::sync::atomic::Ordering::Release); // reaped: its pid is no longer its
    signals.close();
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if let Some(to) = report_to {
        let text = report(&dir, pid, &a);
        let _ = std::fs::remove_dir_all(&dir);
        to.write(&text?, &a.command[0], pid, a.json)?;
    }
    Ok(code)
}

/// The report of the program `pid` (and the processes it started), from the files libstrata
/// wrote in `dir`: as text, or JSON.
fn report(dir: &Path, pid: u32, a: &Args) -> anyhow::Result<String> {
    let mut reports: Vec<Value> = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let text = std::fs::read_to_string(e.path())?;
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => reports.push(v),
            Err(err) => eprintln!("strata: skipping unreadable report {}: {err}", e.path().display()),
        }
    }
    // the program itself first, then any processes it started
    reports.sort_by_key(|r| (r["pid"].as_u64() != Some(pid as u64), r["pid"].as_u64()));
    if a.json {
        return Ok(serde_json::to_string_pretty(&serde_json::json!({ "pid": pid, "processes": reports }))? + "\n");
    }
    if reports.is_empty() {
        return Ok("strata: no report was written (the program exited abnormally, or is statically linked)\n".into());
    }
    let mut s = String::new();
    for r in reports.iter().take(1) {
        let ctxs = r["contexts"].as_array().cloned().unwrap_or_default();
        let n = |c: &Value, k: &str| c[k].as_u64().unwrap_or(0);
        let allocated: u64 = ctxs.iter().map(|c| n(c, "bytes_allocated")).sum();
        let allocs: u64 = ctxs.iter().map(|c| n(c, "allocs")).sum();
        let _ = writeln!(
            s,
            "\n== Strata report: pid {} ({}), {} contexts{}",
            r["pid"],
            r["exe"].as_str().unwrap_or("?"),
            ctxs.len(),
            if n(r, "contexts_dropped") > 0 {
                format!(", {} allocations without a context (table full)", r["contexts_dropped"])
            } else {
                String::new()
            }
        );
        let _ = writeln!(s, "{} allocated in {allocs} allocations", bytes(allocated));
        for (title, key) in [("by bytes allocated", "bytes_allocated"), ("by peak live bytes", "peak_live_bytes")] {
            let mut v: Vec<&Value> = ctxs.iter().filter(|c| n(c, key) > 0).collect();
            v.sort_by_key(|c| std::cmp::Reverse(n(c, key)));
            let all: u64 = v.iter().map(|c| n(c, key)).sum();
            let top: u64 = v.iter().take(a.top).map(|c| n(c, key)).sum();
            let _ = writeln!(
                s,
                "\ntop {} contexts {title} (they hold {:.0} % of all contexts' {}):",
                a.top.min(v.len()),
                if all > 0 { top as f64 * 100.0 / all as f64 } else { 0.0 },
                if key == "bytes_allocated" { "bytes allocated" } else { "peaks" }
            );
            let _ = writeln!(
                s,
                "  {:<16} {:>9} {:>10} {:>11} {:>11} {:>11} {:<9} resident (tracked)",
                "id", "class", "allocs", "allocated", "peak live", "at exit", "directive"
            );
            for c in v.iter().take(a.top) {
                let res: Vec<String> = c["resident_node_bytes"]
                    .as_object()
                    .map(|m| m.iter().map(|(n, b)| format!("node{n} {}", bytes(b.as_u64().unwrap_or(0)))).collect())
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {:<16} {:>9} {:>10} {:>11} {:>11} {:>11} {:<9} {}",
                    c["id"].as_str().unwrap_or("?"),
                    match c["class_bytes"].as_u64() {
                        Some(0) | None => "large".into(),
                        Some(b) => bytes(b),
                    },
                    n(c, "allocs"),
                    bytes(n(c, "bytes_allocated")),
                    bytes(n(c, "peak_live_bytes")),
                    bytes(n(c, "live_bytes")),
                    c["directive"].as_str().unwrap_or("?"),
                    if res.is_empty() { "-".into() } else { res.join(", ") }
                );
                for f in c["stack"].as_array().into_iter().flatten().take(4) {
                    let obj = f["object"]
                        .as_str()
                        .map(|o| Path::new(o).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
                        .unwrap_or_default();
                    // no dynamic symbol (a static function): the offset in its object, for addr2line
                    let sym = f["symbol"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{obj}+{}", f["offset"].as_str().unwrap_or("?")));
                    let _ = writeln!(s, "      at {sym} ({obj})");
                }
            }
        }
        s += LEGEND;
        let topo = strata_topo::process();
        match suggested_rules(r, |node| topo.nodes.iter().find(|n| n.id as u64 == node).map(|n| n.tier)) {
            Some(rules) => {
                let _ = write!(s, "\nsuggested rules (save them to a file for --rules):\n{rules}");
            }
            None => {
                s += "\nno rules suggested: the tracked objects at exit were all on one tier (no daemon moved them, \
                           or the machine has one)\n"
            }
        }
    }
    if reports.len() > 1 {
        let _ = writeln!(s, "\n({} more processes reported; --json shows them all)", reports.len() - 1);
    }
    Ok(s)
}

const LEGEND: &str = "
legend:
  id          the context (call stack and size class): the same in every run of the same
              binaries; an `id=` rule in a --rules file matches it
  class       the size class of its allocations (large: above 64 KiB)
  allocs      allocations made; allocated: the bytes they asked for
  peak live   the most of its memory live at once, as the allocator gave it (its size class, or
              whole pages for objects of 4 KiB and more: the rounding is the difference from
              what was asked; exact for one thread, and for several as close as their counts
              are to each other's); at exit: live when the program ended
  directive   where its new objects went: default (first touch), fast, slow, tier:N (set by a
              rule, a policy or the daemon)
  resident    where its tracked objects (those of 4 KiB and more) were at exit, per node
";

/// A rules file from where each context's tracked objects were at exit: `fast` for a context
/// wholly on the fastest tier's nodes, `slow` for one wholly below it, by id (the same in the
/// next run). Where a daemon managed the program, that is where its policy's measurements put
/// them; None when every context was on one tier (nothing was placed, or one tier exists).
fn suggested_rules(r: &Value, tier_of: impl Fn(u64) -> Option<u32>) -> Option<String> {
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    for c in r["contexts"].as_array().into_iter().flatten() {
        let Some(res) = c["resident_node_bytes"].as_object() else { continue };
        let (mut on_fast, mut below) = (0u64, 0u64);
        for (node, b) in res {
            let b = b.as_u64().unwrap_or(0);
            match node.parse().ok().and_then(&tier_of) {
                Some(0) => on_fast += b,
                Some(_) => below += b,
                None => {}
            }
        }
        let id = c["id"].as_str().unwrap_or("?");
        if on_fast > 0 && below == 0 {
            fast.push(format!("fast id={id}"));
        } else if below > 0 && on_fast == 0 {
            slow.push(format!("slow id={id}"));
        }
    }
    if fast.is_empty() || slow.is_empty() {
        return None;
    }
    Some(fast.into_iter().chain(slow).map(|l| l + "\n").collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_rules_place_each_context_where_it_ended_and_rules_files_take_them() {
        let r = serde_json::json!({"contexts": [
            {"id": "00000000000000aa", "resident_node_bytes": {"0": 8192}},
            {"id": "00000000000000bb", "resident_node_bytes": {"1": 4096}},
            {"id": "00000000000000cc", "resident_node_bytes": {"0": 4096, "1": 4096}},
            {"id": "00000000000000dd", "resident_node_bytes": {}}
        ]});
        let two = |node: u64| Some(node as u32); // node 0 fast, node 1 slow
        let rules = suggested_rules(&r, two).expect("two tiers in use");
        assert_eq!(rules, "fast id=00000000000000aa\nslow id=00000000000000bb\n");
        let file = std::env::temp_dir().join(format!("strata-suggested-{}.rules", std::process::id()));
        std::fs::write(&file, &rules).unwrap();
        assert_eq!(check_rules(&file).unwrap(), 2, "--rules takes them as they are");
        std::fs::remove_file(file).unwrap();
        assert_eq!(suggested_rules(&r, |_| Some(0)), None, "one tier: nothing to suggest");
    }
}
