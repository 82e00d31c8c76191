/* access.c: the emulator's reference workloads, compared against cachegrind by
 * `strata emu validate` and used by the golden tests. Built twice: plain (for cachegrind and
 * native timing) and with `strata emu cc` (for the emulator).
 *
 *   access seq    MIB PASSES   sum a MIB-sized array of 8-byte words, PASSES times
 *   access random MIB N        N reads at pseudo-random words (an LCG, all in registers)
 *   access chase  MIB N        N hops around one random cycle through MIB of 64-byte nodes
 *
 * Data sits at a fixed address (mmap with MAP_FIXED_NOREPLACE), so runs are reproducible. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define BASE ((void *)0x200000000000ull)

static void *region(size_t bytes) {
  void *p = mmap(BASE, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) {
    perror("access: mmap");
    exit(1);
  }
  madvise(p, bytes, MADV_NOHUGEPAGE); /* 4 KiB pages, as the emulator's default */
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: access seq|random|chase MIB COUNT\n");
    return 2;
  }
  size_t bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
  uint64_t count = strtoull(argv[3], NULL, 10);
  if (!bytes) {
    fprintf(stderr, "access: MIB must be > 0\n");
    return 2;
  }
  uint64_t sum = 0;
  double t0, t1;
  if (!strcmp(argv[1], "seq")) {
    uint64_t *a = region(bytes);
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) a[i] = i;
    t0 = now_s();
    for (uint64_t p = 0; p < count; p++)
      for (size_t i = 0; i < n; i++) sum += a[i];
    t1 = now_s();
  } else if (!strcmp(argv[1], "random")) {
    uint64_t *a = region(bytes);
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) a[i] = i;
    uint64_t x = 12345;
    t0 = now_s();
    for (uint64_t k = 0; k < count; k++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      sum += a[(x >> 17) % n];
    }
    t1 = now_s();
  } else if (!strcmp(argv[1], "chase")) {
    typedef struct node {
      struct node *next;
      uint64_t pad[7];
    } node_t;
    node_t *a = region(bytes);
    size_t n = bytes / sizeof(node_t);
    /* one random cycle: Sattolo's shuffle of 0..n-1 kept in the pad words */
    for (size_t i = 0; i < n; i++) a[i].pad[0] = i;
    uint64_t x = 777;
    for (size_t i = n - 1; i > 0; i--) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      size_t j = (size_t)((x >> 17) % i);
      uint64_t t = a[i].pad[0];
      a[i].pad[0] = a[j].pad[0];
      a[j].pad[0] = t;
    }
    for (size_t i = 0; i < n; i++) a[i].next = &a[a[i].pad[0]];
    node_t *p = a;
    t0 = now_s();
    for (uint64_t k = 0; k < count; k++) p = p->next;
    t1 = now_s();
    sum = (uint64_t)(p - a);
  } else {
    fprintf(stderr, "access: unknown workload '%s' (seq, random, chase)\n", argv[1]);
    return 2;
  }
  printf("%s %.6f s checksum %llu\n", argv[1], t1 - t0, (unsigned long long)sum);
  return 0;
}
