/* test_sample.c: the hint-fault sampler (agent/sample.c): sampled pages that the program reads
 * or writes, itself or through the kernel (read(2) into one), are reported as such and lose
 * nothing; untouched ones are not reported and come back whole; a read leaves a clean page
 * clean for the daemon's scan; freeing, growing (mremap) and forking with samples out keep
 * every byte and hand out zeroed memory where they should; and writers running through round
 * after round of samples lose no write.
 *
 *   test_sample [ROUNDS]
 *
 * A thread here answers the userfaultfd's faults as the agent thread does. Skipped, saying
 * why, where the kernel has no UFFDIO_MOVE (before 6.8) or this process may not use a full
 * userfaultfd. */
#include "check.h"
#include "internal.h"
#include "util/uapi.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 128
#define WRITERS 2

static char *pages[PAGES];
static atomic_int quit;
static int uffd;

/* The agent's half: faults at sampled pages are answered. */
static void *answerer(void *arg) {
  (void)arg;
  while (!atomic_load(&quit)) {
    struct pollfd p = {uffd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) _strata_agent_answer_faults(uffd);
  }
  return NULL;
}

static bool pattern_ok(int i) {
  for (size_t k = 0; k < PAGE_SIZE; k++)
    if ((unsigned char)pages[i][k] != (unsigned char)(i * 7 + k / 512)) return false;
  return true;
}

static int index_of(uint64_t page) {
  for (int i = 0; i < PAGES; i++)
    if ((uint64_t)(uintptr_t)pages[i] == page) return i;
  return -1;
}

/* Reads, writes, a read(2) into a page, untouched pages; what comes back and what is reported. */
static void reads_and_writes(void) {
  for (int i = 0; i < PAGES; i++)
    for (size_t k = 0; k < PAGE_SIZE; k++) pages[i][k] = (char)(i * 7 + k / 512);
  /* clean, as after a daemon's scan */
  struct uffdio_writeprotect wp = {.range = {(uintptr_t)pages[0], PAGES * PAGE_SIZE},
                                   .mode = UFFDIO_WRITEPROTECT_MODE_WP};
  CHECK(ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0);
  uint64_t touched[STRATA_AGENT_MAX_PAGES];
  size_t taken;
  CHECK(_strata_sample((void *const *)pages, PAGES, touched, &taken) == 0);
  CHECK(taken == PAGES);
  /* 0-31 read, 32-47 written, 48 filled by read(2) from a pipe, the rest untouched */
  long sum = 0;
  for (int i = 0; i < 32; i++) sum += ((volatile char *)pages[i])[100];
  for (int i = 32; i < 48; i++) pages[i][200] = (char)(i * 7 + 200 / 512);
  int fds[2];
  CHECK(pipe(fds) == 0);
  char chunk[64];
  for (int k = 0; k < 64; k++) chunk[k] = (char)(48 * 7 + (300 + k) / 512);
  CHECK(write(fds[1], chunk, sizeof chunk) == (ssize_t)sizeof chunk);
  CHECK(read(fds[0], pages[48] + 300, sizeof chunk) == (ssize_t)sizeof chunk);
  close(fds[0]);
  close(fds[1]);
  size_t got = _strata_sample(NULL, 0, touched, &taken);
  int reads = 0, writes = 0, other = 0;
  for (size_t j = 0; j < got; j++) {
    int i = index_of(touched[j] & ~(uint64_t)1);
    bool w = touched[j] & 1;
    if (i >= 0 && i < 32 && !w) reads++;
    else if (i >= 32 && i <= 48 && w) writes++;
    else other++;
  }
  printf("test_sample: %zu touched of %d sampled: %d reads, %d writes (one by read(2)), %d others (sum %ld)\n",
         got, PAGES, reads, writes, other, sum);
  CHECK(reads == 32 && writes == 17 && other == 0);
  for (int i = 0; i < PAGES; i++) CHECK(pattern_ok(i));
  /* read and untouched pages are clean again for the daemon's scan, written ones are not */
  int clean_ok = 0;
  for (int i = 0; i < PAGES; i++) {
    bool written = _strata_page_categories(pages[i]) & PAGE_IS_WRITTEN;
    clean_ok += written == (i >= 32 && i <= 48);
  }
  CHECK(clean_ok == PAGES);
}

