/* test_stress.c: threads allocate objects of random sizes and placements, stamp them, and
 * hand half of them to the next thread, which checks the stamp and frees them (cross-thread
 * frees). Any lost or overlapping block shows up as a wrong stamp. Also run under ASan and
 * TSan by `make test`. Built with -DUSE_LIBC it calls malloc/realloc/free instead, and runs
 * under LD_PRELOAD=libstrata.so. Usage: test_stress [threads] [rounds] */
#include "strata.h"
#include "check.h"

#ifdef USE_LIBC /* transparent mode: the program knows nothing of Strata */
#define strata_malloc(n, place) malloc(n)
#define strata_realloc realloc
#define strata_free free
#define strata_arena_new(place) ((strata_arena_t *)1)
#define strata_arena_destroy(a) 0
#define strata_stat(name) 0
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096
#define RING 1024

typedef struct obj { unsigned char *p; size_t n; uint32_t stamp; } obj_t;

typedef struct ring {
  pthread_mutex_t lock;
  obj_t items[RING];
  size_t head, tail;
} ring_t;

static unsigned nthreads = 4;
static int rounds = 200000;
static ring_t *rings;
static _Atomic long bad_stamps, failed_allocs;

static void stamp(obj_t *o) {
  for (size_t i = 0; i < o->n; i += 61) o->p[i] = (unsigned char)(o->stamp + i);
  if (o->n) o->p[o->n - 1] = (unsigned char)o->stamp;
}
static int stamped(const obj_t *o) {
  for (size_t i = 0; i < o->n; i += 61)
    if (i != o->n - 1 && o->p[i] != (unsigned char)(o->stamp + i)) return 0;
  return !o->n || o->p[o->n - 1] == (unsigned char)o->stamp;
}

/* 0 when the ring is full (its reader may have finished): the caller frees the object */
static int ring_put(ring_t *r, obj_t o) {
  pthread_mutex_lock(&r->lock);
  int ok = r->tail - r->head < RING;
  if (ok) r->items[r->tail++ % RING] = o;
  pthread_mutex_unlock(&r->lock);
  return ok;
}

/* take everything queued */
static size_t ring_drain(ring_t *r, obj_t *out) {
  pthread_mutex_lock(&r->lock);
  size_t n = 0;
  while (r->head != r->tail) out[n++] = r->items[r->head++ % RING];
  pthread_mutex_unlock(&r->lock);
  return n;
}

static void check_free(obj_t o) {
  if (!stamped(&o)) bad_stamps++;
  strata_free(o.p);
}

static void *worker(void *arg) {
  long id = (long)arg;
  uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
  obj_t *slots = calloc(SLOTS, sizeof *slots);
  obj_t *in = malloc(RING * sizeof *in);
  strata_arena_t *arena = strata_arena_new(strata_default());
  ring_t *next = &rings[(id + 1) % nthreads], *mine = &rings[id];
  for (int r = 0; r < rounds; r++) {
    size_t k = xorshift64(&seed) % SLOTS;
    if (slots[k].p) {
      if (!(xorshift64(&seed) & 1) || !ring_put(next, slots[k])) check_free(slots[k]);
      slots[k].p = NULL;
    }
    uint64_t x = xorshift64(&seed);
    size_t n = x % 100 < 90 ? x % 256 : x % 100 < 99 ? x % 20000 : x % 3000000;
    strata_place_t pl;
    switch (x >> 60) {
      case 0: pl = strata_hot(); break;
      case 1: pl = strata_cold(); break;
      case 2: pl = strata_in_arena(arena); break;
      case 3: pl = slots[(k + 1) % SLOTS].p ? strata_next_to(slots[(k + 1) % SLOTS].p)
                                            : strata_default(); break;
      default: pl = strata_default();
    }
    (void)pl; /* unused when built with USE_LIBC */
    obj_t o = {strata_malloc(n, pl), n, (uint32_t)x};
    if (!o.p) { failed_allocs++; continue; }
    stamp(&o);
    slots[k] = o;
    if ((r & 255) == 0) {
      size_t got = ring_drain(mine, in);
      for (size_t i = 0; i < got; i++) check_free(in[i]);
    }
    if ((r & 1023) == 0 && (x & 7) == 0) { /* grow/shrink a random live object */
      size_t j = xorshift64(&seed) % SLOTS;
      if (slots[j].p && stamped(&slots[j])) {
        /* mostly small; sometimes a run or a large object, which grow without copying */
        size_t nn = xorshift64(&seed) % ((x & 24) == 24 ? (size_t)3 << 20 : 50000);
        unsigned char *q = strata_realloc(slots[j].p, nn);
        size_t kept = nn < slots[j].n ? nn : slots[j].n;
        for (size_t i = 0; q && i < kept; i += 61) /* the old contents came along */
          if (i != slots[j].n - 1 && q[i] != (unsigned char)(slots[j].stamp + i)) { bad_stamps++; break; }
        if (q || nn == 0) {
          slots[j].p = q;
          slots[j].n = nn;
          if (q) stamp(&slots[j]);
        }
      }
    }
  }
  for (size_t k = 0; k < SLOTS; k++)
    if (slots[k].p) check_free(slots[k]);
  /* arena objects handed to other threads are still in their rings: keep the arena alive
   * until every thread is done (main destroys it) */
  free(slots);
  free(in);
  return arena;
}

int main(int argc, char **argv) {
  if (argc > 1) nthreads = (unsigned)strtoul(argv[1], NULL, 10);
  if (argc > 2) rounds = atoi(argv[2]);
  if (nthreads < 1 || nthreads > 64) nthreads = 4;
  rings = calloc((size_t)nthreads, sizeof *rings);
  for (unsigned i = 0; i < nthreads; i++) {
    pthread_mutex_init(&rings[i].lock, NULL);
  }
  pthread_t *t = calloc((size_t)nthreads, sizeof *t);
  for (long i = 0; i < (long)nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  strata_arena_t **arenas = calloc((size_t)nthreads, sizeof *arenas);
  for (unsigned i = 0; i < nthreads; i++) pthread_join(t[i], (void **)&arenas[i]);
  obj_t *in = malloc(RING * sizeof *in);
  for (unsigned i = 0; i < nthreads; i++) {
    size_t got;
    while ((got = ring_drain(&rings[i], in)) > 0)
      for (size_t k = 0; k < got; k++) check_free(in[k]);
  }
  for (unsigned i = 0; i < nthreads; i++) CHECK(strata_arena_destroy(arenas[i]) == 0);
  CHECK(bad_stamps == 0);
  CHECK(failed_allocs == 0);
  CHECK(strata_stat("free_invalid") == 0);
  CHECK(strata_stat("arenas") == 0);
  free(in);
  free(t);
  free(arenas);
  free(rings);
  return check_done("test_stress");
}
