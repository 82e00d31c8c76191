/* strata.h: the one public header of libstrata, the Strata allocator with placement.
 *
 * Every call is thread-safe. Errors are returned (NULL + errno, or a negative errno value);
 * the library never prints unless STRATA_VERBOSE is set, and never exits.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* exported from libstrata.so; everything else in the library is hidden */
#define STRATA_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------------------------------
 * Limits
 * ---------------------------------------------------------------------------------------- */

#define STRATA_MAX_NODES 64   /* NUMA node ids 0..63 */
#define STRATA_MAX_TIERS 8    /* memory tiers, 0 = fastest */

/* ------------------------------------------------------------------------------------------
 * Placement: where an allocation should go. A small value type; build it with the
 * constructors below and pass it by value.
 * ---------------------------------------------------------------------------------------- */

typedef struct strata_arena_s strata_arena_t;

typedef enum strata_place_kind_e {
  STRATA_PLACE_DEFAULT = 0, /* the default arena: no binding, the kernel places pages */
  STRATA_PLACE_NEXT_TO,     /* in the arena of `ptr`, on its page when it fits */
  STRATA_PLACE_HOT,         /* the shared arena bound to the fastest tier */
  STRATA_PLACE_COLD,        /* the shared arena bound to the slowest tier */
  STRATA_PLACE_TIER,        /* the shared arena bound to tier `tier` (clamped to the last) */
  STRATA_PLACE_ARENA,       /* the arena `arena` */
} strata_place_kind_t;

typedef struct strata_place_s {
  strata_place_kind_t kind;
  unsigned tier;            /* STRATA_PLACE_TIER */
  union {
    const void *ptr;        /* STRATA_PLACE_NEXT_TO */
    strata_arena_t *arena;  /* STRATA_PLACE_ARENA */
  } u;
} strata_place_t;

static inline strata_place_t strata_default(void) {
  strata_place_t p = {STRATA_PLACE_DEFAULT, 0, {0}};
  return p;
}
/* Next to the object containing `ptr`. `ptr` is only used as an address: it is never read.
 * A pointer not allocated by Strata, or whose arena was destroyed, gives the default
 * placement (counted as `next_to_foreign` in the statistics). A freed pointer whose page
 * still belongs to an arena places in that arena. */
static inline strata_place_t strata_next_to(const void *ptr) {
  strata_place_t p = {STRATA_PLACE_NEXT_TO, 0, {0}};
  p.u.ptr = ptr;
  return p;
}
static inline strata_place_t strata_hot(void) {
  strata_place_t p = {STRATA_PLACE_HOT, 0, {0}};
  return p;
}
static inline strata_place_t strata_cold(void) {
  strata_place_t p = {STRATA_PLACE_COLD, 0, {0}};
  return p;
}
static inline strata_place_t strata_tier(unsigned n) {
  strata_place_t p = {STRATA_PLACE_TIER, n, {0}};
  return p;
}
static inline strata_place_t strata_in_arena(strata_arena_t *a) {
  strata_place_t p = {STRATA_PLACE_ARENA, 0, {0}};
  p.u.arena = a;
  return p;
}

/* ------------------------------------------------------------------------------------------
 * Allocation
 * ---------------------------------------------------------------------------------------- */

/* Allocate `size` bytes (16-byte aligned) placed as `place` says. size 0 returns a unique
 * pointer. Returns NULL with errno ENOMEM when memory cannot be had, EINVAL for a bad
 * placement (an ARENA placement with a NULL arena). */
STRATA_API void *strata_malloc(size_t size, strata_place_t place);
/* Zeroed n*size bytes; NULL + ENOMEM on overflow. */
STRATA_API void *strata_calloc(size_t n, size_t size, strata_place_t place);
/* `size` bytes aligned to `align` (a power of two, at most 1 MiB); EINVAL otherwise. */
STRATA_API void *strata_malloc_aligned(size_t size, size_t align, strata_place_t place);
/* Grow or shrink `p`, keeping its contents and its placement (the new block is in the same
 * arena; in a user arena, next to the old one). realloc(NULL, n) is malloc(n, default);
 * realloc(p, 0) frees p and returns NULL, as glibc does. On failure p is unchanged, NULL is
 * returned with errno ENOMEM (EINVAL for a pointer Strata does not own). */
STRATA_API void *strata_realloc(void *p, size_t size);
/* Free a pointer returned by this library. NULL is ignored. A pointer that Strata did not
 * allocate is detected and ignored (counted as `free_foreign`). */
STRATA_API void strata_free(void *p);
/* Bytes usable at p (at least the size asked for); 0 for NULL or a foreign pointer. */
STRATA_API size_t strata_usable_size(const void *p);
/* 1 if p lies in memory Strata manages, else 0. */
STRATA_API int strata_owns(const void *p);

/* ------------------------------------------------------------------------------------------
 * Arenas: the unit of locality. An arena owns its own pages; objects in one arena never
 * share a page with another arena's. Destroying an arena frees every object in it at once
 * and returns its pages to the operating system.
 * ---------------------------------------------------------------------------------------- */

/* A new arena whose pages follow `place`: DEFAULT (unbound), HOT, COLD, TIER(n), or NEXT_TO(p)
 * (the binding of p's arena). ARENA is not accepted (EINVAL). NULL + errno on failure. */
