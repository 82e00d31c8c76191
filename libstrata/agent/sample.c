/* sample.c: the hint-fault sampler: which of a set of Strata's pages the program touches,
 * reads as well as writes (Linux 6.8+: UFFDIO_MOVE).
 *
 * Nothing else on a kernel without DAMON for virtual addresses or a PMU sees a page that is
 * only read. A sample makes one page of the program's memory missing for a while, without
 * losing it and without the program noticing anything but a delay:
 *   1. the page's range (that page alone) is registered for missing-page faults (the VMA is
 *      split around it until the sample ends);
 *   2. its page is moved out, atomically, to a slot of the agent's (UFFDIO_MOVE; a page that
 *      is pinned for I/O or shared with a fork child is refused, EBUSY, and not sampled);
 *   3. the first access to it, by the program or by the kernel on its behalf (read(2) into
 *      it, say: the agent's userfaultfd is a full one), waits in the kernel; the agent thread
 *      sees the fault, moves the page back (which wakes the access) and notes the page as
 *      read, or written (the fault says which);
 *   4. a sample not touched by the next request is moved back the same way, not noted.
 * Either way the range goes back to write-protect tracking only (the VMA merges again), and a
 * page that was clean before and only read stays clean for the daemon's PAGEMAP_SCAN.
 *
 * The daemon asks (STRATA_AGENT_SAMPLE): the pages it names are sampled until its next
 * request, which is answered with the pages touched meanwhile. Samples never outlive what
 * they sample: before libstrata unmaps, purges or remaps its memory (machine/linux.c) the
 * samples in that range go back under a lock that no new sample passes, and before a fork
 * (init.c) all of them do, since a child has no userfaultfd and would find the pages empty.
 * Memory the program itself unmaps or purges behind libstrata's back (madvise on a malloc'd
 * block) is not covered: a sample there would come back after the purge. Every lock here is
 * taken after the allocator's and the agent's, never before; the agent thread takes none of
 * the allocator's. */
#include "internal.h"
#include "util/uapi.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#define SAMPLES STRATA_AGENT_MAX_PAGES

typedef struct sample_s {
  uint64_t page;   /* 0: a free entry */
  bool was_clean;  /* not written since the daemon's last scan when sampled */
} sample_t;

static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static int uffd = -1;
static _Atomic bool ready; /* the sampler runs (the agent started) */
static char *slots;        /* SAMPLES pages: where sampled pages wait */
static sample_t samples[SAMPLES];
static size_t outstanding;
static uint64_t touched[SAMPLES]; /* page | 1 if written, since the last request */
static size_t ntouched;

int _strata_sample_init(void) {
  bool move;
  uffd = _strata_uffd(&move);
  slots = _strata_agent_reserve(SAMPLES * PAGE_SIZE, true);
  if (!slots) return -ENOMEM;
  atomic_store(&ready, true);
  return 0;
}

void _strata_sample_forget(void) { /* fork child: the parent's samples are back (fork_prepare) */
  atomic_store(&ready, false);
  if (slots) munmap(slots, SAMPLES * PAGE_SIZE);
  slots = NULL;
  uffd = -1;
  memset(samples, 0, sizeof samples);
  outstanding = ntouched = 0;
}

static char *slot_of(const sample_t *s) { return slots + (size_t)(s - samples) * PAGE_SIZE; }

/* Back to write-protect tracking only: the VMA merges with its neighbours again. */
static void track_only(uint64_t page) {
  struct uffdio_range r = {page, PAGE_SIZE};
  ioctl(uffd, UFFDIO_UNREGISTER, &r);
  _strata_uffd_register((void *)(uintptr_t)page, PAGE_SIZE, UFFDIO_REGISTER_MODE_WP);
}

/* End sample s (sample lock held): its page back at its address, which wakes any access
 * waiting there; noted when it was touched. */
