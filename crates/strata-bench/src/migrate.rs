//! `strata bench migrate`: what moving a program's pages costs the program, by mechanism
//! (issue #23's targets).
//!
//! A program under Strata (this binary's hidden `migrate-workload`, preloaded with
//! libstrata.so) reads and writes random pages of a buffer, timing every access into a
//! histogram; each thread owns one word of every page and checks, at every access and at the
//! end, that the word holds what it last wrote there (`lost_writes`: any that does not). The
//! benchmark (standing in for the daemon) first lets it run unmoved (the baseline), then moves
//! every page of the buffer to the slow node and back, pass after pass, while it runs:
//!
//! - **`move_pages`**: move_pages(2) on the program's pages, as the daemon does by default;
//!   an access to a page being moved waits for the kernel's copy;
//! - **`transactional`**: through the program's agent (libstrata/agent/), which copies while the
//!   page stays in use and commits only if it was not written meanwhile; promotions keep a
//!   shadow, clean demotions remap it.
//!
//! The stall per migrated page is the extra time the program's accesses took while pages moved
//! (their total time less as many accesses at the baseline's mean), divided by the pages moved.
//! With `--cpus isolated` (the default) the program's access threads run on CPUs of their own
//! (thread t on CPU t) and everything else (this process, which moves with move_pages(2), and
//! the program's other threads, its agent among them) on the remaining CPUs, as the kernel's
//! migration work runs beside a program on a machine with cores to spare: the stall is then
//! what the accesses wait for moves, not CPU time the mover takes from them. `--cpus shared`
//! lets the scheduler place every thread.
//! Each run has its own baseline, measured just before, in the same process. The `writer`
//! program writes at every access, the `reader` at one in 64. Needs two NUMA nodes: `--vm`
//! runs it in the two-tier guest on Debian's 6.12 kernel (UFFDIO_MOVE needs Linux 6.8), where
//! times are emulated (TCG) and only ratios between the mechanisms mean anything.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use strata_daemon::agent::{Agent, AgentCounters};
use strata_util::size::{format as bytes, parse as parse_size};
use strata_util::{find_built, Owned, Progress, XorShift};

use crate::{ensure, failed, Error};

const PAGE: usize = 4096;
const WORDS: usize = PAGE / 8;
/// pages per request, the agent's most (STRATA_AGENT_MAX_PAGES), and move_pages' too
const CHUNK: usize = 512;

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// The program's buffer, whose every page moves each pass
    #[arg(long, default_value = "32M")]
    pub bytes: String,
    /// Programs: writer (every access writes), reader (one access in 64 writes)
    #[arg(long, value_delimiter = ',', default_value = "writer,reader")]
    pub programs: Vec<String>,
    /// Mechanisms, each a run of its own per program
    #[arg(long, value_delimiter = ',', default_value = "move_pages,transactional")]
    pub mechanisms: Vec<String>,
    /// The program's threads
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seconds of the baseline (no moves) before each run's moves
    #[arg(long, default_value_t = 3.0)]
    pub baseline_secs: f64,
    /// Seconds of moves per run (at most)
    #[arg(long, default_value_t = 20.0)]
    pub secs: f64,
    /// Stop a run's moves once this many pages have moved (0: --secs only)
    #[arg(long, default_value_t = 0)]
    pub migrations: u64,
    /// transactional: copies tried per page and request before it is given up (1-64)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=strata_sys::STRATA_AGENT_MAX_ATTEMPTS as i64))]
    pub attempts: u32,
    /// Run in the two-tier QEMU guest (booting the kernel of --kernel)
    #[arg(long)]
    pub vm: bool,
    /// --vm: the guest's kernel (a Debian version fetched once, or a vmlinuz file)
    #[arg(long, default_value = "6.12")]
    pub kernel: String,
    /// isolated: the program's access threads on CPUs of their own, the mover (and the
    /// agent) on the others (needs more CPUs than --threads); shared: anywhere
    #[arg(long, default_value = "isolated", value_parser = ["isolated", "shared"])]
    pub cpus: String,
}

/// Accesses of one phase, as the program timed them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Phase {
    pub accesses: u64,
    pub secs: f64,
    pub sum_ns: u64,
    pub mean_ns: f64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Phase {
    fn per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.accesses as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// What the program reports when told to stop.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadResult {
    /// the baseline (0) and the phase with moves (1)
    pub phases: Vec<Phase>,
    /// reads that found a word other than its thread last wrote, and words wrong at the end
    pub lost_writes: u64,
    pub words_checked: u64,
    /// the CPUs each access thread was allowed, as it ended
    #[serde(default)]
    pub access_cpus: Vec<Vec<usize>>,
}

