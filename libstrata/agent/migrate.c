/* migrate.c: transactional page migration with shadow copies, in user space (Nomad, seed 004,
 * without a kernel patch), for Strata's own memory.
 *
 * Moving page p to node N by copy:
 *   1. p's range is registered for missing-page faults: nothing changes for p while it is
 *      there (only a page that is not there faults in this mode);
 *   2. the copy, while p stays mapped and in use: p's bytes into a staging page of the agent's
 *      own (process_vm_readv, so a page unmapped meanwhile is an error, not a crash), which the
 *      kernel allocates on N, the agent thread's preferred node;
 *   3. p's page is moved out (UFFDIO_MOVE: atomic; from here on an access to p waits for this
 *      thread), to its shadow slot if this is a promotion, else to a spare slot;
 *   4. the old page and the copy are compared: equal, a page with the copy's bytes is placed at
 *      p, which wakes whoever waits there: commit. It is a new page (UFFDIO_COPY: the kernel
 *      allocates it on N too) unless p's memory has a policy of its own (mbind, as a slow
 *      pool's segments have), which a page allocated for p would follow instead of N: then the
 *      staging page itself is moved in (UFFDIO_MOVE: one TLB shootdown more). Not equal, p was
 *      written after the copy and the old
 *      page goes back (abort; steps 2-4 are tried again, up to the request's attempts, then p
 *      is left for a later request);
 *   5. p's range goes back to write-protect tracking only, p is write-protected (clean), and
 *      the old pages in spare slots are freed.
 * Comparing after the atomic move-out is what makes it safe: every write to p, by the program,
 * by the kernel on its behalf or by a device, either reached the old page before the move (and
 * shows in the comparison) or waits at p for the commit, and pages the kernel or a device holds
 * pinned (O_DIRECT in flight, io_uring fixed buffers) are refused by UFFDIO_MOVE itself (EBUSY)
 * and never move this way. p is missing only during steps 3 and 4: two ioctls and a compare.
 * Neighbouring pages of a request share steps 1 and 5 (one registration, one madvise): each
 * of them is missing only for its own steps 3 and 4.
 *
 * Shadows: after a promotion the old page stays in its shadow slot, and p is write-protected
 * (asynchronous mode: its first write clears the mark without a fault delivered anywhere). A
 * demotion of p back to the shadow's node, when p reads as not written, moves p's page out to a
 * spare slot, compares it with the shadow, and moves the shadow in: no copy, no write to the
 * slow tier. A shadow found different (p was written; the mark can also be cleared by a daemon's
 * scan) is dropped and the page copied instead; the agent also sweeps its shadows every second
 * and drops those of pages written since (_strata_shadows_sweep). Shadows are dropped on
 * request, all of them when a daemon sees the slow tier short, so they never make an
 * allocation fail.
 *
 * Everything here runs on the agent's thread (agent.c), which also answers the missing-page
 * faults of step 2 once the request is done. It takes none of the allocator's locks. */
#include "internal.h"
#include "util/uapi.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define MPOL_DEFAULT 0
#define MPOL_PREFERRED 1

#define SHADOW_SLOTS ((size_t)1 << 20)        /* 4 GiB of shadows at most */
#define SHADOW_TABLE (SHADOW_SLOTS * 2)        /* open addressing, half full at most */

typedef struct shadow_s {
  uint64_t page; /* 0: empty, 1: deleted */
  uint32_t slot;
  int32_t node;  /* where the shadow page is */
} shadow_t;

static int uffd = -1;
static int pagemap = -1;
static char *spare;                   /* STRATA_AGENT_MAX_PAGES slots for old pages on their way out */
static char *staging;                 /* one page: the copy, on the target node (step 2) */
static char *shadows;                 /* SHADOW_SLOTS pages, reserved */
static shadow_t *table;               /* SHADOW_TABLE entries */
static uint32_t *free_slots;          /* a stack of free slot numbers */
static uint64_t *sweep_pages;         /* SHADOW_SLOTS entries: the sweep's sorted page list */
static size_t nfree;
static strata_agent_counters_t counters;
static uint64_t misreported; /* ioctls that did what they answered they had not (outcome) */

