/* hot_writer.c: a hot set and a cold one for the daemon to find (crates/strata-cli/tests/vm.rs).
 *
 *   hot_writer HOT_MB [SECS [COLD_MB [read]]]
 *
 * Run under LD_PRELOAD=libstrata.so, usually with tests/preload/hot_writer.rules, which sends
 * the hot buffer (allocated in alloc_hot) to the slow tier and the cold one (alloc_cold) to the
 * fast tier. It fills the cold buffer once and never touches it again, then writes a counter
 * into every page of the hot buffer, round after round, for SECS seconds (with `read`, it
 * writes the hot buffer once and then only reads it: a hot set that trackers of writes cannot
 * see). It prints how many
 * pages of each buffer each node holds at the start and at the end, as the kernel says
 * (move_pages with no target), independently of Strata; and at the end it checks every page
 * of both buffers ("verified", or the first page that lost a write), so a move that loses data
 * is seen.
 *
 * So that a test waits for events, not for the wall clock (a busy host stretches every step):
 *   HOT_WRITER_GOAL=P  ends the rounds once P % of the hot buffer is on node 0 (looked at
 *                      once a second), or at SECS, whichever comes first ("goal reached");
 *   HOT_WRITER_HOLD=F  then prints "holding" and goes on with the same rounds until the file F
 *                      exists (at most 10 minutes), so a test can read `strata stats` while
 *                      the program still runs, whenever it gets there. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

/* pages of buf on node 0 (-1: move_pages failed) */
static long on_node0(char *buf, size_t pages) {
  void **addrs = malloc(pages * sizeof *addrs);
  int *status = malloc(pages * sizeof *status);
  long n = -1;
  for (size_t i = 0; i < pages; i++) addrs[i] = buf + i * PAGE;
  if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) == 0) {
    n = 0;
    for (size_t i = 0; i < pages; i++) n += status[i] == 0;
  }
  free(addrs);
  free(status);
  return n;
}

static double since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void nodes(const char *what, const char *when, char *buf, size_t pages) {
  void **addrs = malloc(pages * sizeof *addrs);
  int *status = malloc(pages * sizeof *status);
  for (size_t i = 0; i < pages; i++) addrs[i] = buf + i * PAGE;
  long on[8] = {0};
  if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) == 0)
    for (size_t i = 0; i < pages; i++)
      if (status[i] >= 0 && status[i] < 8) on[status[i]]++;
  printf("%s %s: N0=%ld N1=%ld of %zu pages\n", what, when, on[0], on[1], pages);
  fflush(stdout);
  free(addrs);
  free(status);
}

/* two call sites, so rules can place the buffers apart (dynamic symbols: built -rdynamic; the
 * barrier keeps malloc from being a tail call, which would take the site off the stack) */
#define SITE(name)                                  \
  __attribute__((noinline)) char *name(size_t n) { \
    char *p = malloc(n);                            \
    __asm__ volatile("" ::: "memory");              \
    return p;                                       \
  }
SITE(alloc_hot)
SITE(alloc_cold)

int main(int argc, char **argv) {
  size_t hot_mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
  double secs = argc > 2 ? atof(argv[2]) : 10;
  size_t cold_mb = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
  int read_only = argc > 4 && !strcmp(argv[4], "read");
  size_t hot_pages = (hot_mb << 20) / PAGE, cold_pages = (cold_mb << 20) / PAGE;
  char *cold = cold_pages ? alloc_cold(cold_mb << 20) : NULL;
  for (size_t i = 0; i < cold_pages; i++) memset(cold + i * PAGE, (int)(i & 255), PAGE);
  char *hot = alloc_hot(hot_mb << 20);
  if (!hot || (cold_pages && !cold)) return 1;
  memset(hot, 0, hot_mb << 20);
  nodes("hot", "start", hot, hot_pages);
  if (cold) nodes("cold", "start", cold, cold_pages);
  const char *goal_env = getenv("HOT_WRITER_GOAL"), *hold = getenv("HOT_WRITER_HOLD");
  double goal = goal_env ? atof(goal_env) / 100 : 0;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t rounds = 0, sum = 0;
  if (read_only) {
    rounds = 1;
    for (size_t i = 0; i < hot_pages; i++) ((uint64_t *)(hot + i * PAGE))[i % 512] = rounds;
  }
  double looked = 0;
  int holding = 0;
  for (;;) {
    if (read_only) {
      for (size_t i = 0; i < hot_pages; i++) sum += ((volatile uint64_t *)(hot + i * PAGE))[i % 512];
    } else {
      rounds++;
      for (size_t i = 0; i < hot_pages; i++) ((volatile uint64_t *)(hot + i * PAGE))[i % 512] = rounds;
    }
    double now = since(&t0);
    if (holding) {
      if (access(hold, F_OK) == 0 || now > 600) break;
      continue;
    }
    int done = now >= secs;
    if (goal > 0 && now - looked >= 1) {
      looked = now;
      if (on_node0(hot, hot_pages) >= (long)(goal * hot_pages)) {
        printf("goal reached after %.0f s\n", now);
        done = 1;
      }
    }
    if (!done) continue;
    if (!hold) break;
    printf("holding\n");
    fflush(stdout);
    holding = 1;
  }
  if (read_only && sum == 0) return 3; /* (uses sum: the reads are not optimized away) */
  nodes("hot", "end", hot, hot_pages);
  if (cold) nodes("cold", "end", cold, cold_pages);
  printf("rounds: %llu\n", (unsigned long long)rounds);
  for (size_t i = 0; i < hot_pages; i++) {
    const uint64_t *w = (const uint64_t *)(hot + i * PAGE);
    for (size_t k = 0; k < 512; k++)
      if (w[k] != (k == i % 512 ? rounds : 0)) {
        printf("CORRUPT: hot page %zu word %zu holds %llu\n", i, k, (unsigned long long)w[k]);
        return 2;
      }
  }
  for (size_t i = 0; i < cold_pages; i++)
    for (size_t k = 0; k < PAGE; k++)
      if ((unsigned char)cold[i * PAGE + k] != (i & 255)) {
        printf("CORRUPT: cold page %zu byte %zu\n", i, k);
        return 2;
      }
  printf("verified\n");
  free(hot);
  free(cold);
  return 0;
}
