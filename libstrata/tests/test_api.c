/* test_api.c: the edge cases of the explicit API, each asserting a result. */
#include "strata.h"
#include "strata_channel.h"
#include "check.h"
#include "own_channel.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7)) return 0;
  return 1;
}

static void test_zero_and_huge(void) {
  void *a = strata_malloc(0, strata_default()), *b = strata_malloc(0, strata_default());
  CHECK(a && b && a != b);
  CHECK(strata_usable_size(a) >= 1);
  strata_free(a);
  strata_free(b);
  errno = 0;
  CHECK(strata_malloc(SIZE_MAX, strata_default()) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(strata_malloc(SIZE_MAX - 4096, strata_hot()) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(strata_malloc((size_t)1 << 50, strata_default()) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(strata_calloc(SIZE_MAX / 2, 3, strata_default()) == NULL && errno == ENOMEM);
  strata_arena_t *ar = strata_arena_new(strata_default());
  errno = 0;
  CHECK(strata_malloc(SIZE_MAX, strata_in_arena(ar)) == NULL && errno == ENOMEM);
  CHECK(strata_arena_destroy(ar) == 0);
  errno = 0;
  CHECK(strata_malloc(8, strata_in_arena(NULL)) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(strata_malloc_aligned(8, 48, strata_default()) == NULL && errno == EINVAL);
  strata_free(NULL);
}

/* every size from 0 to 20 KiB, then powers of two up to 8 MiB, in every kind of placement:
 * 16-byte alignment, usable size >= requested, contents kept */
static void test_sizes_alignment(void) {
  strata_arena_t *ar = strata_arena_new(strata_default());
  strata_place_t places[] = {strata_default(), strata_hot(), strata_cold(), strata_in_arena(ar)};
  int bad_align = 0, bad_usable = 0, bad_content = 0;
  for (size_t k = 0; k < sizeof places / sizeof places[0]; k++) {
    for (size_t size = 0; size <= 20480; size += (size < 1024 ? 1 : 61)) {
      unsigned char *p = strata_malloc(size, places[k]);
      if (!p) { bad_usable++; continue; }
      if ((uintptr_t)p % 16) bad_align++;
      if (strata_usable_size(p) < size) bad_usable++;
      fill(p, size, (unsigned)size);
      if (!same(p, size, (unsigned)size)) bad_content++;
      strata_free(p);
    }
    for (size_t size = 32768; size <= ((size_t)8 << 20); size *= 2) {
      unsigned char *p = strata_malloc(size + 3, places[k]);
      if (!p || (uintptr_t)p % 16 || strata_usable_size(p) < size + 3) { bad_usable++; continue; }
      if (size >= 16384 && (uintptr_t)p % 4096) bad_align++; /* runs and large: page aligned */
      fill(p, size + 3, 1);
      if (!same(p, size + 3, 1)) bad_content++;
      strata_free(p);
    }
  }
  CHECK(bad_align == 0);
  CHECK(bad_usable == 0);
  CHECK(bad_content == 0);
  /* explicit alignments */
  int bad = 0;
  for (size_t al = 16; al <= ((size_t)1 << 20); al *= 2)
    for (size_t size = 1; size < 70000; size = size * 3 + 5)
      for (size_t k = 0; k < sizeof places / sizeof places[0]; k++) {
        void *p = strata_malloc_aligned(size, al, places[k]);
        if (!p || (uintptr_t)p % al || strata_usable_size(p) < size) bad++;
        strata_free(p);
      }
  CHECK(bad == 0);
  CHECK(strata_arena_destroy(ar) == 0);
}

static void test_realloc(void) {
  strata_arena_t *ar = strata_arena_new(strata_cold());
  strata_place_t places[] = {strata_default(), strata_hot(), strata_in_arena(ar)};
  for (size_t k = 0; k < 3; k++) {
    unsigned char *p = strata_malloc(10, places[k]);
    strata_arena_t *home = strata_arena_of(p);
    fill(p, 10, 3);
    size_t sizes[] = {100, 3000, 40000, (size_t)3 << 20, 50, 20000, 7};
    size_t prev = 10;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      p = strata_realloc(p, sizes[i]);
      CHECK(p != NULL);
      size_t keep = prev < sizes[i] ? prev : sizes[i];
      CHECK(same(p, keep, 3));
      CHECK(strata_arena_of(p) == home); /* placement kept */
      fill(p, sizes[i], 3);
      prev = sizes[i];
    }
    CHECK(strata_realloc(p, 0) == NULL);
  }
  unsigned char *q = strata_realloc(NULL, 33);
  CHECK(q && strata_usable_size(q) >= 33);
  strata_free(q);
  int x;
  errno = 0;
  CHECK(strata_realloc(&x, 10) == NULL && errno == EINVAL);
  CHECK(strata_arena_destroy(ar) == 0);
}

/* Growing a run (64 KiB - 1 MiB) whose next pages are free, or a large object, copies
 * nothing: the run stays where it is, the large object's pages are remapped. */
static void test_realloc_grows_in_place(void) {
  strata_arena_t *ar = strata_arena_new(strata_cold());
  int64_t large_before = strata_stat("large_bytes");
  /* a run with 25 free pages after it: NextTo put a neighbour there, which is then freed */
  unsigned char *run = NULL, *tried[8];
  size_t ntried = 0;
  while (!run && ntried < 8) {
    unsigned char *r = strata_malloc(100000, strata_in_arena(ar));
    unsigned char *after = strata_malloc(100000, strata_next_to(r));
    if (after == r + 25 * 4096) run = r;
    else tried[ntried++] = r;
    strata_free(after);
  }
  CHECK(run != NULL);
  fill(run, 100000, 5);
  unsigned char *grown = strata_realloc(run, 200000); /* 49 pages: 24 more */
  CHECK(grown == run && strata_usable_size(grown) >= 200000 && same(grown, 100000, 5));
  unsigned char *next = strata_malloc(100000, strata_next_to(grown)); /* hemmed in, if there */
  fill(grown, 200000, 6);
  for (size_t i = 0; i < ntried; i++) strata_free(tried[i]);
  unsigned char *moved = strata_realloc(grown, 900000);
  CHECK(moved && (moved != grown || next != grown + 49 * 4096) && same(moved, 200000, 6));
  unsigned char *big = strata_malloc((size_t)6 << 20, strata_in_arena(ar));
  fill(big, (size_t)6 << 20, 7);
  for (size_t size = (size_t)9 << 20; size <= ((size_t)81 << 20); size = size * 3) {
    big = strata_realloc(big, size);
    CHECK(big && strata_usable_size(big) >= size && strata_arena_of(big) == ar);
    CHECK(same(big, (size_t)6 << 20, 7));
  }
  CHECK(strata_stat("large_bytes") >= large_before + (81 << 20));
  strata_free(big);
  strata_free(moved);
  strata_free(next);
  CHECK(strata_stat("large_bytes") == large_before);
  CHECK(strata_arena_destroy(ar) == 0);
}

/* Freed pages stay resident while they are reused; a hole left unused while two ticks' worth
 * of pages (1 MiB each, segment.c) were freed elsewhere is given back. Every other run of a row
 * is freed; the neighbours keep the holes from merging into anything a later allocation takes. */
static void test_idle_free_pages_are_given_back(void) {
  enum { RUNS = 64, RUN_BYTES = 25 * 4096, CHURN_BYTES = 200 * 4096 };
  strata_arena_t *ar = strata_arena_new(strata_default());
  unsigned char *r[RUNS];
  for (int i = 0; i < RUNS; i++) {
    r[i] = strata_malloc(RUN_BYTES, strata_in_arena(ar));
    CHECK(r[i] != NULL);
    memset(r[i], 1, RUN_BYTES);
  }
  int64_t purged = strata_stat("purged_bytes");
  for (int i = 0; i < RUNS; i += 2) strata_free(r[i]);
  for (int k = 0; k < 3; k++) { /* 600 pages freed elsewhere: at least two ticks */
    unsigned char *c = strata_malloc(CHURN_BYTES, strata_in_arena(ar));
    memset(c, 2, CHURN_BYTES);
    strata_free(c);
  }
  size_t resident = 0;
  for (int i = 0; i < RUNS; i += 2) {
    unsigned char vec[25];
    CHECK(mincore(r[i], RUN_BYTES, vec) == 0);
    for (int k = 0; k < 25; k++) resident += vec[k] & 1;
  }
  CHECK(strata_stat("purged_bytes") >= purged + RUNS / 2 * RUN_BYTES);
  CHECK(resident == 0);
  /* a page reused before a tick is not purged: the same run freed and taken again at once */
  unsigned char *a = strata_malloc(RUN_BYTES, strata_in_arena(ar));
  memset(a, 3, RUN_BYTES);
  purged = strata_stat("purged_bytes");
  strata_free(a);
  unsigned char *b = strata_malloc(RUN_BYTES, strata_in_arena(ar));
  CHECK(b == a && strata_stat("purged_bytes") == purged && b[100] == 3);
  strata_free(b);
  for (int i = 1; i < RUNS; i += 2) strata_free(r[i]);
  CHECK(strata_arena_destroy(ar) == 0);
}

static void test_calloc(void) {
  for (size_t n = 1; n < 5000000; n = n * 5 + 1) {
    unsigned char *p = strata_malloc(n, strata_default());
    memset(p, 0xAB, n);
    strata_free(p);
    p = strata_calloc(n, 1, strata_default());
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += p[i] != 0;
    CHECK(nz == 0);
    strata_free(p);
  }
}

static void test_next_to(void) {
  strata_arena_t *ar = strata_arena_new(strata_default());
  char *head = strata_malloc(32, strata_in_arena(ar));
  /* mixed sizes next to each other share the page while it has room */
  char *prev = head;
  int same_page = 0;
  for (int i = 0; i < 40; i++) {
    char *n = strata_malloc(24 + (size_t)(i % 5) * 16, strata_next_to(prev));
    CHECK(strata_arena_of(n) == ar);
    same_page += ((uintptr_t)n >> 12) == ((uintptr_t)head >> 12);
    prev = n;
  }
  CHECK(same_page == 40);
  /* two chains in two arenas, allocated interleaved: each chain stays on its own pages */
  strata_arena_t *a1 = strata_arena_new(strata_default()), *a2 = strata_arena_new(strata_default());
  char *c1 = strata_malloc(48, strata_in_arena(a1)), *c2 = strata_malloc(48, strata_in_arena(a2));
  uintptr_t pages1[300], pages2[300];
  size_t n1 = 0, n2 = 0;
  for (int i = 0; i < 300; i++) {
    c1 = strata_malloc(48, strata_next_to(c1));
    c2 = strata_malloc(48, strata_next_to(c2));
    uintptr_t q1 = (uintptr_t)c1 >> 12, q2 = (uintptr_t)c2 >> 12;
    if (!n1 || pages1[n1 - 1] != q1) pages1[n1++] = q1;
    if (!n2 || pages2[n2 - 1] != q2) pages2[n2++] = q2;
  }
  CHECK(n1 <= 4 && n2 <= 4); /* 301 * 48 bytes fit in 4 pages */
  for (size_t i = 0; i < n1; i++)
    for (size_t j = 0; j < n2; j++) CHECK(pages1[i] != pages2[j]);
  /* alone in its pool, a full page continues on the page right after it */
  strata_arena_t *solo = strata_arena_new(strata_cold());
  char *s0 = strata_malloc(1024, strata_in_arena(solo)), *s = s0;
  for (int i = 0; i < 4; i++) s = strata_malloc(1024, strata_next_to(s));
  CHECK(((uintptr_t)s >> 12) == ((uintptr_t)s0 >> 12) + 1);
  CHECK(strata_arena_destroy(solo) == 0);
  /* next_to a foreign pointer: default placement, counted */
  int64_t before = strata_stat("next_to_foreign");
  int local;
  void *f = strata_malloc(16, strata_next_to(&local));
  CHECK(f && strata_arena_of(f) != a1 && strata_stat("next_to_foreign") == before + 1);
  strata_free(f);
  /* next_to a freed pointer whose page is still the arena's: same arena */
  char *x = strata_malloc(64, strata_next_to(head));
  strata_free(x);
  char *y = strata_malloc(64, strata_next_to(x));
  CHECK(strata_arena_of(y) == ar);
  /* next_to an object in a destroyed arena: default placement */
  strata_arena_t *gone = strata_arena_new(strata_default());
  char *g = strata_malloc(64, strata_in_arena(gone));
  CHECK(strata_arena_destroy(gone) == 0);
  void *z = strata_malloc(64, strata_next_to(g));
  CHECK(z && strata_arena_of(z) != gone);
  strata_free(z);
  /* big objects next_to: same arena, a run of pages */
  char *big = strata_malloc(100000, strata_next_to(head));
  CHECK(strata_arena_of(big) == ar);
  strata_free(big);
  CHECK(strata_arena_destroy(ar) == 0 && strata_arena_destroy(a1) == 0 &&
        strata_arena_destroy(a2) == 0);
}

/* Page colouring (make c-test runs this file with and without STRATA_COLOUR=1): a chain of 1000-B
 * objects, four to a page; the first object of each new page starts the page by default, and
 * at line offsets that vary from page to page with colouring. Every object keeps its bytes. */
static void test_colour(void) {
  const char *env = getenv("STRATA_COLOUR");
  int on = env && !strcmp(env, "1");
  strata_arena_t *ar = strata_arena_new(strata_default());
  unsigned char *objs[400];
  objs[0] = strata_malloc(1000, strata_in_arena(ar));
  fill(objs[0], 1000, 0);
  uintptr_t page = (uintptr_t)objs[0] >> 12;
  int firsts = 0, distinct = 0, seen[64] = {0}, n = 1;
  for (; n < 400 && firsts < 32; n++) {
    objs[n] = strata_malloc(1000, strata_next_to(objs[n - 1]));
    CHECK(objs[n] && strata_arena_of(objs[n]) == ar);
    fill(objs[n], 1000, (unsigned)n);
    if (((uintptr_t)objs[n] >> 12) == page) continue;
    page = (uintptr_t)objs[n] >> 12; /* a new page: where does its first object start? */
    int line = (int)(((uintptr_t)objs[n] & 4095) >> 6);
    if (!on) CHECK(line == 0);
    distinct += !seen[line]++;
    firsts++;
  }
  CHECK(firsts == 32);
  if (on) CHECK(distinct >= 16);
  for (int i = 0; i < n; i++) CHECK(same(objs[i], 1000, (unsigned)i));
  strata_arena_destroy(ar);
  /* a fresh arena's second page has colour 37 lines; an object placed in the arena (not next
   * to one) searches the current page from its colour, so it follows that page's first object
   * instead of taking the page's start */
  strata_arena_t *b = strata_arena_new(strata_default());
  char *first = strata_malloc(1000, strata_in_arena(b)), *o = first;
  while (((uintptr_t)o >> 12) == ((uintptr_t)first >> 12)) o = strata_malloc(1000, strata_in_arena(b));
  CHECK((((uintptr_t)o & 4095) >> 6) == (on ? 37u : 0u));
  char *after = strata_malloc(16, strata_in_arena(b));
  CHECK(after == o + 1008); /* 1000 bytes are 63 granules of 16 */
  strata_arena_destroy(b);
}

static void test_arenas(void) {
  CHECK(strata_arena_destroy(strata_arena_of(strata_malloc(16, strata_default()))) != 0);
  CHECK(strata_arena_destroy(NULL) != 0);
  CHECK(strata_arena_new(strata_in_arena(NULL)) == NULL);
  int64_t seg0 = strata_stat("segments"), large0 = strata_stat("large_objects");
  strata_arena_t *a = strata_arena_new(strata_hot());
  CHECK(strata_arena_tier(a) == 0);
  for (int i = 0; i < 5000; i++) strata_malloc((size_t)(i % 300) + 1, strata_in_arena(a));
  for (int i = 0; i < 50; i++) strata_malloc(30000, strata_in_arena(a));
  strata_malloc((size_t)5 << 20, strata_in_arena(a));
  CHECK(strata_stat("segments") > seg0 && strata_stat("large_objects") == large0 + 1);
  CHECK(strata_arena_destroy(a) == 0);
  CHECK(strata_stat("segments") == seg0 && strata_stat("large_objects") == large0);
  strata_arena_t *b = strata_arena_new(strata_next_to(strata_malloc(8, strata_cold())));
  CHECK(strata_arena_tier(b) == strata_topology()->ntiers - 1);
  CHECK(strata_arena_destroy(b) == 0);
  int64_t clamped = strata_stat("tier_clamped");
  void *t = strata_malloc(100, strata_tier(99));
  CHECK(t && strata_stat("tier_clamped") == clamped + 1);
  CHECK(strata_arena_tier(strata_arena_of(t)) == strata_topology()->ntiers - 1);
  strata_free(t);
}

/* An arena's pages are in the channel, each record with the arena's number and binding, and
 * leave it with the arena. */
static void test_arena_records(void) {
  strata_arena_t *a = strata_arena_new(strata_cold()), *b = strata_arena_new(strata_default());
  void *small = strata_malloc(100, strata_in_arena(a)), *run = strata_malloc(30000, strata_in_arena(a));
  void *large = strata_malloc((size_t)5 << 20, strata_in_arena(a));
  void *other = strata_malloc(100, strata_in_arena(b));
  void *next = strata_malloc(64, strata_next_to(small));
  const strata_channel_header_t *h = own_channel();
  CHECK(h && h->version == STRATA_CHANNEL_VERSION && h->object_bytes == sizeof(strata_object_t));
  if (!h) return;
  const strata_object_t *rs = record_of(h, small), *rr = record_of(h, run), *rl = record_of(h, large);
  const strata_object_t *ro = record_of(h, other), *rn = record_of(h, next);
  CHECK(rs && rr && rl && ro && rn);
  if (!(rs && rr && rl && ro && rn)) return;
  int32_t cold = strata_topology()->ntiers > 1 ? STRATA_DIRECTIVE_SLOW : STRATA_DIRECTIVE_FAST;
  CHECK(rs->arena && rr->arena == rs->arena && rl->arena == rs->arena && rn->arena == rs->arena);
  CHECK(rs->hint == cold && rr->hint == cold && rl->hint == cold && rs->context == 0);
  CHECK(ro->arena && ro->arena != rs->arena && ro->hint == STRATA_DIRECTIVE_DEFAULT);
  CHECK(rs->len == 4096 && rr->len >= 30000 && rl->len >= ((size_t)5 << 20));
  /* a run grown in place keeps one record, of its new length */
  void *grown = strata_realloc(run, 60000);
  const strata_object_t *rg = record_of(h, grown);
  CHECK(rg && rg->arena == rs->arena && rg->addr == (uint64_t)(uintptr_t)grown && rg->len >= 60000);
  uint32_t unit = rs->arena;
  strata_free(other);
  CHECK(strata_arena_destroy(a) == 0);
  CHECK(!record_of(h, small) && !record_of(h, grown) && !record_of(h, large));
  const strata_object_t *o = (const void *)((const char *)h + h->objects_offset);
  for (uint64_t i = 1; i < h->objects_high; i++) CHECK(!o[i].addr || o[i].arena != unit);
  CHECK(strata_arena_destroy(b) == 0);
}

/* A forked child's arena pages are not written into its parent's channel (a shared mapping):
 * its frees do not take the parent's records away, nor do its allocations add to them. */
static void test_arena_records_after_fork(void) {
  strata_arena_t *a = strata_arena_new(strata_default());
  void *run = strata_malloc(30000, strata_in_arena(a));
  const strata_channel_header_t *h = own_channel();
  const strata_object_t *r = h ? record_of(h, run) : NULL;
  CHECK(r != NULL);
  if (!r) return;
  uint32_t unit = r->arena;
  const strata_object_t *o = (const void *)((const char *)h + h->objects_offset);
  int before = 0, after = 0;
  for (uint64_t i = 1; i < h->objects_high; i++) before += o[i].addr && o[i].arena == unit;
  pid_t pid = fork();
  if (pid == 0) {
    strata_free(run);
    for (int i = 0; i < 8; i++) strata_malloc(30000, strata_in_arena(a));
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  for (uint64_t i = 1; i < h->objects_high; i++) after += o[i].addr && o[i].arena == unit;
  CHECK(before == 1 && after == 1 && record_of(h, run) == r);
  CHECK(strata_arena_destroy(a) == 0);
}

static void test_free_foreign_and_invalid(void) {
  int64_t ff = strata_stat("free_foreign"), fi = strata_stat("free_invalid");
  int local;
  void *m = malloc(100);
  strata_free(&local);
  strata_free(m);
  free(m);
  CHECK(strata_stat("free_foreign") == ff + 2);
  strata_arena_t *a = strata_arena_new(strata_default());
  char *p = strata_malloc(100, strata_in_arena(a));
  strata_free(p + 16);      /* interior pointer */
  strata_free(p);
  strata_free(p);           /* double free of a mixed object */
  char *r = strata_malloc(200000, strata_default()); /* a run of pages */
  strata_free(r + 4096);    /* interior of a run */
  strata_free(r);
  CHECK(strata_stat("free_invalid") == fi + 3);
  CHECK(strata_usable_size(&local) == 0 && !strata_owns(&local) && strata_owns(r) == 0);
  CHECK(strata_arena_destroy(a) == 0);
}

static void test_where(void) {
  size_t n = (size_t)4 << 20;
  char *p = strata_malloc(n, strata_hot());
  strata_residency_t r;
  CHECK(strata_where(p, n, &r) == 0);
  CHECK(r.pages == n / 4096 && r.absent_bytes == n); /* untouched: nothing resident yet */
  memset(p, 1, n / 2);
  CHECK(strata_where(p, n, &r) == 0);
  uint64_t resident = 0;
  for (int i = 0; i < STRATA_MAX_NODES; i++) resident += r.node_bytes[i];
  CHECK(resident == n / 2 && r.tier_bytes[0] == n / 2); /* hot = tier 0 */
  const strata_topology_t *t = strata_topology();
  CHECK(r.node_bytes[__builtin_ctzll(t->tier_nodemask[0])] == n / 2);
  strata_free(p);
  CHECK(strata_where(NULL, 0, &r) == 0 && r.pages == 0);
}

static void out_count(const char *s, void *arg) { *(size_t *)arg += strlen(s); }

static void test_stats(void) {
  size_t n = 0;
  strata_stats_print(1, out_count, &n);
  CHECK(n > 100);
  CHECK(strata_stat("segments") > 0 && strata_stat("no_such_counter") == -1);
}

int main(void) {
  test_zero_and_huge();
  test_sizes_alignment();
  test_realloc();
  test_realloc_grows_in_place();
  test_idle_free_pages_are_given_back();
  test_calloc();
  test_next_to();
  test_colour();
  test_arenas();
  test_arena_records();
  test_arena_records_after_fork();
  test_free_foreign_and_invalid();
  test_where();
  test_stats();
  return check_done("test_api");
}