bool _strata_uffd_register(void *p, size_t len, uint64_t mode) {
  struct uffdio_register r = {.range = {(uintptr_t)p, len}, .mode = mode};
  return ioctl(uffd, UFFDIO_REGISTER, &r) == 0;
}

void *_strata_agent_reserve(size_t bytes, bool wp) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  /* slots are destinations of UFFDIO_MOVE, which must be this userfaultfd's (write-protect
   * mode only: in a missing-page mode the agent's own touch would wait on itself) */
  if (wp && !_strata_uffd_register(p, bytes, UFFDIO_REGISTER_MODE_WP)) {
    munmap(p, bytes);
    return NULL;
  }
  return p;
}

int _strata_migrate_init(int fd) {
  uffd = fd;
  pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  spare = _strata_agent_reserve(STRATA_AGENT_MAX_PAGES * PAGE_SIZE, true);
  staging = _strata_agent_reserve(PAGE_SIZE, true);
  if (staging) madvise(staging, PAGE_SIZE, MADV_NOHUGEPAGE); /* a 4 KiB page, never a huge one */
  shadows = _strata_agent_reserve(SHADOW_SLOTS * PAGE_SIZE, true);
  table = _strata_agent_reserve(SHADOW_TABLE * sizeof *table, false);
  free_slots = _strata_agent_reserve(SHADOW_SLOTS * sizeof *free_slots, false);
  sweep_pages = _strata_agent_reserve(SHADOW_SLOTS * sizeof *sweep_pages, false);
  if (pagemap < 0 || !spare || !staging || !shadows || !table || !free_slots || !sweep_pages) return -ENOMEM;
  for (size_t i = 0; i < SHADOW_SLOTS; i++) free_slots[i] = (uint32_t)(SHADOW_SLOTS - 1 - i);
  nfree = SHADOW_SLOTS;
  return 0;
}

void _strata_migrate_forget(void) { /* fork child: none of it is the child's */
  if (spare) munmap(spare, STRATA_AGENT_MAX_PAGES * PAGE_SIZE);
  if (staging) munmap(staging, PAGE_SIZE);
  if (shadows) munmap(shadows, SHADOW_SLOTS * PAGE_SIZE);
  if (table) munmap(table, SHADOW_TABLE * sizeof *table);
  if (free_slots) munmap(free_slots, SHADOW_SLOTS * sizeof *free_slots);
  if (sweep_pages) munmap(sweep_pages, SHADOW_SLOTS * sizeof *sweep_pages);
  if (pagemap >= 0) close(pagemap);
  spare = staging = shadows = NULL;
  table = NULL;
  free_slots = NULL;
  sweep_pages = NULL;
  pagemap = uffd = -1;
  memset(&counters, 0, sizeof counters);
}

const strata_agent_counters_t *_strata_migrate_counters(void) { return &counters; }

uint64_t _strata_migrate_misreported(void) { return misreported; }

/* ---- the shadow table: page -> slot -------------------------------------------------------- */

static size_t hash(uint64_t page) { return (size_t)((page >> PAGE_SHIFT) * 0x9E3779B97F4A7C15ull >> 20) % SHADOW_TABLE; }

static shadow_t *shadow_find(uint64_t page) {
  for (size_t i = hash(page), k = 0; k < SHADOW_TABLE; i = (i + 1) % SHADOW_TABLE, k++) {
    if (table[i].page == page) return &table[i];
    if (table[i].page == 0) return NULL;
  }
  return NULL;
}

static char *slot_addr(uint32_t slot) { return shadows + (size_t)slot * PAGE_SIZE; }

