//! `strata emu calibrate`: measure this machine for the `host` preset. Pointer chases (one
//! random cycle through 64-byte lines) give the load-to-use latency of each cache level and of
//! memory; the same chase with 4 KiB pages instead of 2 MiB ones gives the page-walk cost (the
//! two alternate over nine rounds, the median difference taken); every other chase's figure is
//! the median of its rounds, and every hop is one load instruction, as in a list traversal; a
//! streaming read gives one thread's bandwidth, and with the memory latency the
//! memory-level parallelism of a stream (mlp = latency / line transfer time); every CPU
//! streaming at once gives the memory's bandwidth, the capacity the emulator's queueing divides
//! by (one thread's own rate would make a lone stream queue behind itself, a cost the
//! one-thread measurement already includes). Chases through constant strides of 128 B to
//! 256 KiB, against the random chase, give the stride prefetcher's reach and whether it
//! crosses pages: processors differ there (an AMD EPYC core follows a 48 KiB stride across
//! pages, Intel's cores stop at the page). A chase that reads each line's 128-byte pair
//! `PAIR_GAP` pairs later says whether the pair came in with the line and stayed (the `pair`
//! setting). Lists of pages walked 32 bytes a hop, each page's neighbour another list's page or
//! unused, say whether the core fetches a page's neighbour as a stream nears its end (the
//! `next_page` setting). Chases of growing size up to the LLC sysfs gives say how much of it
//! this program can use (the model's LLC): on a shared or virtual machine the neighbours hold
//! the rest. Chases are timed by the thread's CPU time, so that another program sharing the
//! CPUs does not read as slower memory.
use std::time::Instant;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_util::{median, thread_cpu_ns, Host, Progress};

use crate::Error;

/// The cost of an L1 hit in every preset (emu/config.c's l1_ns).
pub const L1_BASE_NS: f64 = 1.0;

/// The way chases are measured: 2 since every hop is one load instruction ([`hops`]) and a
/// figure the median of its rounds.
/// 3 since the pair chase ([`pair_chase`]); 4 since the LLC's latency is read at 4 times L2
/// and a near stride cheaper than memory is within the reach ([`stride_reach`]); 5 since the
/// page-list chases ([`page_lists`]); 6 since the usable LLC ([`usable_llc`]).
pub const METHOD: u32 = 6;

/// One cache level as sysfs describes it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug)]
pub struct Level {
    pub bytes: u64,
    pub ways: u64,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Calibration {
    /// how it was measured ([`METHOD`]): a calibration by another method is measured again
    #[serde(default)]
    pub method: u32,
    /// the machine measured
    pub host: Host,
    pub l1: Level,
    pub l2: Level,
    pub llc: Level,
    pub l1_ns: f64,
    pub l2_ns: f64,
    pub llc_ns: f64,
    pub memory_ns: f64,
    pub walk_ns: f64,
    pub stream_mbps: f64,
    /// every CPU streaming at once
    pub memory_mbps: f64,
    pub mlp: f64,
    pub memory_bytes: u64,
    /// the constant-stride chases (4 KiB pages), against `random_ns`
    pub strides: Vec<StrideChase>,
    /// ns per hop of the random chase with 4 KiB pages (memory_ns + walk_ns)
    pub random_ns: f64,
    /// the largest stride followed, with every smaller one (0: none)
    pub stride_bytes: u64,
    /// a stride of a page or more was followed
    pub stride_pages: bool,
    /// the `NEAR_STRIDE` chase with 2 MiB pages: the same hops without page walks
    pub near_stride_huge_ns: f64,
    /// a page walk next to a recent one's page-table line: the `NEAR_STRIDE` chase with 4 KiB
    /// pages minus with 2 MiB pages
    pub walk_near_ns: f64,
    /// misses in flight for a followed stride: memory latency over the `NEAR_STRIDE` chase's
    /// hop with 2 MiB pages (1 when the stride is not followed)
    pub stride_mlp: f64,
    /// ns per hop of the pair chase (2 MiB pages): half its hops read a line whose 128-byte
    /// pair was read `PAIR_GAP` pairs before
    #[serde(default)]
    pub pair_ns: f64,
    /// ns per hop of the page-list chase whose pages' neighbours are the other lists' pages
    /// (walked before, by a list beside), and of the one whose neighbours are unused
    #[serde(default)]
    pub pages_beside_ns: f64,
    #[serde(default)]
    pub pages_apart_ns: f64,
    /// chases (2 MiB pages) from the LLC latency's size (that chase) doubling up to the LLC
    /// sysfs gives, and one through twice it: (bytes, ns per hop)
    #[serde(default)]
    pub llc_chases: Vec<(u64, f64)>,
    /// the LLC the model gets ([`usable_llc`])
    #[serde(default)]
    pub llc_usable_bytes: u64,
}

/// A chase through a constant stride: followed by a prefetcher when a hop costs less than
/// `FOLLOWED` of a random one.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
pub struct StrideChase {
    pub stride: u64,
    pub ns_per_hop: f64,
    pub followed: bool,
}

/// Strides the calibration chases: within a page, and across pages up to 256 KiB (the layout
/// benchmark's malloc lists step 48 KiB).
pub const STRIDES: [u64; 11] = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 49152, 65536, 262144];

/// The stride whose chases with 4 KiB and with 2 MiB pages give the cost of a page walk near the
/// last one (12 pages on, a page-table line and a half): the layout benchmark's malloc lists'.
pub const NEAR_STRIDE: u64 = 49152;

/// A stride is followed when a hop through it costs less than this share of a random hop.
pub const FOLLOWED: f64 = 0.5;

/// The pair chase reads the pairs of a group of this many lines after the group: 512 KiB of
/// lines between a line and its pair, as between a malloc list's line and its neighbour list's
/// in the layout benchmark (8,000 nodes a list).
pub const PAIR_GAP: usize = 4096;

/// The pair prefetcher is on when the pair chase costs less than this share of a memory hop:
/// with every pair kept, half its hops hit the LLC (about 0.55 of a memory hop); with none,
/// all miss (1.0). An Intel Xeon host read 0.80 (192 against 242 ns): the pair was read from a
/// DRAM row still open, or in part from its LLC, not kept; read at once, right after its line,
/// it cost 0.62.
pub const PAIR_KEPT: f64 = 0.7;

