/* core.c: the per-access path. Every instrumented load and store arrives here through the
 * SanitizerCoverage hooks (__sanitizer_cov_load1..16 / store1..16); bulk copies arrive
 * through the memcpy/memmove/memset this library interposes. Each access goes through the
 * thread's TLBs and caches and is charged on the thread's simulated clock.
 *
 * The fast path (same cache line as the thread's previous access) is a handful of
 * instructions; the emulator is compiled without instrumentation and never calls the
 * functions it interposes (-fno-builtin, and no loops the compiler turns into memcpy). */
#include "lru.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

_Thread_local emu_thread_t *emu_self __attribute__((tls_model("initial-exec")));
lru_t emu_llc;
double emu_queue_factor[EMU_MAX_NODES] = {1, 1, 1, 1, 1, 1, 1, 1};
#ifdef __AVX512F__
const int emu_avx512 = 1;
#else
const int emu_avx512 = 0;
#endif

static emu_thread_t *threads[EMU_MAX_THREADS];
static _Atomic int nthreads;
/* per thread and node: bytes/(epoch * bandwidth) of its last epoch, summed for queueing */
static double thread_util[EMU_MAX_THREADS][EMU_MAX_NODES];
static uint64_t stream_ps[EMU_MAX_NODES], stride_ps[EMU_MAX_NODES], rd_ps[EMU_MAX_NODES], wr_ps[EMU_MAX_NODES];
static uint64_t stlb_ps, walk_ps, walk_near_ps, epoch_ps;

/* ---- threads ---------------------------------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* core.c may be built for AVX-512 (the Makefile's EMU_SIMD, on by default where the building
 * machine has it): on a CPU without it, say so when the library loads, before any access,
 * instead of dying later on an illegal instruction. */
__attribute__((constructor)) static void check_cpu(void) {
  __builtin_cpu_init();
  if (emu_avx512 && !__builtin_cpu_supports("avx512f"))
    emu_die("strata-emu: this libstrata_emu.so was built for AVX-512, which this CPU lacks: "
            "rebuild it with make emu EMU_SIMD=0");
}

/* The machine of this process, from $STRATA_EMU: a bad setting stops the program, since it
 * would otherwise run on a machine it did not ask for. */
static void global_init(void) {
  char err[600], msg[700];
  if (emu_config_parse(&emu_cfg, emu_getenv("STRATA_EMU"), err, sizeof err)) {
    snprintf(msg, sizeof msg, "strata-emu: %s in STRATA_EMU", err);
    emu_die(msg);
  }
  emu_memory_init();
  /* the geometry was checked with the configuration: what fails here is memory */
  if (lru_init(&emu_llc, emu_cfg.llc_bytes >> EMU_LINE_SHIFT, emu_cfg.llc_ways))
    emu_die("strata-emu: no memory for the LLC's tags");
  for (int n = 0; n < emu_cfg.nnodes; n++) {
    rd_ps[n] = (uint64_t)emu_ps(emu_cfg.rd_ns[n]);
    wr_ps[n] = (uint64_t)emu_ps(emu_cfg.wr_ns[n]);
    double line_ns = (double)(1 << EMU_LINE_SHIFT) * 1000.0 / emu_cfg.rd_mbps[n];
    double st = emu_cfg.rd_ns[n] / emu_cfg.mlp;
    stream_ps[n] = (uint64_t)emu_ps(st > line_ns ? st : line_ns);
    double sd = emu_cfg.rd_ns[n] / emu_cfg.stride_mlp;
    stride_ps[n] = (uint64_t)emu_ps(sd > line_ns ? sd : line_ns);
  }
  stlb_ps = (uint64_t)emu_ps(emu_cfg.stlb_ns);
  walk_ps = (uint64_t)emu_ps(emu_cfg.walk_ns);
  walk_near_ps = (uint64_t)emu_ps(emu_cfg.walk_near_ns);
  epoch_ps = (uint64_t)emu_ps(emu_cfg.epoch_ns);
}

/* Runs once libc is set up: the engine, if the first thread started too early to load it
 * (emu_engine_load), loads now, and its first round is scheduled. */
__attribute__((constructor)) static void engine_when_libc_is_up(void) {
  if (emu_engine_late_load(emu_self)) emu_kernel_tick(emu_self);
}

