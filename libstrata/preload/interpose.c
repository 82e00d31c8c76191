/* interpose.c: transparent mode. Built into libstrata.so only: LD_PRELOAD=libstrata.so
 * replaces the whole malloc family and C++ operator new/delete with Strata, over the same
 * shared arenas as the explicit API.
 *
 * Each allocation of at least STRATA_CONTEXT_MIN bytes gets an allocation context (call
 * stack + size class, context/context.c) whose directive picks the arena; allocations below
 * STRATA_FAST_BELOW always go to the fast tier (hmalloc's rule); objects of at least
 * STRATA_TRACK_MIN are page aligned and recorded for a daemon (bkmalloc's rule) where whole
 * pages cost little more than their size class (tracked() below).
 *
 * Preload-safe: nothing here allocates through libc or uses stdio. Before the constructor
 * runs (allocations made while the dynamic loader starts libraries) every call takes the
 * plain default path. Behaviour follows glibc: malloc(0) returns a unique pointer, failures
 * set errno to ENOMEM, realloc(p, 0) frees p and returns NULL, memalign rounds a
 * non-power-of-two alignment up. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HOT_PATH __attribute__((always_inline)) static inline

static size_t fast_below, context_min, track_min; /* set by the constructor */
static size_t small_blocks; /* bytes a context allocates before its blocks, 0: never */

/* The one allocation path of transparent mode. `ret`/`frame` are the interposed function's
 * return address and frame (these helpers are inlined into it). */
/* From a shared arena (every directive's arena is one): a small block straight from this
 * thread's cache. */
HOT_PATH void *shared_alloc(arena_t *a, size_t size, size_t align) {
  if (likely(align <= GRANULE && size <= SMALL_MAX)) {
    size_t cls = _strata_class_of(size);
    void *p = _strata_tcache_pop((size_t)a->shared, cls);
    return p ? p : _strata_span_alloc(a, cls);
  }
  return _strata_arena_alloc(a, size, align, NULL);
}

/* Whether an object of `size` is tracked: page aligned and recorded for a daemon. Page
 * aligned, it costs whole pages; below the largest size class that is done only where they
 * cost at most an eighth more than its class would (a 4097-byte buffer would take 8 KiB where
 * its class takes 5), so a program's memory stays near what it is without contexts (#37).
 * Such an object keeps its context and directive, without a record of its own. */
HOT_PATH bool tracked(size_t size) {
  if (size < track_min) return false;
  if (size > SMALL_MAX) return true;
  size_t cls = _strata_class_size(_strata_class_of(size));
  return align_up(size, PAGE_SIZE) <= cls + cls / 8;
}

HOT_PATH void *pl_alloc(size_t size, size_t align, void *ret, void *frame) {
  void *p;
  if (!atomic_load_explicit(&_strata_contexts_on, memory_order_relaxed) || size < context_min ||
      _strata_in_capture()) {
    arena_t *a = size < fast_below ? _strata_shared(1) : _strata_directive_arena(STRATA_DIRECTIVE_DEFAULT);
    p = shared_alloc(a, size, align);
    if (unlikely(!p)) errno = ENOMEM;
    return p;
  }
  uint32_t idx = _strata_context_of(size, ret, frame);
  strata_context_t *c = _strata_context(idx);
  arena_t *a = _strata_directive_arena(c ? __atomic_load_n(&c->directive, __ATOMIC_RELAXED) : 0);
  bool track = idx && tracked(size);
  /* a small object of a context: a block of the context's own (blocks.c), its usable size
   * the class's */
  arena_t *own = !track && idx && small_blocks && size <= SMALL_MAX && align <= GRANULE
                     ? _strata_context_arena(c, idx, a, small_blocks) : NULL;
  p = track ? _strata_arena_alloc_pages(a, size, align)
      : own ? _strata_block_alloc(own, _strata_class_of(size))
            : shared_alloc(a, size, align);
  if (unlikely(!p)) {
    errno = ENOMEM;
    return NULL;
  }
  if (idx) {
    size_t usable = !track && size <= SMALL_MAX && align <= GRANULE
                        ? _strata_class_size(_strata_class_of(size)) : strata_usable_size(p);
    if (!own) _strata_tag(p, idx, track ? _strata_track(p, usable, idx) : 0);
    _strata_context_alloc(idx, size, usable);
  }
  return p;
}

HOT_PATH void pl_free(void *p) {
  _strata_free(p, atomic_load_explicit(&_strata_contexts_on, memory_order_relaxed));
}

HOT_PATH void *pl_realloc(void *p, size_t size, void *ret, void *frame) {
  if (!p) return pl_alloc(size, GRANULE, ret, frame);
  size_t usable = strata_usable_size(p);
  if (!usable) { /* not ours: nothing sane can be done with it */
    static const char msg[] = "strata: realloc of a pointer Strata did not allocate; returning NULL\n";
    (void)!write(2, msg, sizeof msg - 1);
    errno = ENOMEM;
    return NULL;
  }
  if (size == 0) {
    pl_free(p);
    return NULL;
  }
  if (size <= usable && size >= usable / 2) return p;
  if (size > usable) { /* a run's free pages after it, a large mapping remapped: no copy */
    void *q = _strata_grow(p, size);
    if (q) {
      if (atomic_load_explicit(&_strata_contexts_on, memory_order_relaxed)) _strata_retag_grown(p, q, usable);
      return q;
    }
  }
  void *q = pl_alloc(size, GRANULE, ret, frame); /* a new size is a new context */
  if (!q) return NULL;
  memcpy(q, p, size < usable ? size : usable);
  pl_free(p);
  return q;
}

