/* context.c: allocation contexts (hmalloc, bkmalloc): call stack + size class -> a context
 * with counters and a placement directive, kept in the shared-memory channel
 * (include/strata_channel.h) where a daemon can read and steer them.
 *
 * Capturing the call stack never allocates:
 *   fp    (default) walks frame pointers, checking every frame lies inside this thread's
 *         stack and every return address inside an executable mapping, so code built
 *         without frame pointers cannot crash it: there the walk stops early, and the
 *         context is the call site plus the frames that validate. About 2-4 ns a frame.
 *   dwarf libgcc's unwinder (_Unwind_Backtrace, what backtrace(3) uses): exact with any
 *         compiler flags, about 1 us per frame. STRATA_UNWIND=dwarf.
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

#define CONTEXT_CAPACITY ((uint64_t)1 << 16) /* tags are 16 bits */
#define OBJECT_CAPACITY ((uint64_t)1 << 20)

_Atomic bool _strata_contexts_on;
static strata_channel_header_t *_Atomic channel;
pthread_mutex_t _strata_channel_lock = PTHREAD_MUTEX_INITIALIZER;
#define channel_lock _strata_channel_lock
static size_t channel_size;
static int channel_fd = -1; /* kept open: the region's only handle once its name is gone */
static uint32_t object_free_head; /* free list of objects[] slots, via next; channel_lock */

static __thread bool in_capture __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
static __thread bool stack_known __attribute__((tls_model("initial-exec")));

/* executable mappings, read once from /proc/self/maps: where return addresses may point */
#define MAX_TEXT 256
static uintptr_t text_lo[MAX_TEXT], text_hi[MAX_TEXT];
static int ntext;
static uintptr_t main_stack_hi; /* end of the [stack] mapping */
static int capture_depth = STRATA_CONTEXT_FRAMES;
static bool capture_dwarf;

/* ---- the channel region -------------------------------------------------------------------- */

static strata_context_t *contexts(strata_channel_header_t *h) {
  return (strata_context_t *)((char *)h + h->contexts_offset);
}
static strata_object_t *objects(strata_channel_header_t *h) {
  return (strata_object_t *)((char *)h + h->objects_offset);
}

void _strata_channel_name(char *buf, size_t n, long pid) {
  snprintf(buf, n, "/dev/shm/strata.%ld", pid);
}

/* Create this process's region (shared memory when /dev/shm works, else private). */
static strata_channel_header_t *channel_create(void) {
  size_t hdr = align_up(sizeof(strata_channel_header_t), 64);
  size_t ctx_off = hdr, obj_off = align_up(ctx_off + CONTEXT_CAPACITY * sizeof(strata_context_t), 4096);
  size_t size = align_up(obj_off + OBJECT_CAPACITY * sizeof(strata_object_t), 4096);
  long pid = (long)getpid();
  char name[64];
  _strata_channel_name(name, sizeof name, pid);
  void *m = MAP_FAILED;
  int fd = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    /* unlinked at once: the region lives exactly as long as this process, whatever way it
     * ends (_exit, a signal, exec), and a daemon opens it through /proc/<pid>/fd */
    unlink(name);
    if (ftruncate(fd, (off_t)size) == 0)
      m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) close(fd);
    else channel_fd = fd;
  }
  if (m == MAP_FAILED) {
    _strata_message("strata: cannot share contexts in %s (errno %d); keeping them private\n", name, errno);
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
  }
  strata_channel_header_t *h = m;
  h->magic = STRATA_CHANNEL_MAGIC;
  h->version = STRATA_CHANNEL_VERSION;
  h->header_bytes = sizeof *h;
  h->pid = pid;
  h->context_capacity = CONTEXT_CAPACITY;
  h->context_bytes = sizeof(strata_context_t);
  h->contexts_offset = ctx_off;
  h->object_capacity = OBJECT_CAPACITY;
  h->object_bytes = sizeof(strata_object_t);
  h->objects_offset = obj_off;
  h->objects_high = 1; /* slot 0 means "no record" */
  channel_size = size;
  object_free_head = 0;
  return h;
}

strata_channel_header_t *_strata_channel(void) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  if (likely(h)) return h;
  pthread_mutex_lock(&channel_lock);
  h = atomic_load(&channel);
  if (!h) {
    h = channel_create();
    atomic_store_explicit(&channel, h, memory_order_release);
  }
  pthread_mutex_unlock(&channel_lock);
  return h;
}

