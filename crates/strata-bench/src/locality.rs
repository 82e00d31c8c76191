//! `strata bench locality`: the native NextTo demonstration.
//!
//! Builds L linked lists of N nodes, inserting round-robin (node i goes to list i mod L), so
//! consecutive nodes of one list are allocated far apart in time. Three ways:
//!   malloc   the system allocator (glibc): a list's nodes are scattered over the heap;
//!   strata   strata_malloc with the default placement: same scattering, Strata's allocator;
//!   next_to  each list in its own arena, each node next to its list's previous node.
//! Then it counts the distinct 4 KiB pages each list traversal touches, and times full
//! traversals of all lists, interleaving the variants round by round so they share the
//! machine's noise. The speed-up is a ratio from one run.
use std::collections::BTreeMap;
use std::ffi::c_void;

use serde::Serialize;
use strata_sys as sys;
use strata_util::{median, thread_cpu_ns, Progress};

use crate::{ensure, failed, Error};

#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Number of lists
    #[arg(long, default_value_t = 1024)]
    pub lists: usize,
    /// Nodes per list
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Bytes per node (>= 16: a next pointer and a key)
    #[arg(long, default_value_t = 32)]
    pub node_bytes: usize,
    /// Timed rounds (each round traverses every list once per variant)
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
    /// Variants to build and time (malloc and next_to are needed for the speed-up)
    #[arg(long, value_delimiter = ',', default_value = "malloc,strata,next_to")]
    pub variants: Vec<String>,
    /// Do not count pages per traversal (they need a sort of every node address: slow on the
    /// emulated machine, which `strata emu validate` runs this on)
    #[arg(long)]
    pub skip_pages: bool,
}

#[repr(C)]
struct Node {
    next: *mut Node,
    key: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Variant {
    Malloc,
    Strata,
    NextTo,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Malloc, Variant::Strata, Variant::NextTo];
    fn name(self) -> &'static str {
        match self {
            Variant::Malloc => "malloc",
            Variant::Strata => "strata",
            Variant::NextTo => "next_to",
        }
    }
}

/// The lists of one variant, and how to give their memory back.
struct Lists {
    variant: Variant,
    heads: Vec<*mut Node>,
    arenas: Vec<*mut sys::strata_arena_t>,
}

impl Lists {
    fn build(variant: Variant, a: &Options) -> Result<Lists, Error> {
        let mut heads = vec![std::ptr::null_mut::<Node>(); a.lists];
        let mut tails = vec![std::ptr::null_mut::<Node>(); a.lists];
        let mut arenas = Vec::new();
        if variant == Variant::NextTo {
            for _ in 0..a.lists {
                let ar = unsafe { sys::strata_arena_new(sys::strata_place_t::new(sys::STRATA_PLACE_DEFAULT)) };
                if ar.is_null() {
                    return Err(failed("strata_arena_new failed"));
                }
                arenas.push(ar);
            }
        }
        let mut lists = Lists { variant, heads: Vec::new(), arenas };
        for i in 0..a.lists * a.nodes {
            let l = i % a.lists;
            let p = unsafe {
                match variant {
                    Variant::Malloc => libc::malloc(a.node_bytes),
                    Variant::Strata => {
                        sys::strata_malloc(a.node_bytes, sys::strata_place_t::new(sys::STRATA_PLACE_DEFAULT))
                    }
                    Variant::NextTo => {
                        let mut place;
                        if tails[l].is_null() {
                            place = sys::strata_place_t::new(sys::STRATA_PLACE_ARENA);
                            place.u.arena = lists.arenas[l];
                        } else {
                            place = sys::strata_place_t::new(sys::STRATA_PLACE_NEXT_TO);
                            place.u.ptr = tails[l] as *const c_void;
                        }
                        sys::strata_malloc(a.node_bytes, place)
                    }
                }
            } as *mut Node;
            if p.is_null() {
                return Err(failed(format!("{} could not allocate node {i}", variant.name())));
            }
            unsafe {
                p.write(Node { next: std::ptr::null_mut(), key: i as u64 });
                if tails[l].is_null() {
                    heads[l] = p;
                } else {
                    (*tails[l]).next = p;
                }
            }
            tails[l] = p;
        }
        lists.heads = heads;
        Ok(lists)
    }