/* A free slot entry for page, or NULL when every slot is taken. */
static shadow_t *shadow_new(uint64_t page, int node) {
  if (nfree == 0) return NULL;
  for (size_t i = hash(page), k = 0; k < SHADOW_TABLE; i = (i + 1) % SHADOW_TABLE, k++) {
    if (table[i].page > 1) continue;
    table[i] = (shadow_t){.page = page, .slot = free_slots[--nfree], .node = node};
    return &table[i];
  }
  return NULL;
}

/* Forget a shadow; its page is freed. */
static void shadow_drop(shadow_t *s) {
  madvise(slot_addr(s->slot), PAGE_SIZE, MADV_DONTNEED);
  free_slots[nfree++] = s->slot;
  s->page = 1; /* deleted: probes go on past it */
}

size_t _strata_shadows_drop(size_t max) {
  size_t dropped = 0;
  for (size_t i = 0; i < SHADOW_TABLE && (max == 0 || dropped < max); i++) {
    if (table[i].page <= 1) continue;
    shadow_drop(&table[i]);
    dropped++;
  }
  counters.shadows_dropped += dropped;
  counters.shadows -= dropped;
  return dropped;
}

/* Heapsort, in place (qsort may allocate, and the agent stays out of the allocator). */
static void sift(uint64_t *a, size_t i, size_t n) {
  for (size_t c; (c = 2 * i + 1) < n; i = c) {
    if (c + 1 < n && a[c + 1] > a[c]) c++;
    if (a[i] >= a[c]) return;
    uint64_t t = a[i];
    a[i] = a[c];
    a[c] = t;
  }
}

static void sort_pages(uint64_t *a, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift(a, i, n);
  for (size_t end = n; end-- > 1;) {
    uint64_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift(a, 0, end);
  }
}

size_t _strata_shadows_sweep(void) {
  size_t n = 0;
  for (size_t i = 0; i < SHADOW_TABLE && n < SHADOW_SLOTS; i++)
    if (table[i].page > 1) sweep_pages[n++] = table[i].page;
  if (n == 0) return 0;
  sort_pages(sweep_pages, n);
  /* one scan from the lowest shadowed page to the highest, for the ranges written since */
  struct page_region r[64];
  size_t dropped = 0, k = 0;
  uint64_t from = sweep_pages[0], end = sweep_pages[n - 1] + PAGE_SIZE;
  while (from < end && k < n) {
    struct pm_scan_arg a = {.size = sizeof a, .start = from, .end = end, .vec = (uintptr_t)r, .vec_len = 64,
                            .category_mask = PAGE_IS_WRITTEN, .return_mask = PAGE_IS_WRITTEN};
    long got = ioctl(pagemap, PAGEMAP_SCAN, &a);
    if (got < 0) break;
    for (long j = 0; j < got; j++) {
      while (k < n && sweep_pages[k] < r[j].start) k++;
      for (; k < n && sweep_pages[k] < r[j].end; k++) {
        shadow_t *s = shadow_find(sweep_pages[k]);
        if (!s) continue;
        shadow_drop(s);
        dropped++;
      }
    }
    if (a.walk_end <= from) break;
    from = a.walk_end;
  }
  counters.shadows -= dropped;
  counters.shadows_stale += dropped;
  return dropped;
}

/* ---- the steps ----------------------------------------------------------------------------- */

/* Is a page mapped at p? (pagemap's present bit) */
static bool present(const void *p) {
  uint64_t e = 0;
  off_t at = (off_t)((uintptr_t)p / PAGE_SIZE * sizeof e);
  return pread(pagemap, &e, sizeof e, at) == (ssize_t)sizeof e && (e >> 63 & 1);
}

/* After an ioctl that put a page at dst answered an error: if the page is there anyway, it was
 * done (and whoever waits at dst is woken, which the failed ioctl skipped). Linux 6.18 was
 * seen to move a page and still answer EEXIST, under contention (test_migrate, 1 run in 2 on
 * a 2-vCPU AMD EPYC host): trusting the answer put the page in a slot that was then freed and
 * left the program a zero page where its data had been. dst is empty before each of these
 * ioctls and nothing but this thread fills it (a slot, or p with its missing-page faults
 * waiting), so a page there is the one put there. */