/// One program under one mechanism.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub program: String,
    pub mechanism: String,
    pub buffer_bytes: u64,
    /// passes over the buffer (every page to the other node)
    pub passes: u64,
    /// pages that reached the node asked for
    pub pages_moved: u64,
    /// pages given up: written while copied on every attempt (transactional) or refused
    pub pages_not_moved: u64,
    pub moves_per_s: f64,
    /// transactional: the agent's counters over the run
    pub agent: Option<AgentCounters>,
    pub baseline: Phase,
    pub migrating: Phase,
    /// the program's extra access time per page moved, µs
    pub stall_us_per_page: f64,
    /// the program's accesses per second while moving, over the baseline's
    pub throughput_ratio: f64,
    pub lost_writes: u64,
    pub words_checked: u64,
    /// the CPUs the program's access threads, and its agent thread, were allowed
    #[serde(default)]
    pub access_cpus: Vec<Vec<usize>>,
    #[serde(default)]
    pub agent_cpus: Option<String>,
    /// TLB shootdowns the access threads' CPUs received while pages moved, per page moved
    /// (x86's /proc/interrupts; None elsewhere)
    #[serde(default)]
    pub tlb_shootdowns_per_page: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// where it ran: "native" or the guest's kernel (emulated: TCG)
    pub machine: String,
    pub threads: usize,
    /// isolated (access threads on CPUs of their own) or shared (--cpus)
    #[serde(default = "shared")]
    pub cpus: String,
    pub rows: Vec<Row>,
    /// per program: transactional's stall per page over move_pages' (the target: at most 0.1)
    pub stall_ratio: Vec<(String, f64)>,
}

impl Report {
    /// The benchmark's name in results files: migrate, or migrate-cpus-shared (--cpus shared).
    pub fn benchmark(&self) -> String {
        if self.cpus == "shared" {
            "migrate-cpus-shared".into()
        } else {
            "migrate".into()
        }
    }

    pub fn table(&self) -> String {
        let buffer = self.rows.first().map_or(0, |r| r.buffer_bytes);
        let mut s = format!(
            "Every page of a program's {} buffer moved between the tiers, back and forth, while it runs \
             ({}, {} thread(s), CPUs {})\n\n",
            bytes(buffer),
            self.machine,
            self.threads,
            self.cpus
        );
        s += &format!(
            "{:<7} {:<14} {:>9} {:>9} {:>8} {:>8} {:>9} {:>12} {:>11} {:>17} {:>6} {:>10}\n",
            "program",
            "mechanism",
            "moved",
            "moves/s",
            "aborts",
            "no-copy",
            "given up",
            "stall/page",
            "throughput",
            "p99/p99.9 (µs)",
            "lost",
            "TLB/page"
        );
        for r in &self.rows {
            let (aborts, nocopy) =
                r.agent.map_or(("-".into(), "-".into()), |a| (a.aborts.to_string(), a.shadow_demotions.to_string()));
            s += &format!(
                "{:<7} {:<14} {:>9} {:>9.0} {:>8} {:>8} {:>9} {:>9.2} µs {:>9.0} % {:>17} {:>6} {:>10}\n",
                r.program,
                r.mechanism,
                r.pages_moved,
                r.moves_per_s,
                aborts,
                nocopy,
                r.pages_not_moved,
                r.stall_us_per_page,
                r.throughput_ratio * 100.0,
                format!(
                    "{:.1}/{:.1} ({:.1}/{:.1})",
                    r.migrating.p99_ns as f64 / 1e3,
                    r.migrating.p999_ns as f64 / 1e3,
                    r.baseline.p99_ns as f64 / 1e3,
                    r.baseline.p999_ns as f64 / 1e3
                ),
                r.lost_writes,
                r.tlb_shootdowns_per_page.map_or("-".into(), |t| format!("{t:.2}"))
            );
        }
        for (program, ratio) in &self.stall_ratio {
            s += &format!("\n{program}: transactional's stall per page is {ratio:.3} of move_pages'");
        }
        s += "\n(stall/page: the program's extra access time per page moved; throughput: its accesses per \
              second while pages move, of its baseline's; p99/p99.9: its access times while pages move (and \
              in its baseline); no-copy: demotions by remapping a shadow; TLB/page: TLB shootdowns the access \
              threads' CPUs took per page moved)\n";
        s
    }
}

