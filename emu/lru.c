/* lru.c: set-associative arrays with true LRU, the caches' and TLBs' tag stores (the layout
 * is described with lru_t in emu.h; the per-access half is inline, in lru.h). */
#include "lru.h"

#include <sys/syscall.h>
#include <unistd.h>

int lru_init(lru_t *c, uint64_t entries, uint64_t ways) {
  c->sets = 0;
  if (!lru_geometry_ok(entries, ways)) return -1;
  if (!entries) return 0; /* level absent */
  c->ways = ways;
  c->sets = entries / ways;
  c->mask = (c->sets & (c->sets - 1)) == 0 ? c->sets - 1 : UINT64_MAX;
  c->shift = (unsigned)__builtin_ctzll(c->sets);
  c->narrow = c->sets >= NARROW_MIN_SETS && ways <= NARROW_SLOTS;
  c->tags = emu_map(c->narrow ? c->sets * NARROW_SLOTS * sizeof(uint32_t) : entries * sizeof(uint64_t));
  return c->tags ? 0 : -1;
}

void lru_free(lru_t *c) {
  /* not munmap: the emulator interposes it (core.c) */
  if (c->sets) syscall(SYS_munmap, c->tags, c->narrow ? c->sets * NARROW_SLOTS * sizeof(uint32_t) : c->sets * c->ways * sizeof(uint64_t));
  c->sets = 0;
}

uint64_t lru_key_at(const lru_t *c, uint64_t set, uint64_t way) {
  const void *p = c->narrow ? (const void *)((const uint32_t *)c->tags + set * NARROW_SLOTS)
                            : (const void *)((const uint64_t *)c->tags + set * c->ways);
  uint64_t tag = lru_slot(p, c->narrow, way);
  return !tag || !c->narrow ? tag : (tag - 1) * c->sets + set + 1;
}

int lru_touch(lru_t *c, uint64_t key) { return lru_touch_inline(c, key); }

int lru_way(const lru_t *c, uint64_t key) {
  if (!c->sets) return -1;
  lru_where_t w = lru_where(c, key);
  for (uint64_t i = 0; i < c->ways; i++)
    if (lru_slot(w.set, c->narrow, i) == w.tag) return (int)i;
  return -1;
}

void lru_remove(lru_t *c, uint64_t key) {
  int way = lru_way(c, key);
  if (way < 0) return;
  lru_where_t w = lru_where(c, key);
  for (uint64_t i = (uint64_t)way; i + 1 < c->ways; i++)
    lru_set_slot(w.set, c->narrow, i, lru_slot(w.set, c->narrow, i + 1));
  lru_set_slot(w.set, c->narrow, c->ways - 1, 0);
}

void lru_flush(lru_t *c) {
  uint64_t slots = c->narrow ? NARROW_SLOTS : c->ways;
  for (uint64_t i = 0; c->sets && i < c->sets * slots; i++) lru_set_slot(c->tags, c->narrow, i, 0);
}
