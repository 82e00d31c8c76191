/* check.c: level-2 invariant walks (STRATA_DEBUG >= 2, the AddressSanitizer test build), run
 * after every change to a segment's page map, a mixed page or a span. Each walks the whole
 * structure, so they are far too slow for a release build; the cheap level-1 assertions stay
 * where the code is. A broken invariant aborts with the expression that failed. */
#include "internal.h"

#if STRATA_DEBUG >= 2

static inline bool bit(const uint64_t *m, size_t i) { return m[i / 64] >> (i % 64) & 1; }

static size_t head_pages(const page_t *pg) {
  switch (pg->kind) {
    case PK_SPAN: return pg->u.span.npages;
    case PK_RUN: return pg->u.run.npages;
    case PK_MIXED: return 1;
    default: return 0;
  }
}

/* The page map: META pages first and never free; a free page (free_map bit set) is PK_FREE;
 * every page in use is a head (span, mixed, run) or a tail inside the head's extent; used_pages
 * counts what is not free. */
void _strata_check_segment(const segment_t *s) {
  strata_assert(2, s->magic == STRATA_MAGIC && s->kind == SEG_PAGES);
  size_t used = 0;
  for (size_t i = 0; i < PAGES_PER_SEG; i++) {
    const page_t *pg = &s->pages[i];
    bool free_bit = bit(s->free_map, i);
    strata_assert(2, free_bit || (!bit(s->dirty_map, i) && !bit(s->idle_map, i))); /* only free pages */
    if (i < SEG_META_PAGES) {
      strata_assert(2, !free_bit && pg->kind == PK_META);
      used++;
      continue;
    }
    if (free_bit) {
      strata_assert(2, pg->kind == PK_FREE);
      continue;
    }
    used++;
    if (pg->kind == PK_TAIL) {
      const page_t *h = &s->pages[pg->head];
      strata_assert(2, pg->head < i && (h->kind == PK_SPAN || h->kind == PK_RUN));
      strata_assert(2, i < pg->head + head_pages(h));
    } else {
      strata_assert(2, pg->kind == PK_SPAN || pg->kind == PK_MIXED || pg->kind == PK_RUN);
      strata_assert(2, i + head_pages(pg) <= PAGES_PER_SEG);
    }
  }
  strata_assert(2, used == s->used_pages);
}

/* A mixed page: objects start on allocated granules, every run of allocated granules begins
 * with a start, `used` counts allocated granules, the colour lies on the page. */
void _strata_check_mixed(const page_t *pg) {
  strata_assert(2, pg->kind == PK_MIXED && pg->arena);
  size_t used = 0;
  for (size_t g = 0; g < PAGE_GRANULES; g++) {
    bool a = bit(pg->u.mixed.alloc, g), st = bit(pg->u.mixed.start, g);
    strata_assert(2, !st || a);
    if (a && (g == 0 || !bit(pg->u.mixed.alloc, g - 1))) strata_assert(2, st);
    used += a;
  }
  strata_assert(2, used == pg->u.mixed.used);
  strata_assert(2, pg->u.mixed.colour < PAGE_GRANULES);
}

/* A span: used <= bump <= capacity, and its free list holds exactly bump - used distinct
 * blocks, each inside the span at a multiple of the class size, below the bump. */
void _strata_check_span(const page_t *span) {
  strata_assert(2, span->kind == PK_SPAN && span->cls > 0 && span->cls < NCLASSES);
  size_t size = _strata_class_size(span->cls);
  uint32_t cap = span->u.span.capacity, bump = span->u.span.bump, used = span->u.span.used;
  strata_assert(2, cap == span->u.span.npages * PAGE_SIZE / size);
  strata_assert(2, used <= bump && bump <= cap);
  uintptr_t base = (uintptr_t)_strata_page_addr(span);
  uint64_t seen[(SPAN_PAGES_BIG * PAGE_SIZE / 16 + 63) / 64] = {0};
  uint32_t n = 0;
  for (const block_t *b = span->u.span.free; b; b = b->next) {
    uintptr_t off = (uintptr_t)b - base;
    strata_assert(2, (uintptr_t)b >= base && off % size == 0 && off / size < bump);
    size_t k = off / size;
    strata_assert(2, !bit(seen, k)); /* a cycle or a block freed twice */
    seen[k / 64] |= 1ull << (k % 64);
    strata_assert(2, ++n <= cap);
  }
  strata_assert(2, n == bump - used);
}

#endif
