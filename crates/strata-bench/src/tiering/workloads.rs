//! The programs `strata bench tiering` runs on the emulated machine, each single-threaded and
//! seeded (so a run repeats exactly), each with a setup phase (allocation and first touch, not
//! timed) and a measured phase whose operations per second of simulated time are its figure.
//!
//! | workload | what first touch gets wrong |
//! |---|---|
//! | `cold-first` | a large table filled first and then rarely read, and a hot index allocated after it: the fast tier fills with the table (hmalloc's motivating case) |
//! | `phase` | the hot tenth of the data moves to another part every `1 / phases` of the run: promotion and demotion have to keep up |
//! | `gups-hot` | random 8-byte updates, 90 % of them in a hot tenth of the table that lies beyond the fast tier (HeMem and Nomad's microbenchmark) |
//! | `gups-hot-ro` | the same with reads instead of updates |
//! | `ycsb-c`, `ycsb-a` | strata-kv's `std` variant (glibc malloc) under YCSB C and A, Zipf 0.99: hot records scattered over the heap |
//! | `pagerank` | PageRank over a power-law graph: the edges, allocated first, are streamed; the ranks, allocated last, are read at random, a few of them very often |
//! | `hinted` | the program's own hints, right and then stale: eight arenas of 256-byte records (each placed next to the one before, NextTo's chains), the first bound hot and the rest cold; 90 % of the updates go to the hot-bound arena for the first half of the run and to a cold-bound one for the second. A binding is never wrong to first touch (what only a policy that knows arenas can correct) |
//! | `multi-site` | eight allocation sites of graded hotness (the last two allocated take 90 % of the lookups), four arrays each, freed and allocated again every generation, the coldest site first: first touch gives the fast tier to the coldest sites every time (what context policies can learn) |
//! | `small-sites` | eight allocation sites of 192-byte nodes, allocated in turn, of multi-site's graded hotness (the last two sites, a quarter of the nodes, take 90 % of the lookups): freed and allocated again in four generations; in spans shared by size class every page holds nodes of every site and is as hot as the next; in blocks of each context's own (libstrata's default) the hot sites' pages are hot |
//!
//! Sizes scale with `size_mb`, the footprint each aims at. The field's workloads (GAPBS,
//! XSBench, a B+-tree, GUPS) are in [`super::field`]; `run` takes either.
use serde::{Deserialize, Serialize};
use strata_kv::{Store, Variant};

use crate::{failed, Error};

/// The workloads, in the order the benchmark runs them.
pub const WORKLOADS: &[&str] = &[
    "cold-first",
    "phase",
    "gups-hot",
    "gups-hot-ro",
    "ycsb-c",
    "ycsb-a",
    "pagerank",
    "multi-site",
    "hinted",
    "small-sites",
];

/// One run of a workload (printed as JSON by `strata bench tiering-workload`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub workload: String,
    /// operations of the measured phase
    pub ops: u64,
    /// its length, ns (simulated on the emulated machine)
    pub ns: u64,
    /// ops per second
    pub figure: f64,
    pub unit: String,
    /// bytes the workload allocated
    pub allocated_bytes: u64,
    /// a checksum of what it computed (so nothing is optimised away, and runs can be compared)
    pub checksum: u64,
    /// multi-site: the code address of each allocation site, coldest first (so that a
    /// context report's return addresses can be matched to the sites)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<u64>,
    /// a workload timed in rounds (Nomad's micro-benchmark): each round's figure, in order
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
    /// multi-site on the emulated machine: per generation, per site (coldest first), the share
    /// of its arrays' pages on the fastest node at the generation's end (small-sites: its nodes'
    /// pages)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<Vec<f64>>,
}

/// A deterministic generator (splitmix64).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// uniform in 0..n
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
    /// uniform in [0, 1)
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A vector of n words, each written once in order (first touch in allocation order).
fn filled(n: usize, seed: u64) -> Vec<u64> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n as u64 {
        v.push(i ^ seed);
    }
    v
}

