/* alloc.c: the public allocation calls. They turn a placement into an arena and hand the
 * request to arena.c; frees go by what the pointer's page says it is. */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* The arena a placement names, and the next_to target (NULL when none). */
static arena_t *resolve(strata_place_t place, const void **near) {
  *near = NULL;
  switch (place.kind) {
    case STRATA_PLACE_DEFAULT: return _strata_shared(0);
    case STRATA_PLACE_HOT:
    case STRATA_PLACE_COLD:
    case STRATA_PLACE_TIER: return _strata_shared(1 + _strata_place_tier(place));
    case STRATA_PLACE_ARENA:
      if (!place.u.arena || place.u.arena->magic != STRATA_MAGIC) break;
      return place.u.arena;
    case STRATA_PLACE_NEXT_TO: {
      arena_t *a = strata_arena_of(place.u.ptr);
      if (!a) {
        STAT_ADD(next_to_foreign, 1);
        return _strata_shared(0);
      }
      *near = place.u.ptr;
      return a;
    }
  }
  errno = EINVAL;
  return NULL;
}

void *strata_malloc(size_t size, strata_place_t place) {
  if (likely(place.kind == STRATA_PLACE_DEFAULT && size <= SMALL_MAX)) {
    size_t cls = _strata_class_of(size);
    void *p = _strata_tcache_pop(0, cls);
    if (likely(p)) return p;
    p = _strata_span_alloc(_strata_shared(0), cls);
    if (unlikely(!p)) errno = ENOMEM;
    return p;
  }
  return strata_malloc_aligned(size, GRANULE, place);
}

void *strata_malloc_aligned(size_t size, size_t align, strata_place_t place) {
  if (align == 0 || (align & (align - 1)) || align > ALIGN_MAX) {
    errno = EINVAL;
    return NULL;
  }
  const void *near;
  arena_t *a = resolve(place, &near);
  if (!a) return NULL;
  void *p = _strata_arena_alloc(a, size, align, near);
  if (!p) errno = ENOMEM;
  return p;
}

void *strata_calloc(size_t n, size_t size, strata_place_t place) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = strata_malloc(total, place);
  if (!p) return NULL;
  segment_t *chunk = _strata_chunk_of(p);
  if (chunk->kind != SEG_LARGE) memset(p, 0, total); /* a fresh mapping is already zero */
  return p;
}

/* The one free path. With `untag` (transparent mode with contexts), the object's context
 * tag is read, cleared and counted on the way, from the same metadata lookups. */
void _strata_free(void *p, bool untag) {
  if (!p) return;
  segment_t *chunk = _strata_chunk_of(p);
  if (unlikely(!chunk)) {
    STAT_ADD(free_foreign, 1);
    return;
  }
  if (unlikely(chunk->kind == SEG_LARGE)) {
    if (untag) _strata_untag(p);
    _strata_large_free((large_t *)chunk, p);
    return;
  }
  page_t *pg = &chunk->pages[((uintptr_t)p - (uintptr_t)chunk) >> PAGE_SHIFT];
  if (likely(pg->cls)) { /* a span page: straight to this thread's cache */
    if (unlikely(pg->shared == SHARED_NONE)) { /* a context's block (blocks.c) */
      page_t *head = pg->kind == PK_TAIL ? &chunk->pages[pg->head] : pg;
      if (untag) _strata_context_free(head->arena->ctx, _strata_class_size(pg->cls));
      _strata_block_free(head, p);
      return;
    }
    if (untag && __atomic_load_n(&pg->tagged, __ATOMIC_RELAXED)) {
      page_t *head = pg->kind == PK_TAIL ? &chunk->pages[pg->head] : pg;
      uint16_t *tags = atomic_load_explicit(&head->u.span.tags, memory_order_acquire);
      if (tags) _strata_untag_block(head, tags, p);
    }
    if (likely(_strata_tcache_push(pg->shared, pg->cls, p))) return;
    _strata_span_free(pg->kind == PK_TAIL ? &chunk->pages[pg->head] : pg, p);
    return;
  }
  if (untag) _strata_untag(p);
  if (pg->kind == PK_TAIL) pg = &chunk->pages[pg->head];
  switch (pg->kind) {
    case PK_MIXED: {
      arena_t *a = pg->arena;
      pthread_mutex_lock(&a->lock);
      if (pg->kind == PK_MIXED && pg->arena == a) _strata_mixed_free(pg, p);
      else STAT_ADD(free_invalid, 1);
      pthread_mutex_unlock(&a->lock);
      return;
    }
    case PK_RUN: _strata_run_free(pg, p); return;
    default: STAT_ADD(free_invalid, 1); return;
  }
}