/// The lists of the page-list chases: a list's pages lie this many (or twice as many) pages
/// apart, as 1,024 lists built a node at a time, each in its own arena, lie in the layout
/// benchmark.
pub const PAGE_LISTS: usize = 1024;

/// Hops a page of the page-list chases: 32 bytes a hop, two a line.
pub const PAGE_HOPS: usize = 4096 / 32;

/// The next-page prefetcher is on when a page of the page-list chase whose neighbours were
/// walked costs at least this share of a memory hop less than one whose neighbours are unused:
/// the page's first line (and its translation) came in with the neighbour's walk, where
/// without it both start with a demand miss and a walk. An Intel Xeon host read 0.61-0.75 (113
/// to 145 ns a page less, 5.1-5.2 against 6.0-6.4 ns a hop; `docs/emulator.md`).
pub const NEXT_PAGE_SAVES: f64 = 0.3;

/// The LLC this program can use, from chases of growing size (`chases`: bytes, ns per hop; the
/// first the size `llc_ns` was read at, the last twice `llc`'s size): the largest up to `llc`'s
/// size mostly served by the LLC, its hop under halfway from `llc_ns` to memory as the chase
/// past the LLC reads it (or `memory_ns`, if less: a random chase through twice an LLC's size
/// hits it about half the time); in whole sets of `llc`'s ways. An Intel Xeon host (a
/// Firecracker guest, 260 MiB by sysfs) read 37-47 ns at 8 MiB, 93-126 at 16 MiB and 120-140 from
/// 32 to 512 MiB, but 170-270 ns at 1 GiB (`memory_ns`, which a chase through more memory than
/// the host's TLBs map pays for): halfway to that reached into the plateau and kept the whole
/// LLC at 37 ns, which gave a 1 GiB random chase a quarter of LLC hits the machine never had (0.83-0.92
/// of its ns a hop) and the layout benchmark's malloc lists 1.05-1.12 of its speed. Without a
/// chase below halfway, the first size.
pub fn usable_llc(chases: &[(u64, f64)], llc_ns: f64, memory_ns: f64, llc: Level) -> u64 {
    let memory = chases.iter().filter(|c| c.0 > llc.bytes).map(|c| c.1).fold(memory_ns, f64::min);
    let half = (llc_ns + memory) / 2.0;
    let within = || chases.iter().filter(|c| c.0 <= llc.bytes);
    let bytes = within().filter(|c| c.1 < half).chain(within().take(1)).map(|c| c.0).max();
    let set = 64 * llc.ways.max(1);
    (bytes.unwrap_or(llc.bytes) / set * set).max(set)
}

/// Whether page-list chases of `beside_ns` and `apart_ns` a hop (`PAGE_HOPS` a page), against a
/// memory hop of `memory_ns`, say that a stream's next page is fetched before it is reached.
pub fn next_page_fetched(beside_ns: f64, apart_ns: f64, memory_ns: f64) -> bool {
    (apart_ns - beside_ns) * PAGE_HOPS as f64 > NEXT_PAGE_SAVES * memory_ns
}

/// A stream's first lines that cost a demand miss (the `stream_train` setting), from the
/// page-list chase: `lists_ns` a hop natively (pages beside walked ones when the next-page
/// prefetcher is on, else apart), against what the model charges the same walk when it follows
/// a stream from its second line: a streamed hop (half of an L1 hit and a streamed line,
/// `read_ns / mlp` or the line's transfer time, queued at the walk's own bandwidth, as
/// emu/core.c charges them) and, for pages apart, a walk and a miss at each page
/// (`page_start_ns`). Each whole memory access the machine spends more a page is a line of
/// training: the AMD EPYC host read 4.70 ns a hop beside where the model charged 1.9, 2.3
/// accesses more a page, so 3. The Intel Xeon host's lists (5.1-5.2 ns a hop) lay within one
/// access of its model's (3.9-4.0 ns: its streamed lines cost more there), so 1, the default,
/// and its next_to lists already ran slower in the model than natively.
pub fn stream_train(lists_ns: f64, page_start_ns: f64, memory_ns: f64, mlp: f64, memory_mbps: f64) -> u32 {
    let line = (memory_ns / mlp).max(64_000.0 / memory_mbps);
    let mut hop = (L1_BASE_NS + line) / 2.0;
    for _ in 0..50 {
        hop = (L1_BASE_NS + line * queueing(32.0 / hop, memory_mbps)) / 2.0; // a line per two hops
    }
    let extra = (lists_ns - hop) * PAGE_HOPS as f64 - page_start_ns;
    1 + (extra / memory_ns).clamp(0.0, 15.0) as u32
}

/// Whether a pair chase of `pair_ns` a hop, against a memory hop of `memory_ns`, says that a
/// line's pair comes in with it and stays.
pub fn pair_kept(pair_ns: f64, memory_ns: f64) -> bool {
    pair_ns < PAIR_KEPT * memory_ns
}

/// Misses in flight for a followed stride, from the memory latency and a hop of the
/// `NEAR_STRIDE` chase with 2 MiB pages (`hop_ns`): the emulator charges such a miss latency /
/// stride_mlp, times its queueing factor at the bandwidth the chase itself uses (a line a hop,
/// M/D/1 as emu/core.c's epoch_end), which the measured hop already includes: without taking
/// it out the emulated chase came out 12 % slower than the native one on the AMD EPYC host.
pub fn stride_mlp(memory_ns: f64, hop_ns: f64, memory_mbps: f64) -> f64 {
    (memory_ns * queueing(64.0 / hop_ns, memory_mbps) / hop_ns).max(1.0)
}

/// The emulator's queueing factor for a program reading `bytes_per_ns` (GB/s) from memory of
/// `memory_mbps`: M/D/1 with the utilisation capped at 0.95, as emu/core.c's epoch_end.
fn queueing(bytes_per_ns: f64, memory_mbps: f64) -> f64 {
    let rho = (bytes_per_ns / (memory_mbps / 1000.0)).min(0.95);
    1.0 + rho / (2.0 * (1.0 - rho))
}