/// Time the measured phase on the machine's clock (simulated when emulated).
pub(crate) fn timed(workload: &str, ops: u64, allocated_bytes: u64, f: impl FnOnce() -> u64) -> Outcome {
    let t = strata::now_ns();
    let checksum = std::hint::black_box(f());
    let ns = (strata::now_ns() - t).max(1);
    stratad::emulated::trace_phase(t, t + ns);
    Outcome {
        workload: workload.into(),
        ops,
        ns,
        figure: ops as f64 / (ns as f64 * 1e-9),
        unit: "ops/s".into(),
        allocated_bytes,
        checksum,
        sites: Vec::new(),
        rounds: Vec::new(),
        placement: Vec::new(),
    }
}

const WORD: usize = 8;

/// A table filled first (80 % of the footprint), read rarely; a hot index allocated after it.
fn cold_first(size_mb: u64, ops: u64) -> Outcome {
    let words = (size_mb << 20) as usize / WORD;
    let table = filled(words * 4 / 5, 1);
    let mut index = filled(words / 5, 2);
    let mut rng = Rng(3);
    timed("cold-first", ops, (words * WORD) as u64, || {
        let mut sum = 0u64;
        for _ in 0..ops {
            let i = rng.below(index.len() as u64) as usize;
            index[i] = index[i].wrapping_add(1);
            sum = sum.wrapping_add(index[i]);
            if rng.below(100) < 2 {
                sum = sum.wrapping_add(table[rng.below(table.len() as u64) as usize]);
            }
        }
        sum
    })
}

/// Updates, 90 % in a window of a tenth of the data that moves on every `ops / phases`.
fn phase(size_mb: u64, ops: u64) -> Outcome {
    const PHASES: u64 = 6;
    let words = (size_mb << 20) as usize / WORD;
    let mut data = filled(words, 4);
    let mut rng = Rng(5);
    let window = (words / 10) as u64;
    timed("phase", ops, (words * WORD) as u64, || {
        let mut sum = 0u64;
        for op in 0..ops {
            // windows 0, 3, 6, 9, 2, 5 (tenths of the data): each phase somewhere new
            let start = (op * PHASES / ops * 3 % 10) * window;
            let i = if rng.below(10) < 9 { start + rng.below(window) } else { rng.below(words as u64) } as usize;
            data[i] = data[i].wrapping_mul(3).wrapping_add(op);
            sum ^= data[i];
        }
        sum
    })
}

/// Random 8-byte updates (or reads), 90 % in the tenth of the table at 60-70 % of it.
fn gups_hot(size_mb: u64, ops: u64, write: bool) -> Outcome {
    let name = if write { "gups-hot" } else { "gups-hot-ro" };
    let words = (size_mb << 20) as usize / WORD;
    let mut table = filled(words, 6);
    let mut rng = Rng(7);
    let (hot, hot_len) = (words as u64 * 6 / 10, words as u64 / 10);
    timed(name, ops, (words * WORD) as u64, || {
        let mut sum = 0u64;
        for _ in 0..ops {
            let r = rng.next();
            let i = if r % 10 < 9 { hot + rng.below(hot_len) } else { rng.below(words as u64) } as usize;
            if write {
                table[i] ^= r;
            } else {
                sum = sum.wrapping_add(table[i]);
            }
        }
        if write {
            table.iter().step_by(4096).fold(0, |a, x| a ^ x)
        } else {
            sum
        }
    })
}

