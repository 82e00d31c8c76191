/* observe.c: the observation interface of strata_emu.h: what the emulated machine lets a
 * program, a test or a tiering policy read (clock, page bits, residency, counters) and do
 * (move pages, sample LLC misses). */
#include "emu.h"

#include <errno.h>
#include <string.h>

uint64_t strata_emu_now_ns(void) {
  emu_thread_t *t = emu_thread();
  return t ? t->clock_ps / 1000 : 0;
}

size_t strata_emu_scan(const void *p, size_t len, uint8_t *flags, int clear) {
  uint64_t first = (uintptr_t)p >> EMU_PAGE_SHIFT;
  uint64_t end = ((uintptr_t)p + len + (1u << EMU_PAGE_SHIFT) - 1) >> EMU_PAGE_SHIFT;
  for (uint64_t v = first; v < end; v++) {
    pte_t *e = emu_pte(v);
    uint8_t f = e ? atomic_load(&e->flags) : 0;
    flags[v - first] = f & (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY | STRATA_EMU_HINT);
    if (clear && e) atomic_fetch_and(&e->flags, (uint8_t) ~(STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY));
  }
  /* cleared bits are set again by the next access (the emulator sets them on every access,
   * so no TLB flush is needed for them to be seen) */
  return (size_t)(end - first);
}

size_t strata_emu_page_accesses(const void *p, size_t len, uint32_t *counts) {
  uint64_t first = (uintptr_t)p >> EMU_PAGE_SHIFT;
  uint64_t end = ((uintptr_t)p + len + (1u << EMU_PAGE_SHIFT) - 1) >> EMU_PAGE_SHIFT;
  for (uint64_t v = first; v < end; v++) {
    pte_t *e = emu_pte(v);
    counts[v - first] = e ? e->accesses : 0;
  }
  return (size_t)(end - first);
}

/* The engine's walk: pages read and their background time (report.c). */
static _Atomic uint64_t walked_pages;

uint64_t emu_walked_pages(void) { return atomic_load(&walked_pages); }

size_t strata_emu_walk(uint64_t *cursor, strata_emu_page_t *out, size_t max, int clear) {
  uint64_t v = *cursor;
  size_t n = 0;
  while (n < max) {
    size_t leaf_i = v >> EMU_LEAF_BITS;
    if (leaf_i >= EMU_TOP_ENTRIES) {
      v = 0; /* past the last page: the walk starts again */
      break;
    }
    pte_t *leaf = atomic_load(&emu_top[leaf_i]);
    if (!leaf) {
      v = (uint64_t)(leaf_i + 1) << EMU_LEAF_BITS; /* a gigabyte never touched */
      continue;
    }
    pte_t *p = &leaf[v & (EMU_LEAF_ENTRIES - 1)];
    uint8_t f = atomic_load(&p->flags);
    if (f & STRATA_EMU_PRESENT) {
      out[n].addr = v << EMU_PAGE_SHIFT;
      out[n].node = p->node;
      out[n].flags = f & (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY | STRATA_EMU_HINT);
      n++;
      if (clear) atomic_fetch_and(&p->flags, (uint8_t) ~(STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY));
    }
    v++;
  }
  *cursor = v;
  atomic_fetch_add(&walked_pages, n);
  atomic_fetch_add(&emu_scan_ps, (uint64_t)emu_ps(emu_cfg.scan_ns * (double)n));
  return n;
}

int strata_emu_nodes(strata_emu_node_t *out, int n) {
  emu_thread();
  for (int i = 0; i < n && i < emu_cfg.nnodes; i++) {
    out[i].capacity_bytes = emu_cfg.cap_bytes[i];
    out[i].resident_pages = atomic_load(&emu_resident[i]);
    out[i].tier = (int)emu_cfg.tier[i];
    out[i].distance = (int)emu_cfg.distance[i];
  }
  return emu_cfg.nnodes;
}

int strata_emu_node_of(const void *p) {
  pte_t *e = emu_pte((uintptr_t)p >> EMU_PAGE_SHIFT);
  return e && (atomic_load(&e->flags) & STRATA_EMU_PRESENT) ? e->node : -1;
}

int strata_emu_residency(uint64_t *pages, int n) {
  emu_thread();
  for (int i = 0; i < n && i < emu_cfg.nnodes; i++) pages[i] = atomic_load(&emu_resident[i]);
  return emu_cfg.nnodes;
}

int strata_emu_move(void *const *pages, size_t n, const int *nodes, int *status, int async) {
  emu_thread_t *t = emu_thread();
  if (!t) return -ENOMEM;
  return emu_move_pages(t, pages, n, nodes, status, async);
}

void strata_emu_set_sample_period(uint64_t misses) {
  emu_thread_t *t = emu_thread();
  emu_cfg.sample_period = misses;
  for (int i = 0; t && i < emu_nthreads(); i++) emu_thread_at(i)->sample_countdown = misses;
}

/* One thread's counter by name, or -1. */
static int64_t thread_counter(const emu_thread_t *t, const char *name) {
  if (!strcmp(name, "sim_ns")) return (int64_t)(t->clock_ps / 1000);
#define X(n) if (!strcmp(name, #n)) return (int64_t)t->n;
#define D(n, e) if (!strcmp(name, #n)) return (int64_t)(e);
  EMU_COUNTERS(X, D)
#undef X
#undef D
  return -1;
}

int64_t strata_emu_counter(const char *name) {
  emu_thread_t *t = emu_thread();
  if (!t) return -1;
  static const char all[] = "process.";
  if (strncmp(name, all, sizeof all - 1)) return thread_counter(t, name);
  /* the sum over every thread, and for moves the background's too (the report's totals) */
  name += sizeof all - 1;
  if (!strcmp(name, "sim_ns")) return -1;
  int64_t sum = thread_counter(t, name);
  if (sum < 0) return -1;
  sum = 0;
  for (int i = 0; i < emu_nthreads(); i++) sum += thread_counter(emu_thread_at(i), name);
  static const char *const bg[] = {"moved_pages", "promoted_pages", "demoted_pages", "shootdowns"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, bg[i])) sum += (int64_t)emu_bg_counter(i);
  return sum;
}