/// A `NEAR_STRIDE` hop with 2 MiB pages that costs less than this share of a memory hop is
/// cheaper than a miss, prefetched or not (see [`stride_reach`]).
pub const NEAR: f64 = 0.85;

/// The stride prefetcher's settings from the chases: the largest stride followed with every
/// smaller one, and whether one of a page or more was; at least `NEAR_STRIDE` when its hop with
/// 2 MiB pages (`near_huge_ns`) costs less than `NEAR` of a memory hop (`memory_ns`).
///
/// The model charges a followed stride's miss what that hop costs (`stride_mlp`), and a stride
/// beyond the reach a whole memory latency. An Intel Xeon host follows no stride beyond 16 KiB
/// (48 KiB with 4 KiB pages: 0.74 of a random hop), yet its 48 KiB hop with 2 MiB pages cost
/// 157-200 ns against 210-297 for memory (a DRAM row still open, not a prefetch), and shorter
/// strides cost less: with the reach at 16 KiB the emulated 48 KiB chase ran at 1.3-1.9 of the
/// machine's time, and 16 KiB, at 0.47-0.49 of a random hop, moved the reach from one
/// calibration to the next.
pub fn stride_reach(chases: &[StrideChase], near_huge_ns: f64, memory_ns: f64) -> (u64, bool) {
    let mut reach = chases.iter().take_while(|c| c.followed).last().map_or(0, |c| c.stride);
    if near_huge_ns < NEAR * memory_ns {
        reach = reach.max(NEAR_STRIDE);
    }
    (reach, reach >= 4096)
}

impl Calibration {
    /// The pair chase costs less than `PAIR_KEPT` of a memory hop: a line's pair comes in with
    /// it and stays in the caches (the `pair` setting).
    pub fn pair(&self) -> bool {
        pair_kept(self.pair_ns, self.memory_ns)
    }

    /// A page among walked ones costs `NEXT_PAGE_SAVES` of a memory hop less than one among
    /// unused ones: the next-page prefetcher (the `next_page` setting).
    pub fn next_page(&self) -> bool {
        next_page_fetched(self.pages_beside_ns, self.pages_apart_ns, self.memory_ns)
    }

    /// A stream's first lines that cost a demand miss ([`stream_train`]).
    pub fn stream_train(&self) -> u32 {
        let (lists_ns, page_start_ns) = if self.next_page() {
            (self.pages_beside_ns, 0.0)
        } else {
            (self.pages_apart_ns, self.walk_ns + self.memory_ns)
        };
        stream_train(lists_ns, page_start_ns, self.memory_ns, self.mlp, self.memory_mbps)
    }

