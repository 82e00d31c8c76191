/* emu.h: the emulated machine's internals, grouped by the file that defines them. The files
 * form layers; each calls only the ones below it (scripts/check-layers.sh checks this):
 *
 *   observe.c  machine.c  report.c    the edges: strata_emu.h, libstrata's machine, the report
 *   core.c                            the per-access path: hooks, bulk copies, caches, clock
 *   memory.c                          the page table: first touch, binds, moves, kernel modes
 *   linux.c                           the rules of Linux's memory tiering (the linux mode)
 *   config.c lru.c events.c engine.c  settings and presets; set-associative arrays; rings;
 *   random.c                          a tiering engine loaded into the program; seeded randomness
 *   fail.c     ../libstrata/util/json.c   dying with a message; the JSON writer
 *
 * The model, per access (addr, size, load or store):
 *   L1D -> L2 -> LLC (set-associative, true LRU, write-allocate, virtually indexed or, with
 *   physical=1, L2 and LLC by emulated frame; L1/L2 per thread, LLC shared); a miss everywhere
 *   goes to the emulated node of its page, costing that tier's latency; tier costs grow with
 *   the tier's utilisation per epoch (queueing). An L2 miss that continues a sequential stream
 *   (the next line of one of the last 16 misses: what a hardware prefetcher follows), or
 *   that repeats a recent miss's constant stride (a stride prefetcher, up to stride_bytes,
 *   across pages with stride_pages), costs latency / mlp (latency / stride_mlp) instead, and
 *   from memory at least a line's transfer time at the tier's bandwidth.
 *   Address translation: DTLB -> STLB -> page walk (fixed cost); a page's first touch is a page
 *   fault that places it (first touch or a bind policy).
 * Everything is charged to the thread's simulated clock, in picoseconds. */
#ifndef STRATA_EMU_INTERNAL_H
#define STRATA_EMU_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "strata_emu.h"

#define EMU_MAX_NODES 8
#define EMU_MAX_THREADS 1024
#define EMU_LINE_SHIFT 6
#define EMU_PAGE_SHIFT 12
#define EMU_STREAMS 16
#define EMU_WALKS 4        /* page walks whose page-table lines a thread remembers */
#define EMU_STRIDES 16   /* strides the stride prefetcher tracks per thread */

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* simulated nanoseconds as picoseconds, rounded */
static inline double emu_ps(double ns) { return ns * 1000.0 + 0.5; }