static void end_sample(sample_t *s, bool touched_it, bool write) {
  void *page = (void *)(uintptr_t)s->page;
  int rc = _strata_uffd_move(page, slot_of(s));
  if (rc != 0) { /* cannot happen while every path that empties or fills p returns samples first */
    STAT_ADD(sample_errors, 1);
    _strata_message("strata: a sampled page at %p could not be put back (%d); its data stays in the agent's slot\n",
                    page, rc);
  }
  track_only(s->page);
  if (s->was_clean && !write) { /* clean again: a read is no write for the daemon's scan */
    struct uffdio_writeprotect w = {.range = {s->page, PAGE_SIZE}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    ioctl(uffd, UFFDIO_WRITEPROTECT, &w);
  }
  if (touched_it && ntouched < SAMPLES) touched[ntouched++] = s->page | (write ? 1 : 0);
  s->page = 0;
  outstanding--;
}

static sample_t *find(uint64_t page) {
  for (size_t i = 0; i < SAMPLES; i++)
    if (samples[i].page == page) return &samples[i];
  return NULL;
}

bool _strata_sample_fault(uint64_t page, bool write) {
  if (!atomic_load(&ready)) return false;
  pthread_mutex_lock(&sample_lock);
  sample_t *s = outstanding ? find(page) : NULL;
  if (s) end_sample(s, true, write);
  pthread_mutex_unlock(&sample_lock);
  return s != NULL;
}

/* Every sample in [start, end) back (sample lock held). */
static void return_range(uint64_t start, uint64_t end) {
  for (size_t i = 0; i < SAMPLES && outstanding; i++)
    if (samples[i].page && samples[i].page >= start && samples[i].page < end) end_sample(&samples[i], false, false);
}

void _strata_sample_return_all(void) {
  if (!atomic_load(&ready)) return;
  pthread_mutex_lock(&sample_lock);
  return_range(0, UINT64_MAX);
  pthread_mutex_unlock(&sample_lock);
}

bool _strata_sample_hold(void *p, size_t len) {
  if (!atomic_load(&ready)) return false;
  pthread_mutex_lock(&sample_lock);
  return_range((uintptr_t)p, (uintptr_t)p + len);
  return true;
}

void _strata_sample_release(bool held) {
  if (held) pthread_mutex_unlock(&sample_lock);
}

/* Sample one page (sample lock held): false when it cannot be (not Strata's, not there, a
 * huge page, pinned or shared). */
static bool take(uint64_t page, sample_t *s) {
  void *p = (void *)(uintptr_t)page;
  if (!_strata_chunk_of(p) || find(page)) return false;
  uint64_t c = _strata_page_categories(p);
  if (c == UINT64_MAX || !(c & PAGE_IS_PRESENT) || (c & PAGE_IS_HUGE)) return false;
  if (!_strata_uffd_register(p, PAGE_SIZE, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP)) return false;
  *s = (sample_t){.page = page, .was_clean = !(c & PAGE_IS_WRITTEN)};
  if (_strata_uffd_move(slot_of(s), p) != 0) {
    s->page = 0;
    track_only(page);
    return false;
  }
  outstanding++;
  return true;
}

size_t _strata_sample(void *const *pages, size_t n, uint64_t *accessed, size_t *taken) {
  *taken = 0;
  if (!atomic_load(&ready)) return 0;
  /* the agent lock: no fork or remap between a sample and its bookkeeping */
  pthread_mutex_lock(&_strata_agent_lock);
  pthread_mutex_lock(&sample_lock);
  return_range(0, UINT64_MAX);
  size_t got = ntouched;
  memcpy(accessed, touched, got * sizeof touched[0]);
  ntouched = 0;
  for (size_t i = 0, k = 0; i < n && i < SAMPLES; i++) {
    while (k < SAMPLES && samples[k].page) k++;
    if (k == SAMPLES) break;
    uint64_t page = (uintptr_t)pages[i] & ~(uint64_t)(PAGE_SIZE - 1);
    if (take(page, &samples[k])) (*taken)++;
  }
  pthread_mutex_unlock(&sample_lock);
  pthread_mutex_unlock(&_strata_agent_lock);
  return got;
}
