/* memory.c: the emulated page table of the process and everything that changes it.
 *
 * One 8-byte entry per 4 KiB page, in a two-level radix tree over the 47-bit address space
 * (leaves of 2^18 entries, mapped on demand). An entry holds the page's emulated node, its
 * accessed/dirty/hint bits, its ground-truth access count and the bind policy that applies to
 * it (an index into a small table, written by libstrata's bind through the machine interface).
 *
 * First touch places a page: by its policy (bind, preferred, interleave), else on the nearest
 * node with room (by `distance`, as Linux's fallback list), else the next. Moves (libstrata's move, a daemon's, tpp's) are charged as
 * unmap + copy + TLB shootdown. The tpp kernel mode: a periodic scanner protects slow-tier pages
 * so the next access takes a hint fault; a page faulted twice is promoted at once (rate
 * limited); when the fast tier's free memory falls below a watermark, pages not accessed since
 * the last pass (a clock) are demoted in the background. The nomad kernel mode is tpp with
 * Nomad's transactional migration (seed 004): a promotion is queued for a background copy while
 * the page stays in use, committed only if no store hit it meanwhile, and keeps the old page as
 * a shadow on the slow node until the page is written; a demotion of a page with a shadow is a
 * remap, no copy; shadows are reclaimed before a slow node refuses a page. Strata's own
 * transactional mover (strata_emu_move with STRATA_EMU_MOVE_TRANSACTIONAL) uses the same queue
 * and shadows, with libstrata's agent's costs. */
#include "emu.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE ((uint64_t)1 << EMU_PAGE_SHIFT)

_Atomic(pte_t *) emu_top[EMU_TOP_ENTRIES];
_Atomic uint64_t emu_tlb_gen;
static pte_t dummy; /* for addresses beyond the user address space */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t emu_resident[EMU_MAX_NODES];
uint64_t emu_peak_resident; /* most pages resident at once, all nodes (under mem_lock) */
_Atomic uint64_t emu_bg_ps, emu_bg_bytes[EMU_MAX_NODES];
_Atomic uint64_t emu_scan_ps;
uint64_t emu_next_tick_ps = UINT64_MAX;
static uint64_t tpp_next_ps = UINT64_MAX; /* the tpp scanner's next pass */
static int node_order[EMU_MAX_NODES] = {0, 1, 2, 3, 4, 5, 6, 7}; /* nearest first (set by emu_memory_init) */

/* The kernel modes with tpp's scanner, hint faults and demotion. */
static int tpp_like(void) { return emu_cfg.kernel == KERNEL_TPP || emu_cfg.kernel == KERNEL_NOMAD; }
static int linux_mode(void) { return emu_cfg.kernel == KERNEL_LINUX; }

static uint64_t tx_next_ps(void); /* the next transactional commit due (UINT64_MAX: none) */

/* linux: the rules' state (linux.c), each node's watermarks, and kswapd (one for the fast node,
 * which works through its demotions one batch at a time on its own clock) */
static lx_t lx;
static uint64_t wmark[EMU_MAX_NODES][LX_NWMARK];
static int kswapd_awake;
static uint64_t kswapd_clock_ps;
const lx_t *emu_linux_state(void) { return &lx; }

/* The next periodic work of any kind: the scanner's, a commit's, kswapd's or the engine's. */
static void next_tick_update(void) {
  uint64_t next = tpp_next_ps < emu_engine_next_ps ? tpp_next_ps : emu_engine_next_ps;
  uint64_t tx = tx_next_ps();
  if (tx < next) next = tx;
  if (kswapd_awake && kswapd_clock_ps < next) next = kswapd_clock_ps;
  emu_next_tick_ps = next;
}

void emu_memory_init(void) {
  emu_node_order(&emu_cfg, node_order);
  tpp_next_ps = tpp_like() ? (uint64_t)emu_ps(emu_cfg.tpp_scan_period_ns) : UINT64_MAX;
  if (linux_mode()) {
    lx_init(&lx, &emu_cfg);
    for (int n = 0; n < emu_cfg.nnodes; n++) lx_watermarks(&emu_cfg, n, wmark[n]);
    tpp_next_ps = lx.next_scan_ps;
  }
  next_tick_update();
}

static void shadow_free(void); /* a shadow's page is freed (its node: shadow_node()) */

pte_t *emu_pte_make(uint64_t vpn) {
  pte_t *p = emu_pte(vpn);
  if (likely(p)) return p;
  size_t i = vpn >> EMU_LEAF_BITS;
  if (i >= EMU_TOP_ENTRIES) {
    dummy.flags = STRATA_EMU_PRESENT;
    return &dummy;
  }
  size_t bytes = sizeof(pte_t) * EMU_LEAF_ENTRIES;
  pte_t *leaf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (leaf == MAP_FAILED) return &dummy;
  pte_t *expect = NULL;
  if (!atomic_compare_exchange_strong(&emu_top[i], &expect, leaf))
    syscall(SYS_munmap, leaf, bytes); /* not munmap: the emulator interposes it */
  return emu_pte(vpn);
}

/* The pages of [start, start+len) are gone; `keep_policy`: the range's bind policy stays (a
 * discard), else it goes with the mapping. */
static void forget(uintptr_t start, size_t len, bool keep_policy) {
  pthread_mutex_lock(&mem_lock);
  for (uint64_t v = start / PAGE; v < (start + len + PAGE - 1) / PAGE; v++) {
    pte_t *p = emu_pte(v);
    if (!p) {
      v |= EMU_LEAF_ENTRIES - 1; /* no leaf: skip to the next one */
      continue;
    }
    uint8_t f = atomic_exchange(&p->flags, 0);
    if (f & STRATA_EMU_PRESENT) atomic_fetch_sub(&emu_resident[p->node], 1);
    if (f & PTE_SHADOW) shadow_free();
    p->accesses = 0;
    if (!keep_policy) p->policy = 0;
  }
  emu_shootdown(NULL, 0);
  pthread_mutex_unlock(&mem_lock);
}

/* The program unmapped [start, start+len): its pages are gone (a later mapping at the same
 * address starts afresh: first touch, no policy). Only unmappings through the munmap symbol
 * are seen: glibc's internal ones (free of a large block) are not. */