emu_thread_t *emu_thread(void) {
  if (emu_self) return emu_self;
  pthread_once(&once, global_init);
  int idx = atomic_fetch_add(&nthreads, 1);
  if (idx >= EMU_MAX_THREADS) {
    atomic_fetch_sub(&nthreads, 1);
    return NULL; /* accesses of threads beyond the limit are not modelled */
  }
  emu_thread_t *t = emu_map(sizeof *t);
  const emu_config_t *c = &emu_cfg;
  if (!t || lru_init(&t->l1, c->l1_bytes >> EMU_LINE_SHIFT, c->l1_ways) ||
      lru_init(&t->l2, c->l2_bytes >> EMU_LINE_SHIFT, c->l2_ways) ||
      lru_init(&t->dtlb, c->huge ? c->dtlb2m : c->dtlb, c->dtlb_ways) ||
      lru_init(&t->stlb, c->stlb, c->stlb_ways))
    emu_die("strata-emu: no memory for a thread's caches and TLBs"); /* unmodelled: wrong figures */
  t->index = idx;
  t->last_line = t->last_vpn = t->last_tlb_key = UINT64_MAX;
  t->gen = atomic_load(&emu_tlb_gen);
  t->cost_l1 = (uint64_t)emu_ps(c->l1_ns);
  t->cost_l2 = (uint64_t)emu_ps(c->l2_ns);
  t->cost_llc = (uint64_t)emu_ps(c->llc_ns);
  t->cost_llc_stream = (uint64_t)emu_ps(c->llc_ns / c->mlp);
  t->cost_llc_stride = (uint64_t)emu_ps(c->llc_ns / c->stride_mlp);
  /* a new thread starts at the first thread's time: most programs spawn from main */
  t->clock_ps = idx ? threads[0]->clock_ps : 0;
  t->epoch_end_ps = t->clock_ps + epoch_ps;
  t->sample_countdown = emu_cfg.sample_period;
  threads[idx] = t;
  emu_self = t;
  if (idx == 0) {
    emu_engine_load(t);
    emu_kernel_tick(t); /* nothing is due yet: this schedules the engine's first round */
  }
  return t;
}

int emu_nthreads(void) {
  int n = atomic_load(&nthreads);
  return n > EMU_MAX_THREADS ? EMU_MAX_THREADS : n;
}
emu_thread_t *emu_thread_at(int i) { return threads[i]; }

/* ---- the access path -------------------------------------------------------------------- */

/* End of a bandwidth epoch: publish this thread's use of each tier, and recompute each tier's
 * latency factor from the sum (an M/D/1 queue: 1 + rho / (2 (1 - rho)), rho capped at 0.95). */
static void epoch_end(emu_thread_t *t) {
  static _Atomic uint64_t bg_seen[EMU_MAX_NODES];
  double epoch_s = (double)epoch_ps * 1e-12;
  int nt = emu_nthreads();
  for (int n = 0; n < emu_cfg.nnodes; n++) {
    double bw = emu_cfg.rd_mbps[n] * 1e6;
    thread_util[t->index][n] = (double)t->epoch_bytes[n] / (bw * epoch_s);
    t->epoch_bytes[n] = 0;
    uint64_t bg = atomic_load_explicit(&emu_bg_bytes[n], memory_order_relaxed);
    uint64_t seen = atomic_exchange_explicit(&bg_seen[n], bg, memory_order_relaxed);
    double rho = (double)(bg - seen) / (bw * epoch_s);
    for (int i = 0; i < nt; i++) rho += thread_util[i][n];
    if (rho > 0.95) rho = 0.95;
    emu_queue_factor[n] = 1.0 + rho / (2.0 * (1.0 - rho));
  }
  while (t->epoch_end_ps <= t->clock_ps) t->epoch_end_ps += epoch_ps;
}

enum { STREAM_UP = 1, STREAM_DOWN = 2 };
/* a line's index within its 4 KiB page: line & PAGE_LINE */
#define PAGE_LINE ((1u << (EMU_PAGE_SHIFT - EMU_LINE_SHIFT)) - 1)

/* Does this L2 access continue a sequential stream, ascending or descending? (what the L2
 * streamer prefetches: such a miss overlaps with mlp - 1 others in flight instead of paying
 * the full latency) STREAM_UP or STREAM_DOWN if it does, else 0. If not, and start is set,
 * the line takes a slot and may start one. */
