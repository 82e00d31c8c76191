/* tag.c: which allocation context each object belongs to, for transparent mode.
 *
 * The tag lives in the allocator's own metadata, not in the object: spans get a side array
 * of 16-bit context indices (one per block, made on the first tag), runs and large objects
 * a field in their page descriptor or header. A free clears the tag after counting it, so
 * blocks handed out by the explicit API, which never tags, always read as "no context". */
#include "internal.h"

#include <string.h>

static size_t block_index(page_t *span, const void *p) {
  uint64_t off = (uint64_t)((const char *)p - (const char *)_strata_page_addr(span));
  return (size_t)((off * _strata_class_magic(span->cls)) >> 40);
}

/* every page of a span: its blocks may carry tags (page_t.tagged) */
static void span_flag(page_t *span, uint8_t on) {
  for (uint32_t i = 0; i < span->u.span.npages; i++) __atomic_store_n(&span[i].tagged, on, __ATOMIC_RELAXED);
}

static page_t *head_of(segment_t *seg, const void *p) {
  page_t *pg = &seg->pages[((uintptr_t)p - (uintptr_t)seg) >> PAGE_SHIFT];
  return pg->kind == PK_TAIL ? &seg->pages[pg->head] : pg;
}

/* The head page of p's page, NULL in a large object. */
static page_t *head_in(segment_t *seg, const void *p) { return seg->kind == SEG_LARGE ? NULL : head_of(seg, p); }

/* A large object's (pg NULL) or a run's context and record fields, and its usable size; false
 * for anything else (span blocks carry their tag in the span's array). */
static bool whole_object(segment_t *seg, page_t *pg, const void *p, uint32_t **ctx, uint32_t **record,
                         size_t *usable) {
  if (!pg) {
    large_t *l = (large_t *)seg;
    if (p != (char *)l + l->data_off) return false;
    *ctx = &l->ctx;
    *record = &l->record;
    *usable = l->map_size - l->data_off;
    return true;
  }
  if (pg->kind != PK_RUN) return false;
  *ctx = &pg->u.run.ctx;
  *record = &pg->u.run.record;
  *usable = pg->u.run.npages * PAGE_SIZE;
  return true;
}

void _strata_tag(void *p, uint32_t ctx, uint32_t record) {
  segment_t *seg = _strata_chunk_of(p);
  if (!seg) return;
  page_t *pg = head_in(seg, p);
  uint32_t *c, *r;
  size_t usable;
  if (whole_object(seg, pg, p, &c, &r, &usable)) {
    *c = ctx;
    *r = record;
  } else if (pg && pg->kind == PK_SPAN && ctx) {
    uint16_t *tags = atomic_load_explicit(&pg->u.span.tags, memory_order_acquire);
    if (!tags) { /* two threads may tag blocks of one span at once: first one wins */
      size_t bytes = pg->u.span.capacity * sizeof(uint16_t);
      uint16_t *mine = _strata_meta_alloc(bytes), *none = NULL;
      if (!mine) return;
      /* flagged before the array is published (the exchange releases), so whoever frees a
       * block tagged from it sees the flag on the block's page */
      span_flag(pg, 1);
      if (atomic_compare_exchange_strong(&pg->u.span.tags, &none, mine)) tags = mine;
      else {
        _strata_meta_free(mine, bytes);
        tags = none;
      }
    }
    /* plain store: the block's tag is read and cleared by whoever frees it, which the
     * program orders after this allocation */
    tags[block_index(pg, p)] = (uint16_t)ctx;
  }
}

void _strata_untag(void *p) {
  segment_t *seg = _strata_chunk_of(p);
  if (!seg) return;
  page_t *pg = head_in(seg, p);
  uint32_t *c, *r;
  size_t usable;
  if (!whole_object(seg, pg, p, &c, &r, &usable)) {
    uint16_t *tags = pg && pg->kind == PK_SPAN ? atomic_load_explicit(&pg->u.span.tags, memory_order_acquire) : NULL;
    if (tags) _strata_untag_block(pg, tags, p);
    return;
  }
  uint32_t ctx = *c, record = *r;
  *c = *r = 0;
  if (ctx) _strata_context_free(ctx, usable);
  if (record) _strata_untrack(record, p);
}

void _strata_retag_grown(const void *p, void *q, size_t old_usable) {
  segment_t *seg = _strata_chunk_of(q);
  uint32_t *ctx, *record;
  size_t usable;
  if (!seg || !whole_object(seg, head_in(seg, q), q, &ctx, &record, &usable)) return;
  if (*ctx && usable > old_usable) _strata_context_grow(*ctx, usable - old_usable);
  if (*record) {
    _strata_untrack(*record, p);
    *record = _strata_track(q, usable, *ctx);
  }
}

void _strata_untag_block(page_t *span, uint16_t *tags, const void *p) {
  size_t b = block_index(span, p);
  uint32_t ctx = tags[b];
  if (!ctx) return;
  tags[b] = 0;
  _strata_context_free(ctx, _strata_class_size(span->cls));
}

void _strata_tags_release(page_t *span) {
  span_flag(span, 0);
  uint16_t *tags = atomic_exchange(&span->u.span.tags, NULL);
  if (tags) _strata_meta_free(tags, span->u.span.capacity * sizeof(uint16_t));
}
