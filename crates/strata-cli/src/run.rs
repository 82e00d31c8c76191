//! `strata run`: run a program under Strata's transparent mode (LD_PRELOAD=libstrata.so),
//! optionally with placement rules, and report its allocation contexts at exit.
use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

use strata_util::find_built;
use strata_util::size::format as bytes;

use crate::output::emit;

#[derive(clap::Args)]
pub struct Args {
    /// Print a per-context report after the program exits (top contexts by bytes allocated
    /// and by live bytes, with stacks, directives, and where tracked objects are)
    #[arg(long)]
    report: bool,
    /// Placement rules for allocation contexts (see examples/rules.txt)
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// With --report: print the reports as JSON
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
    let mut dir = PathBuf::new();
    if a.report {
        anyhow::ensure!(!a.no_contexts, "--report needs contexts (drop --no-contexts)");
        dir = private_dir()?;
        cmd.env("STRATA_REPORT", dir.join("report.%p.json"));
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {}", a.command[0]))?;
    let pid = child.id();
    let status = child.wait()?;
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if a.report {
        let result = print_report(&dir, pid, &a);
        let _ = std::fs::remove_dir_all(&dir);
        result?;
    }
    Ok(code)
}

fn print_report(dir: &Path, pid: u32, a: &Args) -> anyhow::Result<()> {
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
        return crate::output::emit_json(&serde_json::json!({ "pid": pid, "processes": reports }));
    }
    if reports.is_empty() {
        return emit("strata: no report was written (the program exited abnormally, or is statically linked)\n");
    }
    let mut s = String::new();
    for r in reports.iter().take(1) {
        let ctxs = r["contexts"].as_array().cloned().unwrap_or_default();
        let _ = writeln!(
            s,
            "\n== Strata report: pid {} ({}), {} contexts{}",
            r["pid"],
            r["exe"].as_str().unwrap_or("?"),
            ctxs.len(),
            if r["contexts_dropped"].as_u64().unwrap_or(0) > 0 {
                format!(", {} allocations without a context (table full)", r["contexts_dropped"])
            } else {
                String::new()
            }
        );
        for (title, key) in [("by bytes allocated", "bytes_allocated"), ("by live bytes", "live_bytes")] {
            let mut v: Vec<&Value> = ctxs.iter().filter(|c| c[key].as_u64().unwrap_or(0) > 0).collect();
            v.sort_by_key(|c| std::cmp::Reverse(c[key].as_u64().unwrap_or(0)));
            let _ = writeln!(s, "\ntop contexts {title}:");
            let _ = writeln!(
                s,
                "  {:<16} {:>9} {:>10} {:>10} {:>11} {:>11} {:<9} resident (tracked)",
                "id", "class", "allocs", "live", "allocated", "live bytes", "directive"
            );
            for c in v.iter().take(a.top) {
                let res: Vec<String> = c["resident_node_bytes"]
                    .as_object()
                    .map(|m| m.iter().map(|(n, b)| format!("node{n} {}", bytes(b.as_u64().unwrap_or(0)))).collect())
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {:<16} {:>9} {:>10} {:>10} {:>11} {:>11} {:<9} {}",
                    c["id"].as_str().unwrap_or("?"),
                    match c["class_bytes"].as_u64() {
                        Some(0) | None => "large".into(),
                        Some(b) => bytes(b),
                    },
                    c["allocs"].as_u64().unwrap_or(0),
                    c["live_objects"].as_u64().unwrap_or(0),
                    bytes(c["bytes_allocated"].as_u64().unwrap_or(0)),
                    bytes(c["live_bytes"].as_u64().unwrap_or(0)),
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
    }
    if reports.len() > 1 {
        let _ = writeln!(s, "\n({} more processes reported; --json shows them all)", reports.len() - 1);
    }
    emit(&s)
}