static inline int stream_continues(emu_thread_t *t, uint64_t line, int start) {
  int i;
#ifdef __AVX512F__
  _Static_assert(EMU_STREAMS == 16, "two 8-lane vectors");
  /* line - last + 1 <= 2 (unsigned) and line != last, for all 16 at once */
  __m512i lv = _mm512_set1_epi64((long long)line), one = _mm512_set1_epi64(1),
          two = _mm512_set1_epi64(2);
  __m512i a = _mm512_loadu_si512(t->stream_last), b = _mm512_loadu_si512(t->stream_last + 8);
  unsigned m = (_mm512_cmple_epu64_mask(_mm512_add_epi64(_mm512_sub_epi64(lv, a), one), two) &
                _mm512_cmpneq_epu64_mask(lv, a)) |
               (unsigned)(_mm512_cmple_epu64_mask(_mm512_add_epi64(_mm512_sub_epi64(lv, b), one), two) &
                          _mm512_cmpneq_epu64_mask(lv, b)) << 8;
  i = m ? __builtin_ctz(m) : EMU_STREAMS;
#else
  for (i = 0; i < EMU_STREAMS; i++)
    if (line - t->stream_last[i] + 1 <= 2 && line != t->stream_last[i]) break; /* last +- 1 */
#endif
  if (i < EMU_STREAMS) {
    int up = line == t->stream_last[i] + 1;
    t->stream_last[i] = line;
    t->stream_slot = (unsigned)i;
    t->stream_len[i] += t->stream_len[i] != UINT32_MAX;
    return up ? STREAM_UP : STREAM_DOWN;
  }
  if (!start) return 0;
  i = (int)(t->stream_victim++ % EMU_STREAMS);
  t->stream_last[i] = line;
  t->stream_at[i] = t->clock_ps;
  t->stream_len[i] = 1;
  return 0;
}

/* Has the streamer the stream just continued (stream_continues) on its way, or is the stream
 * still training? Its first stream_train lines are demand misses: a core's streamer confirms
 * a direction over a few misses before it runs ahead, and stops at each 4 KiB page, so every
 * page a list walks into starts with them. Measured on the AMD EPYC host: lists of 32-byte
 * nodes whose pages lie apart cost 594 ns a page more than one walk through contiguous pages
 * (6.19 against 1.55 ns a hop), about three memory accesses, where a stream followed from its
 * second line costs one. */
static inline int stream_followed(const emu_thread_t *t) {
  return t->stream_len[t->stream_slot] > (uint32_t)emu_cfg.stream_train;
}

/* What a streamed line costs the thread: its share of the stream's fetches (cost), less, with
 * overlap=1, the time since the thread took the stream's previous line, during which the
 * streamer had this one on its way (a list walked at 5 ns a node waits for little of a line
 * that arrives every 8 ns). The stream's clock then moves to now. */
static inline uint64_t stream_cost(emu_thread_t *t, uint64_t cost) {
  if (!emu_cfg.overlap) return cost;
  uint64_t at = t->stream_at[t->stream_slot];
  uint64_t since = t->clock_ps > at ? t->clock_ps - at : 0;
  cost = cost > since ? cost - since : 0;
  t->stream_at[t->stream_slot] = t->clock_ps + cost;
  return cost;
}

/* Does this L2 miss repeat the step of a recent one's constant stride? (what a stride
 * prefetcher follows: within its reach, stride_bytes, and with stride_pages into other pages,
 * it has the line on its way: it costs latency / stride_mlp.) Each of the EMU_STRIDES slots
 * holds an L2-miss line and the step that led to it: a miss one step on from a slot's line
 * continues its stride; else it trains the slot whose line is nearest within the reach (its
 * step becomes the distance), or takes the oldest slot. By address, not by instruction, which
 * is the same for a chase whose every hop is one load (a list traversal; the calibration's
 * chases): an AMD EPYC core follows its 48 KiB stride at 14.5 ns a hop, against 258 ns in
 * random order. Unrolled 8 times, each load's own stride is 8 hops and the core's
 * per-instruction prefetcher runs 8 hops ahead (8.8 ns a hop): not modelled. A stride of one
 * line is the stream detector's. */