/// YCSB on strata-kv's std variant: records of 1 KB filling the footprint, Zipf 0.99.
fn ycsb(size_mb: u64, ops: u64, letter: &str) -> Result<Outcome, Error> {
    let records = ((size_mb << 20) / 1100).max(1);
    let mut wl = strata_ycsb::Workload::core(letter).map_err(|e| failed(e.to_string()))?;
    for (k, v) in [("recordcount", records.to_string()), ("operationcount", ops.to_string())] {
        wl.set(k, &v).map_err(|e| failed(e.to_string()))?;
    }
    let store = Store::new(Variant::Std, (records / 64).max(1) as usize);
    let l = strata_ycsb::load(&store, &wl, 1, true);
    if l.errors > 0 {
        return Err(failed(format!("ycsb-{letter}: {} inserts failed", l.errors)));
    }
    // the driver times the run phase on its worker's clock (simulated clocks are per thread)
    let r = strata_ycsb::run(&store, &wl, 1, 42, true);
    if r.errors > 0 {
        return Err(failed(format!("ycsb-{letter}: {} operations failed", r.errors)));
    }
    Ok(Outcome {
        workload: format!("ycsb-{letter}"),
        ops,
        ns: (r.seconds * 1e9) as u64,
        figure: r.ops_per_sec,
        unit: "ops/s".into(),
        allocated_bytes: records * wl.record_bytes() as u64,
        checksum: store.len() as u64,
        sites: Vec::new(),
        rounds: Vec::new(),
        placement: Vec::new(),
    })
}

/// A vertex of n with a power-law skew: vertex i is drawn with probability falling as i grows
/// (x^4 of a uniform x: the first percent of the vertices gets a third of the draws).
fn skewed(rng: &mut Rng, n: usize) -> usize {
    let x = rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
    ((x * x * x * x) * n as f64) as usize
}

/// PageRank, pull style, over a power-law graph: edges streamed, ranks read at random.
fn pagerank(size_mb: u64, iterations: u64) -> Outcome {
    // 8 edges a vertex; edges (4 B), offsets (8 B), degrees (4 B), two ranks (8 B) a vertex:
    // 8 * 4 + 8 + 4 + 16 = 60 bytes a vertex
    let n = ((size_mb << 20) / 60) as usize;
    let mut rng = Rng(8);
    // in-degrees: power-law, 8 on average; the graph is built by destination directly (CSR),
    // each in-edge's source skewed towards the low vertices, so a few are read very often
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u64);
    for _ in 0..n {
        let d = 1 + (skewed(&mut rng, 64) as u64).min(63) / 4 + rng.below(8);
        offsets.push(offsets.last().copied().unwrap_or(0) + d);
    }
    let m = *offsets.last().unwrap_or(&0) as usize;
    let mut edges = Vec::with_capacity(m);
    let mut degree = vec![0u32; n];
    for _ in 0..m {
        let u = skewed(&mut rng, n);
        degree[u] += 1;
        edges.push(u as u32);
    }
    // the ranks, allocated last
    let mut rank = vec![1.0 / n as f64; n];
    let mut next = vec![0f64; n];
    let allocated = (m * 4 + (n + 1) * 8 + n * 4 + n * 16) as u64;
    timed("pagerank", m as u64 * iterations, allocated, || {
        for _ in 0..iterations {
            for v in 0..n {
                let mut s = 0.0;
                for &u in &edges[offsets[v] as usize..offsets[v + 1] as usize] {
                    s += rank[u as usize] / degree[u as usize].max(1) as f64;
                }
                next[v] = 0.15 / n as f64 + 0.85 * s;
            }
            std::mem::swap(&mut rank, &mut next);
        }
        rank.iter().map(|r| (r * 1e12) as u64).fold(0, u64::wrapping_add)
    })
}

/// multi-site: the share of the lookups (percent) each site takes, in allocation order: the
/// two sites allocated last (a quarter of the footprint) take 90 % of them.
const SITE_WEIGHTS: [u64; 8] = [1, 1, 1, 2, 2, 3, 40, 50];
const ARRAYS_PER_SITE: usize = 4;
const GENERATIONS: u64 = 8;

