/* context.c: allocation contexts (hmalloc, bkmalloc): call stack + size class -> a context
 * with counters and a placement directive, kept in the shared-memory channel
 * (channel/channel.c) where a daemon can read and steer them.
 *
 * Capturing the call stack never allocates:
 *   cached (default) follows the unwind tables' rule for each return address, read once and
 *         kept (unwind.c): exact callers in code built without frame pointers; what contexts
 *         cost whole programs is measured by `strata bench alloc --program`.
 *   dwarf libgcc's unwinder on every capture: the reference, about 1 us per frame.
 *         STRATA_UNWIND=dwarf.
 * Anything libc allocates while we look up stack bounds or symbols comes back into malloc
 * with this thread's capture guard set, and takes the plain default path. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

_Atomic bool _strata_contexts_on;

static __thread bool in_capture __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
static __thread bool stack_known __attribute__((tls_model("initial-exec")));

static uintptr_t main_stack_hi; /* end of the [stack] mapping */
static int capture_depth = STRATA_CONTEXT_FRAMES;
static bool capture_dwarf;

/* ---- capture ----------------------------------------------------------------------------- */

/* The end of the main thread's stack, from the [stack] line of /proc/self/maps. */
static void read_main_stack(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[8192], line[512];
  size_t ll = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (ll + 1 < sizeof line) line[ll++] = buf[i];
        continue;
      }
      line[ll] = 0;
      ll = 0;
      unsigned long lo, hi;
      size_t len = strlen(line);
      if (len >= 7 && !strcmp(line + len - 7, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
        main_stack_hi = hi;
    }
  }
  close(fd);
}

/* The top of this thread's stack, without locks or allocation (this runs inside malloc,
 * possibly under a libc lock: pthread_getattr_np would deadlock when the program is itself
 * inside pthread_getattr_np, as Rust's runtime is at start). The main thread's comes from
 * the [stack] line of /proc/self/maps; glibc puts every other thread's descriptor at the
 * top of its stack mapping, so pthread_self() bounds its frames. 0 = unknown: no walk. */
static void learn_stack(void) {
  stack_known = true;
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  uintptr_t hi = syscall(SYS_gettid) == getpid() ? main_stack_hi : (uintptr_t)pthread_self();
  stack_hi = hi > here ? hi : 0;
}

typedef struct { uint64_t *out; int n, depth, skip; } unwind_state_t;