static inline int stride_continues(emu_thread_t *t, uint64_t line) {
  uint64_t reach = emu_cfg.stride_bytes >> EMU_LINE_SHIFT, nearest = reach + 1;
  if (!reach) return 0;
  int near = -1;
  for (int i = 0; i < EMU_STRIDES; i++) {
    int64_t step = (int64_t)(line - t->stride_last[i]);
    uint64_t d = step < 0 ? (uint64_t)-step : (uint64_t)step;
    if (step != 0 && step == t->stride_step[i]) {
      int same_page = line >> (EMU_PAGE_SHIFT - EMU_LINE_SHIFT) ==
                      t->stride_last[i] >> (EMU_PAGE_SHIFT - EMU_LINE_SHIFT);
      t->stride_last[i] = line;
      return d > 1 && (emu_cfg.stride_pages || same_page);
    }
    if (step != 0 && d < nearest) nearest = d, near = i;
  }
  if (near < 0) near = (int)(t->stride_victim++ % EMU_STRIDES), t->stride_step[near] = 0;
  else t->stride_step[near] = (int64_t)(line - t->stride_last[near]);
  t->stride_last[near] = line;
  return 0;
}

/* How a miss in L2 was prefetched, if it was. */
enum { PF_STREAM = 1, PF_STRIDE = 2 };

/* A miss in every cache: the line comes from the node of its page. */
static void memory_access(emu_thread_t *t, int prefetched, const pte_t *pte, int store,
                          uintptr_t addr) {
  int node = pte->node;
  uint64_t cost = prefetched == PF_STREAM   ? stream_ps[node]
                  : prefetched == PF_STRIDE ? stride_ps[node]
                  : store                   ? wr_ps[node]
                                            : rd_ps[node];
  cost = (uint64_t)((double)cost * emu_queue_factor[node]);
  t->clock_ps += prefetched == PF_STREAM ? stream_cost(t, cost) : cost;
  t->node_accesses[node]++;
  /* a line in, and for a store eventually a line out */
  t->epoch_bytes[node] += (uint64_t)(1 + store) << EMU_LINE_SHIFT;
  if (unlikely(t->clock_ps >= t->epoch_end_ps)) epoch_end(t);
  if (unlikely(emu_cfg.sample_period) && --t->sample_countdown == 0) {
    t->sample_countdown = emu_cfg.sample_period;
    emu_sample(t, addr, node, store);
  }
}

/* The key of a line in L2 and the LLC: the virtual line (physical=0, the default, as
 * cachegrind indexes), or the line of an emulated physical frame (physical=1).
 *
 * Real L2s and LLCs index by physical address, and which frames the kernel hands out varies
 * from run to run. build/emu/frames reads them from /proc/self/pagemap for a malloc heap like
 * the layout benchmark's: along its malloc lists' 12-page stride the pages' colours (frame
 * modulo the 32 pages a 2 MiB 16-way L2 way spans) were as concentrated as by virtual page
 * (4.00: 8 of 32 colours) in some runs, the kernel giving consecutive frames, and spread almost
 * evenly (1.08, where 1 is even) in others. physical=1 models the spread case: a frame is a
 * fixed permutation of its page's number (a multiply and an xorshift, a bijection on the 36
 * bits of a 48-bit address space's pages: distinct pages get distinct frames, the frame's lines
 * stay below 2^42 as narrow LRU sets need, and runs stay deterministic),
 * of the 2 MiB page's number with huge=1 (a transparent huge page is contiguous, so its 512
 * pages keep their colours). The L1 stays virtually indexed: its sets span one page (64 sets of
 * 64 B), where the two agree. */
static inline uint64_t frame_line(uint64_t line) {
  if (!emu_cfg.physical) return line;
  unsigned shift = emu_cfg.huge ? 21 - EMU_LINE_SHIFT : EMU_PAGE_SHIFT - EMU_LINE_SHIFT;
  const uint64_t m = (1ull << (48 - EMU_LINE_SHIFT - shift)) - 1; /* frames of 2^48 bytes */
  uint64_t x = ((line >> shift) * 0x9E3779B97F4A7C15ull) & m;
  x ^= x >> 17;
  return x << shift | (line & ((1ull << shift) - 1));
}

