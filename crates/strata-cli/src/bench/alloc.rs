//! `strata bench alloc`: allocation throughput of libstrata next to other allocators, in one
//! run, plus the whole-program cost of transparent mode.
//!
//! Allocators (each called through a function pointer, so all pay the same indirect call):
//!   strata              strata_malloc / strata_free (explicit API, default placement)
//!   strata-preload      malloc / free under LD_PRELOAD=libstrata.so, contexts off: the
//!                       allocator of transparent mode alone
//!   strata-preload-ctx  the same with allocation contexts on (capture, tags, counters)
//!   glibc               the system malloc
//!   jemalloc            Debian's libjemalloc2, preloaded (it cannot be dlopen'ed: static TLS)
//!   mimalloc            Debian's libmimalloc2.0, preloaded
//! Preloaded allocators are measured by re-running this benchmark as a child with LD_PRELOAD
//! set; the child times only the benchmark loop, like the in-process ones.
//! Benchmarks (malloc+free pairs per second of wall time):
//!   small-1t   one thread: batches of 64 objects of 16..512 bytes, freed out of order
//!   small-2t   two threads doing small-1t at once
//!   prodcons   one thread allocates, the other frees (every free is cross-thread)
//!   mixed-1t   one thread, sizes 16 B..64 KiB (log-uniform), batches of 16
//! The allocators take turns round by round; the table shows medians and ratios to glibc.
//! `--program` also runs a real allocation-heavy program (perl building a large hash) plain,
//! under Strata without contexts, and with contexts: wall time (noisy here: +-20 % between
//! identical runs), and instructions counted by valgrind's callgrind (repeatable), which is
//! the figure the context-tracking overhead is judged by.
use std::collections::BTreeMap;
use std::ffi::{c_void, CString};

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use strata_sys as sys;

use super::median;
use crate::output::{emit, emit_json, progress};

#[derive(clap::Args)]
pub struct Args {
    /// malloc+free pairs per benchmark run, per thread
    #[arg(long, default_value_t = 2_000_000)]
    ops: usize,
    /// Rounds; each allocator runs each benchmark once per round
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Only these benchmarks (comma separated): small-1t, small-2t, prodcons, mixed-1t
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only these allocators (comma separated): strata, strata-preload, glibc, jemalloc, mimalloc
    #[arg(long, value_delimiter = ',')]
    allocators: Vec<String>,
    /// Also time a real program (perl) plain and under transparent mode, contexts off and on
    #[arg(long)]
    program: bool,
    /// Print JSON: {results: [{allocator, benchmark, ops_per_sec, threads}], ratios, program}
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr
    #[arg(long, short)]
    quiet: bool,
    /// Internal: measure the system malloc once and print its rate (the preloaded child)
    #[arg(long, hide = true)]
    child_rate: Option<String>,
}

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);

#[derive(Clone, Copy)]
struct Allocator {
    malloc: MallocFn,
    free: FreeFn,
}

unsafe extern "C" fn strata_default_malloc(n: usize) -> *mut c_void {
    sys::strata_malloc(n, sys::strata_place_t::new(sys::STRATA_PLACE_DEFAULT))
}

fn glibc() -> Allocator {
    Allocator { malloc: libc::malloc, free: libc::free }
}

/// A system shared library by its soname, if the dynamic loader can find it.
fn system_lib(soname: &str) -> Option<std::path::PathBuf> {
    let c = CString::new(soname).ok()?;
    // RTLD_NOLOAD would miss it; load and close just to learn the path
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    let found = !h.is_null();
    if found {
        unsafe { libc::dlclose(h) };
    }
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| std::path::Path::new(d).join(soname))
        .find(|p| p.exists())
        .or_else(|| found.then(|| soname.into()))
}

fn sizes(seed: u64, n: usize, min_log: u32, max_log: u32) -> Vec<usize> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let lg = min_log + (s % (max_log - min_log + 1) as u64) as u32;
            let base = 1usize << lg;
            base + (s >> 20) as usize % base
        })
        .collect()
}

/// Batches of `batch` allocations, each touched, then freed in a scrambled order.
fn churn(a: Allocator, ops: usize, batch: usize, sz: &[usize]) {
    let mut live = vec![std::ptr::null_mut::<c_void>(); batch];
    let mut k = 0;
    for _ in 0..ops / batch {
        for slot in live.iter_mut() {
            let p = unsafe { (a.malloc)(sz[k % sz.len()]) };
            assert!(!p.is_null(), "malloc failed");
            unsafe { (p as *mut u8).write(k as u8) };
            *slot = p;
            k += 1;
        }
        for i in 0..batch {
            unsafe { (a.free)(live[(i * 7 + 3) % batch]) }; // 7 is coprime with the batch sizes
        }
    }
}