void emu_unmap(uintptr_t start, size_t len) { forget(start, len, false); }

/* The program discarded [start, start+len) (madvise MADV_DONTNEED: libstrata's purge of free
 * pages): the pages are freed from their nodes, and the next touch places each again by the
 * range's policy, which stays. */
void emu_discard(uintptr_t start, size_t len) { forget(start, len, true); }

/* The program remapped [old, old+old_len) to [new, new+new_len) (mremap): the pages that
 * still exist move with their node, bits and policy; the old range is gone. */
void emu_remap(uintptr_t old, size_t old_len, uintptr_t new, size_t new_len) {
  size_t keep = (old_len < new_len ? old_len : new_len) / PAGE;
  if (new == old) {
    if (new_len < old_len) emu_unmap(old + new_len, old_len - new_len);
    return;
  }
  pthread_mutex_lock(&mem_lock);
  for (size_t i = 0; i < keep; i++) {
    pte_t *from = emu_pte(old / PAGE + i);
    if (!from || !(atomic_load(&from->flags) & STRATA_EMU_PRESENT)) continue;
    pte_t *to = emu_pte_make(new / PAGE + i);
    to->node = from->node;
    to->accesses = from->accesses;
    to->policy = from->policy;
    /* a copy in flight was of the old address: abandoned (its shadow, if any, moves along) */
    atomic_store(&to->flags, (uint8_t)(atomic_exchange(&from->flags, 0) & ~PTE_INFLIGHT));
    from->accesses = 0;
    from->policy = 0;
  }
  pthread_mutex_unlock(&mem_lock);
  emu_unmap(old, old_len); /* what did not move (resident counts of moved pages are unchanged) */
}

/* ---- policies: bind requests of libstrata (through the machine interface) --------------- */

enum { POL_DEFAULT = 0, POL_PREFERRED = 1, POL_BIND = 2, POL_INTERLEAVE = 3 };
typedef struct {
  uint64_t mask;
  int mode;
} policy_t;
static policy_t policies[256] = {{0, POL_DEFAULT}};
static int npolicies = 1;

static uint64_t cap_pages(int n) { return emu_cfg.cap_bytes[n] / PAGE; }
static uint64_t reclaim_shadows(int node, uint64_t want);

/* Room for one more page on node n: shadows on it go first (mem_lock held). */
static int has_room(int n) {
  if (atomic_load(&emu_resident[n]) < cap_pages(n)) return 1;
  return reclaim_shadows(n, 64) > 0 && atomic_load(&emu_resident[n]) < cap_pages(n);
}

/* mode: 0 preferred, 1 bind, 2 interleave (libstrata's BIND_PREFERRED / BIND_STRICT, and
 * interleave for other callers). */
int emu_bind(uintptr_t start, size_t len, uint64_t nodemask, int mode) {
  nodemask &= ((uint64_t)1 << emu_cfg.nnodes) - 1;
  if (!nodemask || mode < 0 || mode > 2) return -EINVAL;
  policy_t want = {nodemask, mode + 1};
  pthread_mutex_lock(&mem_lock);
  int idx = 0;
  while (idx < npolicies && !(policies[idx].mask == want.mask && policies[idx].mode == want.mode))
    idx++;
  if (idx == npolicies) {
    if (npolicies == 256) {
      pthread_mutex_unlock(&mem_lock);
      return -ENOMEM;
    }
    policies[npolicies++] = want;
  }
  for (uint64_t v = start / PAGE; v < (start + len + PAGE - 1) / PAGE; v++) {
    pte_t *p = emu_pte_make(v);
    if (p != &dummy) p->policy = (uint16_t)idx;
  }
  pthread_mutex_unlock(&mem_lock);
  return 0;
}


/* The first node of mask, nearest first, with room; -1 if none. */
static int nearest_with_room(uint64_t mask) {
  for (int k = 0; k < emu_cfg.nnodes; k++)
    if ((mask >> node_order[k] & 1) && has_room(node_order[k])) return node_order[k];
  return -1;
}

static int default_node(void) {
  int n = nearest_with_room(((uint64_t)1 << emu_cfg.nnodes) - 1);
  return n >= 0 ? n : node_order[emu_cfg.nnodes - 1]; /* everything full: overcommit the farthest */
}

/* Preferred and bind try the policy's nodes nearest first (so a tier of several nodes fills
 * like Linux's MPOL_PREFERRED_MANY); preferred then falls back to any node, bind overcommits
 * its nearest. */
static int choose_node(uint64_t vpn, const pte_t *pte) {
  policy_t pol = policies[pte->policy < npolicies ? pte->policy : 0];
  int n;
  switch (pol.mode) {
  case POL_PREFERRED:
    n = nearest_with_room(pol.mask);
    return n >= 0 ? n : default_node();
  case POL_BIND:
    n = nearest_with_room(pol.mask);
    if (n >= 0) return n;
    for (int k = 0;; k++)
      if (pol.mask >> node_order[k] & 1) return node_order[k];
  case POL_INTERLEAVE: {
    int k = (int)(vpn % (uint64_t)__builtin_popcountll(pol.mask));
    for (int n = 0;; n++)
      if ((pol.mask >> n & 1) && k-- == 0) return n;
  }
  default:
    return default_node();
  }
}

/* ---- TLB shootdowns ------------------------------------------------------------------------ */

/* Every shootdown bumps the generation and leaves a record: up to SD_PAGES pages, or a full
 * flush (like Linux, which flushes everything beyond 33 pages). Threads apply the records
 * they have not seen on their next access (as after an IPI). Called with mem_lock held. */
#define SD_RING 64
#define SD_PAGES 32
typedef struct {
  _Atomic uint64_t gen;
  int n; /* -1: full flush */
  uint64_t vpn[SD_PAGES];
} shootdown_t;
static shootdown_t sd_ring[SD_RING];

void emu_shootdown(const uint64_t *vpns, size_t n) {
  uint64_t g = atomic_load(&emu_tlb_gen) + 1;
  shootdown_t *r = &sd_ring[g % SD_RING];
  r->n = vpns && n <= SD_PAGES ? (int)n : -1;
  for (int i = 0; i < r->n; i++) r->vpn[i] = vpns[i];
  atomic_store(&r->gen, g);
  atomic_store(&emu_tlb_gen, g);
}