    /// As emulator settings: one tier with this machine's caches and latencies.
    pub fn settings(&self) -> Vec<(String, String)> {
        let s = |k: &str, v: String| (k.to_string(), v);
        vec![
            s("nodes", "1".into()),
            s("read_ns", format!("{:.1}", self.memory_ns)),
            s("write_ns", format!("{:.1}", self.memory_ns)),
            s("read_mbps", format!("{:.0}", self.memory_mbps)),
            s("write_mbps", format!("{:.0}", self.memory_mbps)),
            s("capacity", self.memory_bytes.to_string()),
            s("l1", self.l1.bytes.to_string()),
            s("l1_ways", self.l1.ways.to_string()),
            s("l2", self.l2.bytes.to_string()),
            s("l2_ways", self.l2.ways.to_string()),
            s("llc", self.llc_usable_bytes.to_string()),
            s("llc_ways", self.llc.ways.to_string()),
            // an L1 hit costs a base cost standing in for compute (as in every preset), not
            // the load-to-use latency: most L1 hits are off the critical path
            s("l1_ns", L1_BASE_NS.to_string()),
            s("l2_ns", format!("{:.2}", self.l2_ns)),
            s("llc_ns", format!("{:.2}", self.llc_ns)),
            s("walk_ns", format!("{:.1}", self.walk_ns)),
            s("walk_near_ns", format!("{:.1}", self.walk_near_ns)),
            s("mlp", format!("{:.2}", self.mlp)),
            s("stride_bytes", self.stride_bytes.to_string()),
            s("stride_mlp", format!("{:.2}", self.stride_mlp)),
            s("stride_pages", u8::from(self.stride_pages).to_string()),
            s("pair", u8::from(self.pair()).to_string()),
            s("next_page", u8::from(self.next_page()).to_string()),
            s("stream_train", self.stream_train().to_string()),
        ]
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn size(s: &str) -> Option<u64> {
    let (n, m) = match s.strip_suffix('K') {
        Some(n) => (n, 1024),
        None => match s.strip_suffix('M') {
            Some(n) => (n, 1 << 20),
            None => (s, 1),
        },
    };
    n.parse::<u64>().ok().map(|v| v * m)
}

/// The data and unified caches of cpu0 by level (L1D, L2, last level).
fn caches() -> Result<(Level, Level, Level), Error> {
    let mut levels: Vec<(u32, Level)> = Vec::new();
    for i in 0..8 {
        let d = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let (Some(level), Some(kind), Some(sz), Some(ways)) = (
            read(&format!("{d}/level")),
            read(&format!("{d}/type")),
            read(&format!("{d}/size")),
            read(&format!("{d}/ways_of_associativity")),
        ) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        if let (Ok(l), Some(b), Ok(w)) = (level.parse(), size(&sz), ways.parse()) {
            levels.push((l, Level { bytes: b, ways: w }));
        }
    }
    levels.sort_by_key(|(l, _)| *l);
    if levels.len() < 3 {
        return Err(Error::Failed("sysfs describes fewer than three data cache levels".into()));
    }
    Ok((levels[0].1, levels[1].1, levels[levels.len() - 1].1))
}

/// An anonymous mapping, 2 MiB aligned, with or without transparent huge pages.
struct Buffer {
    base: *mut u8,
    map: *mut libc::c_void,
    map_len: usize,
}

impl Buffer {
    fn new(bytes: usize, huge: bool) -> Result<Buffer, Error> {
        let map_len = bytes + (2 << 20);
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(Error::Failed(format!("mmap of {bytes} bytes failed")));
        }
        let base = ((map as usize + (2 << 20) - 1) & !((2 << 20) - 1)) as *mut u8;
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        unsafe { libc::madvise(base as *mut libc::c_void, bytes, advice) };
        Ok(Buffer { base, map, map_len })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// A pointer chase through one random cycle over the lines of a buffer.
struct Chase {
    buf: Buffer,
    p: usize,
}

impl Chase {
    fn new(bytes: usize, huge: bool) -> Result<Chase, Error> {
        let buf = Buffer::new(bytes, huge)?;
        let lines = bytes / 64;
        let mut order: Vec<u32> = (0..lines as u32).collect();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for i in (1..lines).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, ((x >> 17) % i as u64) as usize); // Sattolo: a single cycle
        }
        let base = buf.base as *mut usize;
        for (i, next) in order.iter().enumerate() {
            unsafe { *base.add(i * 8) = *next as usize * 8 };
        }
        let mut c = Chase { buf, p: 0 };
        c.hops(lines.min(1 << 20) as u64); // warm up: fault in, fill caches and TLBs
        Ok(c)
    }

    fn hops(&mut self, n: u64) {
        self.p = hops(self.buf.base as *const usize, self.p, n);
    }

    /// ns per hop over the next `n` hops.
    fn ns_per_hop(&mut self, n: u64) -> f64 {
        let t = thread_cpu_ns();
        self.hops(n);
        (thread_cpu_ns() - t) as f64 / n as f64
    }
}

/// `n` hops of a chase whose words hold the index of the next, from word `p`; where it ended.
///
/// One load instruction makes every hop, as in a list traversal (`while (p) p = p->next`). A
/// counted loop would be unrolled by the compiler into several loads, and a prefetcher that
/// tracks strides per instruction (an AMD EPYC core's L1 stride prefetcher) then runs as many
/// hops ahead: a 48 KiB stride chase cost 8.8 ns a hop unrolled by eight and 14.5 ns in one
/// load (AMD EPYC), the cost the layout benchmark's lists pay. The never-taken second exit
/// keeps the loop whole: compilers do not unroll a loop with two exits by a runtime count.
fn hops(base: *const usize, mut p: usize, n: u64) -> usize {
    let mut k = 0;
    while k < n {
        p = unsafe { *base.add(p) };
        if p == usize::MAX {
            break;
        }
        k += 1;
    }
    std::hint::black_box(p)
}

/// The median of `ROUNDS` measurements. Not the fastest: on a shared host the machine's speed
/// drifts both ways (a 48 KiB stride hop read 13 ns, then 17 ns minutes later), and the fastest
/// of a few short rounds made the model faster than the programs timed after it, whose runs
/// are single and long (`strata emu validate`: stride chases at 0.79 of native).
fn median_of_rounds(mut f: impl FnMut() -> f64) -> f64 {
    median((0..ROUNDS).map(|_| f()).collect())
}

/// Rounds of each chase whose median is taken.
const ROUNDS: usize = 3;

fn chase(bytes: usize, huge: bool, hops: u64) -> Result<f64, Error> {
    let mut c = Chase::new(bytes, huge)?;
    Ok(median_of_rounds(|| c.ns_per_hop(hops / ROUNDS as u64)))
}

/// ns per hop of a chase through `buf` (4 KiB pages) at a constant `stride`: the lines at
/// each offset within the stride form a lane walked from start to end, lanes in random order
/// (so that the line next to one just read, which a core may fetch with it, is not read soon).
fn stride_chase(buf: &Buffer, bytes: usize, stride: usize, n: u64) -> f64 {
    let (lanes, per_lane) = (stride / 64, bytes / stride);
    let order = shuffled(lanes, 0x2545f4914f6cdd1d ^ stride as u64);
    let word = |lane: u32, i: usize| (i * stride + lane as usize * 64) / 8;
    cycle_ns(buf, order.iter().flat_map(|&lane| (0..per_lane).map(move |i| word(lane, i))), n)
}

/// ns per hop of a chase through `buf` (2 MiB pages) in groups of `PAIR_GAP` random 128-byte
/// pairs: the first line of each pair of the group, then the second line of each, in the same
/// order. Without a pair prefetcher every hop misses; with one that keeps what it fetched, the
/// second half of each group hits the cache the pairs were kept in.
fn pair_chase(buf: &Buffer, bytes: usize, n: u64) -> f64 {
    let order = shuffled(bytes / 128, 0x5851f42d4c957f2d);
    let word = |pair: u32, second: usize| (pair as usize * 128 + second * 64) / 8;
    let groups = order.chunks(PAIR_GAP);
    cycle_ns(buf, groups.flat_map(|g| (0..2).flat_map(move |second| g.iter().map(move |&p| word(p, second)))), n)
}

/// ns per hop of a chase through `PAGE_LISTS` lists of pages of `buf` (4 KiB pages), each page
/// walked 32 bytes a hop (two hops a line: a core's L1 streamer wants more than one load in a
/// line, and walked a line a hop an Intel Xeon's pages cost about the same either way), a
/// list's pages in turn, then the next list's. List l's k-th page is page
/// (k * PAGE_LISTS + l) * gap: with gap 1 a page's neighbours are the lists' beside it, walked
/// a list before and after; with gap 2 they are never read. The lists fill half of `bytes`
/// either way. A core that fetches the next page's first line (and its translation) as a
/// stream nears the end of a page has it cached when a list beside reaches it with gap 1; with
/// gap 2 every page starts with a demand miss and a page walk.
fn page_lists(buf: &Buffer, bytes: usize, gap: usize, n: u64) -> f64 {
    let per_list = bytes / 2 / 4096 / PAGE_LISTS;
    let page = move |list: usize, k: usize| (k * PAGE_LISTS + list) * gap * 4096 / 8;
    let pages = (0..PAGE_LISTS).flat_map(move |list| (0..per_list).map(move |k| page(list, k)));
    cycle_ns(buf, pages.flat_map(|p| (0..PAGE_HOPS).map(move |hop| p + hop * 4096 / PAGE_HOPS / 8)), n)
}

/// 0..n in a pseudo-random order (a Fisher-Yates shuffle seeded by `seed`).
fn shuffled(n: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x = seed;
    for i in (1..n).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        order.swap(i, ((x >> 17) % (i as u64 + 1)) as usize);
    }
    order
}