/* In a forked child: the parent's region is not ours; start a new one on first use. The
 * child's inherited objects keep tags into the old table; frees check before counting. */
void _strata_channel_forget(void) {
  strata_channel_header_t *h = atomic_load(&channel);
  atomic_store(&channel, NULL);
  if (h) munmap(h, channel_size);
  if (channel_fd >= 0) close(channel_fd);
  channel_fd = -1;
}

/* ---- capture ----------------------------------------------------------------------------- */

static void read_text_ranges(void) {
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
      char perm[8];
      if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3) continue;
      if (perm[2] == 'x' && ntext < MAX_TEXT) {
        text_lo[ntext] = lo;
        text_hi[ntext++] = hi;
      }
      size_t len = strlen(line);
      if (len >= 7 && !strcmp(line + len - 7, "[stack]")) main_stack_hi = hi;
    }
  }
  close(fd);
}

static bool is_text(uintptr_t a) {
  for (int i = 0; i < ntext; i++)
    if (a >= text_lo[i] && a < text_hi[i]) return true;
  return false;
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

/* Callers' frames lie between our own frame and the top of the stack, and all of that is
 * mapped: a frame pointer outside it is not one (code built without frame pointers keeps
 * anything in rbp), and the walk stops there. The stack's low end is not used: with an
 * unlimited stack rlimit glibc reports it near 0 for the main thread. */
static int capture_fp(void *frame, uint64_t *out, int depth) {
  int n = 0;
  uintptr_t fp = (uintptr_t)frame, lo = (uintptr_t)__builtin_frame_address(0);
  while (n < depth) {
    if (fp < lo || stack_hi < 16 || fp > stack_hi - 16 || (fp & 7)) break; /* no wrap-around */
    uintptr_t next = ((uintptr_t *)fp)[0], ret = ((uintptr_t *)fp)[1];
    if (!is_text(ret)) break;
    out[n++] = ret;
    if (next <= fp) break; /* frames grow upwards as we go out */
    fp = next;
  }
  return n;
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

static uint64_t hash_frames(const uint64_t *f, int n, size_t cls) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ cls;
  for (int i = 0; i < n; i++) {
    h ^= f[i];
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h ? h : 1;
}

/* The context index of an allocation of `size` called from `ret` (the caller of the
 * malloc-family function) with `frame` that function's frame; 0 = none. */
uint32_t _strata_context_of(size_t size, void *ret, void *frame) {
  if (in_capture) return 0;
  in_capture = true;
  uint64_t f[STRATA_CONTEXT_FRAMES];
  int depth = capture_depth, n;
  if (capture_dwarf) {
    unwind_state_t s = {f, 0, depth, 2}; /* skip this function and the interposer */
    _Unwind_Backtrace(unwind_cb, &s);
    n = s.n;
  } else {
    if (!stack_known) learn_stack();
    f[0] = (uint64_t)(uintptr_t)ret;
    n = 1 + capture_fp(((void **)frame)[0], f + 1, depth - 1);
  }
  size_t cls = size <= SMALL_MAX ? _strata_class_of(size) : 0;
  uint64_t id = hash_frames(f, n, cls ? cls : 64 - (size_t)__builtin_clzl(size));
  uint32_t idx = 0;
  strata_channel_header_t *h = _strata_channel();
  if (h) {
    strata_context_t *t = contexts(h);
    uint64_t mask = h->context_capacity - 1;
    for (uint64_t probe = 0; probe < 64; probe++) {
      uint64_t i = (id + probe) & mask;
      if (i == 0) continue;
      _Atomic uint64_t *slot = (_Atomic uint64_t *)&t[i].id;
      uint64_t cur = atomic_load_explicit(slot, memory_order_acquire);
      if (cur == id) { idx = (uint32_t)i; break; }
      if (cur == 0) {
        uint64_t zero = 0;
        if (atomic_compare_exchange_strong(slot, &zero, id)) {
          t[i].size_class = (uint32_t)cls;
          t[i].nframes = (uint32_t)n;
          memcpy(t[i].frames, f, (size_t)n * sizeof f[0]);
          _strata_rules_apply(&t[i]); /* symbol lookups: once per context */
          atomic_fetch_add_explicit((_Atomic uint64_t *)&h->contexts_used, 1, memory_order_relaxed);
          idx = (uint32_t)i;
          break;
        }
        if (zero == id) { idx = (uint32_t)i; break; }
      }
    }
    if (!idx) atomic_fetch_add_explicit((_Atomic uint64_t *)&h->contexts_dropped, 1, memory_order_relaxed);
  }
  in_capture = false;
  return idx;
}

strata_context_t *_strata_context(uint32_t idx) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  return h && idx && idx < h->context_capacity ? &contexts(h)[idx] : NULL;
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
} pending_t;
static __thread pending_t pending[PENDING_SLOTS] __attribute__((tls_model("initial-exec")));
static pthread_key_t pending_key;
static pthread_once_t pending_once = PTHREAD_ONCE_INIT;
static __thread bool pending_registered __attribute__((tls_model("initial-exec")));

static void pending_flush(pending_t *q) {
  strata_context_t *c = _strata_context(q->idx);
  if (c && q->events) {
    atomic_fetch_add_explicit(CTR(c, allocs), (uint64_t)q->allocs, memory_order_relaxed);
    atomic_fetch_add_explicit(CTR(c, frees), (uint64_t)q->frees, memory_order_relaxed);
    atomic_fetch_add_explicit(CTR(c, live_objects), (uint64_t)(q->allocs - q->frees), memory_order_relaxed);
    atomic_fetch_add_explicit(CTR(c, live_bytes), (uint64_t)q->live_bytes, memory_order_relaxed);
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

void _strata_context_alloc(uint32_t idx, size_t requested, size_t usable) {
  pending_t *q = pending_for(idx);
  q->allocs++;
  q->live_bytes += (int64_t)usable;
  q->bytes_allocated += (int64_t)requested;
  if (++q->events >= PENDING_MAX) pending_flush(q);
}

void _strata_context_free(uint32_t idx, size_t usable) {
  if (!_strata_context(idx)) return; /* a stale tag from before a fork */
  pending_t *q = pending_for(idx);
  q->frees++;
  q->live_bytes -= (int64_t)usable;
  if (++q->events >= PENDING_MAX) pending_flush(q);
}

/* ---- tracked objects ------------------------------------------------------------------------ */

/* Record [p, p+len) for context idx, in 64 MiB pieces; returns the first record, 0 if none. */
uint32_t _strata_track(void *p, size_t len, uint32_t idx) {
  strata_channel_header_t *h = _strata_channel();
  if (!h) return 0;
  strata_object_t *o = objects(h);
  uint32_t first = 0, prev = 0;
  pthread_mutex_lock(&channel_lock);
  for (size_t off = 0; off < len; off += STRATA_OBJECT_RECORD_MAX) {
    uint32_t r = object_free_head;
    if (r) object_free_head = o[r].next;
    else if (h->objects_high < h->object_capacity) r = (uint32_t)h->objects_high++;
    else {
      h->objects_dropped++;
      break;
    }
    o[r].len = len - off < STRATA_OBJECT_RECORD_MAX ? len - off : STRATA_OBJECT_RECORD_MAX;
    o[r].context = idx;
    o[r].next = 0;
    atomic_store_explicit((_Atomic uint64_t *)&o[r].addr, (uint64_t)(uintptr_t)p + off, memory_order_release);
    if (prev) o[prev].next = r;
    else first = r;
    prev = r;
  }
  pthread_mutex_unlock(&channel_lock);
  return first;
}

void _strata_untrack(uint32_t first, const void *p) {
  strata_channel_header_t *h = atomic_load(&channel);
  if (!h || !first || first >= h->objects_high) return;
  strata_object_t *o = objects(h);
  pthread_mutex_lock(&channel_lock);
  if (o[first].addr == (uint64_t)(uintptr_t)p) { /* not a stale record from before a fork */
    for (uint32_t r = first, next; r; r = next) {
      next = o[r].next;
      atomic_store_explicit((_Atomic uint64_t *)&o[r].addr, 0, memory_order_release);
      o[r].next = object_free_head;
      object_free_head = r;
    }
  }
  pthread_mutex_unlock(&channel_lock);
}

void _strata_contexts_start(void) {
  int64_t d = _strata_option(OPT_CONTEXT_DEPTH);
  capture_depth = d < 1 ? 1 : d > STRATA_CONTEXT_FRAMES ? STRATA_CONTEXT_FRAMES : (int)d;
  capture_dwarf = _strata_option(OPT_UNWIND) == UNWIND_DWARF;
  read_text_ranges();
  atomic_store(&_strata_contexts_on, true);
}

bool _strata_in_capture(void) { return in_capture; }
void _strata_set_in_capture(bool v) { in_capture = v; }