static void tlb_forget(emu_thread_t *t, uint64_t vpn) {
  uint64_t key = emu_cfg.huge ? vpn >> (21 - EMU_PAGE_SHIFT) : vpn;
  lru_remove(&t->dtlb, key);
  lru_remove(&t->stlb, key);
  if (key == t->last_tlb_key) t->last_tlb_key = UINT64_MAX;
  if (vpn == t->last_vpn) t->last_vpn = UINT64_MAX;
  t->last_line = UINT64_MAX; /* so the next access translates again (and may hint-fault) */
}

void emu_tlb_sync(emu_thread_t *t) {
  uint64_t g = atomic_load(&emu_tlb_gen);
  for (uint64_t x = t->gen + 1; x <= g; x++) {
    shootdown_t *r = &sd_ring[x % SD_RING];
    int n = r->n;
    if (g - x >= SD_RING - 1 || atomic_load(&r->gen) != x || n < 0) {
      lru_flush(&t->dtlb);
      lru_flush(&t->stlb);
      t->last_vpn = t->last_tlb_key = t->last_line = UINT64_MAX;
      break;
    }
    for (int i = 0; i < n && i < SD_PAGES; i++) tlb_forget(t, r->vpn[i]);
  }
  t->gen = g;
}

/* ---- moving pages --------------------------------------------------------------------------- */

static uint64_t copy_ps(int from, int to) {
  double mbps = emu_cfg.copy_mbps;
  if (emu_cfg.rd_mbps[from] < mbps) mbps = emu_cfg.rd_mbps[from];
  if (emu_cfg.wr_mbps[to] < mbps) mbps = emu_cfg.wr_mbps[to];
  return (uint64_t)emu_ps((double)PAGE * 1000.0 / mbps);
}

/* A table of 32-bit stamps beside the page table: leaves made when a page of theirs is first
 * stamped (mem_lock held). */
static uint32_t *stamp_in(_Atomic(uint32_t *) *top, uint64_t vpn, int make) {
  size_t i = vpn >> EMU_LEAF_BITS;
  if (i >= EMU_TOP_ENTRIES) return NULL;
  uint32_t *leaf = atomic_load(&top[i]);
  if (!leaf && make) {
    leaf = emu_map(sizeof(uint32_t) * EMU_LEAF_ENTRIES);
    if (!leaf) return NULL;
    atomic_store(&top[i], leaf); /* mem_lock held: no other maker */
  }
  return leaf ? &leaf[vpn & (EMU_LEAF_ENTRIES - 1)] : NULL;
}

static uint32_t us_of(uint64_t ps) { return (uint32_t)(ps / 1000000); }

/* The latest simulated time a caller of this file brought (mem_lock held): threads' clocks
 * differ by up to an epoch, which is fine for what it times (ping-pong). */
static uint64_t mem_now_ps;
static void mem_clock(const emu_thread_t *t) {
  if (t && t->clock_ps > mem_now_ps) mem_now_ps = t->clock_ps;
}

/* Ping-pong: a page demoted within pingpong_window_ms of its last promotion (simulated time,
 * mem_now_ps), counted whoever moved it. The promotion's time, in microseconds
 * plus one (0: none since its last demotion), is kept beside the page table. */
static _Atomic(uint32_t *) promoted_top[EMU_TOP_ENTRIES];
static _Atomic uint64_t pingpong;
uint64_t emu_pingpong_pages(void) { return atomic_load(&pingpong); }

static void note_move(uint64_t vpn, int from, int to) {
  uint32_t now = us_of(mem_now_ps) + 1;
  if (emu_cfg.tier[to] < emu_cfg.tier[from]) {
    uint32_t *s = stamp_in(promoted_top, vpn, 1);
    if (s) *s = now;
  } else if (emu_cfg.tier[to] > emu_cfg.tier[from]) {
    uint32_t *s = stamp_in(promoted_top, vpn, 0);
    if (s && *s && (double)(now - *s) <= emu_cfg.pingpong_window_ms * 1000.0) atomic_fetch_add(&pingpong, 1);
    if (s) *s = 0;
  }
}

static void forget_promotion(uint64_t vpn) {
  uint32_t *s = stamp_in(promoted_top, vpn, 0);
  if (s) *s = 0;
}

/* Move one present page (mem_lock held); returns the cost in ps, which the caller charges. */
static uint64_t move_one(pte_t *p, uint64_t vpn, int to) {
  int from = p->node;
  note_move(vpn, from, to);
  uint8_t f = atomic_fetch_and(&p->flags, (uint8_t)~(PTE_SHADOW | PTE_INFLIGHT));
  if (f & PTE_SHADOW) shadow_free(); /* moved by copy: the old page is a stale shadow now */
  atomic_fetch_sub(&emu_resident[from], 1);
  atomic_fetch_add(&emu_resident[to], 1);
  p->node = (uint8_t)to;
  return (uint64_t)emu_ps(emu_cfg.migrate_ns) + copy_ps(from, to);
}

static _Atomic uint64_t bg_moved, bg_promoted, bg_demoted, bg_shootdowns;
uint64_t emu_bg_counter(int which) {
  _Atomic uint64_t *c[] = {&bg_moved, &bg_promoted, &bg_demoted, &bg_shootdowns};
  return atomic_load(c[which]);
}

/* Count and charge a move of `pages` pages from..to costing ps: synchronously to thread t
 * (its clock and bandwidth), or asynchronously to the background budget. */
static void charge(emu_thread_t *t, int async, uint64_t ps, int from, int to, uint64_t pages) {
  uint64_t bytes = pages * PAGE;
  if (async) {
    atomic_fetch_add(&bg_moved, pages);
    atomic_fetch_add(to < from ? &bg_promoted : &bg_demoted, pages);
    atomic_fetch_add(&emu_bg_ps, ps);
    atomic_fetch_add(&emu_bg_bytes[from], bytes);
    atomic_fetch_add(&emu_bg_bytes[to], bytes);
  } else {
    t->moved_pages += pages;
    if (to < from) t->promoted_pages += pages;
    else t->demoted_pages += pages;
    t->clock_ps += ps;
    t->migrate_ps += ps;
    t->epoch_bytes[from] += bytes;
    t->epoch_bytes[to] += bytes;
  }
}