/* The next-page prefetcher (next_page=1): a stream that ascends to the last line of its 4 KiB
 * page has the next page's first line fetched into L2 (and the LLC), and that page's
 * translation walked into the STLB, at no cost to the thread; a prefetch never faults, so
 * nothing happens for a page not present or waiting for a hint fault. When the program
 * reaches the page, now or much later (a list whose pages lie among other lists' pages: Intel
 * L1's next-page prefetcher fetched its first line while the list beside it was walked), its
 * first line hits L2 and the streamer, which sees the hit, goes on from it. Measured on the
 * Intel Xeon host: 1,024 lists of 32-byte nodes, a list's 4 KiB pages 1,024 pages apart,
 * walked 4.1 ns a node with each page's neighbours the other lists' pages, 6.1 ns with a page
 * left unused between them (250 ns a page: a demand miss and a walk, what the model charged
 * both). */
static void next_page_fetch(emu_thread_t *t, uint64_t line) {
  uint64_t vpn = line >> (EMU_PAGE_SHIFT - EMU_LINE_SHIFT);
  pte_t *pte = emu_pte(vpn);
  if (!pte) return;
  uint8_t f = atomic_load_explicit(&pte->flags, memory_order_relaxed);
  if ((f & (STRATA_EMU_PRESENT | STRATA_EMU_HINT)) != STRATA_EMU_PRESENT) return;
  if (t->stlb.sets) lru_touch_inline(&t->stlb, emu_cfg.huge ? line >> (21 - EMU_LINE_SHIFT) : vpn);
  uint64_t pline = frame_line(line);
  if (t->l2.sets && lru_touch_inline(&t->l2, pline)) return;
  if (emu_llc.sets && lru_touch_inline(&emu_llc, pline)) return;
  t->epoch_bytes[pte->node] += 1 << EMU_LINE_SHIFT;
}

/* An L2 access the streamer sees: does it continue a stream (stream_continues), and, with
 * next_page=1, is it an ascending stream's last line of its page, whose next page is fetched?
 * Every L2 miss may start a stream; with next_page=1 an L2 hit continues one, and starts one
 * only at its page's first line (the line next_page_fetch brings: a hit anywhere else
 * starting streams would train on every reuse, which costs graph walks 4-17 % in the model
 * and no real streamer does). */
static inline int stream_seen(emu_thread_t *t, uint64_t line, int start) {
  int s = stream_continues(t, line, start);
  if (emu_cfg.next_page && s == STREAM_UP && (line & PAGE_LINE) == PAGE_LINE)
    next_page_fetch(t, line + 1);
  return s;
}

/* pline: the line's key in L2 and the LLC (frame_line); llc: where it lives in the LLC, if
 * there is one (access_slow has it already, for its prefetch). */
static inline __attribute__((always_inline)) void cache_path(emu_thread_t *t, uint64_t line,
                                                             uint64_t pline, lru_where_t llc,
                                                             const pte_t *pte, int store,
                                                             uintptr_t addr) {
  if (lru_touch_inline(&t->l1, line)) {
    t->clock_ps += t->cost_l1;
    return;
  }
  t->l1_misses++;
  if (t->l2.sets) {
    if (lru_touch_inline(&t->l2, pline)) {
      t->l2_hits++;
      t->clock_ps += t->cost_l2;
      if (emu_cfg.next_page) stream_seen(t, line, (line & PAGE_LINE) == 0);
      return;
    }
    t->l2_misses++;
  }
  int stride = stride_continues(t, line), continues = stream_seen(t, line, 1) != 0;
  int stream = continues && stream_followed(t);
  t->stream_misses += stream;
  /* the pair's other line, in on the same fetch (no cost, no count); not for a miss that
   * continues a stream, whose next line the streamer fetches once it is trained */
  if (emu_cfg.pair && !continues && emu_llc.sets) lru_touch_inline(&emu_llc, pline ^ 1);
  t->stride_misses += stride && !stream;
  int prefetched = stream ? PF_STREAM : stride ? PF_STRIDE : 0;
  if (emu_llc.sets && lru_touch_at(&emu_llc, llc)) {
    t->llc_hits++;
    t->clock_ps += stream ? stream_cost(t, t->cost_llc_stream) : stride ? t->cost_llc_stride : t->cost_llc;
    return;
  }
  t->llc_misses++;
  memory_access(t, prefetched, pte, store, addr);
}