// ---- the program --------------------------------------------------------------------------

/// The program (`strata bench migrate-workload`): a buffer of `bytes`, `threads` threads
/// reading and checking a word of random pages, writing it at one access in `write_every`.
/// Prints `ready ADDR PAGES` (the first whole page and how many), then reads commands from
/// stdin: `phase N` starts timing into phase N, `stop` ends it and prints the result as JSON.
pub fn workload(bytes: u64, threads: usize, write_every: u64, pin: bool) -> Result<(), Error> {
    ensure((1..=WORDS).contains(&threads), || format!("--threads: 1 to {WORDS}"))?;
    ensure(write_every >= 1, || "--write-every: at least 1".into())?;
    let words = bytes as usize / 8 + WORDS;
    let buf: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
    let base = buf.as_ptr() as usize;
    let first = (base + PAGE - 1) & !(PAGE - 1); // the first whole page
    let skip = (first - base) / 8;
    let pages = (words - skip) / WORDS;
    ensure(pages > 0, || "--bytes: at least one page".into())?;
    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..threads {
        let (buf, phase, stop) = (Arc::clone(&buf), Arc::clone(&phase), Arc::clone(&stop));
        let h = std::thread::Builder::new()
            .name(format!("access-{t}"))
            .spawn(move || {
                if pin {
                    set_cpus(&[t]).map_err(|e| failed(format!("pinning access thread {t} to CPU {t}: {e}")))?;
                }
                let a = access_loop(&buf, skip, pages, t, write_every, &phase, &stop);
                Ok::<_, Error>((a, cpus_now().unwrap_or_default()))
            })
            .map_err(|e| failed(format!("starting an access thread: {e}")))?;
        handles.push(h);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {first} {pages}");
    let _ = out.flush();
    let mut starts = vec![Instant::now()];
    let mut secs = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| failed(format!("stdin: {e}")))?;
        if let Some(n) = line.strip_prefix("phase ") {
            let n: usize = n.trim().parse().map_err(|_| failed(format!("bad command: {line}")))?;
            secs.push(starts.last().expect("one").elapsed().as_secs_f64());
            starts.push(Instant::now());
            phase.store(n, Ordering::Relaxed);
        } else if line.trim() == "stop" {
            break;
        }
    }
    secs.push(starts.last().expect("one").elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let mut hists: Vec<Histogram<u64>> = Vec::new();
    let mut sums: Vec<u64> = Vec::new();
    let (mut lost, mut last) = (0u64, vec![vec![0u64; pages]; threads]);
    let mut access_cpus = Vec::new();
    for (t, h) in handles.into_iter().enumerate() {
        let (r, cpus) = h.join().map_err(|_| failed("a thread of the program panicked"))??;
        access_cpus.push(cpus);
        for (i, (hist, sum)) in r.hists.into_iter().zip(r.sums).enumerate() {
            if hists.len() <= i {
                hists.push(new_histogram());
                sums.push(0);
            }
            hists[i].add(&hist).map_err(|e| failed(e.to_string()))?;
            sums[i] += sum;
        }
        lost += r.lost;
        last[t] = r.last;
    }
    // every word as its thread last wrote it, and every other word untouched
    let mut checked = 0u64;
    for p in 0..pages {
        for w in 0..WORDS {
            let want = if w < threads { last[w][p] } else { 0 };
            lost += u64::from(buf[skip + p * WORDS + w].load(Ordering::Relaxed) != want);
            checked += 1;
        }
    }
    let phases = hists
        .iter()
        .zip(&sums)
        .enumerate()
        .map(|(i, (h, &sum))| Phase {
            accesses: h.len(),
            secs: secs.get(i).copied().unwrap_or(0.0),
            sum_ns: sum,
            mean_ns: if h.is_empty() { 0.0 } else { sum as f64 / h.len() as f64 },
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        })
        .collect();
    let r = WorkloadResult { phases, lost_writes: lost, words_checked: checked, access_cpus };
    let _ = writeln!(out, "{}", serde_json::to_string(&r).map_err(|e| failed(e.to_string()))?);
    Ok(())
}