/// ns per hop of a chase that visits the words of `buf` at `order` (indexes, each once) in that
/// order and then starts again: each word gets the index of the next, and `n` hops are timed
/// after `n / 4` that warm up the TLB's and the prefetchers' state.
fn cycle_ns(buf: &Buffer, order: impl IntoIterator<Item = usize>, n: u64) -> f64 {
    let words = buf.base as *mut usize;
    let mut order = order.into_iter();
    let first = order.next().expect("a chase visits at least one word");
    let mut prev = first;
    for w in order {
        unsafe { *words.add(prev) = w };
        prev = w;
    }
    unsafe { *words.add(prev) = first };
    let p = hops(words, first, n / 4);
    let t = thread_cpu_ns();
    hops(words, p, n);
    (thread_cpu_ns() - t) as f64 / n as f64
}

/// Memory latency (2 MiB pages) and the page-walk cost (4 KiB pages minus 2 MiB pages): the
/// two chases alternate for `rounds` rounds. The latency is the median huge-page round's; the
/// walk, a small difference of two large
/// figures, is the median of the rounds' differences, each taken from two chases run back to
/// back under the same load (single differences varied between 0 and 75 ns on a shared host).
fn memory_and_walk(bytes: usize, rounds: usize, hops: u64) -> Result<(f64, f64), Error> {
    let mut huge = Chase::new(bytes, true)?;
    let mut small = Chase::new(bytes, false)?;
    let (mut mem, mut walk) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let h = huge.ns_per_hop(hops);
        let s = small.ns_per_hop(hops);
        mem.push(h);
        walk.push(s - h);
    }
    Ok((median(mem), median(walk).max(0.0)))
}

/// Each thread's share of `total` bytes: whole 2 MiB pages, at least one, so that a machine
/// with many CPUs does not need one large buffer each.
fn share(total: usize, threads: usize) -> usize {
    ((total / threads) & !((2 << 20) - 1)).max(2 << 20)
}

