/* linux.c: the Linux machine. Memory comes from mmap; placement goes through the NUMA
 * system calls (mbind, move_pages), called directly so libstrata needs no libnuma.
 *
 * The machine is reached through _strata_machine() (init.c), so the emulated machine can stand in for
 * this one without libstrata knowing: topo.c switches to it when the program is linked with
 * libstrata_emu.so (see machine.h). */
#include "internal.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MPOL_PREFERRED 1
#define MPOL_BIND 2
#define MPOL_INTERLEAVE 3
#define MPOL_PREFERRED_MANY 5 /* Linux 5.15 */
#define MPOL_MF_MOVE (1 << 1)

void *_strata_prim_map(size_t size, size_t align) {
  if (align <= PAGE_SIZE) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  /* over-map, then trim both ends to the alignment */
  size_t over = size + align;
  if (over < size) return NULL;
  char *p = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  char *a = (char *)align_up((uintptr_t)p, align);
  if (a > p) munmap(p, (size_t)(a - p));
  size_t tail = (size_t)((p + over) - (a + size));
  if (tail) munmap(a + size, tail);
  return a;
}

/* (each of these first ends the hint-fault samples in the range: agent/sample.c) */
void _strata_prim_unmap(void *p, size_t size) {
  bool held = _strata_sample_hold(p, size);
  munmap(p, size);
  _strata_sample_release(held);
}

void _strata_prim_purge(void *p, size_t size) {
  bool held = _strata_sample_hold(p, size);
  madvise(p, size, MADV_DONTNEED);
  _strata_sample_release(held);
}

/* Resize a mapping without copying its pages: in place when `to` is NULL (the address space
 * after it must be free), else moved to `to`, which the caller has reserved (the reservation
 * is replaced). The pages keep their nodes and the mapping its policy. NULL on failure. */
void *_strata_prim_remap(void *p, size_t old_size, size_t new_size, void *to) {
  bool held = _strata_sample_hold(p, old_size);
  void *q = to ? mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to) : mremap(p, old_size, new_size, 0);
  _strata_sample_release(held);
  return q == MAP_FAILED ? NULL : q;
}

/* Preferred: the tier's nodes nearest first, then any (MPOL_PREFERRED_MANY); on a kernel
 * without it, the lowest node of the tier. */
static int linux_bind(void *p, size_t len, uint64_t nodemask, int mode) {
  unsigned long mask = (unsigned long)nodemask, lowest = nodemask & (~nodemask + 1);
  int mpol = mode == BIND_INTERLEAVE ? MPOL_INTERLEAVE : mode == BIND_PREFERRED ? MPOL_PREFERRED : MPOL_BIND;
  if (mode == BIND_PREFERRED && mask != lowest) {
    if (syscall(SYS_mbind, p, len, MPOL_PREFERRED_MANY, &mask, (unsigned long)STRATA_MAX_NODES + 1, 0) == 0)
      return 0;
    if (errno != EINVAL) return -errno;
    mask = lowest;
  } else if (mode == BIND_PREFERRED) {
    mask = lowest;
  }
  if (syscall(SYS_mbind, p, len, mpol, &mask, (unsigned long)STRATA_MAX_NODES + 1, 0) != 0) return -errno;
  return 0;
}

static int linux_where(void *const *pages, size_t n, int *status) {
  if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, NULL, status, 0) != 0) return -errno;
  return 0;
}

static int linux_move(void *const *pages, size_t n, const int *nodes, int *status) {
  if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, nodes, status, MPOL_MF_MOVE) < 0)
    return -errno;
  return 0;
}

const strata_machine_t _strata_machine_linux = {"linux", linux_bind, linux_where, linux_move, NULL};

/* Provided by the emulated machine when the program is linked with it. */
__attribute__((weak, visibility("default"))) uint64_t strata_emu_now_ns(void);

__attribute__((weak, visibility("default"))) int64_t strata_emu_counter(const char *name);

int strata_emulated(void) { return strata_emu_now_ns != NULL; }

int64_t strata_emulated_counter(const char *name) {
  return strata_emu_counter ? strata_emu_counter(name) : -1;
}

uint64_t strata_now_ns(void) {
  if (strata_emu_now_ns) return strata_emu_now_ns();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
