/* access.c: the emulator's reference workloads, compared against cachegrind by
 * `strata emu validate` and used by the golden tests. Built twice: plain (for cachegrind and
 * native timing) and with `strata emu cc` (for the emulator).
 *
 *   access seq    MIB PASSES   sum a MIB-sized array of 8-byte words, PASSES times
 *   access random MIB N        N reads at pseudo-random words (an LCG, all in registers)
 *   access chase  MIB N        N hops around one random cycle through MIB of 64-byte nodes
 *   access stride MIB N [B]    N hops of a chase through MIB at a constant stride of B bytes
 *                              (default 49152): each line offset within the stride is a lane
 *                              walked from start to end, lanes in random order
 *
 * Data sits at a fixed address (mmap with MAP_FIXED_NOREPLACE), so runs are reproducible. The
 * time printed is the timed loop's: simulated time on the emulator; natively the thread's CPU
 * time, not wall time, so that a program sharing the CPUs (the test suite runs in parallel on
 * two) does not count as a slower memory (a 13 ms stride chase preempted once read half as fast
 * as the model).
 *
 * ONE_LOAD_A_HOP: each chase is a loop with a second, never-taken exit, so that the compiler
 * does not unroll it and one load instruction makes every hop, as in a list traversal. Unrolled
 * by eight (clang -O2), each load's stride is eight hops, and a prefetcher that tracks strides
 * per instruction (AMD EPYC's L1 stride prefetcher) runs eight hops ahead: the 48 KiB stride
 * chase took 8.8 ns a hop instead of 14.5 on an AMD EPYC host, faster than the list traversal
 * of `strata bench locality` that the emulator is calibrated for (emu/calibrate.rs's hops). */
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

/* the emulator's clock, when the program runs on it (linked with libstrata_emu) */
extern uint64_t strata_emu_now_ns(void) __attribute__((weak));

static double now_s(void) {
  if (strata_emu_now_ns) return (double)strata_emu_now_ns() * 1e-9;
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 4 && !(argc == 5 && !strcmp(argv[1], "stride"))) {
    fprintf(stderr, "usage: access seq|random|chase MIB COUNT, access stride MIB COUNT [BYTES]\n");
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
    for (uint64_t k = 0; k < count; k++)
      if (!(p = p->next)) break; /* never: one load a hop (see ONE_LOAD_A_HOP) */
    t1 = now_s();
    sum = (uint64_t)(p - a);
  } else if (!strcmp(argv[1], "stride")) {
    size_t stride = argc == 5 ? (size_t)strtoull(argv[4], NULL, 10) : 49152;
    if (stride < 64 || stride % 64 || stride > bytes) {
      fprintf(stderr, "access: the stride must be a multiple of 64 bytes, at most MIB\n");
      return 2;
    }
    size_t lanes = stride / 64, per_lane = bytes / stride;
    uint64_t *a = region(bytes);
    size_t *order = malloc(lanes * sizeof *order);
    if (!order) return 1;
    for (size_t i = 0; i < lanes; i++) order[i] = i;
    uint64_t x = 2025;
    for (size_t i = lanes - 1; i > 0; i--) { /* Fisher-Yates */
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      size_t j = (size_t)((x >> 17) % (i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    /* word index of lane l's i-th node; each node holds the address of the next */
    uint64_t *first = &a[order[0] * 8], **prev = (uint64_t **)first;
    for (size_t l = 0; l < lanes; l++)
      for (size_t i = 0; i < per_lane; i++) {
        uint64_t *node = &a[(i * stride + order[l] * 64) / 8];
        *prev = node;
        prev = (uint64_t **)node;
      }
    *prev = first;
    free(order);
    uint64_t *p = first;
    t0 = now_s();
    for (uint64_t k = 0; k < count; k++)
      if (!(p = *(uint64_t **)p)) break; /* never: one load a hop (see ONE_LOAD_A_HOP) */
    t1 = now_s();
    sum = (uint64_t)(p - a);
  } else {
    fprintf(stderr, "access: unknown workload '%s' (seq, random, chase, stride)\n", argv[1]);
    return 2;
  }
  printf("%s %.6f s checksum %llu\n", argv[1], t1 - t0, (unsigned long long)sum);
  return 0;
}
