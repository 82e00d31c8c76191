//! Drivers: run a workload's load and transaction phases against a database, from many
//! threads, timing every operation into HDR histograms. `Db` is what a driver needs of a
//! database; the in-process engine implements it here, the network clients in their files.
//!
//! Time is `strata::now_ns()`: monotonic time natively, the thread's simulated clock on the
//! emulated machine. A phase lasts as long as its slowest worker, measured by each worker on
//! its own clock (simulated clocks are per thread).
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use strata::now_ns;
use strata_kv::Store;

use crate::workload::{fill_field, key_name, KeySequence, Op, OpStream, Workload};

/// What a driver needs of a database. Values are `fieldcount` fields of `fieldlength` bytes,
/// stored as one record.
pub trait Db: Sync {
    /// Read the whole record into `out`; false when the key is missing.
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool;
    /// Overwrite one field; false when the key is missing.
    fn update_field(&self, key: &[u8], offset: usize, data: &[u8]) -> bool;
    /// Insert a new record; false when the database refused it (counted as an error).
    fn insert(&self, key: &[u8], record: &[u8]) -> bool;
}

impl Db for Store {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.get(key, |v| {
            out.clear();
            out.extend_from_slice(v);
        })
        .is_some()
    }
    fn update_field(&self, key: &[u8], offset: usize, data: &[u8]) -> bool {
        self.update(key, |old| {
            old.map(|o| {
                let mut v = o.to_vec();
                if offset + data.len() <= v.len() {
                    v[offset..offset + data.len()].copy_from_slice(data);
                }
                v
            })
        })
        .is_ok_and(|(_, updated)| updated)
    }
    fn insert(&self, key: &[u8], record: &[u8]) -> bool {
        self.set(key, record).is_ok()
    }
}

/// Latency summary of one operation type, in microseconds.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// The result of a phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PhaseResult {
    pub operations: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// reads of keys that should exist but did not, and similar: must be 0
    pub errors: u64,
    pub latency: BTreeMap<&'static str, Latency>,
}

/// A phase's duration in seconds (at least 1 ns, so rates stay finite).
fn seconds(ns: u64) -> f64 {
    ns.max(1) as f64 / 1e9
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn summarize(ops: u64, secs: f64, errors: u64, hists: BTreeMap<Op, Histogram<u64>>) -> PhaseResult {
    let us = |ns: u64| ns as f64 / 1000.0;
    let latency = hists
        .into_iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(op, h)| {
            (
                op.name(),
                Latency {
                    count: h.len(),
                    mean_us: h.mean() / 1000.0,
                    p50_us: us(h.value_at_quantile(0.5)),
                    p99_us: us(h.value_at_quantile(0.99)),
                    p999_us: us(h.value_at_quantile(0.999)),
                    max_us: us(h.max()),
                },
            )
        })
        .collect();
    PhaseResult { operations: ops, seconds: secs, ops_per_sec: ops as f64 / secs, errors, latency }
}

/// Progress lines every second on stderr (never on stdout, where the data goes).
fn progress_loop(what: &str, done: &AtomicU64, total: u64, stop: &AtomicU64) {
    let start = Instant::now();
    let mut last = 0;
    while stop.load(Ordering::Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(100));
        let t = start.elapsed().as_secs();
        if t > last {
            last = t;
            let d = done.load(Ordering::Relaxed);
            eprintln!(
                "[ycsb] {what}: {:.0} % ({d} of {total}), {:.0} ops/s",
                100.0 * d as f64 / total.max(1) as f64,
                d as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
}

/// Run `work(t, done)` on `threads` workers (t = 0..threads) beside a progress line that
/// follows `done` up to `total`. Returns each worker's result and the phase's length: the
/// longest worker, each timed on its own clock.
///
/// Quiet, there is no progress thread, and one worker runs on the calling thread: on the
/// emulated machine every thread is modelled, and threads that overlap in the host's time share
/// the tiers' bandwidth queues in the host's order, so a phase on a spawned thread (which
/// overlapped the spawner's last accesses) did not repeat its simulated time exactly.
fn on_workers<R: Send>(
    what: &str,
    total: u64,
    threads: u64,
    quiet: bool,
    work: impl Fn(u64, &AtomicU64) -> R + Sync,
) -> (Vec<R>, u64) {
    let done = AtomicU64::new(0);
    if quiet && threads == 1 {
        let begin = now_ns();
        let r = work(0, &done);
        return (vec![r], now_ns() - begin);
    }
    let stop = AtomicU64::new(0);
    let (mut out, mut longest) = (Vec::new(), 0);
    std::thread::scope(|s| {
        if !quiet {
            s.spawn(|| progress_loop(what, &done, total, &stop));
        }
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (done, work) = (&done, &work);
                s.spawn(move || {
                    let begin = now_ns();
                    let r = work(t, done);
                    (r, now_ns() - begin)
                })
            })
            .collect();
        for w in workers {
            let (r, ns) = w.join().expect("worker thread");
            out.push(r);
            longest = longest.max(ns);
        }
        stop.store(1, Ordering::Relaxed);
    });
    (out, longest)
}

