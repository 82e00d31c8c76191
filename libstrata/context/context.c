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
#include <unistd.h>
#include <unwind.h>

#define CONTEXT_CAPACITY ((uint64_t)1 << 16) /* tags are 16 bits */
#define OBJECT_CAPACITY ((uint64_t)1 << 20)

_Atomic bool _strata_contexts_on;
static strata_channel_header_t *_Atomic channel;
pthread_mutex_t _strata_channel_lock = PTHREAD_MUTEX_INITIALIZER;
#define channel_lock _strata_channel_lock
static size_t channel_size;
static int64_t channel_pid;
static uint32_t object_free_head; /* free list of objects[] slots, via next; channel_lock */

static __thread bool in_capture __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
static __thread bool stack_known __attribute__((tls_model("initial-exec")));

/* executable mappings, read once from /proc/self/maps: where return addresses may point */
#define MAX_TEXT 256
static uintptr_t text_lo[MAX_TEXT], text_hi[MAX_TEXT];
static int ntext;

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
    if (ftruncate(fd, (off_t)size) == 0)
      m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) unlink(name);
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
  channel_pid = pid;
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

/* At exit: the region's name goes away (a daemon that has it mapped keeps its view). */
void _strata_channel_remove(void) {
  if (channel_pid != (int64_t)getpid()) return;
  char name[64];
  _strata_channel_name(name, sizeof name, (long)channel_pid);
  unlink(name);
}

/* In a forked child: the parent's region is not ours; start a new one on first use. The
 * child's inherited objects keep tags into the old table; frees check before counting. */
void _strata_channel_forget(void) {
  strata_channel_header_t *h = atomic_load(&channel);
  atomic_store(&channel, NULL);
  if (h) munmap(h, channel_size);
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
      if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 && perm[2] == 'x' && ntext < MAX_TEXT) {
        text_lo[ntext] = lo;
        text_hi[ntext++] = hi;
      }
    }
  }
  close(fd);
}

static bool is_text(uintptr_t a) {
  for (int i = 0; i < ntext; i++)
    if (a >= text_lo[i] && a < text_hi[i]) return true;
  return false;
}

static void learn_stack(void) {
  stack_known = true;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) { /* may malloc: guard is set */
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) stack_hi = (uintptr_t)addr + size;
    pthread_attr_destroy(&attr);
  }
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
  int depth = (int)_strata_option(OPT_CONTEXT_DEPTH);
  if (depth < 1) depth = 1;
  if (depth > STRATA_CONTEXT_FRAMES) depth = STRATA_CONTEXT_FRAMES;
  int n;
  if (_strata_option(OPT_UNWIND) == UNWIND_DWARF) {
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

void _strata_context_alloc(uint32_t idx, size_t requested, size_t usable) {
  strata_context_t *c = _strata_context(idx);
  if (!c) return;
  atomic_fetch_add_explicit(CTR(c, allocs), 1, memory_order_relaxed);
  atomic_fetch_add_explicit(CTR(c, live_objects), 1, memory_order_relaxed);
  atomic_fetch_add_explicit(CTR(c, live_bytes), usable, memory_order_relaxed);
  atomic_fetch_add_explicit(CTR(c, bytes_allocated), requested, memory_order_relaxed);
}

void _strata_context_free(uint32_t idx, size_t usable) {
  strata_context_t *c = _strata_context(idx);
  if (!c || !atomic_load_explicit(CTR(c, live_objects), memory_order_relaxed)) return;
  atomic_fetch_add_explicit(CTR(c, frees), 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(CTR(c, live_objects), 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(CTR(c, live_bytes), usable, memory_order_relaxed);
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
  read_text_ranges();
  atomic_store(&_strata_contexts_on, true);
}

bool _strata_in_capture(void) { return in_capture; }
void _strata_set_in_capture(bool v) { in_capture = v; }
