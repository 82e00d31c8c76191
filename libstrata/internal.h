/* internal.h: names shared between libstrata's files, grouped by the file that defines them.
 *
 * Memory layout, in one picture:
 *
 *   segment (4 MiB, 4 MiB aligned, bound to one tier or unbound)
 *   ┌──────────────┬───────────────────────────────────────────────────────────┐
 *   │ header +     │ 4 KiB pages, each described by one page_t in the header:   │
 *   │ page_t[1024] │  SPAN  16 pages of one size class (shared arenas' fast path)│
 *   │ (META pages) │  MIXED one page of mixed-size objects, 16-byte granules,   │
 *   │              │        bitmaps in its page_t (arenas and next_to)          │
 *   │              │  RUN   n pages holding one medium object                   │
 *   └──────────────┴───────────────────────────────────────────────────────────┘
 *   large object (>= 1 MiB): its own mapping, 4 MiB aligned, header page, then data.
 *
 * A span of a context arena (alloc/blocks.c) holds one allocation context's small objects: a
 * block, recorded in the channel.
 *
 * A byte map over the address space (the registry) says which 4 MiB chunks are Strata's, so
 * any pointer maps to its segment and page descriptor in O(1), and foreign pointers are
 * recognised.
 */
#ifndef STRATA_INTERNAL_H
#define STRATA_INTERNAL_H

#include "strata.h"
#include "strata_channel.h"
#include "machine/machine.h"
#include "util/json.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- sizes --------------------------------------------------------------------------- */

#define PAGE_SHIFT 12
#define PAGE_SIZE ((size_t)1 << PAGE_SHIFT)
#define SEG_SHIFT 22
#define SEG_SIZE ((size_t)1 << SEG_SHIFT)
#define PAGES_PER_SEG (SEG_SIZE / PAGE_SIZE)       /* 1024 */
#define SPAN_PAGES 16                           /* a class span is 64 KiB ... */
#define SPAN_PAGES_BIG 64                       /* ... or 256 KiB for classes above 16 KiB */
#define GRANULE 16                              /* mixed pages: allocation unit */
#define PAGE_GRANULES (PAGE_SIZE / GRANULE)     /* 256 */
#define MIXED_MAX 2048                          /* largest object on a mixed page */
#define SMALL_MAX 65536                         /* largest size class */
#define LARGE_MIN ((size_t)1 << 20)             /* from here on, a mapping of its own */
#define NCLASSES 45                             /* classes 1..44; 0 unused */
#define NSHARED (1 + STRATA_MAX_TIERS)          /* shared arenas: default, then one per tier */
#define ALIGN_MAX SEG_SIZE                      /* large objects: data offset = alignment */

#define STRATA_MAGIC 0x53545241u /* "STRA" */

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

/* ---- assertions: graded, compiled in by STRATA_DEBUG level (0 none, 1 cheap, 2 internal) - */

