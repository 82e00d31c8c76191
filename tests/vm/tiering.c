/* tiering.c: the kernel's own tiering as a baseline, inside the guest started with
 * `strata vm run --kernel-tiering`: a hot set moved to the slow node gets promoted back by
 * NUMA hint faults (numa_balancing=2), as /proc/vmstat and numa_maps show.
 * Usage: tiering [MiB] [seconds] */
#include "../../libstrata/tests/check.h"
#include "numa_maps.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long vmstat(const char *name) {
  FILE *f = fopen("/proc/vmstat", "r");
  char key[64];
  long v, found = -1;
  while (f && fscanf(f, "%63s %ld", key, &v) == 2)
    if (!strcmp(key, name)) found = v;
  if (f) fclose(f);
  return found;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  double secs = argc > 2 ? atof(argv[2]) : 60;
  FILE *f = fopen("/proc/sys/kernel/numa_balancing", "r");
  int mode = -1;
  if (f) { if (fscanf(f, "%d", &mode) != 1) mode = -1; fclose(f); }
  CHECK(mode == 2);
  size_t len = mib << 20, pages = len / 4096;
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  madvise(p, len, MADV_NOHUGEPAGE);
  memset(p, 1, len);
  /* move the whole set to the slow node */
  void **addrs = malloc(pages * sizeof *addrs);
  int *nodes = malloc(pages * sizeof *nodes), *status = malloc(pages * sizeof *status);
  for (size_t i = 0; i < pages; i++) { addrs[i] = p + i * 4096; nodes[i] = 1; }
  long rc = syscall(SYS_move_pages, 0, pages, addrs, nodes, status, 2 /* MPOL_MF_MOVE */);
  vma_info_t v;
  CHECK(rc == 0 && vma_of(p, &v) == 0 && v.pages[1] == (long)pages);
  printf("hot set of %zu MiB moved to node 1: N0=%ld N1=%ld\n", mib, v.pages[0], v.pages[1]);
  long promoted0 = vmstat("pgpromote_success"), faults0 = vmstat("numa_hint_faults");
  double t0 = now(), last = t0;
  volatile uint64_t sum = 0;
  while (now() - t0 < secs) {
    for (size_t i = 0; i < len; i += 64) sum += (uint64_t)p[i];
    if (now() - last > 2) {
      last = now();
      vma_of(p, &v);
      printf("  %4.0f s: N0=%ld N1=%ld pgpromote_success +%ld numa_hint_faults +%ld\n", last - t0,
             v.pages[0], v.pages[1], vmstat("pgpromote_success") - promoted0,
             vmstat("numa_hint_faults") - faults0);
      fflush(stdout);
      if (v.pages[0] * 2 >= (long)pages) break; /* half of the hot set is back: enough */
    }
  }
  vma_of(p, &v);
  long promoted = vmstat("pgpromote_success") - promoted0;
  printf("after %.0f s: N0=%ld N1=%ld pgpromote_success +%ld numa_hint_faults +%ld\n", now() - t0,
         v.pages[0], v.pages[1], promoted, vmstat("numa_hint_faults") - faults0);
  CHECK(promoted > 0);
  CHECK(v.pages[0] > 0);
  return check_done("vm-tiering");
}
