/* strata_emu.h: the emulated tiered machine (strata-emu), as a program linked with it sees it.
 *
 * A program built with `strata emu cc` (or `strata emu cargo`) reports every load and store to
 * the emulator, which keeps caches, TLBs, an emulated page table (page -> emulated node) and a
 * simulated clock per thread. These calls let the program, a test, or a tiering policy read
 * what the emulated machine observes. They are the observation interface a tiering daemon uses
 * on the emulated machine; every one is cheap enough to call often.
 *
 * Sizes are in bytes, times in simulated nanoseconds, pages are 4 KiB. Every function works
 * whether or not the process is running under `strata emu run` (with the built-in default
 * machine when it is not). */
#ifndef STRATA_EMU_H
#define STRATA_EMU_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_EMU_API __attribute__((visibility("default")))

/* The calling thread's simulated clock. */
STRATA_EMU_API uint64_t strata_emu_now_ns(void);

/* Page flags returned by strata_emu_scan. */
enum {
  STRATA_EMU_PRESENT = 1,  /* touched: the page has an emulated node */
  STRATA_EMU_ACCESSED = 2, /* accessed since the bit was last cleared */
  STRATA_EMU_DIRTY = 4,    /* written since the bit was last cleared */
  STRATA_EMU_HINT = 8,     /* protected for a hint fault (tpp kernel mode's scanner) */
};

/* Flags of each page of [p, p+len) into flags[] (one byte a page, as many as the range spans);
 * with clear != 0 the accessed and dirty bits are cleared after reading. Returns the number of
 * pages written. */
STRATA_EMU_API size_t strata_emu_scan(const void *p, size_t len, uint8_t *flags, int clear);

/* Ground truth: accesses (loads + stores the emulator saw) of each page of [p, p+len) since
 * the page was first touched. Returns the number of pages written. */
STRATA_EMU_API size_t strata_emu_page_accesses(const void *p, size_t len, uint32_t *counts);

/* The emulated node of the page holding p, or -1 if it was never touched. */
STRATA_EMU_API int strata_emu_node_of(const void *p);

/* Resident pages per emulated node into pages[0..n). Returns the number of nodes. */
STRATA_EMU_API int strata_emu_residency(uint64_t *pages, int n);

/* Move pages to nodes (status[i]: the node, or -errno). With async = 0 the calling thread is
 * charged the unmap, copy and TLB shootdown; with async = 1 a background budget is (as a
 * daemon's mover thread would be), and the copy still takes bandwidth from both tiers. With
 * async = STRATA_EMU_MOVE_TRANSACTIONAL, as libstrata's agent moves (docs/migration.md): in the
 * background, each page copied while it stays in use and committed later only if no store hit
 * it meanwhile (its status is where it is going; -EBUSY: already being copied), promotions
 * keeping the old page as a shadow that a clean demotion remaps. */
enum { STRATA_EMU_MOVE_TRANSACTIONAL = 2 };
STRATA_EMU_API int strata_emu_move(void *const *pages, size_t n, const int *nodes, int *status,
                                   int async);

/* A last-level-cache miss sample (like PEBS): taken every `sample_period` LLC misses. */
typedef struct strata_emu_sample_s {
  uint64_t addr;
  uint64_t time_ns; /* the sampled thread's clock */
  int32_t node;     /* the emulated node that served the miss */
  int32_t thread;   /* emulator thread index, 0 = first thread */
  int32_t store;    /* 1 for a store */
  int32_t pad;
} strata_emu_sample_t;

/* A hint fault of the tpp kernel mode (a protected slow-tier page was accessed). */
typedef struct strata_emu_fault_s {
  uint64_t addr; /* the page */
  uint64_t time_ns;
  int32_t node;     /* where the page was */
  int32_t promoted; /* 1 when the fault promoted it */
} strata_emu_fault_t;

/* Set the LLC-miss sampling period (0 = off, the default). */
STRATA_EMU_API void strata_emu_set_sample_period(uint64_t misses);
/* Take up to max samples / hint-fault events, oldest first (a ring: if nobody reads, the
 * oldest are overwritten and counted as lost in the report). Returns how many were taken. */
STRATA_EMU_API size_t strata_emu_samples(strata_emu_sample_t *out, size_t max);
STRATA_EMU_API size_t strata_emu_hint_faults(strata_emu_fault_t *out, size_t max);

/* One present page of the emulated page table, as strata_emu_walk returns it. */
typedef struct strata_emu_page_s {
  uint64_t addr;  /* the page */
  uint8_t node;
  uint8_t flags;  /* STRATA_EMU_* */
  uint8_t pad[6];
} strata_emu_page_t;

/* The present pages in address order from *cursor on (0: the first page), at most max, into
 * out; with clear != 0 their accessed and dirty bits are cleared once read. *cursor moves past
 * them, and is 0 again once the walk has passed the last page: a full scan ended. Each page
 * returned costs `scan_ns` of background (engine) time. Returns the number of pages. */
STRATA_EMU_API size_t strata_emu_walk(uint64_t *cursor, strata_emu_page_t *out, size_t max, int clear);

/* One emulated node: its memory, what is resident on it, its tier and its distance from the
 * CPUs (first touch tries the nearest first). */
typedef struct strata_emu_node_s {
  uint64_t capacity_bytes, resident_pages;
  int tier, distance;
} strata_emu_node_t;
/* Up to n nodes into out; returns the number of nodes. */
STRATA_EMU_API int strata_emu_nodes(strata_emu_node_t *out, int n);

/* ---- a tiering engine inside the program ------------------------------------------------
 * When $STRATA_ENGINE_LIB names a library, the emulator loads it when the program's first
 * thread starts and calls its `strata_engine_start` (strata_engine_start_fn), which fills in
 * the hooks. Then every period_ns of simulated time, the thread whose clock passed the period
 * calls tick (one at a time, holding no lock of the emulator). The engine stands for a daemon
 * on a core of its own: its own instructions and memory accesses are not the program's (the
 * library is not instrumented, and its bulk copies are not counted); what it costs the
 * program is what it asks of the emulated machine (walks charge background time, moves are
 * background moves with their bandwidth and TLB shootdowns). At exit, report's JSON object goes
 * into the report as "engine". libstratad_emu.so (the stratad-emu crate) is such a library. */
typedef struct strata_emu_engine_s {
  uint64_t period_ns;
  void (*tick)(void *arg);
  const char *(*report)(void *arg); /* the engine's statistics, a JSON object, or NULL */
  void *arg;
} strata_emu_engine_t;
/* 0, or -1 with the reason in err */
typedef int strata_engine_start_fn(strata_emu_engine_t *engine, char *err, size_t errlen);

/* The signal that makes a program on the emulated machine write its report so far to
 * $STRATA_EMU_REPORT.snapshot (without the engine's statistics); `strata emu run` and the
 * benchmarks use it to measure one phase of a server. */
#define STRATA_EMU_SNAPSHOT_SIGNAL (SIGRTMIN + 7)

/* One named counter of the calling thread ("accesses", "l1_misses", "llc_misses",
 * "dtlb_misses", "stlb_misses", "sim_ns", ...; see the report), or -1 when unknown.
 * "process.NAME" sums NAME over every thread, with the background's moves for
 * moved_pages, promoted_pages, demoted_pages and shootdowns (the report's totals). */
STRATA_EMU_API int64_t strata_emu_counter(const char *name);

#ifdef __cplusplus
}
#endif
#endif