fn small_1t(a: Allocator, ops: usize) -> f64 {
    let sz = sizes(1, 4096, 4, 8);
    let t = Instant::now();
    churn(a, ops, 64, &sz);
    ops as f64 / t.elapsed().as_secs_f64()
}

fn mixed_1t(a: Allocator, ops: usize) -> f64 {
    let sz = sizes(2, 4096, 4, 15);
    let t = Instant::now();
    churn(a, ops, 16, &sz);
    ops as f64 / t.elapsed().as_secs_f64()
}

fn small_2t(a: Allocator, ops: usize) -> f64 {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let sz = sizes(10 + i, 4096, 4, 8);
                churn(a, ops, 64, &sz)
            })
        })
        .collect();
    for h in hs {
        h.join().expect("benchmark thread");
    }
    (2 * ops) as f64 / t.elapsed().as_secs_f64()
}

/// Single-producer single-consumer ring of pointers.
struct Ring {
    slots: Vec<AtomicUsize>,
    head: AtomicUsize,
    tail: AtomicUsize,
    done: AtomicBool,
}

fn prodcons(a: Allocator, ops: usize) -> f64 {
    const N: usize = 4096;
    let ring = Arc::new(Ring {
        slots: (0..N).map(|_| AtomicUsize::new(0)).collect(),
        head: AtomicUsize::new(0),
        tail: AtomicUsize::new(0),
        done: AtomicBool::new(false),
    });
    let t = Instant::now();
    let r2 = ring.clone();
    let consumer = std::thread::spawn(move || {
        let mut head = 0;
        loop {
            let tail = r2.tail.load(Ordering::Acquire);
            if head == tail {
                if r2.done.load(Ordering::Acquire) && head == r2.tail.load(Ordering::Acquire) {
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            while head != tail {
                unsafe { (a.free)(r2.slots[head % N].load(Ordering::Relaxed) as *mut c_void) };
                head += 1;
            }
            r2.head.store(head, Ordering::Release);
        }
    });
    let sz = sizes(3, 4096, 4, 8);
    let mut tail = 0;
    for k in 0..ops {
        while tail - ring.head.load(Ordering::Acquire) == N {
            std::hint::spin_loop();
        }
        let p = unsafe { (a.malloc)(sz[k % sz.len()]) };
        assert!(!p.is_null(), "malloc failed");
        unsafe { (p as *mut u8).write(k as u8) };
        ring.slots[tail % N].store(p as usize, Ordering::Relaxed);
        tail += 1;
        ring.tail.store(tail, Ordering::Release);
    }
    ring.done.store(true, Ordering::Release);
    consumer.join().expect("consumer thread");
    ops as f64 / t.elapsed().as_secs_f64()
}

const BENCHES: &[(&str, usize, fn(Allocator, usize) -> f64)] =
    &[("small-1t", 1, small_1t), ("small-2t", 2, small_2t), ("prodcons", 2, prodcons), ("mixed-1t", 1, mixed_1t)];

const ALLOCATORS: &[&str] = &["strata", "strata-preload", "strata-preload-ctx", "glibc", "jemalloc", "mimalloc"];

/// How to measure one allocator: in this process, or in a child with a library preloaded.
enum Runner {
    Here(Allocator),
    Preloaded(std::path::PathBuf, Vec<(&'static str, &'static str)>),
}

impl Runner {
    fn measure(&self, bench: &str, f: fn(Allocator, usize) -> f64, ops: usize) -> anyhow::Result<f64> {
        match self {
            Runner::Here(a) => Ok(f(*a, ops)),
            Runner::Preloaded(lib, env) => {
                let out = Command::new(std::env::current_exe()?)
                    .args(["bench", "alloc", "--child-rate", bench, "--ops", &ops.to_string()])
                    .env("LD_PRELOAD", lib)
                    .envs(env.iter().copied())
                    .output()
                    .context("running the preloaded benchmark child")?;
                anyhow::ensure!(out.status.success(), "preloaded child failed: {}", String::from_utf8_lossy(&out.stderr));
                Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
            }
        }
    }
}

#[derive(Serialize)]
struct Row {
    allocator: String,
    benchmark: &'static str,
    threads: usize,
    ops_per_sec: f64,
    rounds: usize,
}

#[derive(Serialize)]
struct ProgramResult {
    command: String,
    rounds: usize,
    /// median wall seconds per configuration (noisy on shared machines)
    seconds: BTreeMap<&'static str, f64>,
    /// instructions per configuration, counted by callgrind on a smaller run (repeatable);
    /// empty when valgrind is not installed
    instructions: BTreeMap<&'static str, u64>,
    instructions_command: String,
    /// (contexts on) / (contexts off) - 1 in instructions (wall time when no valgrind)
    context_overhead: f64,
    /// (strata, contexts on) / glibc - 1, same measure
    vs_glibc: f64,
}

#[derive(Serialize)]
struct Report {
    machine: &'static str,
    ops_per_run: usize,
    results: Vec<Row>,
    /// allocator ops_per_sec / glibc ops_per_sec, per benchmark then allocator
    ratios: BTreeMap<&'static str, BTreeMap<String, f64>>,
    skipped: Vec<String>,
    program: Option<ProgramResult>,
}

fn perl_program(keys: u32) -> String {
    format!(
        "my %h; for my $i (1..{keys}) {{ $h{{\"k$i\"}} = \"v\" x ($i % 97) }} \
         my $s = 0; $s += length($h{{$_}}) for keys %h; my @a = sort keys %h; print \"$s\\n\""
    )
}

type Env = Vec<(&'static str, String)>;

fn time_program(script: &str, env: &Env) -> anyhow::Result<f64> {
    let t = Instant::now();
    let st = Command::new("perl").args(["-e", script]).envs(env.iter().map(|(k, v)| (k, v))).output().context("running perl")?;
    anyhow::ensure!(st.status.success(), "perl failed: {}", String::from_utf8_lossy(&st.stderr));
    Ok(t.elapsed().as_secs_f64())
}

/// Instructions the program executes, from callgrind; None without valgrind.
fn count_instructions(script: &str, env: &Env) -> anyhow::Result<Option<u64>> {
    let out = match Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null", "perl", "-e", script])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
    {
        Ok(o) => o,
        Err(_) => return Ok(None),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    let n = err
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().replace(',', "").parse().ok());
    anyhow::ensure!(n.is_some(), "callgrind gave no count: {err}");
    Ok(n)
}

fn program(lib: &str, rounds: usize, say: &dyn Fn(&str)) -> anyhow::Result<ProgramResult> {
    let configs: [(&'static str, Env); 3] = [
        ("glibc", vec![]),
        ("strata-contexts-off", vec![("LD_PRELOAD", lib.to_string()), ("STRATA_CONTEXTS", "0".into())]),
        ("strata-contexts-on", vec![("LD_PRELOAD", lib.to_string()), ("STRATA_CONTEXTS", "1".into())]),
    ];
    let big = perl_program(400_000);
    let small = perl_program(60_000);
    let mut times: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for r in 0..rounds {
        say(&format!("program round {}/{}", r + 1, rounds));
        for (name, env) in &configs {
            times.entry(name).or_default().push(time_program(&big, env)?);
        }
    }
    let mut instructions = BTreeMap::new();
    for (name, env) in &configs {
        say(&format!("counting instructions with callgrind: {name}"));
        if let Some(n) = count_instructions(&small, env)? {
            instructions.insert(*name, n);
        }
    }
    let seconds: BTreeMap<&'static str, f64> = times.into_iter().map(|(k, v)| (k, median(v))).collect();
    let measure = |k: &str| instructions.get(k).map(|n| *n as f64).unwrap_or(seconds[k]);
    Ok(ProgramResult {
        command: format!("perl -e '{big}'"),
        rounds,
        context_overhead: measure("strata-contexts-on") / measure("strata-contexts-off") - 1.0,
        vs_glibc: measure("strata-contexts-on") / measure("glibc") - 1.0,
        seconds,
        instructions_command: format!("valgrind --tool=callgrind perl -e '{small}'"),
        instructions,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if let Some(b) = &a.child_rate {
        let (_, _, f) = BENCHES.iter().find(|x| x.0 == b).context("unknown benchmark")?;
        return emit(&format!("{}\n", f(glibc(), a.ops))); // malloc here is the preloaded one
    }
    for o in &a.only {
        anyhow::ensure!(BENCHES.iter().any(|b| b.0 == o), "unknown benchmark '{o}' (see --help)");
    }
    for o in &a.allocators {
        anyhow::ensure!(ALLOCATORS.contains(&o.as_str()), "unknown allocator '{o}' (see --help)");
    }
    anyhow::ensure!(a.ops >= 64 && a.rounds > 0, "--ops must be at least 64 and --rounds positive");
    let say = |m: &str| {
        if !a.quiet {
            progress("alloc", m)
        }
    };
    let wanted = |n: &str| a.allocators.is_empty() || a.allocators.iter().any(|x| x == n) || n == "glibc";
    let mut runners: Vec<(String, Runner)> = Vec::new();
    let mut skipped = Vec::new();
    let lib = crate::run::find_lib(None);
    for name in ALLOCATORS.iter().filter(|n| wanted(n)) {
        let r = match *name {
            "strata" => Some(Runner::Here(Allocator { malloc: strata_default_malloc, free: sys::strata_free })),
            "glibc" => Some(Runner::Here(glibc())),
            "jemalloc" => system_lib("libjemalloc.so.2").map(|l| Runner::Preloaded(l, vec![])),
            "mimalloc" => system_lib("libmimalloc.so.2").map(|l| Runner::Preloaded(l, vec![])),
            "strata-preload" => lib.as_ref().ok().map(|l| Runner::Preloaded(l.clone(), vec![("STRATA_CONTEXTS", "0")])),
            "strata-preload-ctx" => lib.as_ref().ok().map(|l| Runner::Preloaded(l.clone(), vec![("STRATA_CONTEXTS", "1")])),
            _ => None,
        };
        match r {
            Some(r) => runners.push((name.to_string(), r)),
            None => skipped.push(format!("{name}: not available (jemalloc: apt-get install libjemalloc2; mimalloc: libmimalloc2.0; strata-preload: make lib)")),
        }
    }
    for s in &skipped {
        eprintln!("[alloc] skipped {s}");
    }
    let chosen: Vec<_> = BENCHES.iter().filter(|b| a.only.is_empty() || a.only.iter().any(|o| o == b.0)).collect();
    let mut rates: BTreeMap<(&str, String), Vec<f64>> = BTreeMap::new();
    for r in 0..a.rounds {
        say(&format!("round {}/{}", r + 1, a.rounds));
        for b in &chosen {
            // rotate the starting allocator, so none always runs on a warmer machine
            for k in 0..runners.len() {
                let (name, runner) = &runners[(k + r) % runners.len()];
                rates.entry((b.0, name.clone())).or_default().push(runner.measure(b.0, b.2, a.ops)?);
            }
        }
    }
    let mut results = Vec::new();
    let mut ratios: BTreeMap<&'static str, BTreeMap<String, f64>> = BTreeMap::new();
    for b in &chosen {
        let g = median(rates[&(b.0, "glibc".to_string())].clone());
        for (name, _) in &runners {
            let v = median(rates[&(b.0, name.clone())].clone());
            results.push(Row { allocator: name.clone(), benchmark: b.0, threads: b.1, ops_per_sec: v, rounds: a.rounds });
            ratios.entry(b.0).or_default().insert(name.clone(), v / g);
        }
    }
    let program = if a.program {
        let l = lib.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
        Some(program(&l.display().to_string(), a.rounds, &say)?)
    } else {
        None
    };
    let report = Report { machine: "native", ops_per_run: a.ops, results, ratios, skipped, program };
    if a.json {
        return emit_json(&report);
    }
    let mut s = format!("Allocation throughput, M malloc+free pairs per second (native, median of {} rounds; ratio to glibc)\n\n", a.rounds);
    s += &format!("{:<10} {:>3}", "benchmark", "thr");
    for (name, _) in &runners {
        s += &format!(" {:>19}", name);
    }
    s += "\n";
    for b in &chosen {
        s += &format!("{:<10} {:>3}", b.0, b.1);
        for (name, _) in &runners {
            let v = report.results.iter().find(|r| r.benchmark == b.0 && &r.allocator == name).map_or(0.0, |r| r.ops_per_sec);
            s += &format!(" {:>10.1} ({:>5.2}x)", v / 1e6, report.ratios[b.0][name]);
        }
        s += "\n";
    }
    if let Some(p) = &report.program {
        s += &format!(
            "\nWhole program: perl building a 400,000-key hash; wall seconds, median of {} runs (noisy):\n  glibc {:.3}, strata contexts off {:.3}, contexts on {:.3}\n",
            p.rounds, p.seconds["glibc"], p.seconds["strata-contexts-off"], p.seconds["strata-contexts-on"]
        );
        if let (Some(g), Some(off), Some(on)) = (p.instructions.get("glibc"), p.instructions.get("strata-contexts-off"), p.instructions.get("strata-contexts-on")) {
            s += &format!("Instructions (callgrind, 60,000 keys): glibc {g}, strata contexts off {off}, contexts on {on}\n");
        }
        s += &format!(
            "Context tracking costs {:+.1} %; strata with contexts vs glibc {:+.1} % ({})\n",
            p.context_overhead * 100.0,
            p.vs_glibc * 100.0,
            if p.instructions.is_empty() { "wall time: install valgrind for instruction counts" } else { "instructions" }
        );
    }
    emit(&s)
}
