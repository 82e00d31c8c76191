/* blocks.c: small objects by block (bkmalloc's small-object blocks, seed 003 §3.1), for
 * transparent mode.
 *
 * A context's small objects (below the tracked size) live in spans of their own: each
 * context has, per shared arena its directive names (its binding), a private arena whose
 * spans hold that context's objects alone. Each such span is a block: recorded in the channel
 * with the context's index while it lives, so a daemon measures the context's small objects
 * by their blocks' samples, places the context's next objects (hmalloc) and moves the blocks
 * (records of 64 or 256 KiB). Without blocks, the contexts' small objects shared spans by size
 * class, every page mixed the contexts' objects, and no record said whose they were.
 *
 * Each thread caches a context arena's free blocks in its thread cache's block lists, one per
 * context (span.c), refilled from and flushed to the arena's span lists. A context gets its
 * arena once it has allocated STRATA_SMALL_BLOCKS bytes (256 KiB); before, and with
 * STRATA_SMALL_BLOCKS=0 always, its objects are in the shared spans (tagged per block,
 * tag.c). Spans of context arenas are marked with `page_t.shared == SHARED_NONE`, so a free
 * sends their blocks to their context's list, never into a shared arena's bins. */
#include "internal.h"

/* Every context arena made, newest first (fork handlers lock them all), and the table by
 * context index and binding; the table is made on first use, CONTEXT_SLOTS contexts. */
typedef struct ctx_arena_s {
  arena_t arena;
  central_t central[NCLASSES];
  struct ctx_arena_s *older;
} ctx_arena_t;

#define CONTEXT_SLOTS STRATA_CONTEXT_CAPACITY
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(ctx_arena_t *) *table; /* [CONTEXT_SLOTS][NSHARED] */
static ctx_arena_t *all;

static ctx_arena_t *made(uint32_t ctx, const arena_t *shared) {
  ctx_arena_t *c = _strata_meta_alloc(sizeof *c);
  if (!c) return NULL;
  arena_t *a = &c->arena;
  a->magic = STRATA_MAGIC;
  a->shared = -1;
  a->tier = shared->tier;
  a->pool = shared->pool;
  a->ctx = ctx;
  pthread_mutex_init(&a->lock, NULL);
  a->central = c->central;
  for (int k = 0; k < NCLASSES; k++) pthread_mutex_init(&c->central[k].lock, NULL);
  c->older = all;
  all = c;
  return c;
}

/* The private arena of context ctx (its channel entry e) bound as the shared arena `shared`
 * is; NULL when none can be made (no memory, or a context index out of range), or none is
 * made yet because the context has allocated less than `after` bytes (a span of its own would
 * mostly be empty: a Rust program's command line parsing alone made 448 contexts): the caller
 * uses the shared arena. A context's bytes allocated only grow, so the common case, a context
 * below `after`, costs one load from the entry the caller has just read. */
arena_t *_strata_context_arena(const strata_context_t *e, uint32_t ctx, const arena_t *shared, size_t after) {
  if (!e || __atomic_load_n(&e->bytes_allocated, __ATOMIC_RELAXED) < after) return NULL;
  if (!ctx || ctx >= CONTEXT_SLOTS || shared->shared < 0) return NULL;
  _Atomic(ctx_arena_t *) *t = atomic_load_explicit(&table, memory_order_acquire);
  size_t slot = (size_t)ctx * NSHARED + (size_t)shared->shared;
  ctx_arena_t *c = t ? atomic_load_explicit(&t[slot], memory_order_acquire) : NULL;
  if (likely(c)) return &c->arena;
  pthread_mutex_lock(&table_lock);
  if (!(t = atomic_load_explicit(&table, memory_order_relaxed))) {
    t = _strata_meta_alloc((size_t)CONTEXT_SLOTS * NSHARED * sizeof *t);
    atomic_store_explicit(&table, t, memory_order_release);
  }
  if (t && !(c = atomic_load_explicit(&t[slot], memory_order_relaxed)) && (c = made(ctx, shared)))
    atomic_store_explicit(&t[slot], c, memory_order_release);
  pthread_mutex_unlock(&table_lock);
  return c ? &c->arena : NULL;
}

void _strata_blocks_lock_all(void) {
  pthread_mutex_lock(&table_lock);
  for (ctx_arena_t *c = all; c; c = c->older)
    for (int k = 0; k < NCLASSES; k++) pthread_mutex_lock(&c->central[k].lock);
}

void _strata_blocks_unlock_all(void) {
  for (ctx_arena_t *c = all; c; c = c->older)
    for (int k = NCLASSES - 1; k >= 0; k--) pthread_mutex_unlock(&c->central[k].lock);
  pthread_mutex_unlock(&table_lock);
}

/* fork child: the contexts it makes are numbered afresh in its own channel, so it starts a
 * table of its own. The parent's context arenas stay (their blocks are freed into them, and
 * their spans return to the segments as they empty); nothing new is allocated from them. */
void _strata_blocks_forget(void) {
  _Atomic(ctx_arena_t *) *t = atomic_exchange(&table, NULL);
  if (t) _strata_meta_free((void *)t, (size_t)CONTEXT_SLOTS * NSHARED * sizeof *t);
}