/* Does this page walk end on a page-table line next to one of the last EMU_WALKS walks'?
 * (8 entries a line: pages up to 16 pages from a recent walk's.) Such a walk finds its last
 * level in the caches, or a prefetcher has it on its way, and costs walk_near_ns, not walk_ns
 * (measured on the AMD EPYC host: 42-79 ns in random order, 0.5-3 ns through a 48 KiB
 * stride). */
static inline int walk_near(emu_thread_t *t, uint64_t key) {
  uint64_t line = key >> 3;
  int near = 0;
  for (int i = 0; i < EMU_WALKS && !near; i++) near = line - t->walk_last[i] + 2 <= 4;
  t->walk_last[t->walk_victim++ % EMU_WALKS] = line;
  return near;
}

/* The page of addr changed: translate through DTLB, STLB, page walk; fault if needed. */
static pte_t *translate(emu_thread_t *t, uintptr_t addr, uint64_t vpn) {
  uint64_t key = emu_cfg.huge ? addr >> 21 : vpn;
  if (key != t->last_tlb_key) {
    if (!lru_touch_inline(&t->dtlb, key)) {
      t->dtlb_misses++;
      if (t->stlb.sets && lru_touch_inline(&t->stlb, key)) {
        t->clock_ps += stlb_ps;
      } else {
        t->stlb_misses++;
        t->clock_ps += walk_near(t, key) ? walk_near_ps : walk_ps;
      }
    }
    t->last_tlb_key = key;
  }
  pte_t *pte = emu_pte(vpn);
  if (unlikely(!pte)) pte = emu_pte_make(vpn);
  uint8_t f = atomic_load_explicit(&pte->flags, memory_order_relaxed);
  if (unlikely(!(f & STRATA_EMU_PRESENT))) emu_first_touch(t, vpn, pte);
  else if (unlikely(f & STRATA_EMU_HINT)) emu_hint_fault(t, vpn, pte);
  t->last_vpn = vpn;
  t->last_pte = pte;
  if (unlikely(t->clock_ps >= emu_next_tick_ps)) emu_kernel_tick(t);
  return pte;
}

/* The page bits an access sets: accessed, and dirty for a store. */
static inline uint8_t access_bits(int store) {
  return (uint8_t)(STRATA_EMU_ACCESSED | (store ? STRATA_EMU_DIRTY : 0));
}

/* The page's ground-truth access count, saturating. */
static inline __attribute__((always_inline)) void count_access(pte_t *pte) {
  pte->accesses += pte->accesses != UINT32_MAX;
}

/* An access that changes no cache or TLB state (its page's bits are already set): the page's
 * count and the cost of an L1 hit. */
static inline __attribute__((always_inline)) void count_l1_hit(emu_thread_t *t, pte_t *pte) {
  count_access(pte);
  t->clock_ps += t->cost_l1;
}

/* Another line, but one whose access changes no LRU state: the most recent line of its L1 set,
 * through the most recent entry of its DTLB set, on a page that is present, not waiting for a
 * hint fault, and already accessed (and dirty, for a store). Only the counters and the clock
 * move, as on the fast path. About half of the slow-path entries of the layout benchmark are
 * such hits: a program's accesses alternate between its stack and a few heap lines. */
static inline __attribute__((always_inline)) int mru_hit(emu_thread_t *t, uintptr_t addr,
                                                        uint64_t line, int store) {
  if (!lru_is_mru(&t->l1, line)) return 0;
  uint64_t vpn = addr >> EMU_PAGE_SHIFT, key = t->last_tlb_key;
  pte_t *pte = t->last_pte;
  if (vpn != t->last_vpn) {
    key = emu_cfg.huge ? addr >> 21 : vpn;
    if (key != t->last_tlb_key && !lru_is_mru(&t->dtlb, key)) return 0;
    if (t->clock_ps >= emu_next_tick_ps || !(pte = emu_pte(vpn))) return 0; /* translate ticks */
  }
  uint8_t want = (uint8_t)(STRATA_EMU_PRESENT | access_bits(store));
  if ((atomic_load_explicit(&pte->flags, memory_order_relaxed) & (want | STRATA_EMU_HINT)) != want)
    return 0;
  count_l1_hit(t, pte);
  t->last_line = line;
  t->last_vpn = vpn;
  t->last_pte = pte;
  t->last_tlb_key = key;
  return 1;
}

