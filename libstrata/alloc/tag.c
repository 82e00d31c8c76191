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

void _strata_tag(void *p, uint32_t ctx, uint32_t record) {
  segment_t *seg = _strata_chunk_of(p);
  if (!seg) return;
  if (seg->kind == SEG_LARGE) {
    large_t *l = (large_t *)seg;
    l->ctx = ctx;
    l->record = record;
    return;
  }
  page_t *pg = head_of(seg, p);
  if (pg->kind == PK_RUN) {
    pg->u.run.ctx = ctx;
    pg->u.run.record = record;
  } else if (pg->kind == PK_SPAN && ctx) {
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
  uint32_t ctx = 0, record = 0;
  size_t usable = 0;
  if (seg->kind == SEG_LARGE) {
    large_t *l = (large_t *)seg;
    if (p != (char *)l + l->data_off) return;
    ctx = l->ctx;
    record = l->record;
    l->ctx = l->record = 0;
    usable = l->map_size - l->data_off;
  } else {
    page_t *pg = head_of(seg, p);
    if (pg->kind == PK_RUN) {
      ctx = pg->u.run.ctx;
      record = pg->u.run.record;
      pg->u.run.ctx = pg->u.run.record = 0;
      usable = pg->u.run.npages * PAGE_SIZE;
    } else if (pg->kind == PK_SPAN) {
      uint16_t *tags = atomic_load_explicit(&pg->u.span.tags, memory_order_acquire);
      if (tags) _strata_untag_block(pg, tags, p);
      return;
    }
  }
  if (ctx) _strata_context_free(ctx, usable);
  if (record) _strata_untrack(record, p);
}

void _strata_retag_grown(const void *p, void *q, size_t old_usable) {
  segment_t *seg = _strata_chunk_of(q);
  if (!seg) return;
  uint32_t *ctx, *record;
  size_t usable;
  if (seg->kind == SEG_LARGE) {
    large_t *l = (large_t *)seg;
    ctx = &l->ctx;
    record = &l->record;
    usable = l->map_size - l->data_off;
  } else {
    page_t *pg = head_of(seg, q);
    if (pg->kind != PK_RUN) return;
    ctx = &pg->u.run.ctx;
    record = &pg->u.run.record;
    usable = pg->u.run.npages * PAGE_SIZE;
  }
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