    /// Distinct pages touched by each list's traversal, averaged; and the whole footprint.
    fn pages(&self) -> (f64, usize) {
        let mut total = 0usize;
        let mut all = Vec::new();
        for &h in &self.heads {
            let mut pages = Vec::new();
            let mut p = h;
            while !p.is_null() {
                pages.push(p as usize >> 12);
                p = unsafe { (*p).next };
            }
            pages.sort_unstable();
            pages.dedup();
            total += pages.len();
            all.extend_from_slice(&pages);
        }
        all.sort_unstable();
        all.dedup();
        (total as f64 / self.heads.len() as f64, all.len())
    }

    /// Traverse every list once; returns the sum of keys (so the loop cannot be elided).
    fn traverse(&self) -> u64 {
        let mut sum = 0u64;
        for &h in &self.heads {
            let mut p = h;
            while !p.is_null() {
                unsafe {
                    sum = sum.wrapping_add((*p).key);
                    p = (*p).next;
                }
            }
        }
        std::hint::black_box(sum)
    }
}

impl Drop for Lists {
    fn drop(&mut self) {
        match self.variant {
            Variant::NextTo => {
                for &a in &self.arenas {
                    unsafe { sys::strata_arena_destroy(a) };
                }
            }
            v => {
                for &h in &self.heads {
                    let mut p = h;
                    while !p.is_null() {
                        let next = unsafe { (*p).next };
                        unsafe {
                            if v == Variant::Malloc {
                                libc::free(p as *mut c_void)
                            } else {
                                sys::strata_free(p as *mut c_void)
                            }
                        };
                        p = next;
                    }
                }
            }
        }
    }
}

/// The benchmark's figures (`--json`).
#[derive(Serialize, serde::Deserialize)]
pub struct Report {
    /// "native", or "emulated" (times are simulated: see `strata emu run`)
    pub machine: String,
    pub lists: usize,
    pub nodes_per_list: usize,
    pub node_bytes: usize,
    pub rounds: usize,
    pub page_bytes: usize,
    /// mean distinct pages touched by one list's traversal, per variant
    pub pages_per_traversal: BTreeMap<String, f64>,
    /// distinct pages holding all nodes, per variant
    pub footprint_pages: BTreeMap<String, usize>,
    /// median over rounds of nodes visited per second (of the thread's CPU time natively), per
    /// variant
    pub traversal_nodes_per_sec: BTreeMap<String, f64>,
    /// next_to throughput / malloc throughput, medians from the same rounds
    pub traversal_speedup: f64,
    /// malloc pages per traversal / next_to pages per traversal (null with --skip-pages)
    pub page_reduction: Option<f64>,
}

/// The traversals' clock: simulated time on the emulated machine; natively the thread's CPU
/// time (a traversal is single-threaded), so that a program sharing the CPUs does not read as
/// a slower layout.
fn traversal_clock_ns() -> u64 {
    if strata::emulated() {
        strata::now_ns()
    } else {
        thread_cpu_ns()
    }
}