STRATA_API strata_arena_t *strata_arena_new(strata_place_t place);
/* Free every object of the arena and the arena itself. The shared arenas cannot be
 * destroyed: returns -EINVAL for them, 0 on success. */
STRATA_API int strata_arena_destroy(strata_arena_t *a);
/* The arena that owns p, or NULL for a foreign pointer. */
STRATA_API strata_arena_t *strata_arena_of(const void *p);
/* The tier an arena's pages are bound to, or -1 when unbound (default arena). */
STRATA_API int strata_arena_tier(const strata_arena_t *a);

/* ------------------------------------------------------------------------------------------
 * Introspection: where memory really is (asked of the machine, not of Strata's books).
 * ---------------------------------------------------------------------------------------- */

typedef struct strata_residency_s {
  uint64_t node_bytes[STRATA_MAX_NODES]; /* resident bytes per NUMA node */
  uint64_t tier_bytes[STRATA_MAX_TIERS]; /* the same, summed per Strata tier */
  uint64_t absent_bytes;                 /* pages never touched or swapped out */
  uint64_t pages;                        /* pages examined */
} strata_residency_t;

/* Fill *r with where the pages of [p, p+len) are. Every page the range touches counts as a
 * whole. Returns 0, or -errno when the machine cannot tell (e.g. -ENOSYS without NUMA). */
STRATA_API int strata_where(const void *p, size_t len, strata_residency_t *r);

/* ------------------------------------------------------------------------------------------
 * Topology: the nodes and the tier order this process uses. Discovered once from sysfs (or
 * the STRATA_TIERS override) on first use.
 * ---------------------------------------------------------------------------------------- */

typedef struct strata_node_info_s {
  int id;
  int has_cpus;                /* 0 for a CPU-less (e.g. CXL) node */
  char cpulist[64];            /* as the kernel prints it, e.g. "0-3" ("" when none) */
  uint64_t total_bytes, free_bytes;
  int kernel_tier;             /* memory_tierN of the kernel, -1 when not exposed */
  int tier;                    /* Strata's tier, 0 = fastest */
  /* HMAT attributes from access0/initiators, -1 when absent: ns and MB/s */
  int64_t read_latency_ns, write_latency_ns, read_bandwidth_mbps, write_bandwidth_mbps;
  uint8_t distance[STRATA_MAX_NODES]; /* SLIT distance to each node id, 0 when unknown */
} strata_node_info_t;

typedef struct strata_topology_s {
  int nnodes;
  strata_node_info_t nodes[STRATA_MAX_NODES];
  int ntiers;
  uint64_t tier_nodemask[STRATA_MAX_TIERS]; /* bit i = node i */
  char tier_source[64];    /* how the tier order was decided, e.g. "memory_tiering" */
  char nodes_source[64];   /* where node facts came from, e.g. "/sys/devices/system/node" */
} strata_topology_t;

/* The process topology (discovered once, then cached). Never NULL. */
STRATA_API const strata_topology_t *strata_topology(void);
/* Discover a topology from a sysfs tree rooted at `sysfs_root` ("/sys" for the real one,
 * or a fixture directory). `tiers_override` is the STRATA_TIERS syntax ("0,2;1": tier 0 =
 * nodes 0 and 2, tier 1 = node 1) or NULL. Returns 0 or -errno (-EINVAL for a bad override,
 * with nothing changed in *t). */
STRATA_API int strata_topology_discover(const char *sysfs_root, const char *tiers_override,
                             strata_topology_t *t);

/* ------------------------------------------------------------------------------------------
 * Statistics: counters of the whole process. Printed through a callback that never
 * allocates, as a text table or JSON.
 * ---------------------------------------------------------------------------------------- */

typedef void strata_output_fn(const char *text, void *arg);
/* Print the statistics; `out` NULL prints to stderr. json != 0 gives one JSON object. */
STRATA_API void strata_stats_print(int json, strata_output_fn *out, void *arg);
/* One counter by name (see the table in strata_stats_print), -1 when unknown. */
STRATA_API int64_t strata_stat(const char *name);

/* ------------------------------------------------------------------------------------------
 * Transparent mode: LD_PRELOAD=libstrata.so places objects by allocation context.
 * ---------------------------------------------------------------------------------------- */

/* Check a rules file (syntax in libstrata/context/rules.c). Returns the number of rules, or
 * -1 with a message (naming the line) in err. */
STRATA_API int strata_rules_check(const char *path, char *err, size_t errn);

/* ------------------------------------------------------------------------------------------
 * Time: the machine's clock. Natively CLOCK_MONOTONIC; on the emulated machine (a program
 * built with `strata emu cc` / `strata emu cargo`) the calling thread's simulated clock, so a
 * benchmark that times itself with this reports operations per simulated second there.
 * ---------------------------------------------------------------------------------------- */

STRATA_API uint64_t strata_now_ns(void);
/* 1 when the program runs on the emulated machine. */
STRATA_API int strata_emulated(void);
/* One counter of the emulated machine for the calling thread ("l1_misses", "stlb_misses",
 * "llc_misses", ...: the report's), or -1 natively or for a name it does not know. */
STRATA_API int64_t strata_emulated_counter(const char *name);

/* ------------------------------------------------------------------------------------------
 * Options: read from STRATA_<NAME> environment variables on first use.
 * ---------------------------------------------------------------------------------------- */

/* Print every option with its value, default, unit and doc. */
STRATA_API void strata_options_print(strata_output_fn *out, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_H */
