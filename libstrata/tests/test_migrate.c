/* test_migrate.c: transactional migration (agent/migrate.c) under concurrent writers: nothing
 * written is ever lost, pages written while copied abort and are tried again, pages come and go
 * (freed, reused) while being moved, a large object unmapped or remapped (realloc) while its
 * pages are moved keeps every byte, and a fork in the middle sees every page whole.
 *
 *   test_migrate [ROUNDS]
 *
 * It runs on one node too: the moves are forced (STRATA_AGENT_FORCE), which exercises the copy,
 * the commit and the abort though the page lands where it was. With two tiers (the guest of
 * `strata vm run --kernel 6.12`, where make vm-test runs it) it also moves pages between them:
 * promotions keep shadows, clean demotions copy nothing, written pages lose their shadows (the
 * sweep, or the comparison when the written mark was cleared), shadows are reclaimed on request,
 * and pages moved back and forth under writers end up where their status says, aborted ones
 * where they were. Skipped, saying why, where the kernel has no UFFDIO_MOVE (before 6.8) or
 * this process may not use a full userfaultfd. */
#include "check.h"
#include "internal.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 256
#define WRITERS 3
#define WORDS (PAGE_SIZE / sizeof(uint64_t))

static char *pages[PAGES];
static uint64_t mirror[WRITERS][PAGES]; /* what writer t last wrote in word t of each page */
static atomic_int stop;
static atomic_long writes, lost;

/* Writer t owns word t of every page: read, check against its own record, increment. */
static void *writer(void *arg) {
  long t = (long)arg;
  unsigned seed = (unsigned)t * 7919u + 1;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int i = rand_r(&seed) % PAGES;
    volatile uint64_t *w = (volatile uint64_t *)pages[i] + t;
    uint64_t v = *w;
    if (v != mirror[t][i]) atomic_fetch_add(&lost, 1);
    *w = v + 1;
    mirror[t][i] = v + 1;
    atomic_fetch_add_explicit(&writes, 1, memory_order_relaxed);
  }
  return NULL;
}

/* A churner: objects allocated, filled, checked and freed while the mover moves pages. */
static atomic_long churn_bad;
static void *churner(void *arg) {
  (void)arg;
  unsigned seed = 4242;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    size_t n = 4096 + (size_t)(rand_r(&seed) % 8) * 4096;
    unsigned char *p = strata_malloc(n, strata_default());
    if (!p) continue;
    memset(p, 0xA5, n);
    for (size_t k = 0; k < n; k += 512)
      if (p[k] != 0xA5) atomic_fetch_add(&churn_bad, 1);
    strata_free(p);
  }
  return NULL;
}

static int node_of(void *p) {
  int node = -1;
  return syscall(SYS_move_pages, 0, 1ul, &p, NULL, &node, 0) == 0 ? node : -1;
}

static void start_writers(pthread_t *w) {
  atomic_store(&stop, 0);
  for (long t = 0; t < WRITERS; t++) pthread_create(&w[t], NULL, writer, (void *)t);
}

static void stop_writers(pthread_t *w) {
  atomic_store(&stop, 1);
  for (int t = 0; t < WRITERS; t++) pthread_join(w[t], NULL);
}

static int lowest_node(uint64_t mask) { return mask ? __builtin_ctzll(mask) : -1; }

