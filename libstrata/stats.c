/* stats.c: the process-wide counters, printed from the field list in internal.h through a
 * callback that never allocates. */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

stats_t _strata_stats;

static void emit(strata_output_fn *out, void *arg, const char *s) {
  if (out) out(s, arg);
  else (void)!write(2, s, strlen(s));
}

static int64_t load(_Atomic int64_t *v) { return atomic_load_explicit(v, memory_order_relaxed); }

void strata_stats_print(int json, strata_output_fn *out, void *arg) {
  char line[256];
  int first = 1;
  if (json) emit(out, arg, "{");
  else emit(out, arg, "strata statistics\n");
#define X(name, unit, doc)                                                                  \
  if (json) snprintf(line, sizeof line, "%s\"%s\":%lld", first ? "" : ",", #name,            \
                     (long long)load(&_strata_stats.name));                                  \
  else snprintf(line, sizeof line, "  %-20s %14lld %-6s %s\n", #name,                       \
                (long long)load(&_strata_stats.name), unit, doc);                           \
  emit(out, arg, line);                                                                      \
  first = 0;
  STRATA_STATS(X)
#undef X
  /* per binding: unbound, then tier by tier */
  int ntiers = _strata_ntiers();
  if (json) emit(out, arg, ",\"pool_bytes\":{");
  for (int i = 0; i <= ntiers; i++) {
    char label[16];
    if (i == 0) snprintf(label, sizeof label, "unbound");
    else snprintf(label, sizeof label, "tier%d", i - 1);
    if (json)
      snprintf(line, sizeof line, "%s\"%s\":%lld", i ? "," : "", label,
               (long long)load(&_strata_stats.pool_bytes[i]));
    else
      snprintf(line, sizeof line, "  pool_bytes.%-9s %14lld bytes  segment bytes bound this way\n",
               label, (long long)load(&_strata_stats.pool_bytes[i]));
    emit(out, arg, line);
  }
  if (json) emit(out, arg, "}}\n");
}

int64_t strata_stat(const char *name) {
#define X(n, unit, doc) \
  if (!strcmp(name, #n)) return load(&_strata_stats.n);
  STRATA_STATS(X)
#undef X
  return -1;
}

/* STRATA_VERBOSE=1: the options when the library loads, the statistics when the process
 * exits, both on stderr. Not in a build for a tool (STRATA_QUIET_LOAD: strata-sys's quiet-load
 * feature, which the strata CLI uses), whose own allocator would say it all a second time
 * beside the program it runs. */
#ifndef STRATA_QUIET_LOAD
static void print_at_exit(void) { strata_stats_print(0, NULL, NULL); }

__attribute__((constructor)) static void verbose_init(void) {
  if (!_strata_option(OPT_VERBOSE)) return;
  /* a copy linked into a program (strata-sys) beside a preloaded libstrata.so: the program's
   * calls all go to the preloaded one (crates/strata-sys), which speaks for the process */
  void *loaded = dlsym(RTLD_DEFAULT, "strata_options_print");
  if (loaded && loaded != (void *)strata_options_print) return;
  strata_options_print(NULL, NULL);
  atexit(print_at_exit);
}
#endif