static int outcome(int err, void *dst, const void *src) {
  if (!present(dst) || (src && present(src))) return err;
  struct uffdio_range r = {(uintptr_t)dst, PAGE_SIZE};
  ioctl(uffd, UFFDIO_WAKE, &r);
  misreported++;
  return 0;
}

int _strata_uffd_move(void *dst, void *src) {
  struct uffdio_move m = {.dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = PAGE_SIZE, .mode = 0};
  return ioctl(uffd, UFFDIO_MOVE, &m) == 0 ? 0 : outcome(-errno, dst, src);
}

uint64_t _strata_page_categories(void *p) {
  struct page_region r;
  struct pm_scan_arg a = {.size = sizeof a, .start = (uintptr_t)p, .end = (uintptr_t)p + PAGE_SIZE,
                          .vec = (uintptr_t)&r, .vec_len = 1,
                          .return_mask = PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_HUGE};
  long got = ioctl(pagemap, PAGEMAP_SCAN, &a);
  return got < 0 ? UINT64_MAX : got == 0 ? 0 : r.categories;
}

static bool written(void *p) { /* an error: not trusted as clean */
  return _strata_page_categories(p) & PAGE_IS_WRITTEN;
}

/* A run of pages takes missing-page faults (open), or goes back to write-protect tracking
 * only. Only a page that is not there faults in this mode: the run's pages stay in use, each
 * but the one between its move-out and its commit. The agent lock is held in between: a fork
 * (init.c) or a remap of a large object (segment.c) waits, so neither copies or moves a page
 * table with a page missing from it. */
static void window(char *start, size_t len, bool open) {
  if (open) {
    pthread_mutex_lock(&_strata_agent_lock);
    _strata_uffd_register(start, len, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP);
  } else {
    struct uffdio_range r = {(uintptr_t)start, len};
    ioctl(uffd, UFFDIO_UNREGISTER, &r);
    _strata_uffd_register(start, len, UFFDIO_REGISTER_MODE_WP);
    pthread_mutex_unlock(&_strata_agent_lock);
  }
}

static int nodes_of(void *const *pages, size_t n, int *status) {
  return syscall(SYS_move_pages, 0, (unsigned long)n, pages, NULL, status, 0) == 0 ? 0 : -errno;
}

static void set_preferred(int node) {
  unsigned long mask = node >= 0 ? 1ul << node : 0;
  syscall(SYS_set_mempolicy, node >= 0 ? MPOL_PREFERRED : MPOL_DEFAULT, node >= 0 ? &mask : NULL,
          node >= 0 ? (unsigned long)STRATA_MAX_NODES + 1 : 0);
}

/* A promotion: the target is in a faster tier than where the page was. */
static bool faster(int to, int from) {
  int t = _strata_node_tier(to), f = _strata_node_tier(from);
  return t >= 0 && f >= 0 && t < f;
}

/* Demote p (its window open) by its shadow, if it has a valid one on `node`: 1 done (p's old
 * page is in `out`), 0 no shadow (or a stale one, dropped: copy it), or -errno. */
static int shadow_demote(char *p, int node, char *out) {
  shadow_t *s = shadow_find((uint64_t)(uintptr_t)p);
  if (!s || s->node != node) return 0;
  if (written(p)) {
    shadow_drop(s);
    counters.shadows--;
    counters.shadows_stale++;
    return 0;
  }
  int rc = _strata_uffd_move(out, p);
  if (rc == 0) {
    bool same = memcmp(out, slot_addr(s->slot), PAGE_SIZE) == 0;
    if (same && _strata_uffd_move(p, slot_addr(s->slot)) == 0) {
      s->page = 1; /* the shadow's page is p's now; its slot is free */
      free_slots[nfree++] = s->slot;
      counters.shadows--;
      counters.shadow_demotions++;
      rc = 1;
    } else {
      _strata_uffd_move(p, out); /* written meanwhile: p as it was */
      shadow_drop(s);
      counters.shadows--;
      counters.shadows_stale++;
    }
  }
  return rc;
}

