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
//! `--program` also runs real allocation-heavy programs (programs.rs) plain, under Strata
//! without contexts, and with contexts.
use std::collections::BTreeMap;
use std::ffi::{c_void, CString};

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use strata_sys as sys;
use strata_util::{find_built, median, Progress, XorShift};

use strata_util::io;

use crate::programs::{self, ProgramResult};
use crate::{ensure, failed, Error};

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// malloc+free pairs per benchmark run, per thread
    #[arg(long, default_value_t = 2_000_000)]
    pub ops: usize,
    /// Rounds; each allocator runs each benchmark once per round
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Only these benchmarks (comma separated): small-1t, small-2t, prodcons, mixed-1t
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only these allocators (comma separated): strata, strata-preload, strata-preload-ctx,
    /// glibc, jemalloc, mimalloc
    #[arg(long, value_delimiter = ',')]
    pub allocators: Vec<String>,
    /// Also run real programs (perl, python, redis-server under redis-benchmark) plain and under
    /// transparent mode, contexts off and on: wall time and callgrind instruction counts
    #[arg(long)]
    pub program: bool,
    /// Internal: measure the system malloc once and print its rate (the preloaded child)
    #[arg(long, hide = true)]
    pub child_rate: Option<String>,
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

unsafe extern "C" fn strata_free(p: *mut c_void) {
    sys::strata_free(p)
}

fn glibc() -> Allocator {
    Allocator { malloc: libc::malloc, free: libc::free }
}

