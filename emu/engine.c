/* engine.c: a tiering engine inside the emulated program (include/strata_emu.h describes the
 * contract). When $STRATA_ENGINE_LIB names a library, it is loaded as the program's first
 * thread starts, and its tick runs every period of simulated time, called by whichever thread's
 * clock passes the period (memory.c's kernel tick calls emu_engine_tick), one tick at a time.
 * While the engine runs, the calling thread is marked in_engine, so the engine's bulk copies
 * (memcpy from its uninstrumented code) are not counted as the program's. */
#include "emu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static strata_emu_engine_t engine;
static int engine_on;
static _Atomic int engine_busy;
uint64_t emu_engine_next_ps = UINT64_MAX;

/* The first thread may start inside ld.so, before libc has its environment: a preloaded
 * allocator (libstrata.so) touches memory from ld.so's first calls. The engine cannot start
 * then (dlopen, and the engine reading its own configuration from the environment), so it
 * waits for this library's constructor (core.c), which runs once libc is set up. */
static int libc_ready, engine_pending;

void emu_engine_load(emu_thread_t *t) {
  if (!libc_ready) {
    engine_pending = 1;
    return;
  }
  const char *lib = emu_getenv("STRATA_ENGINE_LIB");
  if (!lib || !*lib) return;
  t->in_engine = 1;
  static char msg[1024];
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(msg, sizeof msg, "strata-emu: cannot load the engine %s: %s", lib, dlerror());
    emu_die(msg);
  }
  strata_engine_start_fn *start = (strata_engine_start_fn *)dlsym(h, "strata_engine_start");
  if (!start) {
    snprintf(msg, sizeof msg, "strata-emu: %s has no strata_engine_start: not an engine library", lib);
    emu_die(msg);
  }
  static char err[512];
  if (start(&engine, err, sizeof err) || !engine.tick || !engine.period_ns) {
    snprintf(msg, sizeof msg, "strata-emu: the engine did not start: %s", err[0] ? err : "no reason given");
    emu_die(msg);
  }
  engine_on = 1;
  emu_engine_next_ps = t->clock_ps + (uint64_t)emu_ps((double)engine.period_ns);
  t->in_engine = 0;
}

int emu_engine_late_load(emu_thread_t *t) {
  libc_ready = 1;
  if (!engine_pending || !t) return 0;
  engine_pending = 0;
  emu_engine_load(t);
  return 1;
}

void emu_engine_tick(emu_thread_t *t) {
  if (!engine_on || t->in_engine || atomic_exchange(&engine_busy, 1)) return;
  if (t->clock_ps >= emu_engine_next_ps) {
    uint64_t period = (uint64_t)emu_ps((double)engine.period_ns);
    while (emu_engine_next_ps <= t->clock_ps) emu_engine_next_ps += period;
    t->in_engine = 1;
    engine.tick(engine.arg);
    t->in_engine = 0;
  }
  atomic_store(&engine_busy, 0);
}

const char *emu_engine_report(emu_thread_t *t) {
  if (!engine_on || !engine.report) return NULL;
  int was = t ? t->in_engine : 0;
  if (t) t->in_engine = 1;
  const char *r = engine.report(engine.arg);
  if (t) t->in_engine = was;
  return r;
}