/* p's new page: `from`'s bytes in a page the kernel allocates (by p's policy, else this
 * thread's preferred node). */
static int fill(char *p, const char *from) {
  struct uffdio_copy c = {.dst = (uintptr_t)p, .src = (uintptr_t)from, .len = PAGE_SIZE, .mode = 0};
  return ioctl(uffd, UFFDIO_COPY, &c) == 0 ? 0 : outcome(-errno, p, NULL);
}

/* Does p's memory have a policy of its own (mbind), which a page allocated for p follows? */
static bool has_policy(void *p) {
  int mode = MPOL_DEFAULT;
  return syscall(SYS_get_mempolicy, &mode, NULL, 0ul, p, 2ul /* MPOL_F_ADDR */) == 0 && mode != MPOL_DEFAULT;
}

/* One attempt to move p (its window open) by copy: 1 committed (p's old page is in `out`, or
 * kept as its shadow when this is a promotion), 0 aborted, or -errno. `from` is the node p was
 * on; `stage`: commit by moving the staging page in (p's memory has a policy of its own). */
static int copy_move(char *p, int node, int from, char *out, bool stage) {
  struct iovec local = {staging, PAGE_SIZE}, remote = {p, PAGE_SIZE};
  if (syscall(SYS_process_vm_readv, getpid(), &local, 1ul, &remote, 1ul, 0ul) != (long)PAGE_SIZE) return -ENOENT;
  shadow_t *old = shadow_find((uint64_t)(uintptr_t)p);
  if (old) { /* a shadow from before, stale by now */
    shadow_drop(old);
    counters.shadows--;
  }
  shadow_t *s = NULL;
  if (faster(node, from) && !(s = shadow_new((uint64_t)(uintptr_t)p, from))) return -ENOMEM;
  char *dst = s ? slot_addr(s->slot) : out;
  int rc = _strata_uffd_move(dst, p);
  if (rc == 0) {
    if (memcmp(dst, staging, PAGE_SIZE) == 0 && (stage ? _strata_uffd_move(p, staging) : fill(p, staging)) == 0) {
      rc = 1;
    } else {
      _strata_uffd_move(p, dst); /* written while copied: abort */
      rc = 0;
    }
  }
  if (s && rc == 1) {
    counters.shadows++; /* the old page stays, as p's shadow */
  } else if (s) {
    shadow_drop(s);
  }
  return rc;
}

/* Write-protect pages[k] for each k with moved[k], in runs: clean from here, so a write shows
 * as written. (After the window: unregistering clears the mark. A write in between is missed
 * by the sweep, not by the comparison at demotion.) */