/* Zeroed memory straight from the kernel (the emulator never calls malloc). */
static inline void *emu_map(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* ---- fail.c ----------------------------------------------------------------------------- */

/* Something the emulator cannot run with: the message goes into the report when there is one
 * (as {"error": ...}, which `strata emu run` prints), else to stderr; exit status 2. */
__attribute__((noreturn)) void emu_die(const char *msg);
/* getenv, or the environment the program started with while libc's is not yet set up */
const char *emu_getenv(const char *name);

/* ---- config.c: every setting in one table (key, unit, doc), the presets ----------------- */

enum { KERNEL_NONE = 0, KERNEL_TPP = 1, KERNEL_NOMAD = 2, KERNEL_LINUX = 3 };

typedef struct emu_config_s {
  int nnodes;                       /* emulated nodes; node 0 is in the fastest tier, with the CPUs */
  double rd_ns[EMU_MAX_NODES], wr_ns[EMU_MAX_NODES];
  double rd_mbps[EMU_MAX_NODES], wr_mbps[EMU_MAX_NODES];
  uint64_t cap_bytes[EMU_MAX_NODES];
  uint64_t tier[EMU_MAX_NODES];     /* each node's tier (default: node i is tier i) */
  uint64_t distance[EMU_MAX_NODES]; /* from the CPUs (SLIT): first touch tries nodes nearest first */
  uint64_t l1_bytes, l1_ways, l2_bytes, l2_ways, llc_bytes, llc_ways; /* l2_bytes 0: no L2 */
  double l1_ns, l2_ns, llc_ns;      /* hit costs */
  uint64_t dtlb, dtlb_ways, dtlb2m, stlb, stlb_ways;
  double stlb_ns, walk_ns;          /* DTLB miss that hits the STLB; a full page walk */
  double walk_near_ns;              /* a walk next to a recent walk's page-table line */
  int huge;                         /* 1: translate with 2 MiB pages */
  int physical;                     /* 0: caches indexed by virtual address, as cachegrind; 1:
                                     * L2 and LLC by emulated frame (core.c frame_line) */
  double mlp;                       /* misses in flight for a sequential stream */
  int overlap;                      /* 1: a stream's line costs what remains of its fetch when
                                     * the thread reaches it (core.c stream_cost) */
  int next_page;                    /* 1: the next-page prefetcher (core.c next_page_fetch) */
  int stream_train;                 /* a stream's first lines that are still demand misses */
  uint64_t stride_bytes;            /* the largest stride the stride prefetcher follows (0: none) */
  double stride_mlp;                /* misses in flight for a stride (a miss costs latency / it) */
  int stride_pages;                 /* 1: it follows strides into other 4 KiB pages */
  int pair;                         /* 1: an L2 miss brings its 128-byte pair's other line into the LLC */
  double epoch_ns;                  /* bandwidth accounting period */
  double fault_ns;                  /* first-touch page fault */
  double migrate_ns;                /* per moved page: unmap, fault, remap (copy extra) */
  double copy_mbps;                 /* one thread's copy speed, capped by the tiers' */
  double shootdown_ns;              /* per TLB shootdown (one per move batch) */
  int kernel;                       /* KERNEL_NONE / KERNEL_TPP / KERNEL_NOMAD / KERNEL_LINUX */
  double time_scale;                /* linux: every period and threshold below is times this */
  double nb_scan_delay_ms, nb_scan_period_min_ms, nb_scan_period_max_ms; /* kernel.numa_balancing_* */
  uint64_t nb_scan_size_mb;
  double nb_hot_threshold_ms, nb_promote_rate_limit_mbps;
  uint64_t nb_enough_min_bytes;     /* pgdat_free_space_enough's floor (kernel: 1 GiB) */
  double watermark_scale_factor;    /* vm.watermark_scale_factor (per 10,000) */
  uint64_t min_free_kbytes;         /* vm.min_free_kbytes (0: the kernel's own formula) */
  double tpp_scan_period_ns;        /* numa_balancing scan period (kernel: 1000 ms) */
  uint64_t tpp_scan_bytes;          /* address space marked per scan (kernel: 256 MiB) */
  double tpp_hint_fault_ns;         /* cost of a hint fault */
  double tpp_promote_mbps;          /* promotion rate limit (kernel: 65536 MB/s) */
  double tpp_wmark_low, tpp_wmark_high; /* fast-tier free fractions: demote below low up to high */
  double tx_user_ns;                /* Strata's transactional mover: user-space cost per page */
  double tx_wp_fault_ns;            /* ... and of a first write to a page it write-protected */
  double scan_ns;                   /* an engine's walk: per page read (and cleared) */
  double pingpong_window_ms;        /* a demotion this soon after a promotion is ping-pong */
  uint64_t sample_period;           /* LLC misses per sample, 0 = off */
  char preset[32];                  /* the preset's name, for the report */
} emu_config_t;

/* The machine of this process: the built-in default (the m2t preset) until core.c's first
 * thread parses $STRATA_EMU into it. */
extern emu_config_t emu_cfg;
/* The nodes in allocation order from the CPUs: by distance, then by id (as Linux's fallback
 * list). Fills order[0..nnodes). */
void emu_node_order(const emu_config_t *c, int *order);
void emu_config_defaults(emu_config_t *c);
/* Apply "key=value key=v1,v2 ..." (a leading preset=NAME applies the preset first) to c and
 * check the result. 0, or -1 with the reason in err. */
int emu_config_parse(emu_config_t *c, const char *settings, char *err, size_t errlen);
/* Host side (strata-emu's FFI): the configuration of `settings` over the defaults, as JSON
 * {"config": {key: value, ...}} or {"error": "..."}; and every setting and preset with its
 * unit and documentation. Return the length written (the text is cut at n - 1). */
size_t emu_config_json(const char *settings, char *buf, size_t n);
size_t emu_settings_json(char *buf, size_t n);
const char *emu_kernel_name(int kernel);

/* ---- linux.c: the rules of Linux's memory tiering, without a page table ------------------ */

enum { LX_MIN, LX_LOW, LX_HIGH, LX_PROMO, LX_NWMARK }; /* a node's watermarks, in pages */
typedef struct lx_s {
  /* the settings, scaled (picoseconds, pages) */
  uint64_t scan_delay_ps, period_min_ps, period_max_ps, hot_threshold_ps, second_ps, scan_pages,
      rate_limit_pages;
  /* task_numa_work and update_task_scan_period (one task: the program) */
  uint64_t scan_period_ps, next_scan_ps;
  uint64_t faults_local, faults_remote, faults_private, faults_shared, faults_migrate_fail;
  /* should_numa_migrate_memory (the fast node's pgdat) */
  uint64_t threshold_ps, th_start_ps, th_candidates, candidates, rl_start_ps, rl_candidates;
  uint64_t refused_cold, refused_rate;
  /* memory.c's, for the report */
  uint64_t scans, passes, marked, promoted, refused_unbalanced, kswapd_wakeups, kswapd_demoted,
      direct_demoted, spilled;
} lx_t;
void lx_init(lx_t *x, const emu_config_t *c);
uint64_t lx_scan_min_ps(const lx_t *x, uint64_t rss_pages);
uint64_t lx_scan_max_ps(const lx_t *x, uint64_t rss_pages);
void lx_update_scan_period(lx_t *x, uint64_t rss_pages);
int lx_should_promote(lx_t *x, uint64_t now_ps, uint64_t latency_ps, int free_enough);
void lx_watermarks(const emu_config_t *c, int node, uint64_t w[LX_NWMARK]);
int lx_free_space_enough(const emu_config_t *c, uint64_t free_pages, const uint64_t w[LX_NWMARK]);

/* ---- lru.c (and lru.h): set-associative arrays with true LRU (caches and TLBs) ---------- */

/* A set-associative structure of keys with true LRU (way 0 = most recent). Caches key by line
 * number, TLBs by page number. A slot holds a tag, 0 when empty. Wide: the tag is key + 1, in
 * 64 bits, ways slots a set. Narrow (lru_init chooses it for 2048 sets or more and at most 16
 * ways): the tag is key / sets + 1 in 32 bits (below 2^31 for the lines of a 48-bit address
 * space), 16 slots a set, so a set is one 64-byte host line; an LLC of 105 MiB then keeps
 * 7 MiB of tags instead of 14. */
typedef struct lru_s {
  void *tags;
  uint64_t sets, ways;
  uint64_t mask;       /* sets - 1 when sets is a power of two, else UINT64_MAX */
  unsigned shift;      /* log2(sets) when sets is a power of two */
  int narrow;
} lru_t;

/* 0 entries (absent) or whole sets */
static inline int lru_geometry_ok(uint64_t entries, uint64_t ways) {
  return entries == 0 || (ways && entries % ways == 0);
}
int lru_init(lru_t *c, uint64_t entries, uint64_t ways); /* -1: bad geometry or no memory */
void lru_free(lru_t *c);
int lru_touch(lru_t *c, uint64_t key); /* 1 hit, 0 miss (key inserted as most recent) */
void lru_flush(lru_t *c);
void lru_remove(lru_t *c, uint64_t key);
int lru_way(const lru_t *c, uint64_t key); /* the way holding key, untouched; -1 if none */
uint64_t lru_key_at(const lru_t *c, uint64_t set, uint64_t way); /* key + 1, 0 if empty */

/* ---- the per-thread state (core.c creates it; memory.c charges moves and faults to it) --- */

/* Per-thread counters, in the order the report prints them: X(name) are stored, D(name, expr)
 * derived from the stored ones (so the per-access fast path updates fewer fields). */
#define EMU_COUNTERS(X, D)                                                   \
  D(accesses, t->loads + t->stores) X(loads) X(stores) X(bulk_bytes)          \
  D(l1_hits, t->loads + t->stores - t->l1_misses) X(l1_misses)                \
  X(l2_hits) X(l2_misses) X(llc_hits) X(llc_misses)                          \
  X(stream_misses) X(stride_misses) X(dtlb_misses) X(stlb_misses) X(page_faults) X(hint_faults) \
  X(promoted_pages) X(demoted_pages) X(moved_pages) X(shootdowns) X(migrate_ps) X(kernel_ps)
#define EMU_STORED(n) uint64_t n;
#define EMU_DERIVED(n, e)

typedef struct emu_thread_s {
  /* hot: the last line and page this thread touched */
  uint64_t last_line, last_vpn, last_tlb_key;
  struct pte_s *last_pte;
  struct pte_s *tx_grace;          /* nomad: the page this access's hint fault queued (its own
                                    * store must not abort the move) */
  uint64_t gen;                     /* TLB shootdown generation seen */
  uint64_t clock_ps;
  uint64_t epoch_end_ps;
  uint64_t cost_l1, cost_l2, cost_llc, cost_llc_stream, cost_llc_stride; /* ps */
  int index;
  EMU_COUNTERS(EMU_STORED, EMU_DERIVED)
  uint64_t node_accesses[EMU_MAX_NODES]; /* LLC misses served per node */
  uint64_t epoch_bytes[EMU_MAX_NODES];
  uint64_t stream_last[EMU_STREAMS]; /* the last L2-miss line of each tracked stream */
  uint64_t stream_at[EMU_STREAMS];   /* overlap: when the thread took that line (clock_ps) */
  uint32_t stream_len[EMU_STREAMS];  /* lines each stream has seen (saturating) */
  unsigned stream_victim, stream_slot; /* the slot the last continued stream is in */
  uint64_t walk_last[EMU_WALKS];    /* the page-table lines of the last walks */
  unsigned walk_victim;
  uint64_t stride_last[EMU_STRIDES]; /* an L2-miss line of each tracked stride */
  int64_t stride_step[EMU_STRIDES];  /* the step that led to it (0: none yet) */
  unsigned stride_victim;
  uint64_t sample_countdown;
  int in_engine;                    /* an engine runs on this thread now: not the program */
  lru_t l1, l2, dtlb, stlb;
} emu_thread_t;

/* ---- events.c: rings of LLC-miss samples and hint-fault events ---------------------------- */

void emu_sample(emu_thread_t *t, uint64_t addr, int node, int store);
void emu_fault_event(uint64_t addr, uint64_t time_ps, int node, int promoted);
uint64_t emu_samples_lost(void);
uint64_t emu_fault_events_lost(void);

/* ---- engine.c: a tiering engine inside the program (strata_emu.h) ------------------------- */

extern uint64_t emu_engine_next_ps;  /* when its next round is due; UINT64_MAX: no engine */
void emu_engine_load(emu_thread_t *t); /* the first thread: load $STRATA_ENGINE_LIB, if any */
int emu_engine_late_load(emu_thread_t *t); /* libc is set up: load it if it had to wait; 1 if so */
void emu_engine_tick(emu_thread_t *t); /* a round, if one is due */
const char *emu_engine_report(emu_thread_t *t); /* its statistics (JSON), or NULL */

/* ---- memory.c: the emulated page table and everything that changes it ---------------------- */

/* An emulated page-table entry (one per 4 KiB page). */
typedef struct pte_s {
  uint32_t accesses;                /* ground truth, saturating */
  uint8_t node;
  _Atomic uint8_t flags;            /* STRATA_EMU_* plus the private bits below */
  uint16_t policy;                  /* index of its bind policy (memory.c), 0 = default */
} pte_t;
enum {
  PTE_REFERENCED = 16,              /* tpp: a hint fault already saw this page */
  PTE_INFLIGHT = 32,                /* a transactional move is copying it: a write aborts it */
  PTE_SHADOW = 64,                  /* promoted transactionally, unwritten since: its old page is
                                     * still on the slow node (a write drops it) */
};

/* the page table's radix tree */
#define EMU_LEAF_BITS 18
#define EMU_LEAF_ENTRIES ((size_t)1 << EMU_LEAF_BITS)
#define EMU_TOP_ENTRIES ((size_t)1 << (47 - EMU_PAGE_SHIFT - EMU_LEAF_BITS))
extern _Atomic(pte_t *) emu_top[EMU_TOP_ENTRIES];
static inline pte_t *emu_pte(uint64_t vpn) { /* NULL if its leaf was never allocated */
  size_t i = vpn >> EMU_LEAF_BITS;
  if (i >= EMU_TOP_ENTRIES) return NULL;
  pte_t *leaf = atomic_load_explicit(&emu_top[i], memory_order_acquire);
  return leaf ? &leaf[vpn & (EMU_LEAF_ENTRIES - 1)] : NULL;
}
pte_t *emu_pte_make(uint64_t vpn);  /* allocates the leaf; never NULL (beyond the address space
                                     * or out of memory: a dummy entry, always present) */
void emu_memory_init(void);         /* after the configuration (or a change of kernel mode):
                                     * schedules the kernel mode's scanner */
void emu_first_touch(emu_thread_t *t, uint64_t vpn, pte_t *pte);
void emu_hint_fault(emu_thread_t *t, uint64_t vpn, pte_t *pte);
void emu_kernel_tick(emu_thread_t *t);  /* the kernel mode's and the engine's periodic work */
int emu_bind(uintptr_t start, size_t len, uint64_t nodemask, int mode);
int emu_move_pages(emu_thread_t *t, void *const *pages, size_t n, const int *nodes, int *status,
                   int async);
/* A store found PTE_INFLIGHT or PTE_SHADOW set on the page it wrote (core.c's slow path). */
void emu_tx_written(emu_thread_t *t, pte_t *pte, uint8_t old_flags);
uint64_t emu_tx_counter(int which); /* commits, aborts, shadow demotions, shadows held, shadows
                                     * written over, shadows reclaimed */
extern _Atomic uint64_t emu_tlb_gen;  /* TLB shootdown generation */
extern _Atomic uint64_t emu_resident[EMU_MAX_NODES];
extern uint64_t emu_peak_resident;
extern _Atomic uint64_t emu_bg_ps, emu_bg_bytes[EMU_MAX_NODES];
extern _Atomic uint64_t emu_scan_ps; /* background time of an engine's walks */
extern uint64_t emu_next_tick_ps;
void emu_shootdown(const uint64_t *vpns, size_t n);
void emu_unmap(uintptr_t start, size_t len);
void emu_discard(uintptr_t start, size_t len);  /* madvise(MADV_DONTNEED) */
void emu_remap(uintptr_t old, size_t old_len, uintptr_t new, size_t new_len); /* mremap */
void emu_tlb_sync(emu_thread_t *t);
uint64_t emu_bg_counter(int which); /* 0 moved, 1 promoted, 2 demoted, 3 shootdowns */
uint64_t emu_pingpong_pages(void);  /* demoted within pingpong_window_ms of their promotion */
const lx_t *emu_linux_state(void);  /* the linux mode's rules' state and counters */

/* ---- observe.c ------------------------------------------------------------------------------- */

uint64_t emu_walked_pages(void);     /* pages an engine's walks have read */

/* ---- core.c: threads and the per-access path ------------------------------------------------ */

extern _Thread_local emu_thread_t *emu_self __attribute__((tls_model("initial-exec")));
extern lru_t emu_llc;
extern double emu_queue_factor[EMU_MAX_NODES]; /* tier latency multiplier this epoch */
extern const int emu_avx512;      /* 1: core.c was built for AVX-512 (the Makefile's EMU_SIMD) */
emu_thread_t *emu_thread(void);     /* the caller's state, created on first use */
void emu_access_range(emu_thread_t *t, uintptr_t addr, size_t len, int store);
int emu_nthreads(void);
emu_thread_t *emu_thread_at(int i);

#endif