/* The TLB shootdown that ends a batch of moves, charged as charge() does. */
static void charge_shootdown(emu_thread_t *t, int async) {
  uint64_t sd = (uint64_t)emu_ps(emu_cfg.shootdown_ns);
  if (async) {
    atomic_fetch_add(&bg_shootdowns, 1);
    atomic_fetch_add(&emu_bg_ps, sd);
  } else {
    t->shootdowns++;
    t->clock_ps += sd;
    t->migrate_ps += sd;
  }
}

static int tx_start(emu_thread_t *t, uint64_t vpn, pte_t *pte, int to, int user);
static uint64_t shadow_demote(pte_t *p, uint64_t vpn, int to);

int emu_move_pages(emu_thread_t *t, void *const *pages, size_t n, const int *nodes, int *status,
                   int async) {
  uint64_t vpns[SD_PAGES];
  size_t moved = 0;
  pthread_mutex_lock(&mem_lock);
  mem_clock(t);
  for (size_t i = 0; i < n; i++) {
    pte_t *p = emu_pte((uintptr_t)pages[i] / PAGE);
    int to = nodes[i];
    if (!p || !(p->flags & STRATA_EMU_PRESENT)) {
      status[i] = -ENOENT;
    } else if (to < 0 || to >= emu_cfg.nnodes) {
      status[i] = -ENODEV;
    } else if (p->node == to) {
      status[i] = to;
    } else if (!has_room(to)) {
      status[i] = -ENOMEM;
    } else if (async == STRATA_EMU_MOVE_TRANSACTIONAL) {
      /* a clean page with a shadow there goes down by remap; any other is copied while in use
       * and committed later if not written (its status: where it is going) */
      uint64_t remap = shadow_demote(p, (uintptr_t)pages[i] / PAGE, to);
      if (remap) {
        atomic_fetch_add(&emu_bg_ps, remap + (uint64_t)emu_ps(emu_cfg.tx_user_ns));
        atomic_fetch_add(&bg_moved, 1);
        atomic_fetch_add(&bg_demoted, 1);
        if (moved < SD_PAGES) vpns[moved] = (uintptr_t)pages[i] / PAGE;
        moved++;
      }
      status[i] = remap || tx_start(t, (uintptr_t)pages[i] / PAGE, p, to, 1) == 0 ? to : -EBUSY;
    } else {
      int from = p->node;
      charge(t, async, move_one(p, (uintptr_t)pages[i] / PAGE, to), from, to, 1);
      if (moved < SD_PAGES) vpns[moved] = (uintptr_t)pages[i] / PAGE;
      moved++;
      status[i] = to;
    }
  }
  if (moved) {
    emu_shootdown(vpns, moved);
    charge_shootdown(t, async);
  }
  next_tick_update(); /* commits queued */
  pthread_mutex_unlock(&mem_lock);
  return 0;
}

/* ---- tpp: a hand over the page table -------------------------------------------------------- */

/* The tpp scanner and the demotion clock each keep a hand that walks the page table in address
 * order, wrapping around and skipping leaves never mapped. */
typedef struct {
  size_t leaf, idx;
  uint64_t vpn; /* the page of the entry hand_take returned last */
} hand_t;

static void hand_next_leaf(hand_t *h, size_t *leaves) {
  h->leaf = (h->leaf + 1) % EMU_TOP_ENTRIES;
  h->idx = 0;
  ++*leaves;
}

/* The entry under the hand (the hand moves past it), or NULL once the hand has moved to a new
 * leaf max_leaves times (counted in *leaves, which the caller zeroes to start a walk). */
static pte_t *hand_take(hand_t *h, size_t *leaves, size_t max_leaves) {
  while (*leaves < max_leaves) {
    pte_t *leaf = atomic_load(&emu_top[h->leaf]);
    if (!leaf) {
      hand_next_leaf(h, leaves);
      continue;
    }
    pte_t *p = &leaf[h->idx];
    h->vpn = ((uint64_t)h->leaf << EMU_LEAF_BITS) | h->idx;
    if (++h->idx == EMU_LEAF_ENTRIES) hand_next_leaf(h, leaves);
    return p;
  }
  return NULL;
}

/* ---- transactional moves and shadows (nomad; Strata's transactional mover) ------------------ */

static void demote_cold(void);

/* A queued move: its copy starts at start_ps (the page's dirty bit is cleared then, and
 * PTE_INFLIGHT set) and it commits at commit_ps unless a store hit the page in between (which
 * clears PTE_INFLIGHT). Copies go one after another, as one background thread's would
 * (kpromote, or libstrata's agent). */
typedef struct {
  uint64_t vpn, start_ps, commit_ps;
  int8_t to;
} tx_t;
#define TX_MAX 65536
static tx_t txq[TX_MAX];
static size_t tx_head, tx_len, tx_started; /* mem_lock; the first tx_started entries have started */
static uint64_t tx_free_ps;                /* when the copying thread is free */
static _Atomic uint64_t tx_commits, tx_aborts, tx_shadow_demotions, tx_shadows, tx_shadows_written,
    tx_shadows_reclaimed;

uint64_t emu_tx_counter(int which) {
  _Atomic uint64_t *c[] = {&tx_commits,  &tx_aborts,          &tx_shadow_demotions,
                           &tx_shadows,  &tx_shadows_written, &tx_shadows_reclaimed};
  return atomic_load(c[which]);
}

static tx_t *tx_at(size_t k) { return &txq[(tx_head + k) % TX_MAX]; }

static uint64_t tx_next_ps(void) {
  if (!tx_len) return UINT64_MAX;
  uint64_t commit = txq[tx_head].commit_ps;
  return tx_started < tx_len && tx_at(tx_started)->start_ps < commit ? tx_at(tx_started)->start_ps : commit;
}

/* Where shadows live: the node a demotion from the fast tier goes to (the nearest node of a
 * slower tier, Linux's demotion target; Nomad keeps shadows between adjacent tiers only). */
static int shadow_node(void) {
  for (int k = 0; k < emu_cfg.nnodes; k++)
    if (emu_cfg.tier[node_order[k]] > 0) return node_order[k];
  return -1;
}