/// Run the calling thread on these CPUs only (threads it starts inherit them).
fn set_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a cpu_set_t is plain data, filled by the libc helpers, and read by the kernel
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The calling thread's CPUs.
fn cpus_now() -> std::io::Result<Vec<usize>> {
    // SAFETY: as in set_cpus
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One thread's accesses: per phase, a histogram and the sum of its times (ns).
struct Accesses {
    hists: Vec<Histogram<u64>>,
    sums: Vec<u64>,
    lost: u64,
    /// what it last wrote in its word of each page
    last: Vec<u64>,
}

fn access_loop(
    buf: &[AtomicU64],
    skip: usize,
    pages: usize,
    t: usize,
    write_every: u64,
    phase: &AtomicUsize,
    stop: &AtomicBool,
) -> Accesses {
    let mut a =
        Accesses { hists: vec![new_histogram(), new_histogram()], sums: vec![0, 0], lost: 0, last: vec![0; pages] };
    let mut x = XorShift::new(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let p = x.below(pages as u64) as usize;
        let word = &buf[skip + p * WORDS + t];
        n += 1;
        let write = n.is_multiple_of(write_every);
        let start = Instant::now();
        let v = word.load(Ordering::Relaxed);
        if write {
            word.store(v + 1, Ordering::Relaxed);
        }
        let ns = start.elapsed().as_nanos() as u64;
        if v != a.last[p] {
            a.lost += 1;
        }
        if write {
            a.last[p] = v + 1;
        }
        let ph = phase.load(Ordering::Relaxed).min(1);
        let _ = a.hists[ph].record(ns.max(1));
        a.sums[ph] += ns;
    }
    a
}

// ---- the mover ----------------------------------------------------------------------------

enum PageMover {
    MovePages(u32),
    Agent(Box<Agent>),
}

impl PageMover {
    /// Move `pages` to `node`; how many got there.
    fn pass(&mut self, pages: &[u64], node: u8, attempts: u32) -> Result<(u64, u64), Error> {
        let (mut moved, mut not) = (0, 0);
        for chunk in pages.chunks(CHUNK) {
            let status = match self {
                PageMover::MovePages(pid) => move_pages(*pid, chunk, node)?,
                PageMover::Agent(a) => {
                    a.move_pages(chunk, node, attempts, false).map_err(|e| failed(format!("the agent: {e}")))?
                }
            };
            for s in status {
                if s == i32::from(node) {
                    moved += 1;
                } else {
                    not += 1;
                }
            }
        }
        Ok((moved, not))
    }
}

/// move_pages(2) on the program's pages, as the daemon does ([`strata_daemon::migrate`]).
fn move_pages(pid: u32, pages: &[u64], node: u8) -> Result<Vec<i32>, Error> {
    let nodes = vec![libc::c_int::from(node); pages.len()];
    strata_daemon::migrate::move_pages(pid, pages, Some(&nodes))
        .map_err(|e| failed(format!("move_pages({pid}): {}", std::io::Error::from_raw_os_error(e))))
}

/// The fastest and the slowest node here.
fn fast_and_slow() -> Result<(u8, u8), Error> {
    let topo = strata_topo::discover_at(Path::new("/sys"), std::env::var("STRATA_TIERS").ok().as_deref())
        .map_err(|e| failed(format!("the topology: {e}")))?;
    let node_of = |tier: u32| topo.nodes.iter().filter(|n| n.tier == tier).map(|n| n.id).min();
    let last = topo.nodes.iter().map(|n| n.tier).max().unwrap_or(0);
    match (node_of(0), node_of(last)) {
        (Some(f), Some(s)) if last > 0 => Ok((f as u8, s as u8)),
        _ => Err(failed("this machine has one tier: pages have nowhere to move (--vm runs in the two-tier guest)")),
    }
}

fn me() -> Result<std::path::PathBuf, Error> {
    std::env::current_exe().map_err(|e| failed(format!("this program's path: {e}")))
}

/// One program under one mechanism.
fn run_one(
    a: &Options,
    program: &str,
    mechanism: &str,
    lib: &Path,
    nodes: (u8, u8),
    p: &Progress,
) -> Result<Row, Error> {
    let size = parse_size(&a.bytes).map_err(|e| Error::Invalid(format!("--bytes: {e}")))?;
    let write_every = if program == "writer" { 1 } else { 64 };
    let dir = std::env::temp_dir().join(format!("strata-bench-migrate-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let socket = dir.join("sock");
    let _ = std::fs::remove_file(&socket);
    // the program's hello comes here; only the transactional run answers it
    let listener = (mechanism == "transactional")
        .then(|| UnixListener::bind(&socket).map_err(|e| failed(format!("{}: {e}", socket.display()))))
        .transpose()?;
    let mut child = Owned::spawn(
        Command::new(me()?)
            .args(["bench", "migrate-workload", "--bytes", &size.to_string(), "--threads", &a.threads.to_string()])
            .args(["--write-every", &write_every.to_string()])
            .args(if a.cpus == "isolated" { &["--pin"][..] } else { &[] })
            .env("LD_PRELOAD", lib)
            .env("STRATA_DAEMON_SOCKET", &socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    )
    .map_err(|e| failed(format!("starting the program: {e}")))?;
    let pid = child.0.id();
    let mut stdin: ChildStdin = child.0.stdin.take().expect("piped");
    let mut stdout = BufReader::new(child.0.stdout.take().expect("piped"));
    let mut mover = match listener {
        None => PageMover::MovePages(pid),
        Some(l) => PageMover::Agent(Box::new(accept_agent(&l, pid)?)),
    };
    let mut ready = String::new();
    stdout.read_line(&mut ready).map_err(|e| failed(e.to_string()))?;
    let f: Vec<u64> = ready.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    ensure(ready.starts_with("ready") && f.len() == 2, || format!("the program did not start: {ready}"))?;
    let pages: Vec<u64> = (0..f[1]).map(|i| f[0] + i * PAGE as u64).collect();
    p.say(&format!("{program}, {mechanism}: baseline, {} s", a.baseline_secs));
    std::thread::sleep(Duration::from_secs_f64(a.baseline_secs));
    let before = if let PageMover::Agent(ag) = &mut mover {
        ag.drop_shadows(0).map_err(|e| failed(format!("the agent: {e}")))?; // and its counters
        Some(ag.counters)
    } else {
        None
    };
    let shootdowns_before = tlb_shootdowns();
    command(&mut stdin, "phase 1")?;
    let (fast, slow) = nodes;
    let start = Instant::now();
    let (mut passes, mut moved, mut not) = (0u64, 0u64, 0u64);
    while start.elapsed().as_secs_f64() < a.secs && (a.migrations == 0 || moved < a.migrations) {
        let to = if passes % 2 == 0 { slow } else { fast };
        let (m, n) = mover.pass(&pages, to, a.attempts)?;
        (moved, not, passes) = (moved + m, not + n, passes + 1);
    }
    let secs = start.elapsed().as_secs_f64();
    let shootdowns = tlb_shootdowns().zip(shootdowns_before).map(|(now, then)| {
        // the CPUs the access threads had (all of them, shared)
        let cpus: Vec<usize> = if a.cpus == "isolated" { (0..a.threads).collect() } else { (0..now.len()).collect() };
        cpus.iter().map(|&c| now.get(c).copied().unwrap_or(0) - then.get(c).copied().unwrap_or(0)).sum::<u64>()
    });
    let agent_cpus = agent_cpus(pid);
    command(&mut stdin, "stop")?;
    let result = read_result(&mut stdout)?;
    let agent = match (&mover, before) {
        (PageMover::Agent(ag), Some(b)) => Some(counters_since(ag.counters, b)),
        _ => None,
    };
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    ensure(result.phases.len() == 2, || "the program reported no phase with moves".into())?;
    let (baseline, migrating) = (result.phases[0].clone(), result.phases[1].clone());
    let extra_ns = migrating.sum_ns as f64 - migrating.accesses as f64 * baseline.mean_ns;
    let row = Row {
        program: program.into(),
        mechanism: mechanism.into(),
        buffer_bytes: pages.len() as u64 * PAGE as u64,
        passes,
        pages_moved: moved,
        pages_not_moved: not,
        moves_per_s: moved as f64 / secs,
        agent,
        stall_us_per_page: if moved > 0 { extra_ns.max(0.0) / moved as f64 / 1e3 } else { 0.0 },
        throughput_ratio: if baseline.per_s() > 0.0 { migrating.per_s() / baseline.per_s() } else { 0.0 },
        baseline,
        migrating,
        lost_writes: result.lost_writes,
        words_checked: result.words_checked,
        access_cpus: result.access_cpus,
        agent_cpus,
        tlb_shootdowns_per_page: shootdowns.map(|n| if moved > 0 { n as f64 / moved as f64 } else { 0.0 }),
    };
    p.say(&format!(
        "{program}, {mechanism}: {} pages moved in {passes} passes, {:.2} µs stall a page, {} lost writes",
        row.pages_moved, row.stall_us_per_page, row.lost_writes
    ));
    Ok(row)
}

/// TLB shootdowns received so far, per CPU (x86: the `TLB:` line of /proc/interrupts).
fn tlb_shootdowns() -> Option<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    let line = text.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
    Some(line.split_whitespace().skip(1).map_while(|w| w.parse().ok()).collect())
}

/// The CPUs the program's agent thread may run on (its Cpus_allowed_list), if it has one.
fn agent_cpus(pid: u32) -> Option<String> {
    std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() != "strata-agent" {
            return None;
        }
        let status = std::fs::read_to_string(t.path().join("status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
    })
}

/// The program's hello, answered as a daemon that wants its agent does.
fn accept_agent(l: &UnixListener, pid: u32) -> Result<Agent, Error> {
    l.set_nonblocking(true).map_err(|e| failed(e.to_string()))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(failed(format!("no hello from the program {pid}: {e}"))),
        }
    };
    stream.set_nonblocking(false).map_err(|e| failed(e.to_string()))?;
    let mut hello = String::new();
    BufReader::new(stream.try_clone().map_err(|e| failed(e.to_string()))?)
        .read_line(&mut hello)
        .map_err(|e| failed(e.to_string()))?;
    ensure(hello.contains("\"agent\":true"), || {
        format!(
            "the program offers no agent (it needs Linux 6.8+ and a full userfaultfd: `strata daemon --probe` \
             says why): {}",
            hello.trim()
        )
    })?;
    (&stream).write_all(b"{\"agent\":true}\n").map_err(|e| failed(e.to_string()))?;
    let deadline = stratad::config::MoverConfig::default().agent_deadline_ms;
    Ok(Agent::new(stream, std::time::Duration::from_millis(deadline)))
}

fn command(stdin: &mut ChildStdin, c: &str) -> Result<(), Error> {
    writeln!(stdin, "{c}").and_then(|_| stdin.flush()).map_err(|e| failed(format!("the program: {e}")))
}

fn read_result(stdout: &mut BufReader<ChildStdout>) -> Result<WorkloadResult, Error> {
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|e| failed(e.to_string()))?;
    serde_json::from_str(&line).map_err(|e| failed(format!("the program's result ({e}): {line}")))
}