/// Insert records 0..recordcount (split across threads).
pub fn load(db: &dyn Db, wl: &Workload, threads: usize, quiet: bool) -> PhaseResult {
    let threads = threads.max(1) as u64;
    let errors = AtomicU64::new(0);
    let (hists, ns) = on_workers("load", wl.recordcount, threads, quiet, |t, done| {
        let mut h = new_hist();
        let mut rec = vec![0u8; wl.record_bytes()];
        // record i goes to thread i % threads: keys interleave like YCSB's load
        let mut i = t;
        while i < wl.recordcount {
            for f in 0..wl.fieldcount {
                fill_field(&mut rec[f * wl.fieldlength..(f + 1) * wl.fieldlength], i, f, 0);
            }
            let key = key_name(i, wl.insertorder_hashed);
            let t0 = now_ns();
            if !db.insert(key.as_bytes(), &rec) {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            h.record(now_ns() - t0).ok();
            done.fetch_add(1, Ordering::Relaxed);
            i += threads;
        }
        h
    });
    let mut total = new_hist();
    for h in &hists {
        total.add(h).ok();
    }
    summarize(wl.recordcount, seconds(ns), errors.load(Ordering::Relaxed), BTreeMap::from([(Op::Insert, total)]))
}

/// Run operationcount operations (split across threads) after a load.
pub fn run(db: &dyn Db, wl: &Workload, threads: usize, seed: u64, quiet: bool) -> PhaseResult {
    let threads = threads.max(1) as u64;
    let keys = KeySequence::new(wl.recordcount);
    let errors = AtomicU64::new(0);
    let (per_thread, ns) = on_workers("run", wl.operationcount, threads, quiet, |t, done| {
        let mut stream = OpStream::new(wl, seed.wrapping_add(t * 0x1000_0001), keys.clone());
        let mut hists: BTreeMap<Op, Histogram<u64>> = Op::ALL.iter().map(|o| (*o, new_hist())).collect();
        let mut buf = Vec::with_capacity(wl.record_bytes());
        let mut field = vec![0u8; wl.fieldlength];
        let mut rec = vec![0u8; wl.record_bytes()];
        let n = wl.operationcount / threads + u64::from(t < wl.operationcount % threads);
        for i in 0..n {
            let (op, keynum) = stream.next_op();
            let key = key_name(keynum, wl.insertorder_hashed);
            let t0 = now_ns();
            let ok = match op {
                Op::Read => db.read(key.as_bytes(), &mut buf),
                Op::Update => {
                    let f = stream.field();
                    fill_field(&mut field, keynum, f, i + 1);
                    db.update_field(key.as_bytes(), f * wl.fieldlength, &field)
                }
                Op::ReadModifyWrite => {
                    let f = stream.field();
                    fill_field(&mut field, keynum, f, i + 1);
                    db.read(key.as_bytes(), &mut buf) && db.update_field(key.as_bytes(), f * wl.fieldlength, &field)
                }
                Op::Insert => {
                    for f in 0..wl.fieldcount {
                        fill_field(&mut rec[f * wl.fieldlength..(f + 1) * wl.fieldlength], keynum, f, 0);
                    }
                    let ok = db.insert(key.as_bytes(), &rec);
                    keys.ack(keynum);
                    ok
                }
            };
            hists.get_mut(&op).unwrap().record(now_ns() - t0).ok();
            if !ok {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
        hists
    });
    let mut merged: BTreeMap<Op, Histogram<u64>> = Op::ALL.iter().map(|o| (*o, new_hist())).collect();
    for h in per_thread {
        for (op, hist) in h {
            merged.get_mut(&op).unwrap().add(&hist).ok();
        }
    }
    summarize(wl.operationcount, seconds(ns), errors.load(Ordering::Relaxed), merged)
}