static void shadow_free(void) {
  int n = shadow_node();
  if (n >= 0) atomic_fetch_sub(&emu_resident[n], 1);
  atomic_fetch_sub(&tx_shadows, 1);
}

/* Free up to `want` shadows on node (a slow node short of room), with a hand over the page
 * table; how many were freed. mem_lock held. */
static hand_t reclaim_hand;
static uint64_t reclaim_shadows(int node, uint64_t want) {
  if (node != shadow_node() || !atomic_load(&tx_shadows)) return 0;
  uint64_t freed = 0;
  pte_t *p;
  for (size_t leaves = 0; freed < want && (p = hand_take(&reclaim_hand, &leaves, EMU_TOP_ENTRIES + 1));) {
    if (!(atomic_fetch_and(&p->flags, (uint8_t)~PTE_SHADOW) & PTE_SHADOW)) continue;
    shadow_free();
    freed++;
  }
  atomic_fetch_add(&tx_shadows_reclaimed, freed);
  return freed;
}

/* The background time of one transactional move: nomad's kernel copy (tpp's move cost and a
 * second shootdown: the dirty bit cleared before the copy, the page unmapped to commit), or
 * Strata's agent's (its system calls, a copy in and one out, and the shootdown of its move-out). */
static uint64_t tx_cost_ps(int user, int from, int to) {
  if (user) return (uint64_t)emu_ps(emu_cfg.tx_user_ns + emu_cfg.shootdown_ns) + 2 * copy_ps(from, to);
  return (uint64_t)emu_ps(emu_cfg.migrate_ns + 2 * emu_cfg.shootdown_ns) + copy_ps(from, to);
}

/* The copy of a queued move starts: from here a store to the page aborts it. */
static void tx_begin(tx_t *e) {
  pte_t *p = emu_pte(e->vpn);
  if (!p) return;
  atomic_fetch_and(&p->flags, (uint8_t)~STRATA_EMU_DIRTY);
  atomic_fetch_or(&p->flags, (uint8_t)PTE_INFLIGHT);
}

/* Queue a transactional move of the page at vpn to node `to` (mem_lock held), charged to the
 * background; its copy starts when the copying thread is free (at once if it is). 0, or -EBUSY
 * when the queue is full. */
static int tx_start(emu_thread_t *t, uint64_t vpn, pte_t *pte, int to, int user) {
  if (tx_len == TX_MAX) return -EBUSY;
  int from = pte->node;
  uint64_t cost = tx_cost_ps(user, from, to), now = t ? t->clock_ps : tx_free_ps;
  uint64_t start = tx_free_ps > now ? tx_free_ps : now;
  tx_free_ps = start + cost;
  tx_t *e = tx_at(tx_len++);
  *e = (tx_t){vpn, start, tx_free_ps, (int8_t)to};
  if (tx_started == tx_len - 1 && start <= now) {
    tx_begin(e);
    tx_started++;
  }
  atomic_fetch_add(&emu_bg_ps, cost);
  atomic_fetch_add(&emu_bg_bytes[from], PAGE);
  atomic_fetch_add(&emu_bg_bytes[to], PAGE);
  return 0;
}

/* Start the copies due by `now`, and commit every started move due whose page no store hit
 * (mem_lock held). A promotion from the shadow node keeps the old page there as the page's
 * shadow. */
static void tx_commit_due(uint64_t now) {
  for (; tx_started < tx_len && tx_at(tx_started)->start_ps <= now; tx_started++) tx_begin(tx_at(tx_started));
  while (tx_len && tx_started && txq[tx_head].commit_ps <= now) {
    tx_t e = txq[tx_head];
    tx_head = (tx_head + 1) % TX_MAX;
    tx_len--;
    tx_started--;
    pte_t *p = emu_pte(e.vpn);
    if (!p || !(atomic_fetch_and(&p->flags, (uint8_t)~PTE_INFLIGHT) & PTE_INFLIGHT)) continue; /* aborted */
    int from = p->node;
    if (!(atomic_load(&p->flags) & STRATA_EMU_PRESENT) || from == e.to) continue;
    if (!has_room(e.to) && e.to == 0 && tpp_like()) demote_cold();
    if (!has_room(e.to)) continue; /* no room after all: tried again later */
    int shadow = e.to < from && from == shadow_node();
    atomic_fetch_add(&emu_resident[e.to], 1);
    if (shadow) {
      atomic_fetch_or(&p->flags, (uint8_t)PTE_SHADOW); /* the old page stays, counted on its node */
      atomic_fetch_add(&tx_shadows, 1);
    } else {
      atomic_fetch_sub(&emu_resident[from], 1);
    }
    note_move(e.vpn, from, e.to);
    p->node = (uint8_t)e.to;
    atomic_fetch_add(&tx_commits, 1);
    atomic_fetch_add(&bg_moved, 1);
    atomic_fetch_add(e.to < from ? &bg_promoted : &bg_demoted, 1);
    atomic_fetch_add(&bg_shootdowns, 1);
    emu_shootdown(&e.vpn, 1);
  }
}

void emu_tx_written(emu_thread_t *t, pte_t *pte, uint8_t old) {
  if (t->tx_grace == pte) { /* the store that took the hint fault: before the copy starts */
    atomic_fetch_and(&pte->flags, (uint8_t)~STRATA_EMU_DIRTY);
    return;
  }
  if ((old & PTE_INFLIGHT) && (atomic_fetch_and(&pte->flags, (uint8_t)~PTE_INFLIGHT) & PTE_INFLIGHT))
    atomic_fetch_add(&tx_aborts, 1); /* written while copied: the copy is thrown away */
  if ((old & PTE_SHADOW) && (atomic_fetch_and(&pte->flags, (uint8_t)~PTE_SHADOW) & PTE_SHADOW)) {
    shadow_free(); /* the fast page is the only up-to-date one now */
    atomic_fetch_add(&tx_shadows_written, 1);
    /* the write-protect fault that told (nomad: a page fault; Strata: asynchronous mode) */
    t->clock_ps += (uint64_t)emu_ps(emu_cfg.kernel == KERNEL_NOMAD ? emu_cfg.tpp_hint_fault_ns : emu_cfg.tx_wp_fault_ns);
  }
}