fn counters_since(now: AgentCounters, then: AgentCounters) -> AgentCounters {
    AgentCounters {
        commits: now.commits - then.commits,
        aborts: now.aborts - then.aborts,
        shadow_demotions: now.shadow_demotions - then.shadow_demotions,
        shadows_stale: now.shadows_stale - then.shadows_stale,
        shadows_dropped: now.shadows_dropped - then.shadows_dropped,
        shadows: now.shadows,
        fallbacks: now.fallbacks - then.fallbacks,
        samples: now.samples - then.samples,
        samples_touched: now.samples_touched - then.samples_touched,
    }
}

/// Per program, transactional's stall per page over move_pages'.
fn stall_ratios(rows: &[Row]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.mechanism == "transactional") {
        let base = rows.iter().find(|b| b.program == r.program && b.mechanism == "move_pages");
        if let Some(b) = base.filter(|b| b.stall_us_per_page > 0.0) {
            out.push((r.program.clone(), r.stall_us_per_page / b.stall_us_per_page));
        }
    }
    out
}

/// The same benchmark in the two-tier guest: its report, as the guest's run printed it.
fn in_guest(a: &Options, lib: &Path, p: &Progress) -> Result<Report, Error> {
    let l = lib.to_str().ok_or_else(|| failed("libstrata.so's path is not UTF-8"))?;
    let mut inner = vec![
        "env".to_string(),
        format!("STRATA_LIB={l}"),
        "strata".into(),
        "bench".into(),
        "migrate".into(),
        "--json".into(),
    ];
    inner.extend(
        [
            ("--bytes", a.bytes.clone()),
            ("--programs", a.programs.join(",")),
            ("--mechanisms", a.mechanisms.join(",")),
            ("--threads", a.threads.to_string()),
            ("--baseline-secs", a.baseline_secs.to_string()),
            ("--secs", a.secs.to_string()),
            ("--migrations", a.migrations.to_string()),
            ("--attempts", a.attempts.to_string()),
            ("--cpus", a.cpus.clone()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v]),
    );
    let runs = (a.programs.len() * a.mechanisms.len()) as f64;
    let timeout = (runs * (a.baseline_secs + a.secs + 30.0) + 300.0) as u64;
    p.say(&format!("guest (kernel {}): {} runs, up to {timeout} s", a.kernel, runs));
    let mut guest = Command::new(me()?);
    guest.args(["vm", "run", "--kernel", &a.kernel, "--timeout", &timeout.to_string(), "--file", l, "--"]);
    let out = strata_util::dies_with_parent(guest.args(&inner).stderr(Stdio::inherit()))
        .output()
        .map_err(|e| failed(format!("strata vm run: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure(out.status.success(), || format!("the guest run failed: {text}"))?;
    let json =
        text.find("{\n").map(|i| &text[i..]).ok_or_else(|| failed(format!("no report from the guest: {text}")))?;
    let end = json.rfind('}').map_or(json.len(), |i| i + 1);
    let mut r: Report =
        serde_json::from_str(&json[..end]).map_err(|e| failed(format!("the guest's report ({e}): {text}")))?;
    r.machine = format!("two-tier guest, Linux {} (emulated: TCG)", a.kernel);
    Ok(r)
}

pub fn run(a: &Options, p: Progress) -> Result<Report, Error> {
    ensure(a.secs > 0.0 && a.baseline_secs > 0.0, || "--secs and --baseline-secs must be positive".into())?;
    for m in &a.mechanisms {
        ensure(m == "move_pages" || m == "transactional", || {
            format!("--mechanisms: {m}? (move_pages, transactional)")
        })?;
    }
    for g in &a.programs {
        ensure(g == "writer" || g == "reader", || format!("--programs: {g}? (writer, reader)"))?;
    }
    parse_size(&a.bytes).map_err(|e| Error::Invalid(format!("--bytes: {e}")))?;
    let lib = find_built("libstrata.so", Some("STRATA_LIB"), "make lib")?;
    if a.vm {
        return in_guest(a, &lib, &p);
    }
    let nodes = fast_and_slow()?;
    // isolated: this thread (and so the program it starts, but for its access threads, which
    // pin themselves) on the CPUs the access threads leave
    let all = cpus_now().map_err(|e| failed(format!("sched_getaffinity: {e}")))?;
    if a.cpus == "isolated" {
        ensure(all.len() > a.threads && all.iter().take(a.threads).copied().eq(0..a.threads), || {
            format!(
                "--cpus isolated puts access thread t on CPU t and the mover on the others: it needs CPUs 0 to {} \
                 and one more, and this process may use {all:?}; try --cpus shared",
                a.threads - 1
            )
        })?;
        set_cpus(&all[a.threads..]).map_err(|e| failed(format!("sched_setaffinity: {e}")))?;
    }
    let rows = (|| {
        let mut rows = Vec::new();
        for program in &a.programs {
            for mechanism in &a.mechanisms {
                rows.push(run_one(a, program, mechanism, &lib, nodes, &p)?);
            }
        }
        Ok::<_, Error>(rows)
    })();
    let _ = set_cpus(&all);
    let rows = rows?;
    Ok(Report {
        machine: "native".into(),
        threads: a.threads,
        cpus: a.cpus.clone(),
        stall_ratio: stall_ratios(&rows),
        rows,
    })
}

fn shared() -> String {
    "shared".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(program: &str, mechanism: &str, stall: f64) -> Row {
        Row {
            program: program.into(),
            mechanism: mechanism.into(),
            buffer_bytes: 0,
            passes: 0,
            pages_moved: 1,
            pages_not_moved: 0,
            moves_per_s: 0.0,
            agent: None,
            baseline: Phase::default(),
            migrating: Phase::default(),
            stall_us_per_page: stall,
            throughput_ratio: 1.0,
            lost_writes: 0,
            words_checked: 0,
            access_cpus: Vec::new(),
            agent_cpus: None,
            tlb_shootdowns_per_page: None,
        }
    }

    #[test]
    fn the_stall_ratio_is_transactional_over_move_pages_per_program() {
        let rows = [
            row("writer", "move_pages", 10.0),
            row("writer", "transactional", 1.0),
            row("reader", "transactional", 2.0), // no move_pages row: no ratio
        ];
        assert_eq!(stall_ratios(&rows), vec![("writer".to_string(), 0.1)]);
    }
}