/* Everything past the fast path and mru_hit: another page, or another line. For another line,
 * first prefetches, so that the host fetches them while the model works: the program's
 * own line (it loads or stores it as soon as the hook returns; without this its cache misses
 * no longer overlap with anything) and the LLC set this line maps to (a tag array too large to
 * stay in the host's caches next to the program's data): one host line for a narrow set, or
 * every host line of a wide one, which spans three when it does not start on a line (15 wide
 * ways are 120 bytes). Prefetches never fault. */
static __attribute__((noinline)) void access_slow(emu_thread_t *t, uintptr_t addr, int store) {
  if (atomic_load_explicit(&emu_tlb_gen, memory_order_relaxed) != t->gen) emu_tlb_sync(t);
  uint64_t line = addr >> EMU_LINE_SHIFT, pline = 0;
  lru_where_t llc = {NULL, 0};
  if (line != t->last_line) {
    if (store) __builtin_prefetch((const void *)addr, 1);
    else __builtin_prefetch((const void *)addr, 0);
    pline = frame_line(line);
    if (emu_llc.sets) {
      llc = lru_where(&emu_llc, pline);
      __builtin_prefetch(llc.set, 1);
      if (!emu_llc.narrow) { /* a wide set of up to 16 ways spans up to three host lines */
        __builtin_prefetch((uint64_t *)llc.set + 8, 1);
        __builtin_prefetch((uint64_t *)llc.set + emu_llc.ways - 1, 1);
      }
    }
  }
  uint64_t vpn = addr >> EMU_PAGE_SHIFT;
  pte_t *pte = vpn == t->last_vpn ? t->last_pte : translate(t, addr, vpn);
  uint8_t want = access_bits(store);
  if ((atomic_load_explicit(&pte->flags, memory_order_relaxed) & want) != want) {
    uint8_t old = atomic_fetch_or_explicit(&pte->flags, want, memory_order_relaxed);
    if (store && unlikely(old & (PTE_INFLIGHT | PTE_SHADOW))) emu_tx_written(t, pte, old);
  }
  t->tx_grace = NULL;
  if (line == t->last_line) {
    count_l1_hit(t, pte);
    return;
  }
  count_access(pte);
  t->last_line = line;
  cache_path(t, line, pline, llc, pte, store, addr);
}

/* Not the same line, or a shootdown or page bits pending: a line that is the most recent of
 * its set changes nothing but counters (mru_hit), checked before access_slow's frame. */
static __attribute__((noinline)) void access_other(emu_thread_t *t, uintptr_t addr, int store) {
  uint64_t line = addr >> EMU_LINE_SHIFT;
  if (likely(atomic_load_explicit(&emu_tlb_gen, memory_order_relaxed) == t->gen) &&
      line != t->last_line && mru_hit(t, addr, line, store))
    return;
  access_slow(t, addr, store);
}

/* The fast path: the same line as this thread's previous access (so the most recent line of
 * its L1 set and the most recent page of its TLB: nothing to update but counters), no
 * shootdown pending, and the page's bits already set (a scan or the demotion clock may have
 * cleared them since). */
static inline __attribute__((always_inline)) void access1(emu_thread_t *t, uintptr_t addr, int store) {
  if (store) t->stores++;
  else t->loads++;
  pte_t *pte = t->last_pte;
  uint8_t want = access_bits(store);
  if (likely((addr >> EMU_LINE_SHIFT) == t->last_line &&
             atomic_load_explicit(&emu_tlb_gen, memory_order_relaxed) == t->gen &&
             (atomic_load_explicit(&pte->flags, memory_order_relaxed) & want) == want)) {
    count_l1_hit(t, pte);
    return;
  }
  access_other(t, addr, store);
}

static inline int straddles(uintptr_t a, unsigned size) {
  return (a & ((1u << EMU_LINE_SHIFT) - 1)) + size > (1u << EMU_LINE_SHIFT);
}

/* The first access of a thread, or one that straddles two lines. */
static __attribute__((noinline)) void hook_other(const void *p, unsigned size, int store) {
  emu_thread_t *t = emu_self;
  if (unlikely(!t) && !(t = emu_thread())) return;
  uintptr_t a = (uintptr_t)p;
  access1(t, a, store);
  if (straddles(a, size)) access1(t, a + size - 1, store);
}