/* Demote a page by remapping it onto its shadow, if it has one on `to` (mem_lock held): the
 * background cost, or 0 when it has none. */
static uint64_t shadow_demote(pte_t *p, uint64_t vpn, int to) {
  if (to != shadow_node() || !(atomic_fetch_and(&p->flags, (uint8_t)~PTE_SHADOW) & PTE_SHADOW)) return 0;
  note_move(vpn, p->node, to);
  atomic_fetch_sub(&emu_resident[p->node], 1); /* the fast page is freed; the shadow is counted */
  atomic_fetch_sub(&tx_shadows, 1);
  p->node = (uint8_t)to;
  atomic_fetch_add(&tx_shadow_demotions, 1);
  return (uint64_t)emu_ps(emu_cfg.migrate_ns);
}

/* ---- tpp: demotion (kswapd) ------------------------------------------------------------------ */

static hand_t clock_hand;

/* Demote pages of node 0 to the demotion target (the nearest node of a slower tier: Linux's
 * next_demotion_node, where shadows live too) until node 0 holds at most `target` pages, at most
 * `max` of them: a clock, where a page accessed since the hand last passed gets a second chance
 * (its bit is cleared), as the kernel's LRU rotates a referenced page. How many in *n; the cost
 * in ps, which the caller charges. mem_lock held. */
static uint64_t demote_clock(uint64_t target, uint64_t max, uint64_t *n) {
  int to = shadow_node();
  uint64_t demoted = 0, ps = 0;
  pte_t *p;
  /* at most two sweeps over the address space, so that every page is seen twice (the second
   * time with its bit cleared): two laps, and the rest of the leaf the hand started in */
  for (size_t leaves = 0; to >= 0 && demoted < max && atomic_load(&emu_resident[0]) > target &&
                          (p = hand_take(&clock_hand, &leaves, 2 * EMU_TOP_ENTRIES + 1));) {
    uint8_t f = atomic_load(&p->flags);
    if (!(f & STRATA_EMU_PRESENT) || p->node != 0) continue;
    if (f & STRATA_EMU_ACCESSED) {
      atomic_fetch_and(&p->flags, (uint8_t)~STRATA_EMU_ACCESSED);
      continue;
    }
    uint64_t remap = shadow_demote(p, clock_hand.vpn, to); /* nomad: a clean page with a shadow, no copy */
    ps += remap ? remap : move_one(p, clock_hand.vpn, to);
    demoted++;
  }
  *n = demoted;
  return ps;
}

/* tpp: demote cold pages of node 0 in the background until its free share is at least the high
 * watermark. mem_lock held. */
static void demote_cold(void) {
  uint64_t cap = cap_pages(0), n;
  uint64_t ps = demote_clock(cap - (uint64_t)((double)cap * emu_cfg.tpp_wmark_high), UINT64_MAX, &n);
  if (n) {
    charge(NULL, 1, ps, 0, shadow_node(), n);
    charge_shootdown(NULL, 1);
    emu_shootdown(NULL, n);
  }
}

static void maybe_demote(void) {
  if (!tpp_like()) return;
  uint64_t cap = cap_pages(0), res = atomic_load(&emu_resident[0]);
  if (res + (uint64_t)((double)cap * emu_cfg.tpp_wmark_low) > cap) demote_cold();
}

static int linux_alloc_node(emu_thread_t *t, uint64_t vpn, const pte_t *pte);

void emu_first_touch(emu_thread_t *t, uint64_t vpn, pte_t *pte) {
  pthread_mutex_lock(&mem_lock);
  mem_clock(t);
  if (!(atomic_load(&pte->flags) & STRATA_EMU_PRESENT)) {
    int node = linux_mode() ? linux_alloc_node(t, vpn, pte) : choose_node(vpn, pte);
    pte->node = (uint8_t)node;
    atomic_fetch_or(&pte->flags, STRATA_EMU_PRESENT);
    atomic_fetch_add(&emu_resident[node], 1);
    forget_promotion(vpn); /* a new page: a promotion of the address's last page is not its own */
    uint64_t all = 0;
    for (int n = 0; n < emu_cfg.nnodes; n++) all += atomic_load(&emu_resident[n]);
    if (all > emu_peak_resident) emu_peak_resident = all;
    t->page_faults++;
    t->clock_ps += (uint64_t)emu_ps(emu_cfg.fault_ns);
    maybe_demote();
  }
  pthread_mutex_unlock(&mem_lock);
}

/* ---- tpp: scanning and hint faults ------------------------------------------------------- */

static hand_t scan_hand;
static uint64_t promote_tokens_ps; /* the rate limit: time when the next promotion is allowed */

static void linux_stamp(uint64_t vpn, uint64_t now_ps);

/* Protect up to `budget` present pages' worth of address space, marking the pages of slower
 * tiers, continuing where the last scan stopped (tpp; linux also stamps each marked page with
 * the time, as change_pte_range does in memory-tiering mode). How many were marked; *wrapped
 * says whether the hand came back to the start of the address space (a pass completed). */
static uint64_t scan(uint64_t budget, uint64_t now_ps, int *wrapped) {
  uint64_t marked = 0;
  size_t start = scan_hand.leaf;
  pte_t *p;
  *wrapped = 0;
  /* at most one lap, plus the rest of the leaf it started in */
  for (size_t leaves = 0; budget && (p = hand_take(&scan_hand, &leaves, EMU_TOP_ENTRIES + 1));) {
    if (scan_hand.leaf < start) *wrapped = 1;
    start = scan_hand.leaf;
    uint8_t f = atomic_load(&p->flags);
    if (!(f & STRATA_EMU_PRESENT)) continue;
    budget--;
    if (emu_cfg.tier[p->node] != 0 && !(f & STRATA_EMU_HINT)) {
      atomic_fetch_or(&p->flags, STRATA_EMU_HINT);
      if (linux_mode()) linux_stamp(scan_hand.vpn, now_ps);
      marked++;
    }
  }
  if (marked) emu_shootdown(NULL, marked);
  return marked;
}

static void linux_scan(emu_thread_t *t);
static void kswapd_run(uint64_t now_ps);
static int linux_hint_fault(emu_thread_t *t, uint64_t vpn, pte_t *pte);

