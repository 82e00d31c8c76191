/* track.c: lets a tiering daemon see, from outside, which of Strata's pages this process writes.
 *
 * Every segment and large mapping is registered with this process's userfaultfd in
 * write-protect mode, with asynchronous write-protect (UFFD_FEATURE_WP_ASYNC, Linux 6.7+).
 * Registering protects nothing by itself: a page is protected only once a daemon's
 * PAGEMAP_SCAN on /proc/PID/pagemap (PM_SCAN_WP_MATCHING) has reported it, and the kernel then
 * resolves the first write after each scan itself (about 1 us; no thread here, no signal, and
 * writes by the kernel on the program's behalf, read(2) into a buffer say, are resolved the
 * same way). Only the process can register its own memory, so this half lives here and the
 * scan lives in the daemon (crates/stratad/src/linux.rs).
 *
 * Where the kernel lacks WP_ASYNC (6.1-6.6), or STRATA_TRACK_WRITES=0, nothing is registered
 * and the channel's `tracking` says so; a daemon then falls back to soft-dirty bits where the
 * kernel has them. A forked child neither inherits the registrations nor may use the parent's
 * userfaultfd (its ioctls act on the parent's address space), so the child closes it and,
 * when it makes its own channel, registers its copy of Strata's memory again from the
 * registry. What the write-protection costs: a write fault of about 1 us on a page's first
 * write after each scan, and transparent huge pages split where such a write lands. */
#include "internal.h"
#include "util/uapi.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { TRACK_UNTRIED = 0, TRACK_ON, TRACK_OFF, TRACK_STALE /* a fork child, not yet started */ };
static int uffd = -1;      /* seg lock */
static _Atomic int state;  /* TRACK_*; changed under the seg lock */
static bool can_move;      /* the agent may use uffd (agent/migrate.c) */

/* A userfaultfd, full (it handles the kernel's own faults too) when `full`, else for faults
 * in user mode only; -1 when not allowed. Full ones need root (CAP_SYS_PTRACE), access to
 * /dev/userfaultfd, or vm.unprivileged_userfaultfd=1. */
static int uffd_new(bool full) {
  if (!full) return (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (geteuid() == 0) return (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev < 0) return -1;
  int fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
  close(dev);
  return fd;
}

/* The process's userfaultfd, with asynchronous write-protect (or -1): with UFFDIO_MOVE too
 * and full when possible, so the agent can migrate pages (a page being committed is missing
 * for a moment, and a read(2) into it must wait rather than fail), else for tracking only:
 * in asynchronous mode the kernel resolves every write fault itself, its own included. */
static int uffd_open(bool *move) {
  const uint64_t track = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
  const struct { bool full; uint64_t features; } tries[] = {
      {true, track | UFFD_FEATURE_MOVE}, {false, track}};
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
    int fd = uffd_new(tries[i].full);
    if (fd < 0) continue;
    struct uffdio_api api = {.api = UFFD_API, .features = tries[i].features};
    if (ioctl(fd, UFFDIO_API, &api) == 0) {
      *move = tries[i].full;
      return fd;
    }
    close(fd);
  }
  return -1;
}

int _strata_uffd(bool *move) {
  *move = atomic_load(&state) == TRACK_ON && can_move;
  return atomic_load(&state) == TRACK_ON ? uffd : -1;
}

void _strata_track_range(void *p, size_t len) { /* seg lock held */
  if (atomic_load_explicit(&state, memory_order_relaxed) != TRACK_ON) return;
  struct uffdio_register r = {.range = {(uintptr_t)p, len}, .mode = UFFDIO_REGISTER_MODE_WP};
  if (ioctl(uffd, UFFDIO_REGISTER, &r) == 0) STAT_ADD(track_ranges, 1);
  else STAT_ADD(track_failed, 1);
}

/* Register every chunk the registry marks as Strata's, in runs of neighbouring chunks. Only
 * the registry's pages that were ever touched can hold entries, so mincore picks them. */
static void track_registry(void) { /* seg lock held */
  _Atomic uint8_t *reg = atomic_load(&_strata_registry);
  if (!reg) return;
  unsigned char resident[256];
  const size_t piece = sizeof resident * PAGE_SIZE;
  size_t run = 0, run_len = 0; /* in chunks */
  for (size_t off = 0; off < REG_ENTRIES; off += piece) {
    if (mincore((char *)reg + off, piece, resident) != 0) continue;
    for (size_t pg = 0; pg < sizeof resident; pg++) {
      if (!(resident[pg] & 1)) continue;
      for (size_t i = off + pg * PAGE_SIZE; i < off + (pg + 1) * PAGE_SIZE; i++) {
        uint8_t v = atomic_load_explicit(&reg[i], memory_order_relaxed);
        if (v != REG_HEAD && v != REG_CONT) continue;
        if (run_len && run + run_len == i) {
          run_len++;
          continue;
        }
        if (run_len) _strata_track_range((void *)(run << SEG_SHIFT), run_len << SEG_SHIFT);
        run = i;
        run_len = 1;
      }
    }
  }
  if (run_len) _strata_track_range((void *)(run << SEG_SHIFT), run_len << SEG_SHIFT);
}

uint32_t _strata_track_start(void) {
  if (!_strata_option(OPT_TRACK_WRITES) || _strata_machine() != &_strata_machine_linux) return 0;
  pthread_mutex_lock(&_strata_seg_lock);
  int s = atomic_load(&state);
  if (s == TRACK_UNTRIED || s == TRACK_STALE) {
    uffd = uffd_open(&can_move);
    atomic_store(&state, uffd >= 0 ? TRACK_ON : TRACK_OFF);
    if (uffd >= 0) track_registry();
    else _strata_message("strata: no asynchronous write-protect here (Linux 6.7+); a daemon cannot "
                         "see this process's writes through PAGEMAP_SCAN\n");
  }
  bool on = atomic_load(&state) == TRACK_ON;
  pthread_mutex_unlock(&_strata_seg_lock);
  return on ? STRATA_TRACKING_WP_ASYNC | (can_move ? STRATA_TRACKING_MOVE : 0) : 0;
}

void _strata_track_forget(void) { /* fork child, single-threaded */
  if (uffd >= 0) close(uffd);
  uffd = -1;
  if (atomic_load(&state) == TRACK_ON) atomic_store(&state, TRACK_STALE);
}
