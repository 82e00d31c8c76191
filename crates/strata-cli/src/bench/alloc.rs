//! `strata bench alloc`: allocation throughput of libstrata next to glibc, in one run.
//!
//! Benchmarks (each counts malloc+free pairs per second of wall time):
//!   small-1t   one thread: batches of 64 objects of 16..512 bytes, freed out of order
//!   small-2t   two threads doing small-1t at once
//!   prodcons   one thread allocates, the other frees (every free is cross-thread)
//!   mixed-1t   one thread, sizes 16 B..64 KiB (log-uniform), batches of 16
//! The allocators take turns round by round; the table shows medians and strata/glibc.
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    /// Print JSON: {results: [{allocator, benchmark, ops_per_sec, threads}], ratios: {...}}
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr
    #[arg(long, short)]
    quiet: bool,
}

trait Alloc: Send + Sync + 'static {
    const NAME: &'static str;
    fn alloc(size: usize) -> *mut u8;
    fn free(p: *mut u8);
}

struct Glibc;
impl Alloc for Glibc {
    const NAME: &'static str = "glibc";
    #[inline]
    fn alloc(size: usize) -> *mut u8 {
        unsafe { libc::malloc(size) as *mut u8 }
    }
    #[inline]
    fn free(p: *mut u8) {
        unsafe { libc::free(p as *mut c_void) }
    }
}

struct Strata;
impl Alloc for Strata {
    const NAME: &'static str = "strata";
    #[inline]
    fn alloc(size: usize) -> *mut u8 {
        unsafe {
            sys::strata_malloc(size, sys::strata_place_t::new(sys::STRATA_PLACE_DEFAULT)) as *mut u8
        }
    }
    #[inline]
    fn free(p: *mut u8) {
        unsafe { sys::strata_free(p as *mut c_void) }
    }
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
fn churn<A: Alloc>(ops: usize, batch: usize, sz: &[usize]) {
    let mut live = vec![std::ptr::null_mut::<u8>(); batch];
    let mut k = 0;
    for _ in 0..ops / batch {
        for slot in live.iter_mut() {
            let p = A::alloc(sz[k % sz.len()]);
            assert!(!p.is_null(), "{} malloc failed", A::NAME);
            unsafe { p.write(k as u8) };
            *slot = p;
            k += 1;
        }
        for i in 0..batch {
            A::free(live[(i * 7 + 3) % batch]); // 7 is coprime with the batch sizes used
        }
    }
}

fn small_1t<A: Alloc>(ops: usize) -> f64 {
    let sz = sizes(1, 4096, 4, 8);
    let t = Instant::now();
    churn::<A>(ops, 64, &sz);
    ops as f64 / t.elapsed().as_secs_f64()
}

fn mixed_1t<A: Alloc>(ops: usize) -> f64 {
    let sz = sizes(2, 4096, 4, 15);
    let t = Instant::now();
    churn::<A>(ops, 16, &sz);
    ops as f64 / t.elapsed().as_secs_f64()
}

fn small_2t<A: Alloc>(ops: usize) -> f64 {
    let t = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let sz = sizes(10 + i, 4096, 4, 8);
                churn::<A>(ops, 64, &sz)
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

fn prodcons<A: Alloc>(ops: usize) -> f64 {
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
                A::free(r2.slots[head % N].load(Ordering::Relaxed) as *mut u8);
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
        let p = A::alloc(sz[k % sz.len()]);
        assert!(!p.is_null(), "{} malloc failed", A::NAME);
        unsafe { p.write(k as u8) };
        ring.slots[tail % N].store(p as usize, Ordering::Relaxed);
        tail += 1;
        ring.tail.store(tail, Ordering::Release);
    }
    ring.done.store(true, Ordering::Release);
    consumer.join().expect("consumer thread");
    ops as f64 / t.elapsed().as_secs_f64()
}

type Bench = (&'static str, usize, fn(usize) -> f64, fn(usize) -> f64);

const BENCHES: &[Bench] = &[
    ("small-1t", 1, small_1t::<Glibc>, small_1t::<Strata>),
    ("small-2t", 2, small_2t::<Glibc>, small_2t::<Strata>),
    ("prodcons", 2, prodcons::<Glibc>, prodcons::<Strata>),
    ("mixed-1t", 1, mixed_1t::<Glibc>, mixed_1t::<Strata>),
];

#[derive(Serialize)]
struct Row {
    allocator: &'static str,
    benchmark: &'static str,
    threads: usize,
    ops_per_sec: f64,
    rounds: usize,
}

#[derive(Serialize)]
struct Report {
    machine: &'static str,
    ops_per_run: usize,
    results: Vec<Row>,
    /// strata ops_per_sec / glibc ops_per_sec, per benchmark
    ratios: BTreeMap<&'static str, f64>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    for o in &a.only {
        anyhow::ensure!(
            BENCHES.iter().any(|b| b.0 == o),
            "unknown benchmark '{o}' (see --help)"
        );
    }
    anyhow::ensure!(
        a.ops >= 64 && a.rounds > 0,
        "--ops must be at least 64 and --rounds positive"
    );
    let chosen: Vec<&Bench> = BENCHES
        .iter()
        .filter(|b| a.only.is_empty() || a.only.iter().any(|o| o == b.0))
        .collect();
    let mut glibc: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut strata: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in 0..a.rounds {
        if !a.quiet {
            progress("alloc", &format!("round {}/{}", r + 1, a.rounds));
        }
        for b in &chosen {
            // alternate which allocator goes first, so neither always runs on a warmer machine
            if r % 2 == 0 {
                glibc.entry(b.0).or_default().push((b.2)(a.ops));
                strata.entry(b.0).or_default().push((b.3)(a.ops));
            } else {
                strata.entry(b.0).or_default().push((b.3)(a.ops));
                glibc.entry(b.0).or_default().push((b.2)(a.ops));
            }
        }
    }
    let mut results = Vec::new();
    let mut ratios = BTreeMap::new();
    for b in &chosen {
        let g = median(glibc[b.0].clone());
        let s = median(strata[b.0].clone());
        results.push(Row {
            allocator: "glibc",
            benchmark: b.0,
            threads: b.1,
            ops_per_sec: g,
            rounds: a.rounds,
        });
        results.push(Row {
            allocator: "strata",
            benchmark: b.0,
            threads: b.1,
            ops_per_sec: s,
            rounds: a.rounds,
        });
        ratios.insert(b.0, s / g);
    }
    let report = Report {
        machine: "native",
        ops_per_run: a.ops,
        results,
        ratios,
    };
    if a.json {
        return emit_json(&report);
    }
    let mut s = format!(
        "Allocation throughput, malloc+free pairs per second (native, median of {} rounds)\n\n",
        a.rounds
    );
    s += &format!(
        "{:<10} {:>7} {:>14} {:>14} {:>14}\n",
        "benchmark", "threads", "glibc Mops/s", "strata Mops/s", "strata/glibc"
    );
    for b in &chosen {
        let get = |al: &str| {
            report
                .results
                .iter()
                .find(|r| r.benchmark == b.0 && r.allocator == al)
                .map_or(0.0, |r| r.ops_per_sec)
        };
        s += &format!(
            "{:<10} {:>7} {:>14.1} {:>14.1} {:>13.2}x\n",
            b.0,
            b.1,
            get("glibc") / 1e6,
            get("strata") / 1e6,
            report.ratios[b.0]
        );
    }
    emit(&s)
}