void emu_kernel_tick(emu_thread_t *t) {
  int scan_due = (tpp_like() || linux_mode()) && t->clock_ps >= tpp_next_ps;
  int due = scan_due || tx_next_ps() <= t->clock_ps || (kswapd_awake && kswapd_clock_ps <= t->clock_ps);
  if (due && !pthread_mutex_trylock(&mem_lock)) {
    mem_clock(t);
    if (scan_due && linux_mode()) {
      linux_scan(t);
    } else if (scan_due) {
      uint64_t period = (uint64_t)emu_ps(emu_cfg.tpp_scan_period_ns);
      while (tpp_next_ps <= t->clock_ps) tpp_next_ps += period;
      int wrapped;
      scan(emu_cfg.tpp_scan_bytes / PAGE, t->clock_ps, &wrapped);
    }
    tx_commit_due(t->clock_ps);
    kswapd_run(t->clock_ps);
    pthread_mutex_unlock(&mem_lock);
  }
  emu_engine_tick(t); /* without mem_lock: the engine calls back into strata_emu_move */
  next_tick_update();
}

void emu_hint_fault(emu_thread_t *t, uint64_t vpn, pte_t *pte) {
  pthread_mutex_lock(&mem_lock);
  mem_clock(t);
  uint8_t f = atomic_load(&pte->flags);
  if (!(f & STRATA_EMU_HINT)) { /* another thread took it */
    pthread_mutex_unlock(&mem_lock);
    return;
  }
  atomic_fetch_and(&pte->flags, (uint8_t)~STRATA_EMU_HINT);
  if (!tpp_like() && !linux_mode()) { /* marked by a mode since switched off (tests switch modes) */
    pthread_mutex_unlock(&mem_lock);
    return;
  }
  t->hint_faults++;
  uint64_t fault = (uint64_t)emu_ps(emu_cfg.tpp_hint_fault_ns);
  t->clock_ps += fault;
  t->kernel_ps += fault;
  int from = pte->node, promoted = 0;
  if (linux_mode()) {
    promoted = linux_hint_fault(t, vpn, pte);
  } else if (!(f & PTE_REFERENCED)) {
    atomic_fetch_or(&pte->flags, (uint8_t)PTE_REFERENCED); /* first sighting: now active */
  } else if (from != 0 && t->clock_ps >= promote_tokens_ps) {
    if (!has_room(0)) demote_cold(); /* kswapd could not keep up: reclaim now */
    if (emu_cfg.kernel == KERNEL_NOMAD) {
      /* queued for kpromote's transactional copy: the thread goes on at once */
      promoted = tx_start(t, vpn, pte, 0, 0) == 0;
      if (promoted) {
        t->tx_grace = pte;
        atomic_fetch_and(&pte->flags, (uint8_t)~PTE_REFERENCED);
        uint64_t gap = (uint64_t)emu_ps((double)PAGE * 1000.0 / emu_cfg.tpp_promote_mbps);
        promote_tokens_ps = (promote_tokens_ps > t->clock_ps ? promote_tokens_ps : t->clock_ps) + gap;
        next_tick_update();
      }
    } else if (has_room(0)) {
      charge(t, 0, move_one(pte, vpn, 0), from, 0, 1);
      atomic_fetch_and(&pte->flags, (uint8_t)~PTE_REFERENCED);
      /* the promotion consumed rate-limit budget: a page per PAGE/rate seconds */
      uint64_t gap = (uint64_t)emu_ps((double)PAGE * 1000.0 / emu_cfg.tpp_promote_mbps);
      promote_tokens_ps = (promote_tokens_ps > t->clock_ps ? promote_tokens_ps : t->clock_ps) + gap;
      promoted = 1;
      charge_shootdown(t, 0); /* the faulting thread waits for the other CPUs' TLBs */
      emu_shootdown(&vpn, 1);
      maybe_demote();
    }
  }
  emu_fault_event(vpn * PAGE, t->clock_ps, from, promoted);
  pthread_mutex_unlock(&mem_lock);
}

/* ---- linux: Linux's own tiering (linux.c has the rules; here they meet the pages) ----------- */

/* When each slow page was last marked (or faulted), in simulated microseconds: the kernel keeps
 * it in the page's cpupid bits (folio_xchg_access_time). Leaves beside the page table's, made
 * when a page of theirs is first marked. */
static _Atomic(uint32_t *) stamp_top[EMU_TOP_ENTRIES];

static void linux_stamp(uint64_t vpn, uint64_t now_ps) {
  uint32_t *s = stamp_in(stamp_top, vpn, 1);
  if (s) *s = us_of(now_ps);
}

static uint64_t resident_all(void) {
  uint64_t r = 0;
  for (int n = 0; n < emu_cfg.nnodes; n++) r += atomic_load(&emu_resident[n]);
  return r;
}

static uint64_t free_pages(int n) {
  uint64_t cap = cap_pages(n), res = atomic_load(&emu_resident[n]);
  return res < cap ? cap - res : 0;
}

/* task_numa_work, run by the thread whose clock reached the scan (task_work: the program pays
 * for it, a PTE update a page and a TLB flush): the first scan sets the period to task_scan_start;
 * each marks scan_size of address space; a completed pass runs task_numa_placement's
 * update_task_scan_period; the next scan is a period later. mem_lock held. */
static void linux_scan(emu_thread_t *t) {
  uint64_t now = t->clock_ps, rss = resident_all();
  if (!lx.scan_period_ps) lx.scan_period_ps = lx_scan_min_ps(&lx, rss);
  int wrapped;
  uint64_t marked = scan(lx.scan_pages, now, &wrapped);
  lx.scans++;
  lx.marked += marked;
  uint64_t cost = (uint64_t)emu_ps((double)marked * emu_cfg.scan_ns + (marked ? emu_cfg.shootdown_ns : 0));
  t->clock_ps += cost;
  t->kernel_ps += cost;
  if (wrapped) {
    lx.passes++;
    lx_update_scan_period(&lx, rss);
  }
  tpp_next_ps = now + lx.scan_period_ps;
}

/* wakeup_kswapd for the fast node: it starts demoting from now (a sleeping kswapd banks no
 * time) */