HOT_PATH void *pl_calloc(size_t n, size_t size, void *ret, void *frame) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = pl_alloc(total, GRANULE, ret, frame);
  if (p && ((segment_t *)_strata_chunk_of(p))->kind != SEG_LARGE) memset(p, 0, total);
  return p;
}

#define RET __builtin_return_address(0)
#define FRAME __builtin_frame_address(0)

EXPORT void *malloc(size_t size) { return pl_alloc(size, GRANULE, RET, FRAME); }
EXPORT void free(void *p) { pl_free(p); }
EXPORT void *calloc(size_t n, size_t size) { return pl_calloc(n, size, RET, FRAME); }
EXPORT void *realloc(void *p, size_t size) { return pl_realloc(p, size, RET, FRAME); }

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return pl_realloc(p, total, RET, FRAME);
}

static bool pow2(size_t a) { return a && !(a & (a - 1)); }

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  if (!pow2(align) || align % sizeof(void *) || align > ALIGN_MAX) return EINVAL;
  int saved = errno;
  void *p = pl_alloc(size, align < GRANULE ? GRANULE : align, RET, FRAME);
  errno = saved; /* posix_memalign reports through its result, not errno */
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t size) {
  if (!pow2(align) || align > ALIGN_MAX) {
    errno = EINVAL;
    return NULL;
  }
  return pl_alloc(size, align < GRANULE ? GRANULE : align, RET, FRAME);
}

EXPORT void *memalign(size_t align, size_t size) {
  if (align > ALIGN_MAX) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = GRANULE;
  while (a < align) a <<= 1; /* glibc rounds up to a power of two */
  return pl_alloc(size, a, RET, FRAME);
}

EXPORT void *valloc(size_t size) { return pl_alloc(size, PAGE_SIZE, RET, FRAME); }

EXPORT void *pvalloc(size_t size) {
  size_t rounded = align_up(size ? size : 1, PAGE_SIZE);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  return pl_alloc(rounded, PAGE_SIZE, RET, FRAME);
}

EXPORT size_t malloc_usable_size(void *p) { return strata_usable_size(p); }

/* ---- C++ operator new / delete ----------------------------------------------------------------
 * Written in C under their mangled names, so libstrata.so needs no libstdc++. A failed
 * throwing new calls the program's new_handler, then throws std::bad_alloc through
 * libstdc++'s own functions, found as weak symbols (present in any C++ program). */

typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak, noreturn));
extern char _ZTISt9bad_alloc[] __attribute__((weak));
extern char _ZTVSt9bad_alloc[] __attribute__((weak));
extern void _ZNSt9bad_allocD1Ev(void *) __attribute__((weak));

__attribute__((noinline)) static void *new_failed(size_t size, size_t align, bool nothrow, void *ret,
                                                  void *frame) {
  for (;;) {
    new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!h) break;
    h(); /* may free memory, throw, or abort */
    void *p = pl_alloc(size, align, ret, frame);
    if (p) return p;
  }
  if (nothrow) return NULL;
  if (__cxa_allocate_exception && __cxa_throw && _ZTISt9bad_alloc && _ZTVSt9bad_alloc) {
    void **e = __cxa_allocate_exception(sizeof(void *));
    *e = _ZTVSt9bad_alloc + 2 * sizeof(void *); /* vptr: past offset-to-top and typeinfo */
    __cxa_throw(e, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
  }
  static const char msg[] = "strata: out of memory in operator new, and no C++ runtime to throw\n";
  (void)!write(2, msg, sizeof msg - 1);
  abort();
}

HOT_PATH void *pl_new(size_t size, size_t align, bool nothrow, void *ret, void *frame) {
  void *p = pl_alloc(size, align < GRANULE ? GRANULE : align, ret, frame);
  return likely(p) ? p : new_failed(size, align < GRANULE ? GRANULE : align, nothrow, ret, frame);
}

typedef struct { int unused; } nothrow_t;

EXPORT void *_Znwm(size_t n) { return pl_new(n, GRANULE, false, RET, FRAME); }
EXPORT void *_Znam(size_t n) { return pl_new(n, GRANULE, false, RET, FRAME); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { return pl_new(n, GRANULE, true, RET, FRAME); }
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { return pl_new(n, GRANULE, true, RET, FRAME); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) { return pl_new(n, al, false, RET, FRAME); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) { return pl_new(n, al, false, RET, FRAME); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const nothrow_t *t) {
  return pl_new(n, al, true, RET, FRAME);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const nothrow_t *t) {
  return pl_new(n, al, true, RET, FRAME);
}
EXPORT void _ZdlPv(void *p) { pl_free(p); }
EXPORT void _ZdaPv(void *p) { pl_free(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { pl_free(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { pl_free(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) { pl_free(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) { pl_free(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { pl_free(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { pl_free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { pl_free(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { pl_free(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const nothrow_t *t) { pl_free(p); }
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const nothrow_t *t) { pl_free(p); }

/* ---- start and exit ---------------------------------------------------------------------- */

static void at_exit(void) {
  _strata_context_flush();
  _strata_report_write();
}

__attribute__((constructor(101))) static void preload_start(void) {
  fast_below = (size_t)_strata_option(OPT_FAST_BELOW);
  context_min = (size_t)_strata_option(OPT_CONTEXT_MIN);
  track_min = (size_t)_strata_option(OPT_TRACK_MIN);
  small_blocks = (size_t)_strata_option(OPT_SMALL_BLOCKS);
  if (context_min < 1) context_min = 1;
  _strata_process_directive_init();
  if (!_strata_option(OPT_CONTEXTS)) return;
  _strata_rules_load();
  _strata_contexts_start();
  atexit(at_exit);
}
