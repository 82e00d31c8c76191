/* span.c: the fast path of the shared arenas (default, and one per tier).
 *
 * Small objects (<= 64 KiB) are rounded to one of 44 size classes: multiples of 16 up to
 * 128, then four classes per power of two (worst-case waste 25 %, typically ~10 %). A span
 * is 64 KiB of one class (256 KiB above 16 KiB), taken from the arena's segment pool and
 * aligned to its size, so every block of class size 2^k is 2^k aligned.
 *
 * Each thread keeps, per shared arena and class, a list of free blocks (its cache). malloc
 * pops from it, free pushes to it, whatever thread allocated the block: a cross-thread free
 * costs the same as a local one. When a list is empty it is refilled with a batch from the
 * arena's central list of spans (one mutex per class); when it grows past its limit
 * (STRATA_TCACHE_BYTES), half goes back to the spans. A span whose blocks are all free is
 * returned to its segment, so memory is bounded by what is live plus the caches. */
#include "internal.h"

__thread tcache_t *_strata_tls_cache __attribute__((tls_model("initial-exec")));
#define tls_cache _strata_tls_cache
static __thread bool tls_exited __attribute__((tls_model("initial-exec")));
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

size_t _strata_class_size(size_t cls) {
  if (cls <= 8) return cls * 16;
  size_t k = cls - 9, b = 7 + k / 4, sub = k % 4;
  return (4 + sub + 1) << (b - 2);
}

uint64_t _strata_class_magic(size_t cls) {
  static uint64_t magic[NCLASSES];
  uint64_t m = __atomic_load_n(&magic[cls], __ATOMIC_RELAXED);
  if (unlikely(!m)) {
    uint64_t size = _strata_class_size(cls);
    m = (((uint64_t)1 << 40) + size - 1) / size;
    __atomic_store_n(&magic[cls], m, __ATOMIC_RELAXED);
  }
  return m;
}

/* ---- central lists: spans with free blocks, per shared arena and class ------------------ */

static void partial_push(central_t *c, page_t *s) {
  s->prev = NULL;
  s->next = c->partial;
  if (c->partial) c->partial->prev = s;
  c->partial = s;
  s->in_list = 1;
}

static void partial_remove(central_t *c, page_t *s) {
  if (s->prev) s->prev->next = s->next;
  else c->partial = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
  s->in_list = 0;
}

/* Take up to n blocks for *chain; returns how many (0 when out of memory). */
static uint32_t central_take(arena_t *a, size_t cls, block_t **chain, uint32_t n) {
  central_t *c = &a->central[cls];
  size_t size = _strata_class_size(cls);
  uint32_t got = 0;
  pthread_mutex_lock(&c->lock);
  while (got < n) {
    page_t *s = c->partial;
    if (!s) {
      size_t npages = _strata_span_pages(size);
      s = _strata_pages_alloc(a->pool, npages, npages, NULL, PK_SPAN);
      if (!s) break;
      s->arena = a;
      for (size_t i = 0; i < npages; i++) { /* free() finds class and arena on any page */
        s[i].cls = (uint8_t)cls;
        s[i].shared = a->shared >= 0 ? (uint8_t)a->shared : SHARED_NONE;
      }
      s->u.span.capacity = (uint32_t)(npages * PAGE_SIZE / size);
      s->u.span.record = a->ctx ? _strata_track(_strata_page_addr(s), npages * PAGE_SIZE, a->ctx) : 0;
      partial_push(c, s);
      STAT_ADD(spans, 1);
    }
    char *base = _strata_page_addr(s);
    if (s->u.span.used == 0 && s->u.span.bump) c->empty--; /* an emptied span, in use again */
    while (got < n) {
      block_t *b = s->u.span.free;
      if (b) s->u.span.free = b->next;
      else if (s->u.span.bump < s->u.span.capacity) b = (block_t *)(base + size * s->u.span.bump++);
      else break;
      b->next = *chain;
      *chain = b;
      s->u.span.used++;
      got++;
    }
    _strata_check_span(s);
    if (!s->u.span.free && s->u.span.bump == s->u.span.capacity) partial_remove(c, s);
  }
  pthread_mutex_unlock(&c->lock);
  return got;
}

