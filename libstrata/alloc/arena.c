/* arena.c: arenas, and the objects too big for a page (runs and large mappings).
 *
 * An arena owns its pages: its spans (shared arenas only), mixed pages, runs and large
 * mappings all come from the segment pool of its binding and hold nothing of another arena.
 * Shared arenas are fixed: index 0 is the default (unbound) arena, index 1 + t is bound to
 * tier t; `hot` is tier 0, `cold` the last tier. User arenas come and go with
 * strata_arena_new / strata_arena_destroy.
 *
 * Which allocator serves a request (`near` is the next_to target):
 *   shared arena, no near, <= 64 KiB   size-class spans with thread caches (span.c)
 *   otherwise <= 2 KiB                  mixed pages (mixed.c)
 *   < 1 MiB                             a run of whole pages in the arena's pool
 *   >= 1 MiB                            a mapping of its own, bound like the arena */
#include "internal.h"

#include <errno.h>

static arena_t shared[NSHARED];
static central_t centrals[NSHARED][NCLASSES];
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void shared_init(void) {
  for (int i = 0; i < NSHARED; i++) {
    arena_t *a = &shared[i];
    a->magic = STRATA_MAGIC;
    a->shared = i;
    a->tier = i - 1;
    a->pool = i;
    pthread_mutex_init(&a->lock, NULL);
    a->central = centrals[i];
    for (int c = 0; c < NCLASSES; c++) pthread_mutex_init(&centrals[i][c].lock, NULL);
  }
}

arena_t *_strata_shared(int idx) {
  static _Atomic bool ready;
  if (unlikely(!atomic_load_explicit(&ready, memory_order_acquire))) {
    pthread_once(&shared_once, shared_init);
    atomic_store_explicit(&ready, true, memory_order_release);
  }
  return &shared[idx];
}

/* Every shared arena's lock and its centrals' locks, in the order they nest (init.c's fork
 * handlers), and their release in reverse. */
void _strata_shared_lock_all(void) {
  _strata_shared(0);
  for (int i = 0; i < NSHARED; i++) pthread_mutex_lock(&shared[i].lock);
  for (int i = 0; i < NSHARED; i++)
    for (int c = 0; c < NCLASSES; c++) pthread_mutex_lock(&centrals[i][c].lock);
}

void _strata_shared_unlock_all(void) {
  for (int i = NSHARED - 1; i >= 0; i--)
    for (int c = NCLASSES - 1; c >= 0; c--) pthread_mutex_unlock(&centrals[i][c].lock);
  for (int i = NSHARED - 1; i >= 0; i--) pthread_mutex_unlock(&shared[i].lock);
}

/* ---- runs: n whole pages for one medium object ---------------------------------------------- */

static void *run_alloc(arena_t *a, size_t size, size_t align, const void *near) {
  size_t npages = (size + PAGE_SIZE - 1) / PAGE_SIZE, align_pages = align / PAGE_SIZE;
  if (!npages) npages = 1;
  if (!align_pages) align_pages = 1;
  pthread_mutex_lock(&a->lock);
  const page_t *hint = near ? _strata_page_of(near) : a->runs;
  page_t *pg = _strata_pages_alloc(a->pool, npages, align_pages, hint, PK_RUN);
  if (pg) {
    pg->arena = a;
    if (a->unit)
      pg->u.run.record = _strata_track_arena(_strata_page_addr(pg), npages * PAGE_SIZE, a->unit, a->hint);
    pg->next = a->runs;
    if (a->runs) a->runs->prev = pg;
    a->runs = pg;
    STAT_ADD(runs, 1);
  }
  pthread_mutex_unlock(&a->lock);
  return pg ? _strata_page_addr(pg) : NULL;
}

static void run_unlink(arena_t *a, page_t *pg) {
  if (pg->prev) pg->prev->next = pg->next;
  else a->runs = pg->next;
  if (pg->next) pg->next->prev = pg->prev;
}

void _strata_run_free(page_t *pg, void *p) {
  arena_t *a = pg->arena;
  pthread_mutex_lock(&a->lock);
  if (pg->kind != PK_RUN || pg->arena != a || p != _strata_page_addr(pg)) {
    STAT_ADD(free_invalid, 1);
  } else {
    run_unlink(a, pg);
    if (a->unit) _strata_untrack(pg->u.run.record, p);
    _strata_pages_free(pg, pg->u.run.npages, false);
    STAT_ADD(runs, -1);
  }
  pthread_mutex_unlock(&a->lock);
}