/* Every hook: access1, whose call to the slow path is the last thing the hook does, so the
 * compiler makes it a jump and the fast path needs no stack frame. */
static inline __attribute__((always_inline)) void hook(const void *p, unsigned size, int store) {
  emu_thread_t *t = emu_self;
  uintptr_t a = (uintptr_t)p;
  if (likely(t && !straddles(a, size))) {
    access1(t, a, store);
    return;
  }
  hook_other(p, size, store);
}

/* A range touched by a bulk operation: one access per line. */
void emu_access_range(emu_thread_t *t, uintptr_t addr, size_t len, int store) {
  if (!len) return;
  t->bulk_bytes += len;
  uintptr_t end = addr + len;
  for (uintptr_t a = addr; a < end; a = (a | ((1u << EMU_LINE_SHIFT) - 1)) + 1) access1(t, a, store);
}

/* ---- entry points ------------------------------------------------------------------------ */

#define EMU_HOOKS(n, type)                                                                 \
  __attribute__((visibility("default"))) void __sanitizer_cov_load##n(type *p) { hook(p, n, 0); } \
  __attribute__((visibility("default"))) void __sanitizer_cov_store##n(type *p) { hook(p, n, 1); }
EMU_HOOKS(1, uint8_t)
EMU_HOOKS(2, uint16_t)
EMU_HOOKS(4, uint32_t)
EMU_HOOKS(8, uint64_t)
EMU_HOOKS(16, __int128)

/* inline-8bit-counters is only there because a coverage type must be given for the load and
 * store hooks to be emitted; the counters themselves are not used. */
__attribute__((visibility("default"))) void __sanitizer_cov_8bit_counters_init(uint8_t *b, uint8_t *e) {
  (void)b;
  (void)e;
}

/* Bulk copies: accounted as the ranges they read and write, then done by glibc's own
 * implementation (the _chk entry points reach it without going through these symbols). */
extern void *__memcpy_chk(void *d, const void *s, size_t n, size_t dn);
extern void *__memmove_chk(void *d, const void *s, size_t n, size_t dn);
extern void *__memset_chk(void *d, int c, size_t n, size_t dn);

static void bulk(const void *src, void *dst, size_t n) {
  emu_thread_t *t = emu_self;
  if (unlikely(!t) && !(t = emu_thread())) return;
  if (t->in_engine) return; /* the engine's copies are not the program's */
  if (src) emu_access_range(t, (uintptr_t)src, n, 0);
  emu_access_range(t, (uintptr_t)dst, n, 1);
}

/* munmap: the emulated page table forgets the range. */
__attribute__((visibility("default"))) int munmap(void *p, size_t len) {
  long rc = syscall(SYS_munmap, p, len);
  if (rc == 0 && emu_self) emu_unmap((uintptr_t)p, len);
  return (int)rc;
}

/* madvise: MADV_DONTNEED and MADV_REMOVE free the range's pages (libstrata purges free pages
 * so); the range keeps its policy. Without it, purged pages stayed on their nodes, and a fast
 * tier emptied by the program's frees looked full. */
__attribute__((visibility("default"))) int madvise(void *p, size_t len, int advice) {
  long rc = syscall(SYS_madvise, p, len, advice);
  if (rc == 0 && emu_self && (advice == MADV_DONTNEED || advice == MADV_REMOVE)) emu_discard((uintptr_t)p, len);
  return (int)rc;
}

/* mremap: the pages move with their place in the emulated page table. */
__attribute__((visibility("default"))) void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *to = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    to = va_arg(ap, void *);
    va_end(ap);
  }
  long rc = syscall(SYS_mremap, old, old_len, new_len, flags, to);
  if (rc != -1 && emu_self) emu_remap((uintptr_t)old, old_len, (uintptr_t)rc, new_len);
  return (void *)rc;
}

__attribute__((visibility("default"))) void *memcpy(void *d, const void *s, size_t n) {
  bulk(s, d, n);
  return __memcpy_chk(d, s, n, (size_t)-1);
}
__attribute__((visibility("default"))) void *memmove(void *d, const void *s, size_t n) {
  bulk(s, d, n);
  return __memmove_chk(d, s, n, (size_t)-1);
}
__attribute__((visibility("default"))) void *memset(void *d, int c, size_t n) {
  bulk(NULL, d, n);
  return __memset_chk(d, c, n, (size_t)-1);
}