static void kswapd_wake(uint64_t now_ps) {
  if (kswapd_awake) return;
  kswapd_awake = 1;
  lx.kswapd_wakeups++;
  if (kswapd_clock_ps < now_ps) kswapd_clock_ps = now_ps;
  next_tick_update(); /* it runs at the next access past its clock */
}

/* kswapd's balance_pgdat for the fast node, up to `now`: batches of SWAP_CLUSTER_MAX (32) cold
 * pages demoted (shrink_folio_list -> demote_folio_list), each batch taking its moves' time on
 * kswapd's own clock and one TLB flush, charged to the background, until the node is balanced
 * at its promo watermark (pgdat_balanced in memory-tiering mode) or nothing more can go.
 * mem_lock held. */
static void kswapd_run(uint64_t now_ps) {
  while (kswapd_awake && kswapd_clock_ps <= now_ps) {
    if (free_pages(0) > wmark[0][LX_PROMO]) { /* zone_watermark_ok: free above the mark */
      kswapd_awake = 0;
      break;
    }
    uint64_t n, target = cap_pages(0) > wmark[0][LX_PROMO] ? cap_pages(0) - wmark[0][LX_PROMO] - 1 : 0;
    uint64_t ps = demote_clock(target, 32, &n);
    if (!n) {
      kswapd_awake = 0; /* nothing cold enough: it sleeps until woken again */
      break;
    }
    ps += (uint64_t)emu_ps(emu_cfg.shootdown_ns);
    charge(NULL, 1, ps, 0, shadow_node(), n);
    atomic_fetch_add(&bg_shootdowns, 1);
    emu_shootdown(NULL, n);
    lx.kswapd_demoted += n;
    kswapd_clock_ps += ps;
  }
}

/* Direct reclaim on the fast node (__alloc_pages_direct_reclaim -> shrink_folio_list): the
 * allocating thread demotes a batch of 32 cold pages itself and waits for it. mem_lock held. */
static void direct_demote(emu_thread_t *t) {
  uint64_t n, ps = demote_clock(cap_pages(0) > 32 ? cap_pages(0) - 32 : 0, 32, &n);
  if (!n) return;
  charge(t, 0, ps, 0, shadow_node(), n);
  charge_shootdown(t, 0);
  emu_shootdown(NULL, n);
  lx.direct_demoted += n;
}

/* The page allocator for a first touch (get_page_from_freelist over the policy's zonelist,
 * then __alloc_pages_slowpath): the first node, nearest first, with more free than its low
 * watermark; else kswapd is woken and the min watermark tried; else the thread reclaims (on the
 * fast node: demotes) and takes the first node. A default or preferred allocation therefore
 * spills to the slow node once the fast one is at its low watermark, and only promotion's
 * failures or a full machine wake kswapd; a bind to the fast node reclaims directly.
 * Interleave keeps choose_node's rule. mem_lock held. */
static int linux_alloc_node(emu_thread_t *t, uint64_t vpn, const pte_t *pte) {
  policy_t pol = policies[pte->policy < npolicies ? pte->policy : 0];
  if (pol.mode == POL_INTERLEAVE) return choose_node(vpn, pte);
  uint64_t all = ((uint64_t)1 << emu_cfg.nnodes) - 1;
  int list[2 * EMU_MAX_NODES], len = 0; /* the zonelist: the policy's nodes, then (preferred,
                                         * default) the rest, each nearest first */
  uint64_t first = pol.mode == POL_DEFAULT ? all : pol.mask;
  for (int k = 0; k < emu_cfg.nnodes; k++)
    if (first >> node_order[k] & 1) list[len++] = node_order[k];
  if (pol.mode == POL_PREFERRED)
    for (int k = 0; k < emu_cfg.nnodes; k++)
      if (!(first >> node_order[k] & 1)) list[len++] = node_order[k];
  for (int pass = 0; pass < 2; pass++) {
    int mark = pass ? LX_MIN : LX_LOW;
    for (int i = 0; i < len; i++)
      if (free_pages(list[i]) > wmark[list[i]][mark]) {
        if (i) lx.spilled++;
        return list[i];
      }
    if (!pass) kswapd_wake(t->clock_ps); /* wake_all_kswapds, then the min watermark */
  }
  if (emu_cfg.tier[list[0]] == 0) direct_demote(t);
  return has_room(list[0]) ? list[0] : choose_node(vpn, pte);
}

/* do_numa_page for a page of a slower tier, after the hint fault's cost: its latency since it
 * was marked (numa_hint_fault_latency, which stamps it anew), the fault counted as
 * task_numa_fault does (remote: the CPUs are on node 0; private: in tiering mode a slow page's
 * cpupid holds its time), should_numa_migrate_memory's verdict, then migrate_misplaced_folio:
 * refused, with kswapd woken, unless the fast node stays above its high watermark
 * (migrate_balanced_pgdat); else the page moves while the thread waits (the copy, the unmap
 * and a TLB shootdown). 1 if promoted. mem_lock held. */
static int linux_hint_fault(emu_thread_t *t, uint64_t vpn, pte_t *pte) {
  int from = pte->node;
  uint64_t now = t->clock_ps;
  uint32_t *s = stamp_in(stamp_top, vpn, 1), then = s ? *s : 0;
  if (s) *s = us_of(now);
  uint64_t latency = s ? (uint64_t)(uint32_t)(us_of(now) - then) * 1000000 : UINT64_MAX;
  if (from == 0) lx.faults_local++;
  else lx.faults_remote++;
  lx.faults_private++;
  if (emu_cfg.tier[from] == 0) return 0; /* in tiering mode a top-tier page stays */
  if (!lx_should_promote(&lx, now, latency, lx_free_space_enough(&emu_cfg, free_pages(0), wmark[0]))) return 0;
  if (free_pages(0) <= wmark[0][LX_HIGH] + 1 || !has_room(0)) {
    lx.refused_unbalanced++;
    lx.faults_migrate_fail++;
    kswapd_wake(now);
    return 0;
  }
  charge(t, 0, move_one(pte, vpn, 0), from, 0, 1);
  charge_shootdown(t, 0);
  emu_shootdown(&vpn, 1);
  lx.promoted++;
  return 1;
}
