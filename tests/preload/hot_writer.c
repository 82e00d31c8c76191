/* hot_writer.c: a hot set for the daemon to find (crates/strata-cli/tests/vm.rs). Run under
 * LD_PRELOAD=libstrata.so with STRATA_DIRECTIVE=slow, so that its buffer (a tracked object)
 * starts on the slow tier. It writes every page of the buffer, round after round, for SECS
 * seconds, and prints how many of the buffer's pages each node holds at the start and at the
 * end, as the kernel says (move_pages with no target), independently of Strata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void nodes(const char *when, char *buf, size_t pages) {
  void **addrs = malloc(pages * sizeof *addrs);
  int *status = malloc(pages * sizeof *status);
  for (size_t i = 0; i < pages; i++) addrs[i] = buf + i * 4096;
  long on[8] = {0};
  if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) == 0)
    for (size_t i = 0; i < pages; i++)
      if (status[i] >= 0 && status[i] < 8) on[status[i]]++;
  printf("%s: N0=%ld N1=%ld of %zu pages\n", when, on[0], on[1], pages);
  fflush(stdout);
  free(addrs);
  free(status);
}

int main(int argc, char **argv) {
  size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
  double secs = argc > 2 ? atof(argv[2]) : 10;
  size_t pages = (mb << 20) / 4096;
  char *buf = malloc(mb << 20);
  if (!buf) return 1;
  memset(buf, 1, mb << 20);
  nodes("start", buf, pages);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  unsigned long rounds = 0;
  do {
    for (size_t i = 0; i < pages; i++) buf[i * 4096]++;
    rounds++;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
  nodes("end", buf, pages);
  printf("rounds: %lu\n", rounds);
  free(buf);
  return 0;
}