/// Streaming read bandwidth in MB/s of `threads` threads at once, each over its own share of
/// `total` bytes (the best of three rounds, timed from the first start to the last finish).
fn stream(total: usize, threads: usize) -> Result<f64, Error> {
    let bytes = share(total, threads);
    let bufs = (0..threads).map(|_| Buffer::new(bytes, true)).collect::<Result<Vec<_>, Error>>()?;
    let mut words: Vec<&mut [u64]> =
        bufs.iter().map(|b| unsafe { std::slice::from_raw_parts_mut(b.base as *mut u64, bytes / 8) }).collect();
    for w in words.iter_mut() {
        for (i, x) in w.iter_mut().enumerate() {
            *x = i as u64;
        }
    }
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        std::thread::scope(|sc| {
            for w in &words {
                let w: &[u64] = w;
                sc.spawn(move || std::hint::black_box(w.iter().fold(0u64, |a, &x| a.wrapping_add(x))));
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((bytes * threads) as f64 / best / 1e6)
}

fn mem_total() -> u64 {
    read("/proc/meminfo")
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(1 << 34, |kb| kb * 1024)
}

/// Where the last calibration of this machine is kept: $XDG_CACHE_HOME/strata/host-preset.json,
/// or ~/.cache/strata/host-preset.json (none without either variable).
pub fn saved_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("strata").join("host-preset.json"))
}

/// The calibration saved at `path`, if it was measured on `host` (the same CPU model, CPUs,
/// LLC, memory and kernel) by this [`METHOD`].
pub fn load(path: &Path, host: &Host) -> Option<Calibration> {
    let c: Calibration = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    (c.host == *host && c.method == METHOD).then_some(c)
}

/// Keep a calibration at `path` for the `host` preset.
pub fn save(c: &Calibration, path: &Path) -> Result<(), Error> {
    let saving = || strata_util::io(format!("saving the calibration to {}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(saving())?;
    }
    let text = serde_json::to_string_pretty(c).map_err(|e| Error::Failed(format!("calibration JSON: {e}")))?;
    std::fs::write(path, text).map_err(saving())?;
    Ok(())
}

/// The `host` preset's figures: the saved calibration of this machine, so that runs on the
/// preset repeat exactly (each measurement differs a little, and the machine with it); else
/// measured now and saved. `strata emu calibrate` measures again.
pub fn saved_or_measured(quiet: bool) -> Result<Calibration, Error> {
    let path = saved_path();
    if let Some(c) = path.as_deref().and_then(|p| load(p, &Host::detect())) {
        return Ok(c);
    }
    let c = measure(quiet)?;
    if let Some(p) = &path {
        if let Err(e) = save(&c, p) {
            Progress::new("calibrate", quiet).say(&format!("not kept: {e}"));
        }
    }
    Ok(c)
}

/// Measure (a few seconds; progress on stderr unless quiet).
pub fn measure(quiet: bool) -> Result<Calibration, Error> {
    let progress = Progress::new("calibrate", quiet);
    let say = |m: &str| progress.say(m);
    let (l1, l2, llc) = caches()?;
    say("pointer chases: L1, L2, last-level cache");
    let l1_ns = chase((l1.bytes / 2) as usize, true, 20_000_000)?;
    let l2_ns = chase((l2.bytes / 2) as usize, true, 10_000_000)?;
    // 4 times L2: on shared or virtualised machines the usable LLC can be far smaller than
    // sysfs says, and this is what a miss in L2 really costs there. Not 2 times: on an Intel
    // Xeon host (a Firecracker guest, 2 MiB L2, 300 MiB LLC by sysfs) a chase read 40 ns up to
    // 4 MiB, 6 MiB 51 or 95 ns from one run to the next, and 122-152 ns from 8 to 256 MiB, so
    // the 4 MiB chase gave 42 ns in one calibration and 135-155 in others: a model whose LLC
    // answers in 42 ns ran that host's 32 MiB chase 3 times too fast. On an AMD EPYC (L2 of 0.5
    // or 1 MiB, 32 MiB LLC) 4 times L2 is well inside the LLC either way.
    let llc_probe = (4 * l2.bytes).min(llc.bytes / 2);
    let llc_ns = chase(llc_probe as usize, true, 4_000_000)?;
    say("pointer chases: the usable LLC, from there doubling up to sysfs's, and twice that");
    let llc_chases = std::iter::successors(Some(2 * llc_probe), |b| Some(b * 2))
        .take_while(|&b| b <= llc.bytes)
        .chain([2 * llc.bytes])
        .map(|b| Ok((b, chase(b as usize, true, 1_000_000)?)));
    let llc_chases = std::iter::once(Ok((llc_probe, llc_ns))).chain(llc_chases).collect::<Result<Vec<_>, Error>>()?;
    let big = (4 * llc.bytes as usize).max(256 << 20);
    say(&format!("pointer chases: memory ({} MiB) with 2 MiB and with 4 KiB pages", big >> 20));
    let (memory_ns, walk_ns) = memory_and_walk(big, 9, 400_000)?;
    say("streaming read, one thread");
    let stream_mbps = stream(big, 1)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory_mbps = if cpus > 1 {
        say(&format!("streaming read, {cpus} threads"));
        stream(big, cpus)?.max(stream_mbps)
    } else {
        stream_mbps
    };
    say("pointer chases: constant strides of 128 B to 256 KiB (4 KiB pages), 48 KiB (2 MiB pages)");
    let random_ns = memory_ns + walk_ns;
    let buf = Buffer::new(big, false)?;
    let strides: Vec<StrideChase> = STRIDES
        .iter()
        .map(|&stride| {
            let ns_per_hop = median_of_rounds(|| stride_chase(&buf, big, stride as usize, 400_000));
            StrideChase { stride, ns_per_hop, followed: ns_per_hop < FOLLOWED * random_ns }
        })
        .collect();
    say(&format!("page lists: {PAGE_LISTS} lists walked 32 bytes a hop, their pages side by side and apart"));
    let pages_beside_ns = median_of_rounds(|| page_lists(&buf, big, 1, 2_000_000));
    let pages_apart_ns = median_of_rounds(|| page_lists(&buf, big, 2, 2_000_000));
    drop(buf);
    let huge = Buffer::new(big, true)?;
    let near_stride_huge_ns = median_of_rounds(|| stride_chase(&huge, big, NEAR_STRIDE as usize, 400_000));
    say(&format!("pointer chase: each line's 128-byte pair {PAIR_GAP} pairs later (2 MiB pages)"));
    let pair_ns = median_of_rounds(|| pair_chase(&huge, big, 400_000));
    drop(huge);
    let near_small = strides.iter().find(|c| c.stride == NEAR_STRIDE).map_or(random_ns, |c| c.ns_per_hop);
    let (stride_bytes, stride_pages) = stride_reach(&strides, near_stride_huge_ns, memory_ns);
    let line_ns = 64.0 * 1000.0 / stream_mbps;
    Ok(Calibration {
        method: METHOD,
        host: Host::detect(),
        l1,
        l2,
        llc,
        l1_ns,
        l2_ns,
        llc_ns,
        memory_ns,
        walk_ns,
        stream_mbps,
        memory_mbps,
        mlp: (memory_ns / line_ns).max(1.0),
        memory_bytes: mem_total(),
        strides,
        random_ns,
        stride_bytes,
        stride_pages,
        near_stride_huge_ns,
        walk_near_ns: (near_small - near_stride_huge_ns).max(0.0),
        stride_mlp: stride_mlp(memory_ns, near_stride_huge_ns, memory_mbps),
        pair_ns,
        pages_beside_ns,
        pages_apart_ns,
        llc_usable_bytes: usable_llc(&llc_chases, llc_ns, memory_ns, llc),
        llc_chases,
    })
}

impl Calibration {
    /// The human summary of `strata emu calibrate`.
    pub fn table(&self) -> String {
        let c = self;
        let mut s = format!("host preset, measured natively on this machine ({})\n", c.host.cpu_model);
        s += &format!(
            "caches: L1D {} KiB {}-way, L2 {} KiB {}-way, LLC {} KiB {}-way (sysfs)\n",
            c.l1.bytes >> 10,
            c.l1.ways,
            c.l2.bytes >> 10,
            c.l2.ways,
            c.llc.bytes >> 10,
            c.llc.ways
        );
        s += "usable LLC (chases with 2 MiB pages; LLC hits below halfway to the chase past it or memory):";
        for (bytes, ns) in &c.llc_chases {
            s += &format!(" {} MiB {ns:.1} ns,", bytes >> 20);
        }
        s += &format!(" so llc {} KiB\n", c.llc_usable_bytes >> 10);
        s += &format!(
            "latency (pointer chase): L1 {:.2} ns (the emulator charges L1 hits {L1_BASE_NS} ns), L2 {:.2} ns, LLC {:.2} ns, memory {:.1} ns\n",
            c.l1_ns, c.l2_ns, c.llc_ns, c.memory_ns
        );
        s += &format!(
            "page walk (4 KiB vs 2 MiB pages, memory chase): {:.1} ns\nstreaming read, one thread: {:.0} MB/s, so mlp {:.2}; every CPU at once: {:.0} MB/s (the tier's bandwidth)\n",
            c.walk_ns, c.stream_mbps, c.mlp, c.memory_mbps
        );
        s += &format!(
            "constant-stride chases, ns per hop (4 KiB pages; random order {:.1} ns; followed below {:.0} %):\n",
            c.random_ns,
            FOLLOWED * 100.0
        );
        for x in &c.strides {
            let mark = if x.followed { "followed" } else { "" };
            s += &format!("  {:>7} B {:>8.1} ns  {mark}\n", x.stride, x.ns_per_hop);
        }
        s += &format!(
            "{} KiB stride with 2 MiB pages: {:.1} ns a hop, so stride_mlp {:.2}; a page walk near the last one (4 KiB vs 2 MiB pages): {:.1} ns\n",
            NEAR_STRIDE >> 10,
            c.near_stride_huge_ns,
            c.stride_mlp,
            c.walk_near_ns
        );
        s += &format!(
            "stride prefetcher: strides up to {} B cost a {} KiB hop with 2 MiB pages (its reach, or {} KiB when that hop costs under {NEAR} of memory's: {:.2})\n",
            c.stride_bytes,
            NEAR_STRIDE >> 10,
            NEAR_STRIDE >> 10,
            c.near_stride_huge_ns / c.memory_ns
        );
        s += &format!(
            "each line's 128-byte pair read {PAIR_GAP} pairs later (2 MiB pages): {:.1} ns a hop, {:.2} of memory's, so pair {} (kept below {PAIR_KEPT})\n",
            c.pair_ns,
            c.pair_ns / c.memory_ns,
            u8::from(c.pair())
        );
        s += &format!(
            "{PAGE_LISTS} lists of pages walked 32 bytes a hop (4 KiB pages): {:.2} ns a hop with each page's neighbours walked, {:.2} with them unused, {:.0} ns a page less, {:.2} of memory's, so next_page {} (above {NEXT_PAGE_SAVES})\n",
            c.pages_beside_ns,
            c.pages_apart_ns,
            (c.pages_apart_ns - c.pages_beside_ns) * PAGE_HOPS as f64,
            (c.pages_apart_ns - c.pages_beside_ns) * PAGE_HOPS as f64 / c.memory_ns,
            u8::from(c.next_page())
        );
        s += &format!(
            "a stream's first {} lines are demand misses (stream_train: the page lists' {:.2} ns a hop against the model's with a stream followed from its second line)\n",
            c.stream_train(),
            if c.next_page() { c.pages_beside_ns } else { c.pages_apart_ns }
        );
        s += "\nas emulator settings:\n";
        for (k, v) in c.settings() {
            s += &format!("  {k}={v}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A calibration of this host with made-up figures.
    fn sample() -> Calibration {
        let l = Level { bytes: 1 << 20, ways: 16 };
        Calibration {
            method: METHOD,
            host: Host::detect(),
            l1: l,
            l2: l,
            llc: l,
            l1_ns: 1.0,
            l2_ns: 4.0,
            llc_ns: 20.0,
            memory_ns: 100.0,
            walk_ns: 30.0,
            stream_mbps: 8000.0,
            memory_mbps: 15000.0,
            mlp: 12.5,
            memory_bytes: 1 << 30,
            strides: vec![StrideChase { stride: 49152, ns_per_hop: 10.0, followed: true }],
            random_ns: 130.0,
            stride_bytes: 49152,
            stride_pages: true,
            near_stride_huge_ns: 10.0,
            walk_near_ns: 4.0,
            stride_mlp: 10.0,
            pair_ns: 56.0,
            pages_beside_ns: 4.0,
            pages_apart_ns: 6.0,
            llc_chases: vec![(1 << 19, 20.0), (1 << 20, 60.0), (2 << 20, 100.0)],
            llc_usable_bytes: 1 << 19,
        }
    }

    /// The queueing model divides by the tier's bandwidth: the host preset gives it the
    /// bandwidth of every CPU streaming, not one thread's (with which a lone stream would queue
    /// behind itself), while mlp comes from the one-thread stream.
    #[test]
    fn host_preset_bandwidth_is_every_cpu_streaming() {
        let c = sample();
        let s: std::collections::HashMap<String, String> = c.settings().into_iter().collect();
        assert_eq!(s["read_mbps"], "15000");
        assert_eq!(s["write_mbps"], "15000");
        assert_eq!(s["mlp"], "12.50");
        assert_eq!((s["stride_bytes"].as_str(), s["stride_pages"].as_str()), ("49152", "1"));
        assert_eq!(s["pair"], "1");
        assert_eq!(s["llc"], (1 << 19).to_string()); // the usable part, not sysfs's 1 MiB
    }

    /// The model's LLC is the largest chase up to sysfs's size mostly served by the LLC (under
    /// halfway to the chase past it, or memory), in whole sets; the first chase when none is.
    #[test]
    fn the_usable_llc_is_the_largest_chase_mostly_served_by_the_llc() {
        const MIB: u64 = 1 << 20;
        let llc = Level { bytes: 260 * MIB, ways: 20 };
        let sets = |b: u64| b / 1280 * 1280;
        // a Firecracker guest's: 37 ns at 8 MiB, a plateau of 120-140 ns from 16 MiB, and a
        // memory chase (1 GiB) far slower, which would put the plateau below halfway
        let guest = [
            (8 * MIB, 36.6),
            (16 * MIB, 126.4),
            (32 * MIB, 128.3),
            (64 * MIB, 130.1),
            (128 * MIB, 131.6),
            (256 * MIB, 136.0),
            (520 * MIB, 140.0),
        ];
        assert_eq!(usable_llc(&guest, 36.6, 267.2, llc), sets(8 * MIB));
        // without the chase past the LLC, memory is the reference (and the plateau passes)
        assert_eq!(usable_llc(&guest[..6], 36.6, 267.2, llc), sets(256 * MIB));
        // a machine whose whole LLC answers: sysfs's, in whole sets
        let whole = [(8 * MIB, 40.0), (64 * MIB, 45.0), (128 * MIB, 50.0), (256 * MIB, 60.0), (520 * MIB, 120.0)];
        assert_eq!(usable_llc(&whole, 40.0, 170.0, llc), sets(256 * MIB));
        let amd = Level { bytes: 32 * MIB, ways: 16 };
        let epyc = [(4 * MIB, 15.0), (8 * MIB, 18.0), (16 * MIB, 25.0), (32 * MIB, 45.0), (64 * MIB, 100.0)];
        assert_eq!(usable_llc(&epyc, 15.0, 175.0, amd), 32 * MIB);
        // nothing below halfway (the probe itself read memory): the probe's size
        assert_eq!(
            usable_llc(&[(8 * MIB, 150.0), (16 * MIB, 160.0), (520 * MIB, 160.0)], 150.0, 160.0, llc),
            sets(8 * MIB)
        );
    }

    /// Kept pairs make half the pair chase's hops cache hits; none kept, every hop a miss (an
    /// Intel Xeon host: 192 against 242 ns, a DRAM row still open).
    #[test]
    fn the_pair_prefetcher_is_on_when_half_the_pair_chase_hits() {
        assert!(pair_kept((100.0 + 15.0) / 2.0, 100.0));
        assert!(!pair_kept(192.0, 242.0));
        assert!(!pair_kept(100.0, 100.0));
    }

    /// The hosts' page lists, each against its own calibration's model.
    #[test]
    fn a_stream_trains_for_the_memory_accesses_a_page_costs_beyond_the_model() {
        // AMD EPYC (2026-11-29): 4.70 ns a hop beside walked pages, memory 158.6 ns, mlp 78.15,
        // 42,647 MB/s: the model's hop 1.86 ns, 2.3 accesses more a page
        assert_eq!(stream_train(4.70, 0.0, 158.6, 78.15, 42647.0), 3);
        // Intel Xeon (2026-11-29): 5.15 ns a hop, memory 196.3 ns, mlp 35.74, 22,670 MB/s: the
        // model's hop 4.0 ns, 0.75 of an access more a page
        assert_eq!(stream_train(5.15, 0.0, 196.3, 35.74, 22670.0), 1);
        // a walk cheaper than the model's, and pages apart whose start the model charges
        assert_eq!(stream_train(1.0, 0.0, 158.6, 78.15, 42647.0), 1);
        assert_eq!(stream_train(6.19, 36.8 + 158.6, 158.6, 78.15, 42647.0), 3);
        assert_eq!(stream_train(1e6, 0.0, 100.0, 10.0, 10000.0), 16);
        assert_eq!(sample().settings().iter().filter(|(k, _)| k == "stream_train").count(), 1);
    }

    #[test]
    fn the_next_page_prefetcher_is_on_when_pages_among_walked_ones_are_cheaper() {
        // the Intel Xeon host's: 113 ns a page less against a 189 ns memory hop
        assert!(next_page_fetched(5.13, 6.01, 189.0));
        // the same cost either way: every page starts with a demand miss
        assert!(!next_page_fetched(6.0, 6.05, 189.0));
        // cheaper by less than the share: noise, not a prefetched line
        assert!(!next_page_fetched(6.0, 6.3, 189.0));
        let c = sample();
        assert_eq!(c.settings().iter().find(|(k, _)| k == "next_page").map(|(_, v)| v.as_str()), Some("1"));
    }

    #[test]
    fn a_followed_stride_costs_the_measured_hop_with_the_emulators_queueing() {
        // a hop of 10 ns at 32 GB/s uses a fifth of the bandwidth: queueing 1.125
        let m = stride_mlp(170.0, 10.0, 32000.0);
        assert!((m - 170.0 * 1.125 / 10.0).abs() < 1e-9, "{m}");
        let cost = 170.0 / m; // what the emulator charges before queueing
        let rho = 64.0 / cost / 32.0; // ... and at that cost's own rate (close to the hop's)
        assert!((cost * (1.0 + rho / (2.0 * (1.0 - rho))) / 10.0 - 1.0).abs() < 0.03);
        assert_eq!(stride_mlp(170.0, 400.0, 32000.0), 1.0, "never below one miss in flight");
    }

    #[test]
    fn the_stride_reach_is_the_largest_stride_followed_with_every_smaller_one() {
        let c = |stride, followed| StrideChase { stride, ns_per_hop: 0.0, followed };
        // the 48 KiB hop with 2 MiB pages as dear as memory: the followed strides alone
        let reach = |chases: &[StrideChase]| stride_reach(chases, 250.0, 250.0);
        // within the page only
        assert_eq!(reach(&[c(128, true), c(2048, true), c(4096, false), c(49152, false)]), (2048, false));
        // AMD-like: across pages, far
        assert_eq!(reach(&[c(128, true), c(4096, true), c(49152, true), c(65536, false)]), (49152, true));
        // a large stride that happened to be fast beyond a gap does not count
        assert_eq!(reach(&[c(128, true), c(256, false), c(49152, true)]), (128, false));
        assert_eq!(reach(&[c(128, false)]), (0, false));
    }

    #[test]
    fn a_near_stride_cheaper_than_memory_is_within_the_reach() {
        let c = |stride, followed| StrideChase { stride, ns_per_hop: 0.0, followed };
        // Intel Xeon host: 16 KiB followed (or, in another calibration, not), 48 KiB with 2 MiB
        // pages at 0.67 of memory
        let intel = [c(128, true), c(16384, true), c(49152, false), c(65536, false)];
        assert_eq!(stride_reach(&intel, 200.0, 297.0), (NEAR_STRIDE, true));
        let flipped = [c(128, true), c(8192, true), c(16384, false), c(49152, false)];
        assert_eq!(stride_reach(&flipped, 200.0, 297.0), (NEAR_STRIDE, true));
        // at NEAR of memory or above, the reach is the followed strides'
        assert_eq!(stride_reach(&intel, NEAR * 297.0, 297.0), (16384, true));
        // a reach beyond it stays
        let far = [c(128, true), c(49152, true), c(65536, true), c(262144, false)];
        assert_eq!(stride_reach(&far, 14.5, 258.0), (65536, true));
    }

    #[test]
    fn a_saved_calibration_serves_the_machine_it_was_measured_on_only() {
        let c = sample();
        let here = c.host.clone();
        let dir = std::env::temp_dir().join(format!("strata-calibration-{}", std::process::id()));
        let path = dir.join("sub/host-preset.json");
        save(&c, &path).unwrap();
        let back = load(&path, &here).expect("read back on the same machine");
        assert_eq!(back.settings(), c.settings());
        let other = Host { cpu_model: "Intel(R) Xeon(R)".into(), ..here.clone() };
        assert!(load(&path, &other).is_none(), "another CPU measures again");
        save(&Calibration { method: METHOD - 1, ..sample() }, &path).unwrap();
        assert!(load(&path, &here).is_none(), "an older method measures again");
        std::fs::write(&path, "{\"host\": 1}").unwrap();
        assert!(load(&path, &here).is_none(), "an unreadable file measures again");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn each_streaming_thread_gets_whole_huge_pages_of_the_total() {
        const M: usize = 1 << 20;
        assert_eq!(share(420 * M, 1), 420 * M);
        assert_eq!(share(420 * M, 2), 210 * M);
        assert_eq!(share(420 * M, 64), 6 * M); // 6.56 MiB, rounded down to 2 MiB pages
        assert_eq!(share(M, 4), 2 * M); // at least one page each
    }
}
