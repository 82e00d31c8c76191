/* segment.c: where all of Strata's memory comes from.
 *
 * A segment is 4 MiB, 4 MiB aligned, and belongs to one pool: pool 0 is unbound (the kernel
 * places its pages, first touch), pool 1 + t is bound to tier t through the machine. Its
 * header holds a page_t per 4 KiB page and a bitmap of free pages. Arenas take pages from
 * the pool of their binding, so binding is done once per segment, not per object.
 *
 * Large objects get a mapping of their own, 4 MiB aligned, with a header page in front.
 *
 * The registry is a byte per 4 MiB of address space (32 MiB reserved, touched sparsely):
 * 1 = a segment or large mapping starts here, 2 = a large mapping continues here. */
#include "internal.h"

#include <string.h>
#include <sys/mman.h>

pthread_mutex_t _strata_seg_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic(_Atomic uint8_t *) _strata_registry;
#define registry _strata_registry
static segment_t *pools[NSHARED]; /* segments with at least one free page */

/* Free pages stay resident for reuse while they are reused; a page left free while a whole
 * DIRTY_TICK of pages was freed elsewhere is given back to the OS at the next tick. The clock
 * is pages freed, not time, so an emulated run stays deterministic. Without it a program that
 * keeps replacing medium buffers whose holes other sizes do not fit kept every hole resident
 * (redis-server: about 1 MiB over its 15, `strata bench alloc --program`), while a program
 * that frees and allocates a working set in turns (mixed-1t) reuses its pages before a tick. */
#define DIRTY_TICK ((size_t)256 * 1024 / PAGE_SIZE)
static size_t freed_since_tick; /* pages; seg lock */

