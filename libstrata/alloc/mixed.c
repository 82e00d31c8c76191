/* mixed.c: pages that hold objects of any size up to 2 KiB, for arenas and next_to.
 *
 * This is what makes NextTo work (M2T, section III.A): objects of different sizes allocated
 * at different times share a page when one is placed next to the other. A mixed page is cut
 * in 256 granules of 16 bytes; its page_t holds two bitmaps, `alloc` (granule in use) and
 * `start` (an object starts here), so objects need no header and their size is the run of
 * allocated granules up to the next start.
 *
 * Placement of a new object in arena a, near object p (or not):
 *   1. on p's page, first fit from p onwards, then from the page start;
 *   2. on the arena's current page, first fit from its colour, then from its start;
 *   3. on a new page, the one right after p's (or the current one) when it is free, at the
 *      page's colour: 0, or with STRATA_COLOUR=1 a line offset that changes from one of the
 *      arena's new pages to the next (first_granule).
 * A page whose objects are all freed goes back to its segment unless it is the current page.
 * Callers hold the arena's lock. */
#include "internal.h"

static inline bool bit(const uint64_t *m, size_t i) { return m[i / 64] >> (i % 64) & 1; }
static inline void set_bits(uint64_t *m, size_t i, size_t n, bool on) {
  for (size_t k = i; k < i + n; k++) {
    if (on) m[k / 64] |= 1ull << (k % 64);
    else m[k / 64] &= ~(1ull << (k % 64));
  }
}

/* first set bit of m in [from, to), or `to` */
static size_t next_set(const uint64_t *m, size_t from, size_t to) {
  while (from < to) {
    uint64_t w = m[from / 64] >> (from % 64);
    if (w) {
      size_t i = from + (size_t)__builtin_ctzll(w);
      return i < to ? i : to;
    }
    from = (from / 64 + 1) * 64;
  }
  return to;
}

/* a start granule for n free granules, multiple of step, searching [from, end); SIZE_MAX */
static size_t fit_from(const page_t *pg, size_t n, size_t step, size_t from) {
  size_t i = align_up(from, step);
  while (i + n <= PAGE_GRANULES) {
    size_t j = next_set(pg->u.mixed.alloc, i, i + n);
    if (j == i + n) return i;
    i = align_up(j + 1, step);
  }
  return SIZE_MAX;
}

static void *take(page_t *pg, size_t g, size_t n) {
  set_bits(pg->u.mixed.alloc, g, n, true);
  pg->u.mixed.start[g / 64] |= 1ull << (g % 64);
  pg->u.mixed.used = (uint16_t)(pg->u.mixed.used + n);
  _strata_check_mixed(pg);
  return (char *)_strata_page_addr(pg) + g * GRANULE;
}

static void *try_page(page_t *pg, size_t n, size_t step, size_t from) {
  size_t g = fit_from(pg, n, step, from);
  if (g == SIZE_MAX && from) g = fit_from(pg, n, step, 0);
  return g == SIZE_MAX ? NULL : take(pg, g, n);
}

static void list_push(arena_t *a, page_t *pg) {
  pg->prev = NULL;
  pg->next = a->mixed;
  if (a->mixed) a->mixed->prev = pg;
  a->mixed = pg;
}

static void list_remove(arena_t *a, page_t *pg) {
  if (pg->prev) pg->prev->next = pg->next;
  else a->mixed = pg->next;
  if (pg->next) pg->next->prev = pg->prev;
}

/* The colour of the arena's next new page, for a first object of n granules: the granule where
 * that object goes and where later searches of the page that are not near an object start. By
 * default 0, so an arena that repeats one pattern of objects (a bucket's node, key and value)
 * repeats it at the same offsets on every page, and since a cache set's low index bits are a
 * line's offset within its page, those objects share a fraction of the sets (the README's YCSB
 * section measures this). Page colouring gives the arena's k-th new page line 37k mod 64
 * instead (37 is odd: every offset once in 64 pages), as far as the object still fits; the
 * space before it is used by searches that wrap around, so pages pack less tightly. The count
 * is the arena's, not the page address's: an arena's pages can sit at a regular stride that
 * would give them all one colour. */