/* A large object freed, another grown by realloc, with samples out; a fork with samples out. */
static void frees_remaps_forks(void) {
  uint64_t touched[STRATA_AGENT_MAX_PAGES];
  size_t taken;
  enum { N = LARGE_MIN / PAGE_SIZE < 64 ? LARGE_MIN / PAGE_SIZE : 64 };
  /* freed: the samples go back before the unmap; memory handed out next is zero */
  unsigned char *big = strata_malloc(LARGE_MIN, strata_default());
  memset(big, 0x77, LARGE_MIN);
  void *bp[N];
  for (int i = 0; i < N; i++) bp[i] = big + (size_t)i * PAGE_SIZE;
  _strata_sample(bp, N, touched, &taken);
  CHECK(taken == N);
  strata_free(big);
  unsigned char *again = strata_calloc(1, LARGE_MIN, strata_default());
  int nonzero = 0;
  for (size_t k = 0; k < LARGE_MIN; k += 64) nonzero += again[k] != 0;
  CHECK(nonzero == 0);
  /* grown (mremap): every byte follows */
  memset(again, 0x5A, LARGE_MIN);
  for (int i = 0; i < N; i++) bp[i] = again + (size_t)i * PAGE_SIZE;
  _strata_sample(bp, N, touched, &taken);
  CHECK(taken == N);
  unsigned char *grown = strata_realloc(again, 4 * LARGE_MIN);
  int lost = 0;
  for (size_t k = 0; k < LARGE_MIN; k += 64) lost += grown[k] != 0x5A;
  CHECK(lost == 0);
  strata_free(grown);
  /* a fork: the child sees every page whole (fork_prepare brings the samples back) */
  _strata_sample((void *const *)pages, PAGES, touched, &taken);
  CHECK(taken == PAGES);
  pid_t pid = fork();
  if (pid == 0) {
    int bad = 0;
    for (int i = 0; i < PAGES; i++) bad += !pattern_ok(i);
    _exit(bad ? 1 : 0);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  _strata_sample(NULL, 0, touched, &taken); /* none out */
}

/* Writers own one word of every page each; round after round of samples under them. */
static uint64_t mirror[WRITERS][PAGES];
static atomic_long lost_writes, writes;
static atomic_int stop;

static void *writer(void *arg) {
  long t = (long)arg;
  unsigned seed = (unsigned)t * 31u + 5;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int i = rand_r(&seed) % PAGES;
    volatile uint64_t *w = (volatile uint64_t *)pages[i] + t;
    uint64_t v = *w;
    if (v != mirror[t][i]) atomic_fetch_add(&lost_writes, 1);
    *w = v + 1;
    mirror[t][i] = v + 1;
    atomic_fetch_add_explicit(&writes, 1, memory_order_relaxed);
  }
  return NULL;
}

static void under_writers(int rounds) {
  for (int i = 0; i < PAGES; i++) memset(pages[i], 0, PAGE_SIZE);
  pthread_t w[WRITERS];
  for (long t = 0; t < WRITERS; t++) pthread_create(&w[t], NULL, writer, (void *)t);
  uint64_t touched[STRATA_AGENT_MAX_PAGES];
  size_t taken, seen = 0, sampled = 0;
  unsigned seed = 17;
  void *pick[PAGES / 2];
  for (int r = 0; r < rounds; r++) {
    for (int j = 0; j < PAGES / 2; j++) pick[j] = pages[rand_r(&seed) % PAGES];
    seen += _strata_sample(pick, PAGES / 2, touched, &taken);
    sampled += taken;
    usleep(200);
  }
  seen += _strata_sample(NULL, 0, touched, &taken);
  atomic_store(&stop, 1);
  for (int t = 0; t < WRITERS; t++) pthread_join(w[t], NULL);
  long bad = 0;
  for (int i = 0; i < PAGES; i++) {
    for (int t = 0; t < WRITERS; t++) bad += ((uint64_t *)pages[i])[t] != mirror[t][i];
    for (size_t q = WRITERS; q < PAGE_SIZE / 8; q++) bad += ((uint64_t *)pages[i])[q] != 0;
  }
  printf("test_sample: %d rounds under %d writers: %ld writes, %zu pages sampled, %zu touched, %ld lost\n", rounds,
         WRITERS, atomic_load(&writes), sampled, seen, atomic_load(&lost_writes) + bad);
  CHECK(atomic_load(&lost_writes) == 0 && bad == 0);
  CHECK(sampled > 0 && seen > 0 && atomic_load(&writes) > 0);
  CHECK(strata_stat("sample_errors") == 0);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 300;
  strata_arena_t *a = strata_arena_new(strata_default());
  for (int i = 0; i < PAGES; i++) pages[i] = strata_malloc_aligned(PAGE_SIZE, PAGE_SIZE, strata_in_arena(a));
  for (int i = 0; i < PAGES; i++) memset(pages[i], 0, PAGE_SIZE);
  _strata_track_start();
  bool move;
  uffd = _strata_uffd(&move);
  if (uffd < 0 || !move) {
    printf("test_sample: skipped: no userfaultfd that can move pages here (Linux 6.8+, full userfaultfd)\n");
    return 0;
  }
  CHECK(_strata_migrate_init(uffd) == 0);
  CHECK(_strata_sample_init() == 0);
  pthread_t t;
  pthread_create(&t, NULL, answerer, NULL);
  reads_and_writes();
  frees_remaps_forks();
  under_writers(rounds);
  atomic_store(&quit, 1);
  pthread_join(t, NULL);
  strata_arena_destroy(a);
  return check_done("test_sample");
}
