/* meta.c: memory for the allocator's own records (arenas, thread caches, central lists).
 *
 * Never libc malloc: libstrata must work before libc is ready and under LD_PRELOAD. Records
 * are carved from 256 KiB mappings in 64-byte units; freed records go to an exact-size free
 * list and are reused. Sizes above a chunk get a mapping of their own. */
#include "internal.h"

#include <string.h>

#define META_CHUNK ((size_t)256 * 1024)
#define META_UNIT 64
#define META_LISTS (META_CHUNK / META_UNIT / 4) /* sizes up to 64 KiB are recycled */

pthread_mutex_t _strata_meta_lock = PTHREAD_MUTEX_INITIALIZER;
#define meta_lock _strata_meta_lock
static char *bump, *bump_end;
static block_t *free_lists[META_LISTS];

void *_strata_meta_alloc(size_t size) {
  size = align_up(size ? size : 1, META_UNIT);
  size_t idx = size / META_UNIT;
  if (idx >= META_LISTS) return _strata_prim_map(align_up(size, PAGE_SIZE), PAGE_SIZE);
  void *p = NULL;
  pthread_mutex_lock(&meta_lock);
  if (free_lists[idx]) {
    block_t *b = free_lists[idx];
    free_lists[idx] = b->next;
    p = b;
  } else {
    if ((size_t)(bump_end - bump) < size) {
      char *c = _strata_prim_map(META_CHUNK, PAGE_SIZE); /* the tail of the old chunk is lost */
      if (c) { bump = c; bump_end = c + META_CHUNK; }
    }
    if ((size_t)(bump_end - bump) >= size) { p = bump; bump += size; }
  }
  pthread_mutex_unlock(&meta_lock);
  if (p) memset(p, 0, size);
  return p;
}

void _strata_meta_free(void *p, size_t size) {
  if (!p) return;
  size = align_up(size ? size : 1, META_UNIT);
  size_t idx = size / META_UNIT;
  if (idx >= META_LISTS) { _strata_prim_unmap(p, align_up(size, PAGE_SIZE)); return; }
  pthread_mutex_lock(&meta_lock);
  ((block_t *)p)->next = free_lists[idx];
  free_lists[idx] = p;
  pthread_mutex_unlock(&meta_lock);
}