static bool registry_init(void) { /* seg lock held */
  if (atomic_load(&registry)) return true;
  void *r = mmap(NULL, REG_ENTRIES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return false;
  atomic_store_explicit(&registry, r, memory_order_release);
  return true;
}

static void registry_set(void *base, size_t size, bool on) { /* seg lock held */
  _Atomic uint8_t *reg = atomic_load(&registry);
  size_t first = (uintptr_t)base >> SEG_SHIFT, n = (size + SEG_SIZE - 1) >> SEG_SHIFT;
  for (size_t i = 0; i < n; i++)
    atomic_store_explicit(&reg[first + i], on ? (i ? REG_CONT : REG_HEAD) : REG_NONE,
                          memory_order_release);
}

/* p is inside a large mapping that started in an earlier chunk: walk back to its head */
void *_strata_chunk_of_slow(size_t idx) {
  _Atomic uint8_t *reg = atomic_load_explicit(&registry, memory_order_acquire);
  uint8_t v = REG_CONT;
  while (v == REG_CONT && idx > 0) v = atomic_load_explicit(&reg[--idx], memory_order_acquire);
  return v == REG_HEAD ? (void *)(idx << SEG_SHIFT) : NULL;
}

page_t *_strata_page_of(const void *p) {
  segment_t *seg = _strata_chunk_of(p);
  if (!seg || seg->kind != SEG_PAGES) return NULL;
  page_t *pg = &seg->pages[((uintptr_t)p - (uintptr_t)seg) >> PAGE_SHIFT];
  if (pg->kind == PK_TAIL) pg = &seg->pages[pg->head];
  return pg;
}

/* ---- the free-page bitmap ---------------------------------------------------------------- */

static bool range_free(const segment_t *s, size_t start, size_t n) {
  if (start < SEG_META_PAGES || start + n > PAGES_PER_SEG) return false;
  for (size_t i = start; i < start + n; i++)
    if (!(s->free_map[i / 64] >> (i % 64) & 1)) return false;
  return true;
}

/* first page in [i, end) that is in use, or end: a word at a time */
static size_t next_used(const segment_t *s, size_t i, size_t end) {
  while (i < end) {
    uint64_t used = ~s->free_map[i / 64] >> (i % 64);
    if (used) {
      size_t j = i + (size_t)__builtin_ctzll(used);
      return j < end ? j : end;
    }
    i = (i / 64 + 1) * 64;
  }
  return end;
}

/* first free page in [i, PAGES_PER_SEG), PAGES_PER_SEG if none */
static size_t next_free(const segment_t *s, size_t i) {
  while (i < PAGES_PER_SEG) {
    uint64_t free = s->free_map[i / 64] >> (i % 64);
    if (free) return i + (size_t)__builtin_ctzll(free);
    i = (i / 64 + 1) * 64;
  }
  return PAGES_PER_SEG;
}

/* first start >= SEG_META_PAGES, multiple of align, with n free pages; SIZE_MAX if none. A used
 * page found skips the whole used run after it (a word at a time): a segment full of spans is
 * passed in a few steps, not one step per page. */
static size_t find_free(const segment_t *s, size_t n, size_t align) {
  size_t i = align_up(SEG_META_PAGES, align);
  while (i + n <= PAGES_PER_SEG) {
    size_t j = next_used(s, i, i + n);
    if (j == i + n) return i;
    i = align_up(next_free(s, j), align);
  }
  return SIZE_MAX;
}

/* Pages [start, start + n) are taken again, or purged: neither dirty nor idle. */
static void clean(segment_t *s, size_t start, size_t n) {
  for (size_t i = start; i < start + n; i++) {
    uint64_t bit = 1ull << (i % 64);
    s->dirty_map[i / 64] &= ~bit;
    s->idle_map[i / 64] &= ~bit;
  }
}

static void purge_range(segment_t *s, size_t start, size_t n) {
  _strata_prim_purge((char *)s + start * PAGE_SIZE, n * PAGE_SIZE);
  STAT_ADD(purged_bytes, (int64_t)(n * PAGE_SIZE));
}

/* A tick: every segment's idle pages (free since before the last tick) are purged, a run of
 * them at a time, and its dirty pages become idle. Segments with free pages are all in a pool
 * list (a full one has none). */
static void tick(void) { /* seg lock held */
  for (size_t pool = 0; pool < NSHARED; pool++)
    for (segment_t *s = pools[pool]; s; s = s->next) {
      for (size_t i = SEG_META_PAGES; i < PAGES_PER_SEG;) {
        if (!(s->idle_map[i / 64] >> (i % 64) & 1)) {
          i++;
          continue;
        }
        size_t j = i;
        while (j < PAGES_PER_SEG && (s->idle_map[j / 64] >> (j % 64) & 1)) j++;
        purge_range(s, i, j - i);
        i = j;
      }
      memcpy(s->idle_map, s->dirty_map, sizeof s->idle_map);
      memset(s->dirty_map, 0, sizeof s->dirty_map);
    }
  freed_since_tick = 0;
}

static void list_push(segment_t **head, segment_t *s) {
  s->prev = NULL;
  s->next = *head;
  if (*head) (*head)->prev = s;
  *head = s;
}

static void list_remove(segment_t **head, segment_t *s) {
  if (s->prev) s->prev->next = s->next;
  else *head = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

static bool in_pool(segment_t *s) { return s->prev || pools[s->pool] == s; }

static void bind_range(int pool, void *p, size_t len) {
  if (pool == 0) return;
  int tier = pool - 1;
  STAT_ADD(bind_calls, 1);
  uint64_t nodes = _strata_tier_nodemask(tier);
  int rc = _strata_machine()->bind(p, len, nodes, (int)_strata_option(OPT_BIND));
  if (rc != 0) {
    STAT_ADD(bind_failed, 1);
    _strata_message("strata: %s machine could not bind %zu bytes to tier %d (errno %d)\n",
                    _strata_machine()->name, len, tier, -rc);
  }
}

static segment_t *segment_new(int pool) { /* seg lock held */
  if (!registry_init()) return NULL;
  segment_t *s = _strata_prim_map(SEG_SIZE, SEG_SIZE);
  if (!s) return NULL;
  /* bind before the first write: writing the header first would fault in a transparent
   * huge page on the local node that covers the first data pages too (seen in the guest) */
  bind_range(pool, (char *)s + SEG_META_PAGES * PAGE_SIZE, SEG_SIZE - SEG_META_PAGES * PAGE_SIZE);
  s->magic = STRATA_MAGIC;
  s->kind = SEG_PAGES;
  s->pool = pool;
  s->used_pages = SEG_META_PAGES;
  for (size_t i = 0; i < PAGES_PER_SEG; i++)
    if (i >= SEG_META_PAGES) s->free_map[i / 64] |= 1ull << (i % 64);
  for (size_t i = 0; i < SEG_META_PAGES; i++) s->pages[i].kind = PK_META;
  registry_set(s, SEG_SIZE, true);
  _strata_track_range(s, SEG_SIZE);
  list_push(&pools[pool], s);
  STAT_ADD(segments, 1);
  STAT_ADD(segment_bytes, (int64_t)SEG_SIZE);
  STAT_ADD(pool_bytes[pool], (int64_t)SEG_SIZE);
  return s;
}

page_t *_strata_pages_alloc(int pool, size_t n, size_t align, const page_t *near, page_kind_t kind) {
  strata_assert(1, n > 0 && n <= PAGES_PER_SEG - SEG_META_PAGES && align > 0);
  strata_assert(1, kind == PK_SPAN || kind == PK_RUN || (kind == PK_MIXED && n == 1));
  pthread_mutex_lock(&_strata_seg_lock);
  segment_t *seg = NULL;
  size_t start = SIZE_MAX;
  if (near) { /* the pages right after near's, when they are free: neighbours in memory */
    segment_t *ns = _strata_segment_of_page(near);
    size_t after = _strata_page_index(near) + (near->kind == PK_RUN ? near->u.run.npages
                                               : near->kind == PK_SPAN ? near->u.span.npages : 1);
    after = align_up(after, align);
    if (ns->pool == pool && range_free(ns, after, n)) { seg = ns; start = after; }
  }
  for (segment_t *s = pools[pool]; !seg && s; s = s->next)
    if ((start = find_free(s, n, align)) != SIZE_MAX) seg = s;
  if (!seg && (seg = segment_new(pool)) != NULL) start = find_free(seg, n, align);
  if (!seg || start == SIZE_MAX) {
    pthread_mutex_unlock(&_strata_seg_lock);
    return NULL;
  }
  clean(seg, start, n);
  for (size_t i = start; i < start + n; i++) {
    seg->free_map[i / 64] &= ~(1ull << (i % 64));
    seg->pages[i].kind = PK_TAIL;
    seg->pages[i].head = (uint16_t)start;
    seg->pages[i].tagged = 0;
  }
  seg->used_pages += (uint32_t)n;
  if (seg->used_pages == PAGES_PER_SEG && in_pool(seg)) list_remove(&pools[pool], seg);
  page_t *head = &seg->pages[start];
  memset(head, 0, sizeof *head);
  head->head = (uint16_t)start;
  /* kind and extent under the lock, so the page map is whole whenever the lock is free */
  head->kind = (uint8_t)kind;
  if (kind == PK_SPAN) head->u.span.npages = (uint32_t)n;
  if (kind == PK_RUN) head->u.run.npages = (uint32_t)n;
  _strata_check_segment(seg);
  pthread_mutex_unlock(&_strata_seg_lock);
  return head;
}

void _strata_pages_free(page_t *head, size_t n, bool purge) {
  segment_t *seg = _strata_segment_of_page(head);
  size_t start = _strata_page_index(head);
  pthread_mutex_lock(&_strata_seg_lock);
  for (size_t i = start; i < start + n; i++) {
    strata_assert(1, !(seg->free_map[i / 64] >> (i % 64) & 1));
    memset(&seg->pages[i], 0, sizeof seg->pages[i]);
    seg->free_map[i / 64] |= 1ull << (i % 64);
    if (!purge) seg->dirty_map[i / 64] |= 1ull << (i % 64);
  }
  seg->used_pages -= (uint32_t)n;
  _strata_check_segment(seg);
  if (!in_pool(seg)) list_push(&pools[seg->pool], seg);
  if (seg->used_pages == SEG_META_PAGES) { /* empty: back to the OS */
    list_remove(&pools[seg->pool], seg);
    registry_set(seg, SEG_SIZE, false);
    STAT_ADD(segments, -1);
    STAT_ADD(segment_bytes, -(int64_t)SEG_SIZE);
    STAT_ADD(pool_bytes[seg->pool], -(int64_t)SEG_SIZE);
    _strata_prim_unmap(seg, SEG_SIZE);
  } else if (purge) {
    purge_range(seg, start, n);
  } else if ((freed_since_tick += n) >= DIRTY_TICK) {
    tick();
  }
  pthread_mutex_unlock(&_strata_seg_lock);
}

bool _strata_run_extend(page_t *head, size_t n) {
  segment_t *seg = _strata_segment_of_page(head);
  size_t start = _strata_page_index(head), old = head->u.run.npages;
  if (n <= old) return true;
  if (start + n > PAGES_PER_SEG) return false;
  pthread_mutex_lock(&_strata_seg_lock);
  bool ok = range_free(seg, start + old, n - old);
  if (ok) {
    clean(seg, start + old, n - old);
    for (size_t i = start + old; i < start + n; i++) {
      seg->free_map[i / 64] &= ~(1ull << (i % 64));
      seg->pages[i].kind = PK_TAIL;
      seg->pages[i].head = (uint16_t)start;
    }
    seg->used_pages += (uint32_t)(n - old);
    if (seg->used_pages == PAGES_PER_SEG && in_pool(seg)) list_remove(&pools[seg->pool], seg);
    head->u.run.npages = (uint32_t)n;
    _strata_check_segment(seg);
  }
  pthread_mutex_unlock(&_strata_seg_lock);
  return ok;
}

large_t *_strata_large_map(int pool, size_t size, size_t align) {
  size_t off = align > PAGE_SIZE ? align : PAGE_SIZE;
  /* whole 4 MiB chunks, so no foreign mapping can share a chunk the registry marks as ours
   * (the untouched tail costs address space only) */
  size_t map = align_up(off + size, SEG_SIZE);
  if (map < size || size > ((size_t)1 << 46)) return NULL; /* overflow, or beyond any machine */
  pthread_mutex_lock(&_strata_seg_lock);
  large_t *l = registry_init() ? _strata_prim_map(map, SEG_SIZE) : NULL;
  if (l) {
    bind_range(pool, (char *)l + off, map - off); /* before the first write, as for segments */
    l->magic = STRATA_MAGIC;
    l->kind = SEG_LARGE;
    l->map_size = map;
    l->data_off = off;
    registry_set(l, map, true);
    _strata_track_range(l, map);
    STAT_ADD(large_objects, 1);
    STAT_ADD(large_bytes, (int64_t)map);
  }
  pthread_mutex_unlock(&_strata_seg_lock);
  return l;
}

large_t *_strata_large_grow(large_t *l, size_t size) {
  size_t old = l->map_size, map = align_up(l->data_off + size, SEG_SIZE);
  if (map <= old) return l;
  if (map < size || size > ((size_t)1 << 46)) return NULL;
  int pool = l->arena->pool;
  pthread_mutex_lock(&_strata_seg_lock);
  /* (the agent lock: no page of it is missing for a commit while its page table moves) */
  pthread_mutex_lock(&_strata_agent_lock);
  large_t *n = _strata_prim_remap(l, old, map, NULL); /* the address space after it is free */
  if (!n) { /* elsewhere: a fresh aligned reservation the pages move into */
    void *to = _strata_prim_map(map, SEG_SIZE);
    n = to ? _strata_prim_remap(l, old, map, to) : NULL;
    if (!n && to) _strata_prim_unmap(to, map);
  }
  pthread_mutex_unlock(&_strata_agent_lock);
  if (n) {
    if (n != l) registry_set(l, old, false);
    registry_set(n, map, true);
    bind_range(pool, (char *)n + old, map - old); /* the new tail, before its first write */
    _strata_track_range(n, map); /* mremap dropped the registration */
    n->map_size = map;
    STAT_ADD(large_bytes, (int64_t)(map - old));
  }
  pthread_mutex_unlock(&_strata_seg_lock);
  return n;
}

void _strata_large_unmap(large_t *l) {
  pthread_mutex_lock(&_strata_seg_lock);
  registry_set(l, l->map_size, false);
  STAT_ADD(large_objects, -1);
  STAT_ADD(large_bytes, -(int64_t)l->map_size);
  pthread_mutex_unlock(&_strata_seg_lock);
  _strata_prim_unmap(l, l->map_size);
}