static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *c, void *arg) {
  unwind_state_t *s = arg;
  uintptr_t ip = _Unwind_GetIP(c);
  if (!ip) return _URC_END_OF_STACK;
  if (s->skip > 0) {
    s->skip--;
    return _URC_NO_REASON;
  }
  s->out[s->n++] = ip;
  return s->n < s->depth ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* The context index of an allocation of `size` called from `ret` (the caller of the
 * malloc-family function) with `frame` that function's frame; 0 = none. */
uint32_t _strata_context_of(size_t size, void *ret, void *frame) {
  if (in_capture) return 0;
  in_capture = true;
  uint64_t dwarf[STRATA_CONTEXT_FRAMES], stack_hash, only_ret = (uint64_t)(uintptr_t)ret;
  const uint64_t *f = dwarf;
  int depth = capture_depth, n;
  if (capture_dwarf) {
    unwind_state_t s = {dwarf, 0, depth, 2}; /* skip this function and the interposer */
    _Unwind_Backtrace(unwind_cb, &s);
    n = s.n;
    stack_hash = _strata_hash_frames(dwarf, n);
  } else {
    if (!stack_known) learn_stack();
    if (stack_hi) {
      /* the interposer keeps a frame pointer: the caller's rbp at frame, its return address at
       * frame + 8, so the caller's stack pointer is frame + 16 */
      uintptr_t fp = (uintptr_t)frame;
      f = _strata_unwind((uintptr_t)ret, fp + 16, ((uintptr_t *)fp)[0], stack_hi, depth, &n, &stack_hash);
    } else { /* a stack we do not know the top of: the call site alone */
      f = &only_ret;
      n = 1;
      stack_hash = _strata_hash_frames(f, n);
    }
  }
  size_t cls = size <= SMALL_MAX ? _strata_class_of(size) : 0;
  uint64_t id = stack_hash ^ (cls ? cls : 64 - (size_t)__builtin_clzl(size)) * 0xD6E8FEB86659FD93ull;
  id = id ? id : 1;
  bool created = false;
  uint32_t idx = _strata_channel_context(id, &created);
  strata_context_t *c = created ? _strata_context(idx) : NULL;
  if (c) {
    c->size_class = (uint32_t)cls;
    c->nframes = (uint32_t)n;
    memcpy(c->frames, f, (size_t)n * sizeof f[0]);
    _strata_rules_apply(c); /* symbol lookups: once per context */
  }
  in_capture = false;
  return idx;
}

#define CTR(c, f) ((_Atomic uint64_t *)&(c)->f)

/* Counters: shared atomics on every malloc and free cost more than the allocation itself, so
 * each thread keeps pending deltas for the contexts it touches (a small direct-mapped cache)
 * and adds them to the shared counters every PENDING_MAX events, when a slot is reused, and
 * at thread exit. A reader of the channel sees counts at most that far behind. */
#define PENDING_SLOTS 64
#define PENDING_MAX 256
typedef struct pending_s {
  uint32_t idx, events;
  int64_t allocs, frees, live_bytes, bytes_allocated;
  int64_t live_peak; /* the highest live_bytes reached since the last flush */
} pending_t;
static __thread pending_t pending[PENDING_SLOTS] __attribute__((tls_model("initial-exec")));
static pthread_key_t pending_key;
static pthread_once_t pending_once = PTHREAD_ONCE_INIT;
static __thread bool pending_registered __attribute__((tls_model("initial-exec")));

/* Each context's peak of live bytes, for the report: libstrata's own (the channel's layout is
 * the daemon's contract). Each thread's pending counts keep the highest point their live delta
 * reached, added to the shared count when they are flushed: exact for one thread, and for
 * several as close as their counts are to each other's. */
static _Atomic uint64_t peak_live[STRATA_CONTEXT_CAPACITY];

uint64_t _strata_context_peak(uint32_t idx) {
  return idx < STRATA_CONTEXT_CAPACITY ? atomic_load_explicit(&peak_live[idx], memory_order_relaxed) : 0;
}

static void peak_update(uint32_t idx, uint64_t live) {
  if (idx >= STRATA_CONTEXT_CAPACITY || (int64_t)live < 0) return; /* frees counted before their allocations */
  uint64_t seen = atomic_load_explicit(&peak_live[idx], memory_order_relaxed);
  while (live > seen &&
         !atomic_compare_exchange_weak_explicit(&peak_live[idx], &seen, live, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static void pending_flush(pending_t *q) {
  strata_context_t *c = _strata_context(q->idx);
  if (c && q->events) {
    atomic_fetch_add_explicit(CTR(c, allocs), (uint64_t)q->allocs, memory_order_relaxed);
    atomic_fetch_add_explicit(CTR(c, frees), (uint64_t)q->frees, memory_order_relaxed);
    atomic_fetch_add_explicit(CTR(c, live_objects), (uint64_t)(q->allocs - q->frees), memory_order_relaxed);
    uint64_t before = atomic_fetch_add_explicit(CTR(c, live_bytes), (uint64_t)q->live_bytes, memory_order_relaxed);
    if (q->live_peak > 0) peak_update(q->idx, before + (uint64_t)q->live_peak);
    atomic_fetch_add_explicit(CTR(c, bytes_allocated), (uint64_t)q->bytes_allocated, memory_order_relaxed);
  }
  memset(q, 0, sizeof *q);
}

void _strata_context_flush(void) {
  for (int i = 0; i < PENDING_SLOTS; i++)
    if (pending[i].events) pending_flush(&pending[i]);
}

static void pending_exit(void *arg) { _strata_context_flush(); }
static void pending_key_init(void) { pthread_key_create(&pending_key, pending_exit); }

static pending_t *pending_for(uint32_t idx) {
  if (unlikely(!pending_registered)) {
    pending_registered = true;
    pthread_once(&pending_once, pending_key_init);
    pthread_setspecific(pending_key, (void *)1); /* any non-NULL value: run pending_exit */
  }
  pending_t *q = &pending[idx % PENDING_SLOTS];
  if (q->idx != idx) {
    pending_flush(q);
    q->idx = idx;
  }
  return q;
}

/* One event of context idx, into this thread's pending counts. */
static inline void pending_count(uint32_t idx, int64_t allocs, int64_t frees, int64_t live, int64_t allocated) {
  pending_t *q = pending_for(idx);
  q->allocs += allocs;
  q->frees += frees;
  q->live_bytes += live;
  if (q->live_bytes > q->live_peak) q->live_peak = q->live_bytes;
  q->bytes_allocated += allocated;
  if (++q->events >= PENDING_MAX) pending_flush(q);
}

void _strata_context_alloc(uint32_t idx, size_t requested, size_t usable) {
  pending_count(idx, 1, 0, (int64_t)usable, (int64_t)requested);
}

void _strata_context_grow(uint32_t idx, size_t bytes) { pending_count(idx, 0, 0, (int64_t)bytes, (int64_t)bytes); }

void _strata_context_free(uint32_t idx, size_t usable) {
  if (!_strata_context(idx)) return; /* a stale tag from before a fork */
  pending_count(idx, 0, 1, -(int64_t)usable, 0);
}

void _strata_contexts_start(void) {
  int64_t d = _strata_option(OPT_CONTEXT_DEPTH);
  capture_depth = d < 1 ? 1 : d > STRATA_CONTEXT_FRAMES ? STRATA_CONTEXT_FRAMES : (int)d;
  capture_dwarf = _strata_option(OPT_UNWIND) == UNWIND_DWARF;
  read_main_stack();
  atomic_store(&_strata_contexts_on, true);
}

bool _strata_in_capture(void) { return in_capture; }
void _strata_set_in_capture(bool v) { in_capture = v; }