/* Give a chain of blocks (all of class cls in arena a) back to their spans. */
static void central_give(arena_t *a, size_t cls, block_t *chain) {
  central_t *c = &a->central[cls];
  pthread_mutex_lock(&c->lock);
  while (chain) {
    block_t *b = chain;
    chain = b->next;
    page_t *s = _strata_page_of(b);
    strata_assert(1, s && s->kind == PK_SPAN && s->cls == cls && s->arena == a);
    b->next = s->u.span.free;
    s->u.span.free = b;
    s->u.span.used--;
    if (!s->in_list) partial_push(c, s);
    if (!chain || _strata_page_of(chain) != s) _strata_check_span(s); /* the span's last block here */
    /* empty and not the last: release; a context arena (blocks.c, no thread cache) keeps one
     * empty span besides, or a working set at a span's edge takes and releases a span on
     * every other call */
    if (s->u.span.used == 0 && (s->next || s->prev) && (!a->ctx || c->empty)) {
      partial_remove(c, s);
      _strata_tags_release(s);
      _strata_untrack(s->u.span.record, _strata_page_addr(s));
      _strata_pages_free(s, s->u.span.npages, false);
      STAT_ADD(spans, -1);
    } else if (s->u.span.used == 0) {
      c->empty++;
    }
  }
  pthread_mutex_unlock(&c->lock);
}

/* ---- context arenas' blocks (blocks.c): a small cache per thread ---------------------------
 * A context arena has no bins in the thread caches (they are per shared arena), so each thread
 * keeps lists of free blocks, one per slot of a direct-mapped table by context:
 * two threads allocating from one context do not meet at its class's lock on every call (4x
 * slower on small-2t without it). A list holds at most 64 KiB of blocks. */

/* A context's slot: contexts are numbered from 1 in the order they appear, and a context is
 * one size class, so the first BLOCK_SLOTS contexts of a binding never share one (hashed by
 * arena address, two of small-2t's 24 did, by chance, and took turns flushing each other's
 * blocks on every call: 21 against 65 M/s). */
static block_bin_t *block_bin(tcache_t *tc, const arena_t *a) {
  return &tc->blocks[(a->ctx + (uint32_t)a->pool * 97u) % BLOCK_SLOTS];
}

static void block_bin_flush(block_bin_t *bin) {
  if (bin->head) central_give(bin->arena, bin->cls, bin->head);
  bin->head = NULL;
  bin->count = 0;
}

static void block_bins_flush_all(tcache_t *tc) {
  for (size_t i = 0; i < BLOCK_SLOTS; i++) block_bin_flush(&tc->blocks[i]);
}

/* ---- thread caches ------------------------------------------------------------------------ */

static void cache_flush_bin(arena_t *a, size_t cls, bin_t *bin, uint32_t keep) {
  if (bin->count <= keep) return;
  block_t *chain = bin->head;
  block_t *last = chain;
  for (uint32_t i = 1; i < bin->count - keep; i++) last = last->next;
  bin->head = last->next;
  last->next = NULL;
  bin->count = keep;
  central_give(a, cls, chain);
}

static void cache_destroy(void *arg) {
  tcache_t *tc = arg;
  block_bins_flush_all(tc);
  for (int s = 0; s < NSHARED; s++)
    for (size_t c = 1; c < NCLASSES; c++)
      if (tc->bins[s][c].count) cache_flush_bin(_strata_shared(s), c, &tc->bins[s][c], 0);
  tls_cache = NULL;
  tls_exited = true; /* later frees in this thread (other destructors) bypass the cache */
  _strata_meta_free(tc, sizeof *tc);
}

static void cache_key_init(void) { pthread_key_create(&cache_key, cache_destroy); }