void strata_free(void *p) { _strata_free(p, false); }

/* Everything but a span's block (kept out of line, so the common case saves no registers). */
__attribute__((noinline)) static size_t usable_other(segment_t *chunk, const void *p) {
  if (chunk->kind == SEG_LARGE) {
    large_t *l = (large_t *)chunk;
    return p == (char *)l + l->data_off ? l->map_size - l->data_off : 0;
  }
  page_t *pg = &chunk->pages[((uintptr_t)p - (uintptr_t)chunk) >> PAGE_SHIFT];
  if (pg->kind == PK_TAIL) pg = &chunk->pages[pg->head];
  switch (pg->kind) {
    case PK_RUN: return p == _strata_page_addr(pg) ? pg->u.run.npages * PAGE_SIZE : 0;
    case PK_MIXED: {
      arena_t *a = pg->arena;
      pthread_mutex_lock(&a->lock);
      size_t n = pg->kind == PK_MIXED ? _strata_mixed_usable(pg, p) : 0;
      pthread_mutex_unlock(&a->lock);
      return n;
    }
    default: return 0;
  }
}

size_t strata_usable_size(const void *p) {
  segment_t *chunk = p ? _strata_chunk_of(p) : NULL;
  if (unlikely(!chunk)) return 0;
  if (likely(chunk->kind != SEG_LARGE)) {
    const page_t *pg = &chunk->pages[((uintptr_t)p - (uintptr_t)chunk) >> PAGE_SHIFT];
    if (likely(pg->cls)) return _strata_class_size(pg->cls); /* a span's page, head or tail */
  }
  return usable_other(chunk, p);
}

int strata_owns(const void *p) { return strata_arena_of(p) != NULL; }

void *strata_realloc(void *p, size_t size) {
  if (!p) return strata_malloc(size, strata_default());
  size_t usable = strata_usable_size(p);
  if (!usable) {
    errno = EINVAL;
    return NULL;
  }
  if (size == 0) {
    strata_free(p);
    return NULL;
  }
  if (size <= usable && size >= usable / 2) return p;
  void *grown = size > usable ? _strata_grow(p, size) : NULL;
  if (grown) return grown;
  arena_t *a = strata_arena_of(p);
  void *q = _strata_arena_alloc(a, size, GRANULE, a->shared >= 0 ? NULL : p);
  if (!q) {
    errno = ENOMEM;
    return NULL;
  }
  memcpy(q, p, size < usable ? size : usable);
  strata_free(p);
  return q;
}

int strata_where(const void *p, size_t len, strata_residency_t *r) {
  memset(r, 0, sizeof *r);
  if (!len) return 0;
  (void)strata_topology(); /* decides the machine */
  uintptr_t first = (uintptr_t)p & ~(PAGE_SIZE - 1);
  uintptr_t end = align_up((uintptr_t)p + len, PAGE_SIZE);
  enum { BATCH = 256 };
  void *pages[BATCH];
  int status[BATCH];
  for (uintptr_t a = first; a < end;) {
    size_t n = 0;
    for (; n < BATCH && a < end; n++, a += PAGE_SIZE) pages[n] = (void *)a;
    int rc = _strata_machine()->where(pages, n, status);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
      r->pages++;
      if (status[i] >= 0 && status[i] < STRATA_MAX_NODES) {
        r->node_bytes[status[i]] += PAGE_SIZE;
        int t = _strata_node_tier(status[i]);
        if (t >= 0) r->tier_bytes[t] += PAGE_SIZE;
      } else {
        r->absent_bytes += PAGE_SIZE;
      }
    }
  }
  return 0;
}