/// Build the lists, count their pages, time their traversals.
pub fn run(a: &Options, progress: Progress) -> Result<Report, Error> {
    ensure(a.node_bytes >= 16, || "--node-bytes must be at least 16 (a pointer and a key)".into())?;
    ensure(a.lists > 0 && a.nodes > 0 && a.rounds > 0, || "--lists, --nodes and --rounds must be positive".into())?;
    let say = |m: &str| progress.say(m);
    let chosen: Vec<Variant> = Variant::ALL.into_iter().filter(|v| a.variants.iter().any(|n| n == v.name())).collect();
    for n in &a.variants {
        ensure(Variant::ALL.iter().any(|v| v.name() == n), || {
            format!("unknown variant '{n}' (malloc, strata, next_to)")
        })?;
    }
    ensure(chosen.contains(&Variant::Malloc) && chosen.contains(&Variant::NextTo), || {
        "--variants must include malloc and next_to (the speed-up compares them)".into()
    })?;
    let mut built = Vec::new();
    for v in chosen.iter().copied() {
        say(&format!("building {} lists x {} nodes of {} B with {}", a.lists, a.nodes, a.node_bytes, v.name()));
        built.push(Lists::build(v, a)?);
    }
    let expect: u64 = (0..(a.lists * a.nodes) as u64).fold(0u64, |s, k| s.wrapping_add(k));
    let mut rates: BTreeMap<Variant, Vec<f64>> = BTreeMap::new();
    for l in &built {
        if l.traverse() != expect {
            return Err(failed(format!("{}: lists are corrupt", l.variant.name())));
            // warm-up + check
        }
    }
    let nodes = (a.lists * a.nodes) as f64;
    for r in 0..a.rounds {
        say(&format!("traversal round {}/{}", r + 1, a.rounds));
        for l in &built {
            let t = traversal_clock_ns();
            let sum = l.traverse();
            let dt = (traversal_clock_ns() - t).max(1) as f64 * 1e-9;
            if sum != expect {
                return Err(failed(format!("{}: lists are corrupt", l.variant.name())));
            }
            rates.entry(l.variant).or_default().push(nodes / dt);
        }
    }
    let mut pages = BTreeMap::new();
    let mut foot = BTreeMap::new();
    let mut speed = BTreeMap::new();
    for l in &built {
        if !a.skip_pages {
            let (per, all) = l.pages();
            pages.insert(l.variant.name().to_string(), per);
            foot.insert(l.variant.name().to_string(), all);
        }
        speed.insert(l.variant.name().to_string(), median(rates[&l.variant].clone()));
    }
    drop(built);
    let report = Report {
        machine: if strata::emulated() { "emulated" } else { "native" }.into(),
        lists: a.lists,
        nodes_per_list: a.nodes,
        node_bytes: a.node_bytes,
        rounds: a.rounds,
        page_bytes: 4096,
        traversal_speedup: speed["next_to"] / speed["malloc"],
        page_reduction: match (pages.get("malloc"), pages.get("next_to")) {
            (Some(m), Some(n)) => Some(m / n),
            _ => None,
        },
        pages_per_traversal: pages,
        footprint_pages: foot,
        traversal_nodes_per_sec: speed,
    };
    Ok(report)
}

impl Report {
    /// The human table.
    pub fn table(&self) -> String {
        let report = self;
        let mut s = format!(
            "NextTo locality: {} lists x {} nodes of {} B, inserted round-robin ({})\n\n",
            self.lists,
            self.nodes_per_list,
            self.node_bytes,
            if self.machine == "emulated" { "emulated machine, simulated time" } else { "native, this machine" }
        );
        s += &format!(
            "{:<9} {:>16} {:>16} {:>20}\n",
            "variant", "pages/traversal", "footprint pages", "traversal Mnodes/s"
        );
        for n in self.traversal_nodes_per_sec.keys() {
            let na = || "-".to_string();
            s += &format!(
                "{:<9} {:>16} {:>16} {:>20.1}\n",
                n,
                report.pages_per_traversal.get(n).map_or_else(na, |p| format!("{p:.1}")),
                report.footprint_pages.get(n).map_or_else(na, |p| p.to_string()),
                report.traversal_nodes_per_sec[n] / 1e6
            );
        }
        if let Some(r) = report.page_reduction {
            s += &format!("\nnext_to vs malloc: {r:.1}x fewer pages per list traversal");
        } else {
            s += "\nnext_to vs malloc:";
        }
        s += &format!(", {:.2}x traversal speed-up (median of {} rounds)\n", report.traversal_speedup, self.rounds);
        s
    }
}