static size_t first_granule(arena_t *a, size_t n, size_t step) {
  if (!_strata_option(OPT_COLOUR)) return 0;
  const size_t line = 64 / GRANULE, room = PAGE_GRANULES - n;
  size_t g = a->colour++ * 37u % 64 * line;
  if (g > room) g %= room + 1;
  return g / step * step;
}

void *_strata_mixed_alloc(arena_t *a, size_t size, size_t align, const void *near) {
  size_t n = size ? (size + GRANULE - 1) / GRANULE : 1;
  size_t step = align > GRANULE ? align / GRANULE : 1;
  page_t *np = near ? _strata_page_of(near) : NULL;
  if (np && (np->kind != PK_MIXED || np->arena != a)) np = NULL;
  void *p;
  if (np) {
    size_t from = ((uintptr_t)near & (PAGE_SIZE - 1)) / GRANULE;
    if ((p = try_page(np, n, step, from))) {
      STAT_ADD(next_to_same_page, 1);
      return p;
    }
  }
  if (near) STAT_ADD(next_to_other_page, 1);
  if (a->cur && a->cur != np && (p = try_page(a->cur, n, step, a->cur->u.mixed.colour))) return p;
  const page_t *after = np ? np : a->cur;
  if (!after && near) after = _strata_page_of(near); /* e.g. near a span of a's pool */
  page_t *pg = _strata_pages_alloc(a->pool, 1, 1, after, PK_MIXED);
  if (!pg) return NULL;
  pg->arena = a;
  pg->u.mixed.record = _strata_track_arena(_strata_page_addr(pg), PAGE_SIZE, a->unit, a->hint);
  list_push(a, pg);
  a->cur = pg;
  STAT_ADD(mixed_pages, 1);
  pg->u.mixed.colour = (uint16_t)first_granule(a, n, step);
  return take(pg, pg->u.mixed.colour, n);
}

/* Granule index of p on its page, or SIZE_MAX if p is not the start of a live object. */
static size_t object_start(const page_t *pg, const void *p) {
  uintptr_t off = (uintptr_t)p & (PAGE_SIZE - 1);
  if (off % GRANULE) return SIZE_MAX;
  size_t g = off / GRANULE;
  return bit(pg->u.mixed.start, g) && bit(pg->u.mixed.alloc, g) ? g : SIZE_MAX;
}

static size_t object_granules(const page_t *pg, size_t g) {
  size_t e = g + 1;
  while (e < PAGE_GRANULES && bit(pg->u.mixed.alloc, e) && !bit(pg->u.mixed.start, e)) e++;
  return e - g;
}

size_t _strata_mixed_usable(const page_t *pg, const void *p) {
  size_t g = object_start(pg, p);
  return g == SIZE_MAX ? 0 : object_granules(pg, g) * GRANULE;
}

void _strata_mixed_free(page_t *pg, void *p) {
  size_t g = object_start(pg, p);
  if (g == SIZE_MAX) {
    STAT_ADD(free_invalid, 1);
    return;
  }
  size_t n = object_granules(pg, g);
  set_bits(pg->u.mixed.alloc, g, n, false);
  pg->u.mixed.start[g / 64] &= ~(1ull << (g % 64));
  pg->u.mixed.used = (uint16_t)(pg->u.mixed.used - n);
  _strata_check_mixed(pg);
  if (pg->u.mixed.used == 0 && pg != pg->arena->cur) {
    list_remove(pg->arena, pg);
    _strata_untrack(pg->u.mixed.record, _strata_page_addr(pg));
    _strata_pages_free(pg, 1, false);
    STAT_ADD(mixed_pages, -1);
  }
}

void _strata_mixed_release_all(arena_t *a) {
  for (page_t *pg = a->mixed, *next; pg; pg = next) {
    next = pg->next;
    _strata_untrack(pg->u.mixed.record, _strata_page_addr(pg));
    _strata_pages_free(pg, 1, true);
    STAT_ADD(mixed_pages, -1);
  }
  a->mixed = a->cur = NULL;
}