/// One allocation site: malloc called from its own code (each K is a separate function, so the
/// call stacks differ even in a binary without frame pointers), the array filled in order.
#[inline(never)]
fn site_alloc<const K: usize>(words: usize) -> *mut u64 {
    let p = unsafe { libc::malloc(words * WORD) } as *mut u64;
    std::hint::black_box(K);
    if !p.is_null() {
        for i in 0..words {
            unsafe { p.add(i).write(i as u64 ^ K as u64) };
        }
    }
    p
}

const SITES: [fn(usize) -> *mut u64; 8] = [
    site_alloc::<0>,
    site_alloc::<1>,
    site_alloc::<2>,
    site_alloc::<3>,
    site_alloc::<4>,
    site_alloc::<5>,
    site_alloc::<6>,
    site_alloc::<7>,
];

/// The share of the pages of `arrays` (each `bytes` long) on the emulated machine's fastest
/// node (0), or None on a real machine (the emulator's strata_emu_node_of is not there).
fn fast_share(arrays: &[*mut u64], bytes: usize) -> Option<f64> {
    fast_share_of(arrays.iter().flat_map(|a| (0..bytes).step_by(4096).map(move |off| *a as usize + off)))
}

/// The share of these pages (an address in each) on the emulated machine's fastest node.
fn fast_share_of(pages: impl Iterator<Item = usize>) -> Option<f64> {
    type NodeOf = unsafe extern "C" fn(*const libc::c_void) -> libc::c_int;
    static NODE_OF: std::sync::OnceLock<Option<NodeOf>> = std::sync::OnceLock::new();
    let node_of = (*NODE_OF.get_or_init(|| {
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"strata_emu_node_of".as_ptr()) };
        // SAFETY: the emulator's function has this signature (include/strata_emu.h)
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, NodeOf>(f) })
    }))?;
    let (mut fast, mut all) = (0u64, 0u64);
    for page in pages {
        let node = unsafe { node_of(page as *const libc::c_void) };
        all += u64::from(node >= 0);
        fast += u64::from(node == 0);
    }
    Some(if all == 0 { 0.0 } else { fast as f64 / all as f64 })
}

const HINTED_ARENAS: usize = 8;
const HINTED_RECORD: usize = 256;
/// The arena the program binds hot, and the cold-bound one that is hot in the second half.
const HINTED_HOT: [usize; 2] = [0, 5];

/// `hinted`: eight arenas of 256-byte records, each record placed next to the one before; the
/// first arena bound hot, the others cold. Each update picks a random record, 90 % of them in
/// the phase's hot arena (the hot-bound one, then a cold-bound one), and adds to its first
/// word. `placement`: each arena's share of its pages on the fast node at each half's end.
fn hinted(size_mb: u64, ops: u64) -> Result<Outcome, Error> {
    use strata_sys as sys;
    let per_arena = (((size_mb << 20) as usize) / HINTED_ARENAS / HINTED_RECORD).max(1);
    let mut arenas = Vec::new();
    let mut records: Vec<Vec<*mut u64>> = Vec::new();
    for k in 0..HINTED_ARENAS {
        let bind = if k == HINTED_HOT[0] { sys::STRATA_PLACE_HOT } else { sys::STRATA_PLACE_COLD };
        let a = unsafe { sys::strata_arena_new(sys::strata_place_t::new(bind)) };
        if a.is_null() {
            return Err(failed("hinted: no arena"));
        }
        arenas.push(a);
        let mut v: Vec<*mut u64> = Vec::with_capacity(per_arena);
        for i in 0..per_arena {
            let place = match v.last() {
                Some(&prev) => {
                    let mut p = sys::strata_place_t::new(sys::STRATA_PLACE_NEXT_TO);
                    p.u.ptr = prev as *const libc::c_void;
                    p
                }
                None => {
                    let mut p = sys::strata_place_t::new(sys::STRATA_PLACE_ARENA);
                    p.u.arena = a;
                    p
                }
            };
            let r = unsafe { sys::strata_malloc(HINTED_RECORD, place) } as *mut u64;
            if r.is_null() {
                return Err(failed("hinted: an allocation failed"));
            }
            unsafe { r.write((k * per_arena + i) as u64) };
            v.push(r);
        }
        records.push(v);
    }
    let placement_now = |records: &[Vec<*mut u64>]| -> Option<Vec<f64>> {
        records
            .iter()
            .map(|v| {
                let mut pages: Vec<usize> = v.iter().map(|&r| r as usize & !4095).collect();
                pages.dedup();
                fast_share_of(pages.into_iter())
            })
            .collect()
    };
    let mut rng = Rng(11);
    let mut placement = Vec::new();
    let allocated = (HINTED_ARENAS * per_arena * HINTED_RECORD) as u64;
    let out = timed("hinted", ops, allocated, || {
        let mut sum = 0u64;
        for (half, &hot) in HINTED_HOT.iter().enumerate() {
            for _ in 0..ops / 2 {
                let k = if rng.below(10) < 9 { hot } else { rng.below(HINTED_ARENAS as u64) as usize };
                let r = records[k][rng.below(per_arena as u64) as usize];
                unsafe {
                    *r = (*r).wrapping_add(half as u64 + 1);
                    sum = sum.wrapping_add(*r);
                }
            }
            placement.push(placement_now(&records));
        }
        sum
    });
    for a in arenas {
        unsafe { sys::strata_arena_destroy(a) };
    }
    let placement = placement.into_iter().collect::<Option<Vec<_>>>().unwrap_or_default();
    Ok(Outcome { placement, ..out })
}