#ifndef STRATA_DEBUG
#define STRATA_DEBUG 0
#endif
void _strata_assert_fail(const char *expr, const char *file, int line);
#define strata_assert(lvl, e) \
  ((STRATA_DEBUG >= (lvl) && !(e)) ? _strata_assert_fail(#e, __FILE__, __LINE__) : (void)0)

/* ---- data structures ------------------------------------------------------------------ */

typedef struct block_s { struct block_s *next; } block_t;

typedef enum page_kind_e {
  PK_FREE = 0, PK_META, PK_SPAN, PK_MIXED, PK_RUN, PK_TAIL,
} page_kind_t;

typedef struct strata_arena_s arena_t;

typedef struct page_s {
  uint8_t kind;       /* page_kind_t */
  uint8_t cls;        /* size class, on every page of a span (head and tails), else 0 */
  uint8_t in_list;    /* PK_SPAN: on its central's partial list */
  uint8_t shared;     /* with cls: the shared arena index of the span, SHARED_NONE for a
                       * context arena's (blocks.c) */
  uint16_t head;      /* PK_TAIL: page index of the span/run head */
  uint8_t tagged;     /* span pages: the span's blocks may carry context tags (tag.c); read
                       * by free on the page it lands on, so untagged spans cost one load */
  arena_t *arena;     /* owner (head pages) */
  struct page_s *next, *prev; /* arena's mixed/run list, or central's partial list */
  union {
    /* record: a context arena's span (a block) in the channel's records */
    struct { block_t *free; uint32_t used, bump, capacity, npages, record; _Atomic(uint16_t *) tags; } span;
    /* bits per granule; colour: the granule searches start from (mixed.c first_granule) */
    struct { uint64_t alloc[4], start[4]; uint16_t used, colour; uint32_t record; } mixed;
    struct { uint32_t npages, ctx, record; } run;
  } u;
} page_t;

#define SHARED_NONE 0xff

typedef enum seg_kind_e { SEG_PAGES = 1, SEG_LARGE = 2 } seg_kind_t;

typedef struct segment_s {
  uint32_t magic, kind;       /* common prefix with large_t */
  int pool;                   /* binding: 0 unbound, 1 + tier */
  uint32_t used_pages;        /* including the META pages */
  uint64_t free_map[PAGES_PER_SEG / 64]; /* bit set = page free */
  uint64_t dirty_map[PAGES_PER_SEG / 64]; /* bit set = free since the last purge tick, resident */
  uint64_t idle_map[PAGES_PER_SEG / 64];  /* bit set = free and unused for a whole tick: purged next */
  struct segment_s *next, *prev;     /* pool list */
  page_t pages[PAGES_PER_SEG];
} segment_t;

#define SEG_META_PAGES ((sizeof(segment_t) + PAGE_SIZE - 1) / PAGE_SIZE)

typedef struct large_s {
  uint32_t magic, kind;       /* common prefix with segment_t */
  uint32_t ctx, record;       /* allocation context and tracked-object record (preload) */
  arena_t *arena;
  size_t map_size, data_off;
  struct large_s *next, *prev;
} large_t;

/* a shared arena's per-class pool of spans with free blocks */
typedef struct central_s {
  pthread_mutex_t lock;
  page_t *partial;
  uint32_t empty;     /* spans on the partial list whose blocks are all free */
} central_t;

struct strata_arena_s {
  uint32_t magic;
  int shared;               /* index 0..NSHARED-1, or -1 for a user arena */
  int tier;                 /* bound tier, -1 unbound */
  int pool;                 /* segment pool = tier + 1 */
  pthread_mutex_t lock;     /* guards mixed, cur, runs, larges, colour */
  page_t *mixed, *cur;      /* mixed pages; the one new objects go to */
  uint32_t colour;          /* STRATA_COLOUR: mixed pages taken so far (mixed.c) */
  page_t *runs;
  large_t *larges;
  central_t *central;       /* shared arenas only: [NCLASSES] */
  uint32_t unit;            /* user arenas: its number in the channel's records, 0 = none */
  int32_t hint;             /* user arenas: its binding as a STRATA_DIRECTIVE_* value */
  uint32_t ctx;             /* context arenas (blocks.c): the context whose objects it holds */
};

/* ---- options.c ------------------------------------------------------------------------ */

typedef enum option_id_e {
  OPT_VERBOSE, OPT_TIERS, OPT_BIND, OPT_SYSFS, OPT_TCACHE_BYTES, OPT_COLOUR,
  OPT_CONTEXTS, OPT_CONTEXT_DEPTH, OPT_CONTEXT_MIN, OPT_FAST_BELOW, OPT_TRACK_MIN, OPT_UNWIND,
  OPT_SMALL_BLOCKS, OPT_DIRECTIVE, OPT_RULES, OPT_REPORT, OPT_PRIORITY, OPT_TRACK_WRITES, OPT_DAEMON_SOCKET,
  OPT__COUNT
} option_id_t;
enum { UNWIND_CACHED = 0, UNWIND_DWARF = 1 };
int64_t _strata_option(option_id_t id);          /* numeric value (bool, size, enum) */
const char *_strata_option_str(option_id_t id);  /* string options: NULL when unset */
void _strata_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void _strata_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- stats.c: one field list, expanded into the counters, the table and the JSON ------- */

#define STRATA_STATS(X)                                                                  \
  X(segments, "count", "4 MiB segments mapped")                                          \
  X(segment_bytes, "bytes", "bytes mapped as segments")                                  \
  X(large_objects, "count", "objects with a mapping of their own")                       \
  X(large_bytes, "bytes", "bytes mapped for large objects")                              \
  X(spans, "count", "size-class spans (64 or 256 KiB) in use")                                  \
  X(mixed_pages, "count", "mixed-size pages in use (arenas, next_to)")                   \
  X(runs, "count", "multi-page runs in use (medium objects)")                            \
  X(arenas, "count", "user arenas alive")                                                \
  X(tcache_refills, "count", "thread-cache refills from the shared spans")               \
  X(tcache_flushes, "count", "thread-cache flushes back to the shared spans")            \
  X(next_to_same_page, "count", "next_to placed on the page of its target")              \
  X(next_to_other_page, "count", "next_to placed on another page of the target's arena") \
  X(next_to_foreign, "count", "next_to of a pointer Strata does not own (default used)") \
  X(free_foreign, "count", "frees of pointers Strata does not own (ignored)")            \
  X(free_invalid, "count", "frees detected as double or interior (ignored)")             \
  X(tier_clamped, "count", "tier(n) requests beyond the last tier (clamped)")            \
  X(bind_calls, "count", "ranges bound to a tier through the machine")                   \
  X(bind_failed, "count", "bind requests the machine refused")                           \
  X(purged_bytes, "bytes", "bytes returned to the OS from live segments")                \
  X(track_ranges, "count", "ranges registered for a daemon's write tracker")             \
  X(track_failed, "count", "ranges the write tracker's registration refused")             \
  X(sample_errors, "count", "hint-fault samples whose page could not be moved back")

typedef struct stats_s {
#define X(name, unit, doc) _Atomic int64_t name;
  STRATA_STATS(X)
#undef X
  _Atomic int64_t pool_bytes[NSHARED]; /* segment bytes per binding: unbound, tier 0.. */
} stats_t;
extern stats_t _strata_stats;
#define STAT_ADD(field, n) atomic_fetch_add_explicit(&_strata_stats.field, (n), memory_order_relaxed)

/* ---- meta.c: the allocator's own metadata (never libc malloc) -------------------------- */

extern pthread_mutex_t _strata_meta_lock;
void *_strata_meta_alloc(size_t size);           /* zeroed; NULL on failure */
void _strata_meta_free(void *p, size_t size);

/* ---- segment.c: registry, segments, page runs ----------------------------------------- */

extern pthread_mutex_t _strata_seg_lock;
#define REG_ENTRIES ((size_t)1 << (47 - SEG_SHIFT))
enum { REG_NONE = 0, REG_HEAD = 1, REG_CONT = 2 };
extern _Atomic(_Atomic uint8_t *) _strata_registry;
void *_strata_chunk_of_slow(size_t idx);
/* The segment or large header owning p, or NULL if p is not Strata's. */
static inline void *_strata_chunk_of(const void *p) {
  _Atomic uint8_t *reg = atomic_load_explicit(&_strata_registry, memory_order_acquire);
  size_t idx = (uintptr_t)p >> SEG_SHIFT;
  if (unlikely(!reg || idx >= REG_ENTRIES)) return NULL;
  uint8_t v = atomic_load_explicit(&reg[idx], memory_order_relaxed);
  if (likely(v == REG_HEAD)) return (void *)(idx << SEG_SHIFT);
  return v == REG_CONT ? _strata_chunk_of_slow(idx) : NULL;
}
/* The page descriptor of p's page (head page for spans and runs), NULL when p is not in a
 * segment (foreign or large). */
page_t *_strata_page_of(const void *p);
static inline segment_t *_strata_segment_of_page(const page_t *pg) {
  return (segment_t *)((uintptr_t)pg & ~(SEG_SIZE - 1));
}
static inline size_t _strata_page_index(const page_t *pg) {
  return (size_t)(pg - _strata_segment_of_page(pg)->pages);
}
static inline void *_strata_page_addr(const page_t *pg) {
  return (char *)_strata_segment_of_page(pg) + (_strata_page_index(pg) << PAGE_SHIFT);
}
/* npages contiguous free pages of pool, start index a multiple of align_pages, trying the
 * page right after `near` first (keeps an arena's pages neighbours). Caller holds no lock. */
page_t *_strata_pages_alloc(int pool, size_t npages, size_t align_pages, const page_t *near,
                            page_kind_t kind);      /* PK_SPAN, PK_MIXED (1 page) or PK_RUN */
/* Give pages back; purge = also return the memory to the OS. */
void _strata_pages_free(page_t *head, size_t npages, bool purge);
large_t *_strata_large_map(int pool, size_t size, size_t align);
void _strata_large_unmap(large_t *l);
/* Grow in place, without copying: a run to npages when the pages after it are free; a large
 * object's mapping to hold `size` bytes (by mremap, moved to a new aligned place if it must:
 * the new header is returned, NULL when it cannot grow). The caller holds the arena's lock
 * for a large object (its list links move with the header). */
bool _strata_run_extend(page_t *run, size_t npages);
large_t *_strata_large_grow(large_t *l, size_t size);

/* ---- span.c: size classes, shared spans, thread caches --------------------------------- */

/* 1..NCLASSES-1 for size <= SMALL_MAX: multiples of 16 up to 128, then 4 per power of 2 */
static inline size_t _strata_class_of(size_t size) {
  if (size <= 128) return size <= 16 ? 1 : (size + 15) >> 4;
  size_t w = size - 1;
  size_t b = 63 - (size_t)__builtin_clzl(w); /* w in [2^b, 2^(b+1)) */
  return 9 + (b - 7) * 4 + ((w >> (b - 2)) & 3);
}
size_t _strata_class_size(size_t cls);
/* block index = (offset * magic) >> 40 == offset / size, exact for offsets below 2^18 */
uint64_t _strata_class_magic(size_t cls);
static inline size_t _strata_span_pages(size_t cls_size) {
  return cls_size > 16384 ? SPAN_PAGES_BIG : SPAN_PAGES; /* at least 4 blocks a span */
}

typedef struct bin_s {
  block_t *head;
  uint32_t count, max;
} bin_t;
/* a context arena's free blocks of one class (span.c's block bins) */
typedef struct block_bin_s {
  arena_t *arena;
  uint32_t cls, count, max;
  block_t *head;
} block_bin_t;
#define BLOCK_SLOTS 256
typedef struct tcache_s {
  bin_t bins[NSHARED][NCLASSES];
  block_bin_t blocks[BLOCK_SLOTS]; /* by context (span.c's block_bin), direct mapped */
} tcache_t;
extern __thread tcache_t *_strata_tls_cache __attribute__((tls_model("initial-exec")));

/* The fast paths: a block from / to this thread's cache, or NULL / false. */
static inline void *_strata_tcache_pop(size_t shared, size_t cls) {
  tcache_t *tc = _strata_tls_cache;
  if (unlikely(!tc)) return NULL;
  bin_t *bin = &tc->bins[shared][cls];
  block_t *b = bin->head;
  if (likely(b)) {
    bin->head = b->next;
    bin->count--;
  }
  return b;
}
static inline bool _strata_tcache_push(size_t shared, size_t cls, void *p) {
  tcache_t *tc = _strata_tls_cache;
  if (unlikely(!tc)) return false;
  bin_t *bin = &tc->bins[shared][cls];
  if (unlikely(bin->count >= bin->max)) return false;
  ((block_t *)p)->next = bin->head;
  bin->head = p;
  bin->count++;
  return true;
}
/* The slow paths: refill / flush through the central lists. */
void *_strata_span_alloc(arena_t *shared, size_t cls);
void _strata_span_free(page_t *span, void *p);
void _strata_tcache_flush_all(void);

/* A context arena's block, and its return (blocks.c's spans: no thread cache). */
void *_strata_block_alloc(arena_t *a, size_t cls);
void _strata_block_free(page_t *span, void *p);

/* ---- alloc/blocks.c: small objects by block, one arena per context and binding ----------- */

/* NULL: use `shared` (none made yet while the context has allocated under `after` bytes) */
arena_t *_strata_context_arena(const strata_context_t *e, uint32_t ctx, const arena_t *shared, size_t after);
void _strata_blocks_lock_all(void);              /* fork */
void _strata_blocks_unlock_all(void);
void _strata_blocks_forget(void);                /* fork child */

/* ---- mixed.c: mixed-size pages (arena and next_to allocation) ------------------------- */

void *_strata_mixed_alloc(arena_t *a, size_t size, size_t align, const void *near);
void _strata_mixed_free(page_t *pg, void *p);    /* arena lock held */
size_t _strata_mixed_usable(const page_t *pg, const void *p);
void _strata_mixed_release_all(arena_t *a);      /* arena destroy */

/* ---- arena.c: arenas, runs, large objects, the shared arenas ---------------------------- */

arena_t *_strata_shared(int idx);                /* 0 default, 1 + tier */
void _strata_shared_lock_all(void);              /* fork: every shared arena and central lock */
void _strata_shared_unlock_all(void);
int _strata_place_tier(strata_place_t place);    /* -1 unbound, else the tier (clamped) */
void _strata_free(void *p, bool untag);          /* alloc.c: strata_free, optionally untagging */
/* Grow p's block to hold size bytes without copying (runs, large objects): the block (moved,
 * for a large object, by remapping its pages), or NULL when it cannot: the caller copies. */
void *_strata_grow(void *p, size_t size);
void *_strata_arena_alloc(arena_t *a, size_t size, size_t align, const void *near);
void _strata_run_free(page_t *run, void *p);
void _strata_large_free(large_t *l, void *p);

/* ---- alloc/tag.c: which context an object belongs to, kept in the allocator's metadata -- */

void _strata_tag(void *p, uint32_t ctx, uint32_t record);
void _strata_untag(void *p);                     /* on free: counts it, forgets its record */
/* p's block grew in place from old_usable bytes (q: where it is now, a large object may have
 * been remapped): it stays in its context, which counts the bytes it gained, and its record
 * follows its new extent. */
void _strata_retag_grown(const void *p, void *q, size_t old_usable);
void _strata_untag_block(page_t *span, uint16_t *tags, const void *p); /* a span's block */
void _strata_tags_release(page_t *span);         /* a span goes back to its segment */
void *_strata_arena_alloc_pages(arena_t *a, size_t size, size_t align); /* page aligned, whole pages */

/* ---- alloc/check.c: level-2 invariant walks (STRATA_DEBUG >= 2: the ASan test build) ---- */

#if STRATA_DEBUG >= 2
void _strata_check_segment(const segment_t *s);  /* seg lock held */
void _strata_check_mixed(const page_t *pg);      /* its arena's lock held */
void _strata_check_span(const page_t *span);     /* its central's lock held */
#else
static inline void _strata_check_segment(const segment_t *s) { (void)s; }
static inline void _strata_check_mixed(const page_t *pg) { (void)pg; }
static inline void _strata_check_span(const page_t *span) { (void)span; }
#endif

/* ---- channel/channel.c: the region shared with a daemon (strata_channel.h) -------------- */

extern pthread_mutex_t _strata_channel_lock;
strata_channel_header_t *_strata_channel(void);  /* created on first use; NULL: no memory */
void _strata_channel_forget(void);               /* fork child: the parent's is not ours */
/* The slot of context `id`, claimed when new (*created); 0 when the table is full. */
uint32_t _strata_channel_context(uint64_t id, bool *created);
strata_context_t *_strata_context(uint32_t idx);
uint32_t _strata_track(void *p, size_t len, uint32_t idx); /* first record, 0 if none */
/* Record pages of user arena `arena` (0: none, nothing recorded) bound as `hint` (a
 * STRATA_DIRECTIVE_*); the first record, 0 if none. */
uint32_t _strata_track_arena(void *p, size_t len, uint32_t arena, int32_t hint);
int32_t _strata_process_directive(void);
/* The process's directive at start (STRATA_DIRECTIVE; a bad value keeps the default, with a
 * message), before and when the channel is made. */
void _strata_process_directive_init(void);
int _strata_parse_directive(const char *s, int32_t *out); /* 0, or -1 */
int _strata_parse_priority(const char *s, int32_t *out);  /* 0, or -1 */
void _strata_untrack(uint32_t first, const void *p);
/* Tell a running daemon this process has a channel; offering an agent, the connection when the
 * daemon wants one (else -1). */
int _strata_daemon_hello(bool agent);

/* ---- context/context.c, rules.c, report.c: allocation contexts -------------------------- */

extern _Atomic bool _strata_contexts_on;
uint32_t _strata_context_of(size_t size, void *ret, void *frame); /* 0 = none */
/* unwind.c: the return addresses of the stack from `ret` (stack pointer `sp` and rbp as it
 * returns there), at most `depth`, at least `ret` itself, reading nothing outside
 * [sp, stack_hi); *n of them, *hash a hash of them. The array is this thread's, valid until
 * its next call. */
const uint64_t *_strata_unwind(uintptr_t ret, uintptr_t sp, uintptr_t rbp, uintptr_t stack_hi, int depth,
                               int *n, uint64_t *hash);
uint64_t _strata_hash_frames(const uint64_t *f, int n);
void _strata_context_alloc(uint32_t idx, size_t requested, size_t usable);
void _strata_context_free(uint32_t idx, size_t usable);
void _strata_context_grow(uint32_t idx, size_t bytes); /* an object grew in place */
void _strata_context_flush(void);                /* this thread's pending counts */
uint64_t _strata_context_peak(uint32_t idx);      /* its most live bytes at once (so far) */
void _strata_contexts_start(void);
bool _strata_in_capture(void);
void _strata_set_in_capture(bool v);
void _strata_rules_load(void);
void _strata_rules_apply(strata_context_t *c);
void _strata_report_write(void);
arena_t *_strata_directive_arena(int32_t directive);

/* ---- init.c: the machine, fork handlers ------------------------------------------------- */

const strata_machine_t *_strata_machine(void);   /* Linux, or the emulated machine */

/* ---- machine/linux.c: the machine interface (machine/machine.h) ------------------------ */

extern const strata_machine_t _strata_machine_linux;
void *_strata_prim_map(size_t size, size_t align);  /* zeroed, aligned; NULL on failure */
void _strata_prim_unmap(void *p, size_t size);
void _strata_prim_purge(void *p, size_t size);
void *_strata_prim_remap(void *p, size_t old_size, size_t new_size, void *to); /* NULL: failed */

/* ---- machine/track.c: write tracking for a daemon (userfaultfd asynchronous write-protect) */

void _strata_track_range(void *p, size_t len);   /* seg lock held: a new segment or mapping */
uint32_t _strata_track_start(void);              /* no lock held: STRATA_TRACKING_* bits */
void _strata_track_forget(void);                 /* fork child: the parent's userfaultfd */
int _strata_uffd(bool *can_move);                /* the userfaultfd (-1: none), and whether the agent may move with it */

/* ---- agent/agent.c, migrate.c: transactional migration for a daemon -------------------- */

extern pthread_mutex_t _strata_agent_lock;       /* held while a page is missing for a commit */
void _strata_agent_start(int conn);              /* the daemon's connection (-1: none wanted) */
void _strata_agent_forget(void);                 /* fork child */
void _strata_agent_answer_faults(int uffd);       /* the missing-page faults waiting now */
int _strata_migrate_init(int uffd);
void _strata_migrate_forget(void);
/* Move pages to node: status as move_pages(2) gives it (-EAGAIN: written during every
 * attempt). */
size_t _strata_migrate(void *const *pages, size_t n, int node, unsigned attempts, unsigned flags, int32_t *status);
size_t _strata_shadows_drop(size_t max);         /* 0: all */
size_t _strata_shadows_sweep(void);              /* drop the shadows of pages written since */
const strata_agent_counters_t *_strata_migrate_counters(void);
uint64_t _strata_migrate_misreported(void); /* ioctls that answered an error but had done the move */
/* the agent's userfaultfd, for sample.c too */
bool _strata_uffd_register(void *p, size_t len, uint64_t mode);
int _strata_uffd_move(void *dst, void *src);      /* one page; 0 or -errno */
void *_strata_agent_reserve(size_t bytes, bool wp); /* an area of the agent's (wp: a UFFDIO_MOVE destination) */
uint64_t _strata_page_categories(void *p);        /* PAGEMAP_SCAN's PAGE_IS_* of p (UINT64_MAX: error) */

/* ---- agent/sample.c: the hint-fault sampler (reads as well as writes) --------------------- */
int _strata_sample_init(void);
void _strata_sample_forget(void);                 /* fork child */
/* Return the outstanding samples, put the pages accessed since the last call (page | 1 if
 * written) in accessed[] (at most STRATA_AGENT_MAX_PAGES), then take samples of pages[];
 * how many were accessed. */
size_t _strata_sample(void *const *pages, size_t n, uint64_t *accessed, size_t *taken);
bool _strata_sample_fault(uint64_t page, bool write); /* a missing-page fault at a sample */
void _strata_sample_return_all(void);
/* Around a munmap, purge or mremap of Strata's memory: its samples go back first, and none is
 * taken until the release. Whether the hold took the lock (the sampler runs). */
bool _strata_sample_hold(void *p, size_t len);
void _strata_sample_release(bool held);

/* ---- machine/topo.c -------------------------------------------------------------------- */

uint64_t _strata_tier_nodemask(int tier);
int _strata_ntiers(void);
int _strata_node_tier(int node);                  /* -1 for an unknown node */

#endif