/// A system shared library by its soname, if the dynamic loader can find it.
pub(crate) fn system_lib(soname: &str) -> Option<std::path::PathBuf> {
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
    let mut x = XorShift::new(seed | 1);
    (0..n)
        .map(|_| {
            let s = x.next_u64();
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

/// A benchmark: its loop, given an allocator and the pairs to run; malloc+free pairs per second.
type Bench = fn(Allocator, usize) -> f64;

/// (name, threads, loop)
const BENCHES: &[(&str, usize, Bench)] =
    &[("small-1t", 1, small_1t), ("small-2t", 2, small_2t), ("prodcons", 2, prodcons), ("mixed-1t", 1, mixed_1t)];

const ALLOCATORS: &[&str] = &["strata", "strata-preload", "strata-preload-ctx", "glibc", "jemalloc", "mimalloc"];

/// How to measure one allocator: in this process, or in a child with a library preloaded.
enum Runner {
    Here(Allocator),
    Preloaded(std::path::PathBuf, Vec<(&'static str, &'static str)>),
}

impl Runner {
    fn measure(&self, bench: &str, f: Bench, ops: usize) -> Result<f64, Error> {
        match self {
            Runner::Here(a) => Ok(f(*a, ops)),
            Runner::Preloaded(lib, env) => {
                let exe = std::env::current_exe().map_err(io("finding this program"))?;
                let mut child = Command::new(exe);
                child.args(["bench", "alloc", "--child-rate", bench, "--ops", &ops.to_string()]);
                let out = strata_util::dies_with_parent(child.env("LD_PRELOAD", lib).envs(env.iter().copied()))
                    .output()
                    .map_err(io("running the preloaded benchmark child"))?;
                if !out.status.success() {
                    return Err(failed(format!("preloaded child failed: {}", String::from_utf8_lossy(&out.stderr))));
                }
                let text = String::from_utf8_lossy(&out.stdout);
                text.trim().parse().map_err(|_| failed(format!("the preloaded child printed '{}'", text.trim())))
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct Row {
    pub allocator: String,
    pub benchmark: String,
    pub threads: usize,
    pub ops_per_sec: f64,
    pub rounds: usize,
}

/// The benchmark's figures (`--json`).
#[derive(Serialize, Deserialize)]
pub struct Report {
    pub machine: String,
    pub ops_per_run: usize,
    pub results: Vec<Row>,
    /// allocator ops_per_sec / glibc ops_per_sec, per benchmark then allocator
    pub ratios: BTreeMap<String, BTreeMap<String, f64>>,
    pub skipped: Vec<String>,
    /// `--program`: whole programs (perl, python, redis) with and without contexts
    #[serde(default)]
    pub programs: Vec<ProgramResult>,
}

/// The preloaded child's measurement: one benchmark with the system malloc, which in the
/// child is the preloaded allocator's.
pub fn child_rate(bench: &str, ops: usize) -> Result<f64, Error> {
    let (_, _, f) =
        BENCHES.iter().find(|x| x.0 == bench).ok_or_else(|| failed(format!("unknown benchmark '{bench}'")))?;
    Ok(f(glibc(), ops))
}

/// Every allocator on every benchmark, rounds taking turns.
pub fn run(a: &Options, progress: Progress) -> Result<Report, Error> {
    for o in &a.only {
        ensure(BENCHES.iter().any(|b| b.0 == o), || format!("unknown benchmark '{o}' (see --help)"))?;
    }
    for o in &a.allocators {
        ensure(ALLOCATORS.contains(&o.as_str()), || format!("unknown allocator '{o}' (see --help)"))?;
    }
    ensure(a.ops >= 64 && a.rounds > 0, || "--ops must be at least 64 and --rounds positive".into())?;
    let say = |m: &str| progress.say(m);
    let wanted = |n: &str| a.allocators.is_empty() || a.allocators.iter().any(|x| x == n) || n == "glibc";
    let mut runners: Vec<(String, Runner)> = Vec::new();
    let mut skipped = Vec::new();
    let lib = find_built("libstrata.so", Some("STRATA_LIB"), "make lib");
    for name in ALLOCATORS.iter().filter(|n| wanted(n)) {
        let r = match *name {
            "strata" => Some(Runner::Here(Allocator { malloc: strata_default_malloc, free: strata_free })),
            "glibc" => Some(Runner::Here(glibc())),
            "jemalloc" => system_lib("libjemalloc.so.2").map(|l| Runner::Preloaded(l, vec![])),
            "mimalloc" => system_lib("libmimalloc.so.2").map(|l| Runner::Preloaded(l, vec![])),
            "strata-preload" => lib.as_ref().ok().map(|l| Runner::Preloaded(l.clone(), vec![("STRATA_CONTEXTS", "0")])),
            "strata-preload-ctx" => {
                lib.as_ref().ok().map(|l| Runner::Preloaded(l.clone(), vec![("STRATA_CONTEXTS", "1")]))
            }
            _ => None,
        };
        match r {
            Some(r) => runners.push((name.to_string(), r)),
            None => skipped.push(format!("{name}: not available (jemalloc: apt-get install libjemalloc2; mimalloc: libmimalloc2.0; strata-preload: make lib)")),
        }
    }
    for s in &skipped {
        progress.say(&format!("skipped {s}"));
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
    let mut ratios: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for b in &chosen {
        let g = median(rates[&(b.0, "glibc".to_string())].clone());
        for (name, _) in &runners {
            let v = median(rates[&(b.0, name.clone())].clone());
            results.push(Row {
                allocator: name.clone(),
                benchmark: b.0.into(),
                threads: b.1,
                ops_per_sec: v,
                rounds: a.rounds,
            });
            ratios.entry(b.0.into()).or_default().insert(name.clone(), v / g);
        }
    }
    let programs = if a.program {
        let (programs, missing) = programs::measure(&lib?.display().to_string(), a.rounds, &say)?;
        skipped.extend(missing);
        programs
    } else {
        Vec::new()
    };
    Ok(Report { machine: "native".into(), ops_per_run: a.ops, results, ratios, skipped, programs })
}

impl Report {
    /// The human table.
    pub fn table(&self) -> String {
        let report = self;
        let mut allocators: Vec<&str> = Vec::new();
        let mut benches: Vec<(&str, usize)> = Vec::new();
        for r in &self.results {
            if !allocators.contains(&r.allocator.as_str()) {
                allocators.push(&r.allocator);
            }
            if !benches.iter().any(|b| b.0 == r.benchmark) {
                benches.push((&r.benchmark, r.threads));
            }
        }
        let rounds = self.results.first().map_or(0, |r| r.rounds);
        let mut s = format!("Allocation throughput, M malloc+free pairs per second (native, median of {rounds} rounds; ratio to glibc)\n\n");
        s += &format!("{:<10} {:>3}", "benchmark", "thr");
        for name in &allocators {
            s += &format!(" {:>19}", name);
        }
        s += "\n";
        for b in &benches {
            s += &format!("{:<10} {:>3}", b.0, b.1);
            for name in &allocators {
                let v = report
                    .results
                    .iter()
                    .find(|r| r.benchmark == b.0 && r.allocator == *name)
                    .map_or(0.0, |r| r.ops_per_sec);
                s += &format!(" {:>10.1} ({:>5.2}x)", v / 1e6, report.ratios[b.0][*name]);
            }
            s += "\n";
        }
        if !report.programs.is_empty() {
            s += &programs::table(&report.programs);
        }
        s
    }
}