/// Generations of: every array freed, all allocated again (coldest site first), then lookups
/// spread over the sites by their weights, each a random read and an update at the place the
/// value read points to (two dependent misses, as a hash table's bucket and entry).
fn multi_site(size_mb: u64, ops: u64) -> Result<Outcome, Error> {
    let words = ((size_mb << 20) as usize / WORD / (SITES.len() * ARRAYS_PER_SITE)).max(1);
    let pick: Vec<usize> =
        SITE_WEIGHTS.iter().enumerate().flat_map(|(k, &w)| std::iter::repeat_n(k, w as usize)).collect();
    let mut rng = Rng(9);
    let mut arrays: Vec<*mut u64> = Vec::new();
    let allocated = (words * WORD * SITES.len() * ARRAYS_PER_SITE) as u64;
    let mut failed_alloc = false;
    let mut placement = Vec::new();
    let out = timed("multi-site", ops, allocated, || {
        let mut sum = 0u64;
        for g in 0..GENERATIONS {
            if !arrays.is_empty() {
                let shares = arrays.chunks(ARRAYS_PER_SITE).map(|site| fast_share(site, words * WORD));
                placement.push(shares.collect::<Option<Vec<f64>>>());
            }
            for p in arrays.drain(..) {
                unsafe { libc::free(p as *mut libc::c_void) };
            }
            for alloc in SITES {
                for _ in 0..ARRAYS_PER_SITE {
                    let p = alloc(words);
                    failed_alloc |= p.is_null();
                    arrays.push(p);
                }
            }
            if failed_alloc {
                return 0;
            }
            for _ in 0..ops / GENERATIONS {
                let site = pick[rng.below(pick.len() as u64) as usize];
                let a = arrays[site * ARRAYS_PER_SITE + rng.below(ARRAYS_PER_SITE as u64) as usize];
                let i = rng.below(words as u64) as usize;
                unsafe {
                    let j = (a.add(i).read().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % words;
                    let x = a.add(j);
                    *x = (*x).wrapping_add(g + 1);
                    sum = sum.wrapping_add(*x);
                }
            }
        }
        sum
    });
    if !arrays.is_empty() {
        placement.push(arrays.chunks(ARRAYS_PER_SITE).map(|site| fast_share(site, words * WORD)).collect());
    }
    for p in arrays {
        unsafe { libc::free(p as *mut libc::c_void) };
    }
    if failed_alloc {
        return Err(failed("multi-site: an allocation failed"));
    }
    let placement = placement.into_iter().collect::<Option<Vec<_>>>().unwrap_or_default();
    Ok(Outcome { sites: SITES.iter().map(|f| *f as usize as u64).collect(), placement, ..out })
}

/// small-sites: the bytes of a node (a size class of its own: 192)
const NODE_BYTES: usize = 192;

/// One small allocation site: a node from its own code (as `site_alloc`), its first word set.
#[inline(never)]
fn node_alloc<const K: usize>() -> *mut u64 {
    let p = unsafe { libc::malloc(NODE_BYTES) } as *mut u64;
    std::hint::black_box(K);
    if !p.is_null() {
        unsafe { p.write(K as u64) };
    }
    p
}

const NODE_SITES: [fn() -> *mut u64; 8] = [
    node_alloc::<0>,
    node_alloc::<1>,
    node_alloc::<2>,
    node_alloc::<3>,
    node_alloc::<4>,
    node_alloc::<5>,
    node_alloc::<6>,
    node_alloc::<7>,
];

/// Eight sites of small nodes, allocated in turn (node i of every site, then node i + 1), the
/// lookups weighted as multi-site's: each a read and an update of a random node of the site.
/// Every node is freed and allocated again each generation (four), so a policy that directs a
/// context's next objects can act.
fn small_sites(size_mb: u64, ops: u64) -> Result<Outcome, Error> {
    const GENERATIONS: u64 = 4;
    let per_site = ((size_mb << 20) as usize / NODE_BYTES / NODE_SITES.len()).max(1);
    let pick: Vec<usize> =
        SITE_WEIGHTS.iter().enumerate().flat_map(|(k, &w)| std::iter::repeat_n(k, w as usize)).collect();
    // One vector per site, each with its own capacity (`vec![v; n]` clones drop capacity, and the
    // clones would grow by doubling into mappings of their own during the measured phase).
    let mut nodes: Vec<Vec<*mut u64>> = (0..NODE_SITES.len()).map(|_| Vec::with_capacity(per_site)).collect();
    let mut rng = Rng(11);
    let mut failed_alloc = false;
    let mut placement = Vec::new();
    let share = |nodes: &[Vec<*mut u64>]| -> Option<Vec<f64>> {
        nodes.iter().map(|site| fast_share_of(site.iter().map(|&p| p as usize & !4095))).collect()
    };
    let out = timed("small-sites", ops, (per_site * NODE_BYTES * NODE_SITES.len()) as u64, || {
        let mut sum = 0u64;
        for _ in 0..GENERATIONS {
            for p in nodes.iter_mut().flat_map(|site| site.drain(..)) {
                unsafe { libc::free(p as *mut libc::c_void) };
            }
            for _ in 0..per_site {
                for (site, alloc) in nodes.iter_mut().zip(NODE_SITES) {
                    site.push(alloc());
                }
            }
            failed_alloc |= nodes.iter().flatten().any(|p| p.is_null());
            if failed_alloc {
                return 0;
            }
            for _ in 0..ops / GENERATIONS {
                let site = &nodes[pick[rng.below(pick.len() as u64) as usize]];
                let p = site[rng.below(per_site as u64) as usize];
                unsafe {
                    *p = (*p).wrapping_mul(3).wrapping_add(1);
                    sum = sum.wrapping_add(*p);
                }
            }
            placement.push(share(&nodes));
        }
        sum
    });
    for p in nodes.into_iter().flatten() {
        unsafe { libc::free(p as *mut libc::c_void) };
    }
    if failed_alloc {
        return Err(failed("small-sites: an allocation failed"));
    }
    let placement = placement.into_iter().collect::<Option<Vec<_>>>().unwrap_or_default();
    Ok(Outcome { sites: NODE_SITES.iter().map(|f| *f as usize as u64).collect(), placement, ..out })
}

/// The default operations of a workload's measured phase, for a footprint of size_mb.
pub fn default_ops(workload: &str, size_mb: u64) -> u64 {
    if super::field::FIELD.contains(&workload) {
        return super::field::default_ops(workload, size_mb);
    }
    let per_mb = match workload {
        "cold-first" | "gups-hot" | "gups-hot-ro" | "hinted" | "small-sites" => 60_000,
        "multi-site" => 40_000,
        "phase" => 80_000,
        "ycsb-c" | "ycsb-a" => 3_000,
        "pagerank" => return 2, // iterations
        _ => 10_000,
    };
    per_mb * size_mb
}

/// Run one workload; ops 0 means its default.
pub fn run(workload: &str, size_mb: u64, ops: u64) -> Result<Outcome, Error> {
    if size_mb == 0 {
        return Err(Error::Invalid("--size-mb must be positive".into()));
    }
    let ops = if ops == 0 { default_ops(workload, size_mb) } else { ops };
    Ok(match workload {
        "cold-first" => cold_first(size_mb, ops),
        "phase" => phase(size_mb, ops),
        "gups-hot" => gups_hot(size_mb, ops, true),
        "gups-hot-ro" => gups_hot(size_mb, ops, false),
        "ycsb-c" => ycsb(size_mb, ops, "c")?,
        "ycsb-a" => ycsb(size_mb, ops, "a")?,
        "pagerank" => pagerank(size_mb, ops),
        "multi-site" => multi_site(size_mb, ops)?,
        "hinted" => hinted(size_mb, ops)?,
        "small-sites" => small_sites(size_mb, ops)?,
        w => super::field::run(w, size_mb, ops).or_else(|| super::nomad::run(w, size_mb, ops)).ok_or_else(|| {
            Error::Invalid(format!(
                "unknown workload '{w}' (known: {}, {}, nomad-SCENARIO-ACCESS)",
                WORKLOADS.join(", "),
                super::field::FIELD.join(", ")
            ))
        })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_small_and_repeats_its_result() {
        for w in WORKLOADS {
            let a = run(w, 2, 0).unwrap();
            let b = run(w, 2, 0).unwrap();
            assert_eq!(a.checksum, b.checksum, "{w}: two runs computed different things");
            assert!(a.ops > 0 && a.figure > 0.0 && a.allocated_bytes > 0, "{w}");
            assert_eq!(a.workload, *w);
        }
        assert!(run("nosuch", 2, 0).unwrap_err().to_string().contains("unknown workload 'nosuch'"));
    }

    #[test]
    fn the_hot_sets_are_where_the_descriptions_say() {
        // phase: six windows, none repeated
        let starts: Vec<u64> = (0..6u64).map(|p| p * 3 % 10).collect();
        let mut dedup = starts.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), 6, "{starts:?}");
        // a generator in range, roughly uniform
        let mut r = Rng(1);
        let mut hist = [0u32; 4];
        for _ in 0..40_000 {
            hist[r.below(4) as usize] += 1;
        }
        assert!(hist.iter().all(|&h| (9_000..11_000).contains(&h)), "{hist:?}");
        // multi-site: the two sites allocated last are a quarter of the footprint and take 90 %
        assert_eq!(SITE_WEIGHTS.iter().sum::<u64>(), 100);
        assert_eq!(SITE_WEIGHTS[6] + SITE_WEIGHTS[7], 90);
        assert!(SITE_WEIGHTS.is_sorted(), "hotter sites are allocated later");
    }

    #[test]
    fn the_multi_site_sites_are_distinct_functions() {
        let addrs: std::collections::BTreeSet<usize> = SITES.iter().map(|f| *f as usize).collect();
        assert_eq!(addrs.len(), SITES.len());
        let addrs: std::collections::BTreeSet<usize> = NODE_SITES.iter().map(|f| *f as usize).collect();
        assert_eq!(addrs.len(), NODE_SITES.len());
    }
}