static tcache_t *cache_get(void) {
  tcache_t *tc = tls_cache;
  if (likely(tc) || tls_exited) return tc;
  pthread_once(&cache_once, cache_key_init);
  tc = _strata_meta_alloc(sizeof *tc);
  if (!tc) return NULL;
  size_t bytes = (size_t)_strata_option(OPT_TCACHE_BYTES);
  for (size_t c = 1; c < NCLASSES; c++) {
    size_t m = bytes / _strata_class_size(c);
    m = m < 4 ? 4 : m > 512 ? 512 : m;
    for (int s = 0; s < NSHARED; s++) tc->bins[s][c].max = (uint32_t)m;
  }
  tls_cache = tc;
  pthread_setspecific(cache_key, tc);
  return tc;
}

/* The cache had nothing (or this thread has no cache yet): refill it from the spans. */
void *_strata_span_alloc(arena_t *a, size_t cls) {
  tcache_t *tc = cache_get();
  if (unlikely(!tc)) {
    block_t *b = NULL;
    return central_take(a, cls, &b, 1) ? b : NULL;
  }
  bin_t *bin = &tc->bins[a->shared][cls];
  if (bin->head) { /* the cache was just created, or another path filled it */
    block_t *b = bin->head;
    bin->head = b->next;
    bin->count--;
    return b;
  }
  STAT_ADD(tcache_refills, 1);
  block_t *chain = NULL;
  uint32_t got = central_take(a, cls, &chain, bin->max / 2 ? bin->max / 2 : 1);
  if (!got) return NULL;
  bin->head = chain->next;
  bin->count = got - 1;
  return chain;
}

/* The cache was full (or absent): push, then give half back to the spans. */
void _strata_span_free(page_t *span, void *p) {
  arena_t *a = span->arena;
  block_t *b = p;
  tcache_t *tc = cache_get();
  if (unlikely(!tc)) {
    b->next = NULL;
    central_give(a, span->cls, b);
    return;
  }
  bin_t *bin = &tc->bins[a->shared][span->cls];
  b->next = bin->head;
  bin->head = b;
  if (unlikely(++bin->count > bin->max)) {
    STAT_ADD(tcache_flushes, 1);
    cache_flush_bin(a, span->cls, bin, bin->max / 2);
  }
}

/* Give this thread's cached blocks back (tests and statistics use it; threads do it at exit). */
void _strata_tcache_flush_all(void) {
  tcache_t *tc = tls_cache;
  if (!tc) return;
  block_bins_flush_all(tc);
  for (int s = 0; s < NSHARED; s++)
    for (size_t c = 1; c < NCLASSES; c++)
      if (tc->bins[s][c].count) cache_flush_bin(_strata_shared(s), c, &tc->bins[s][c], 0);
}

void *_strata_block_alloc(arena_t *a, size_t cls) {
  tcache_t *tc = cache_get();
  if (unlikely(!tc)) { /* the thread's caches are gone (or none can be made): from the spans */
    block_t *b = NULL;
    return central_take(a, cls, &b, 1) ? b : NULL;
  }
  block_bin_t *bin = block_bin(tc, a);
  if (bin->arena != a || bin->cls != cls || !bin->head) {
    block_bin_flush(bin);
    size_t m = 65536 / _strata_class_size(cls);
    bin->arena = a;
    bin->cls = (uint32_t)cls;
    bin->max = m < 1 ? 1 : m > 32 ? 32 : (uint32_t)m;
    bin->count = central_take(a, cls, &bin->head, bin->max / 2 ? bin->max / 2 : 1);
    if (!bin->count) return NULL;
  }
  block_t *b = bin->head;
  bin->head = b->next;
  bin->count--;
  return b;
}

void _strata_block_free(page_t *span, void *p) {
  block_t *b = p;
  tcache_t *tc = tls_cache;
  block_bin_t *bin = tc ? block_bin(tc, span->arena) : NULL;
  if (bin && bin->arena == span->arena && bin->cls == span->cls && bin->count < bin->max) {
    b->next = bin->head;
    bin->head = b;
    bin->count++;
    return;
  }
  b->next = NULL;
  central_give(span->arena, span->cls, b);
}