static void protect_moved(char *const *pages, size_t n, const bool *moved) {
  for (size_t k = 0; k < n;) {
    if (!moved[k]) {
      k++;
      continue;
    }
    size_t j = k + 1;
    while (j < n && moved[j]) j++;
    struct uffdio_writeprotect w = {.range = {(uintptr_t)pages[k], (j - k) * PAGE_SIZE},
                                    .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    ioctl(uffd, UFFDIO_WRITEPROTECT, &w);
    k = j;
  }
}

/* Move a run of neighbouring pages to `node`, one window for all of them. The old pages that
 * are not kept as shadows go to `out` (a slot a page), freed together at the end. */
static void migrate_run(char *const *pages, size_t n, int node, const int *from, unsigned attempts,
                        int32_t *status, char *out) {
  bool moved[STRATA_AGENT_MAX_PAGES] = {false};
  _strata_sample_release(_strata_sample_hold(pages[0], n * PAGE_SIZE)); /* its samples back first */
  window(pages[0], n * PAGE_SIZE, true);
  bool stage = has_policy(pages[0]); /* a run is one chunk's: one policy */
  for (size_t k = 0; k < n; k++) {
    char *p = pages[k], *o = out + k * PAGE_SIZE;
    int rc = shadow_demote(p, node, o);
    if (rc == 0) {
      for (unsigned a = 0; a < (attempts ? attempts : 1) && rc == 0; a++) { /* 1-64: _strata_migrate */
        rc = copy_move(p, node, from[k], o, stage);
        if (rc == 0) counters.aborts++;
      }
      if (rc == 1) counters.commits++;
    }
    moved[k] = rc == 1;
    status[k] = rc == 1 ? node : rc == 0 ? -EAGAIN : rc;
  }
  window(pages[0], n * PAGE_SIZE, false);
  protect_moved(pages, n, moved);
  madvise(out, n * PAGE_SIZE, MADV_DONTNEED); /* the old pages, all at once */
  /* where the new pages are (the target node, unless it had no room) */
  int at[STRATA_AGENT_MAX_PAGES];
  if (nodes_of((void *const *)pages, n, at) == 0)
    for (size_t k = 0; k < n; k++)
      if (moved[k]) status[k] = at[k];
}

size_t _strata_migrate(void *const *pages, size_t n, int node, unsigned attempts, unsigned flags, int32_t *status) {
  if (n > STRATA_AGENT_MAX_PAGES) n = STRATA_AGENT_MAX_PAGES;
  if (attempts > STRATA_AGENT_MAX_ATTEMPTS) attempts = STRATA_AGENT_MAX_ATTEMPTS; /* the daemon's config holds to it too */
  int where[STRATA_AGENT_MAX_PAGES];
  if (nodes_of(pages, n, where) != 0)
    for (size_t i = 0; i < n; i++) where[i] = -ENOENT;
  void *fallback[STRATA_AGENT_MAX_PAGES];
  size_t nfall = 0, fall_at[STRATA_AGENT_MAX_PAGES];
  bool todo[STRATA_AGENT_MAX_PAGES];
  for (size_t i = 0; i < n; i++) {
    status[i] = where[i];
    todo[i] = where[i] >= 0 && (where[i] != node || (flags & STRATA_AGENT_FORCE));
    if (todo[i] && !_strata_chunk_of(pages[i])) { /* not Strata's memory: not registered here */
      todo[i] = false;
      fall_at[nfall] = i;
      fallback[nfall++] = pages[i];
    }
  }
  set_preferred(node);
  for (size_t i = 0; i < n;) { /* runs of neighbouring pages, each within one chunk */
    if (!todo[i]) {
      i++;
      continue;
    }
    size_t j = i + 1;
    void *chunk = _strata_chunk_of(pages[i]);
    while (j < n && todo[j] && (char *)pages[j] == (char *)pages[j - 1] + PAGE_SIZE && _strata_chunk_of(pages[j]) == chunk)
      j++;
    migrate_run((char *const *)pages + i, j - i, node, where + i, attempts, status + i, spare + i * PAGE_SIZE);
    i = j;
  }
  set_preferred(-1);
  madvise(staging, PAGE_SIZE, MADV_DONTNEED); /* an aborted copy's page, on this request's node */
  if (nfall) {
    int nodes[STRATA_AGENT_MAX_PAGES], st[STRATA_AGENT_MAX_PAGES];
    for (size_t k = 0; k < nfall; k++) nodes[k] = node;
    if (syscall(SYS_move_pages, 0, (unsigned long)nfall, fallback, nodes, st, 2 /* MPOL_MF_MOVE */) >= 0) {
      for (size_t k = 0; k < nfall; k++) status[fall_at[k]] = st[k];
      counters.fallbacks += nfall;
    }
  }
  return n;
}