/* ---- large objects ----------------------------------------------------------------------- */

static void *large_alloc(arena_t *a, size_t size, size_t align) {
  large_t *l = _strata_large_map(a->pool, size, align);
  if (!l) return NULL;
  l->arena = a;
  void *p = (char *)l + l->data_off;
  if (a->unit) l->record = _strata_track_arena(p, l->map_size - l->data_off, a->unit, a->hint);
  pthread_mutex_lock(&a->lock);
  l->next = a->larges;
  if (a->larges) a->larges->prev = l;
  a->larges = l;
  pthread_mutex_unlock(&a->lock);
  return p;
}

static void large_unlink(arena_t *a, large_t *l) {
  if (l->prev) l->prev->next = l->next;
  else a->larges = l->next;
  if (l->next) l->next->prev = l->prev;
}

void _strata_large_free(large_t *l, void *p) {
  if (p != (char *)l + l->data_off) {
    STAT_ADD(free_invalid, 1);
    return;
  }
  arena_t *a = l->arena;
  pthread_mutex_lock(&a->lock);
  large_unlink(a, l);
  pthread_mutex_unlock(&a->lock);
  if (a->unit) _strata_untrack(l->record, p);
  _strata_large_unmap(l);
}

/* ---- growing in place (realloc) ------------------------------------------------------------ */

void *_strata_grow(void *p, size_t size) {
  segment_t *chunk = _strata_chunk_of(p);
  if (!chunk) return NULL;
  if (chunk->kind == SEG_LARGE) {
    large_t *l = (large_t *)chunk;
    if (p != (char *)l + l->data_off) return NULL;
    arena_t *a = l->arena;
    pthread_mutex_lock(&a->lock);
    large_unlink(a, l); /* the links live in the header, which may move */
    large_t *n = _strata_large_grow(l, size);
    if (!n) n = l;
    if (a->unit) { /* the pages' record follows them (and their address, when mremap moved them) */
      _strata_untrack(n->record, p);
      n->record = _strata_track_arena((char *)n + n->data_off, n->map_size - n->data_off, a->unit, a->hint);
    }
    n->next = a->larges;
    n->prev = NULL;
    if (a->larges) a->larges->prev = n;
    a->larges = n;
    pthread_mutex_unlock(&a->lock);
    return n->map_size - n->data_off >= size ? (char *)n + n->data_off : NULL;
  }
  page_t *pg = _strata_page_of(p);
  if (pg->kind != PK_RUN || p != _strata_page_addr(pg) || size >= LARGE_MIN) return NULL;
  if (!_strata_run_extend(pg, (size + PAGE_SIZE - 1) / PAGE_SIZE)) return NULL;
  arena_t *a = pg->arena;
  if (a->unit) {
    pthread_mutex_lock(&a->lock);
    _strata_untrack(pg->u.run.record, p);
    pg->u.run.record = _strata_track_arena(p, pg->u.run.npages * PAGE_SIZE, a->unit, a->hint);
    pthread_mutex_unlock(&a->lock);
  }
  return p;
}

/* Whole pages, page aligned, whatever the size (tracked objects of transparent mode). */
void *_strata_arena_alloc_pages(arena_t *a, size_t size, size_t align) {
  if (align < PAGE_SIZE) align = PAGE_SIZE;
  if (size < LARGE_MIN && align <= LARGE_MIN) return run_alloc(a, size, align, NULL);
  return large_alloc(a, size, align);
}

/* The shared arena a context directive names; the default one follows the process's default
 * directive (the channel's, which a daemon may set). */