/* Between two tiers: shadows, and moves under writers that land where their status says. */
static void between_tiers(int uffd, int rounds) {
  int fast = lowest_node(_strata_tier_nodemask(0)), slow = lowest_node(_strata_tier_nodemask(_strata_ntiers() - 1));
  printf("test_migrate: two tiers: fast node %d, slow node %d\n", fast, slow);
  int32_t st[PAGES];
  const strata_agent_counters_t *k = _strata_migrate_counters();
  _strata_migrate((void *const *)pages, PAGES, slow, 1, 0, st);
  int on_slow = 0;
  for (int i = 0; i < PAGES; i++) on_slow += st[i] == slow && node_of(pages[i]) == slow;
  CHECK(on_slow == PAGES);

  /* promoted, each keeps its old page as a shadow; demoted clean, the shadow comes back */
  strata_agent_counters_t c = *k;
  _strata_migrate((void *const *)pages, PAGES, fast, 1, 0, st);
  int on_fast = 0;
  for (int i = 0; i < PAGES; i++) on_fast += st[i] == fast && node_of(pages[i]) == fast;
  CHECK(on_fast == PAGES);
  CHECK(k->shadows == c.shadows + PAGES && k->commits == c.commits + PAGES);
  c = *k;
  _strata_migrate((void *const *)pages, PAGES, slow, 1, 0, st);
  on_slow = 0;
  for (int i = 0; i < PAGES; i++) on_slow += st[i] == slow && node_of(pages[i]) == slow;
  CHECK(on_slow == PAGES);
  CHECK(k->shadow_demotions == c.shadow_demotions + PAGES && k->commits == c.commits && k->shadows == 0);

  /* written after promotion: the sweep drops those shadows, and those pages demote by copy */
  _strata_migrate((void *const *)pages, PAGES, fast, 1, 0, st);
  for (int i = 0; i < PAGES; i += 2) ((uint64_t *)pages[i])[WRITERS] = 0x5157;
  c = *k;
  CHECK(_strata_shadows_sweep() == PAGES / 2 && k->shadows == PAGES / 2);
  /* a write whose mark was cleared again (a daemon's scan does that): the comparison sees it */
  ((uint64_t *)pages[1])[WRITERS] = 0x5157;
  struct uffdio_writeprotect wp = {.range = {(uintptr_t)pages[1], PAGE_SIZE}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
  CHECK(ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0);
  c = *k;
  _strata_migrate((void *const *)pages, PAGES, slow, 1, 0, st);
  CHECK(k->shadow_demotions == c.shadow_demotions + PAGES / 2 - 1 && k->commits == c.commits + PAGES / 2 + 1);
  CHECK(k->shadows_stale == c.shadows_stale + 1);
  int kept = 0;
  for (int i = 0; i < PAGES; i++) kept += ((uint64_t *)pages[i])[WRITERS] == ((i % 2 == 0 || i == 1) ? 0x5157u : 0);
  CHECK(kept == PAGES);
  for (int i = 0; i < PAGES; i++) ((uint64_t *)pages[i])[WRITERS] = 0;

  /* memory bound to the slow node (mbind, as a slow pool's segments are) still moves: the copy
   * is the agent's page, allocated where the agent asks, not where p's policy says */
  {
    unsigned long mask = 1ul << slow;
    int bound = 0;
    for (int i = 0; i < 16; i++) bound += syscall(SYS_mbind, pages[i], PAGE_SIZE, 2 /* MPOL_BIND */, &mask, 64ul, 0u) == 0;
    CHECK(bound == 16);
    _strata_migrate((void *const *)pages, 16, fast, 1, 0, st);
    int bound_fast = 0;
    for (int i = 0; i < 16; i++) bound_fast += st[i] == fast && node_of(pages[i]) == fast;
    CHECK(bound_fast == 16);
    for (int i = 0; i < 16; i++) syscall(SYS_mbind, pages[i], PAGE_SIZE, 0 /* MPOL_DEFAULT */, NULL, 0ul, 0u);
    _strata_migrate((void *const *)pages, 16, slow, 1, 0, st);
  }

  /* reclaimed on request */
  _strata_migrate((void *const *)pages, PAGES, fast, 1, 0, st);
  CHECK(k->shadows == PAGES && _strata_shadows_drop(0) == PAGES && k->shadows == 0);

  /* back and forth under writers: every page where its status says */
  pthread_t w[WRITERS];
  start_writers(w);
  long misplaced = 0, aborted = 0;
  for (int r = 0; r < rounds; r++) {
    int to = r % 2 ? fast : slow;
    int before[PAGES];
    for (int i = 0; i < PAGES; i++) before[i] = node_of(pages[i]);
    _strata_migrate((void *const *)pages, PAGES, to, 2, 0, st);
    for (int i = 0; i < PAGES; i++) {
      int now = node_of(pages[i]);
      if (st[i] == -EAGAIN) {
        aborted++;
        misplaced += now != before[i];
      } else {
        misplaced += st[i] != to || now != to;
      }
    }
  }
  stop_writers(w);
  printf("test_migrate: %d rounds between tiers, %ld pages given up (left where they were), %llu shadow demotions\n",
         rounds, aborted, (unsigned long long)k->shadow_demotions);
  CHECK(misplaced == 0 && atomic_load(&lost) == 0);
}

/* A large object (a mapping of its own) freed or grown by realloc (mremap) by another thread
 * while its pages are being moved: no crash, no byte of a grown one lost. */
typedef struct {
  unsigned char *p;
  int grow;
  unsigned spin;
  unsigned char *out;
} racer_t;

static void *racer(void *arg) {
  racer_t *r = arg;
  for (volatile unsigned i = 0; i < r->spin; i++) {}
  if (r->grow) r->out = strata_realloc(r->p, 4 * LARGE_MIN);
  else strata_free(r->p);
  return NULL;
}

static void large_races(int rounds) {
  enum { N = LARGE_MIN / PAGE_SIZE };
  static void *lp[N];
  int32_t st[N];
  int node = 0, bad = 0, odd = 0, gone = 0;
  unsigned seed = 99;
  for (int r = 0; r < rounds; r++) {
    unsigned char *p = strata_malloc(LARGE_MIN, strata_default());
    for (size_t k = 0; k < LARGE_MIN; k += 64) p[k] = (unsigned char)(k / 64 + r);
    for (int i = 0; i < N; i++) lp[i] = p + (size_t)i * PAGE_SIZE;
    racer_t rc = {p, r % 2, (unsigned)rand_r(&seed) % 200000, NULL};
    pthread_t t;
    pthread_create(&t, NULL, racer, &rc);
    _strata_migrate(lp, N, node, 1, STRATA_AGENT_FORCE, st);
    pthread_join(t, NULL);
    for (int i = 0; i < N; i++) {
      gone += st[i] == -ENOENT || st[i] == -EFAULT;
      odd += st[i] != node && st[i] != -ENOENT && st[i] != -EFAULT && st[i] != -EAGAIN;
    }
    if (rc.grow) {
      for (size_t k = 0; k < LARGE_MIN; k += 64) bad += rc.out[k] != (unsigned char)(k / 64 + r);
      strata_free(rc.out);
    }
  }
  printf("test_migrate: %d large objects freed or grown while moved (%d of their pages gone under the mover)\n",
         rounds, gone);
  CHECK(bad == 0);
  CHECK(odd == 0);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  strata_arena_t *a = strata_arena_new(strata_default());
  for (int i = 0; i < PAGES; i++) pages[i] = strata_malloc_aligned(PAGE_SIZE, PAGE_SIZE, strata_in_arena(a));
  for (int i = 0; i < PAGES; i++) memset(pages[i], 0, PAGE_SIZE);
  _strata_track_start(); /* what a channel's creation does under the preload */
  bool move;
  int uffd = _strata_uffd(&move);
  if (uffd < 0 || !move) {
    printf("test_migrate: skipped: no userfaultfd that can move pages here (Linux 6.8+, full userfaultfd)\n");
    return 0;
  }
  CHECK(_strata_migrate_init(uffd) == 0);
  int node;
  void *first = pages[0];
  CHECK(syscall(SYS_move_pages, 0, 1ul, &first, NULL, &node, 0) == 0 && node >= 0);

  /* a quiet page: one attempt commits, and the content moves with it */
  int32_t st[PAGES];
  memset(pages[7], 0x3C, 64);
  CHECK(_strata_migrate((void *const *)&pages[7], 1, node, 1, STRATA_AGENT_FORCE, st) == 1);
  CHECK(st[0] == node && ((unsigned char *)pages[7])[63] == 0x3C);
  CHECK(_strata_migrate_counters()->commits == 1);
  memset(pages[7], 0, 64);
  /* memory that is not Strata's goes by move_pages(2) */
  static char foreign[2 * 4096] __attribute__((aligned(4096)));
  foreign[0] = 1;
  void *fp = foreign;
  CHECK(_strata_migrate(&fp, 1, node, 1, STRATA_AGENT_FORCE, st) == 1 && st[0] == node);
  CHECK(_strata_migrate_counters()->fallbacks == 1);

  /* concurrent writers and churn while every page moves, round after round */
  pthread_t w[WRITERS], c;
  start_writers(w);
  pthread_create(&c, NULL, churner, NULL);
  long eagain = 0, moved = 0, forked_bad = 0;
  for (int r = 0; r < rounds; r++) {
    _strata_migrate((void *const *)pages, PAGES, node, 2, STRATA_AGENT_FORCE, st);
    for (int i = 0; i < PAGES; i++) {
      moved += st[i] == node;
      eagain += st[i] == -EAGAIN;
    }
    if (r == rounds / 2) { /* a fork between two moves: the child sees whole pages */
      pid_t pid = fork();
      if (pid == 0) {
        int bad = 0;
        for (int i = 0; i < PAGES; i++)
          for (int k = WRITERS; k < (int)WORDS; k++) bad += ((uint64_t *)pages[i])[k] != 0;
        _exit(bad ? 1 : 0);
      }
      int status;
      waitpid(pid, &status, 0);
      forked_bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  stop_writers(w);
  pthread_join(c, NULL);

  const strata_agent_counters_t *k = _strata_migrate_counters();
  printf("test_migrate: %ld writes, %ld pages moved, %llu commits, %llu aborts, %ld given up after 2 attempts, "
         "%llu moves the kernel did while answering an error\n",
         atomic_load(&writes), moved, (unsigned long long)k->commits, (unsigned long long)k->aborts, eagain,
         (unsigned long long)_strata_migrate_misreported());
  CHECK(atomic_load(&lost) == 0);
  CHECK(atomic_load(&churn_bad) == 0);
  CHECK(forked_bad == 0);
  CHECK(moved > 0 && k->commits >= (unsigned long long)moved);
  long final_bad = 0;
  for (int i = 0; i < PAGES; i++) {
    for (int t = 0; t < WRITERS; t++) final_bad += ((uint64_t *)pages[i])[t] != mirror[t][i];
    for (int q = WRITERS; q < (int)WORDS; q++) final_bad += ((uint64_t *)pages[i])[q] != 0;
  }
  CHECK(final_bad == 0);
  CHECK(atomic_load(&writes) > 0);
  large_races(rounds / 4 + 2);
  if (_strata_ntiers() >= 2) between_tiers(uffd, rounds);
  else printf("test_migrate: one tier here: moves between tiers are tested in the guest (make vm-test)\n");
  strata_arena_destroy(a);
  return check_done("test_migrate");
}