arena_t *_strata_directive_arena(int32_t d) {
  if (d == STRATA_DIRECTIVE_DEFAULT) d = _strata_process_directive();
  if (d == STRATA_DIRECTIVE_FAST) return _strata_shared(1);
  if (d == STRATA_DIRECTIVE_SLOW) return _strata_shared(_strata_ntiers());
  if (d >= STRATA_DIRECTIVE_TIER0) return _strata_shared(1 + _strata_place_tier(strata_tier((unsigned)(d - STRATA_DIRECTIVE_TIER0))));
  return _strata_shared(0);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

void *_strata_arena_alloc(arena_t *a, size_t size, size_t align, const void *near) {
  if (a->shared >= 0 && !near) {
    size_t req = size;
    if (align > GRANULE) { /* a power-of-two class is aligned to its size */
      req = size < align ? align : size;
      req = (size_t)1 << (64 - __builtin_clzl(req - 1));
    }
    if (req <= SMALL_MAX) return _strata_span_alloc(a, _strata_class_of(req));
  } else if (size <= MIXED_MAX && align <= PAGE_SIZE) {
    pthread_mutex_lock(&a->lock);
    void *p = _strata_mixed_alloc(a, size, align, near);
    pthread_mutex_unlock(&a->lock);
    return p;
  }
  if (size < LARGE_MIN && align <= LARGE_MIN) return run_alloc(a, size, align, near);
  return large_alloc(a, size, align);
}

/* ---- user arenas -------------------------------------------------------------------------- */

/* The tier a placement asks for: -1 = unbound (default), else 0..ntiers-1. */
int _strata_place_tier(strata_place_t place) {
  switch (place.kind) {
    case STRATA_PLACE_HOT: return 0;
    case STRATA_PLACE_COLD: return _strata_ntiers() - 1;
    case STRATA_PLACE_TIER:
      if ((int)place.tier >= _strata_ntiers()) {
        STAT_ADD(tier_clamped, 1);
        return _strata_ntiers() - 1;
      }
      return (int)place.tier;
    default: return -1;
  }
}

/* A new arena's number in the channel's records, 0 when the process can have no channel:
 * numbers are not reused while the process lives (a reader tells a new arena from an old one
 * by it), unless four billion arenas come and go. The channel is made here, with no lock held,
 * not at the first record, which is taken under the arena's lock. */
static uint32_t arena_unit(void) {
  static _Atomic uint32_t last;
  if (!_strata_channel()) return 0;
  uint32_t u = atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
  return u ? u : atomic_fetch_add_explicit(&last, 1, memory_order_relaxed) + 1;
}

strata_arena_t *strata_arena_new(strata_place_t place) {
  int tier;
  if (place.kind == STRATA_PLACE_ARENA || place.kind > STRATA_PLACE_ARENA) {
    errno = EINVAL;
    return NULL;
  }
  if (place.kind == STRATA_PLACE_NEXT_TO) {
    arena_t *of = strata_arena_of(place.u.ptr);
    tier = of ? of->tier : -1;
  } else {
    tier = _strata_place_tier(place);
  }
  arena_t *a = _strata_meta_alloc(sizeof *a);
  if (!a) {
    errno = ENOMEM;
    return NULL;
  }
  a->magic = STRATA_MAGIC;
  a->shared = -1;
  a->tier = tier;
  a->pool = tier + 1;
  a->hint = tier < 0 ? STRATA_DIRECTIVE_DEFAULT
            : tier == 0 ? STRATA_DIRECTIVE_FAST
            : tier == _strata_ntiers() - 1 ? STRATA_DIRECTIVE_SLOW
            : STRATA_DIRECTIVE_TIER0 + tier;
  a->unit = arena_unit();
  pthread_mutex_init(&a->lock, NULL);
  STAT_ADD(arenas, 1);
  return a;
}

int strata_arena_destroy(strata_arena_t *a) {
  if (!a || a->magic != STRATA_MAGIC || a->shared >= 0 || a->ctx) return -EINVAL;
  pthread_mutex_lock(&a->lock);
  _strata_mixed_release_all(a);
  for (page_t *pg = a->runs, *next; pg; pg = next) {
    next = pg->next;
    _strata_untrack(pg->u.run.record, _strata_page_addr(pg));
    _strata_pages_free(pg, pg->u.run.npages, true);
    STAT_ADD(runs, -1);
  }
  for (large_t *l = a->larges, *next; l; l = next) {
    next = l->next;
    _strata_untrack(l->record, (char *)l + l->data_off);
    _strata_large_unmap(l);
  }
  a->runs = NULL;
  a->larges = NULL;
  a->magic = 0;
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_destroy(&a->lock);
  _strata_meta_free(a, sizeof *a);
  STAT_ADD(arenas, -1);
  return 0;
}

strata_arena_t *strata_arena_of(const void *p) {
  void *chunk = _strata_chunk_of(p);
  if (!chunk) return NULL;
  if (((segment_t *)chunk)->kind == SEG_LARGE) return ((large_t *)chunk)->arena;
  page_t *pg = _strata_page_of(p);
  return pg && (pg->kind == PK_SPAN || pg->kind == PK_MIXED || pg->kind == PK_RUN) ? pg->arena
                                                                                    : NULL;
}

int strata_arena_tier(const strata_arena_t *a) { return a ? a->tier : -1; }
