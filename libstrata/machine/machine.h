/* machine.h: the machine interface. Everything that touches physical placement goes through
 * it. Two implementations: linux.c (NUMA system calls) and the emulated machine (emu/machine.c),
 * which a program linked with libstrata_emu.so provides as strata_emu_machine(); libstrata
 * then uses it instead of Linux (init.c chooses), so the same libstrata places pages on
 * emulated nodes. */
#ifndef STRATA_MACHINE_H
#define STRATA_MACHINE_H

#include <stddef.h>
#include <stdint.h>

#include "strata.h"

enum { BIND_PREFERRED = 0, BIND_STRICT = 1, BIND_INTERLEAVE = 2 };

typedef struct strata_machine_s {
  const char *name;
  /* Bind [p, p+len) to the nodes of nodemask (BIND_PREFERRED: the first node preferred,
   * falling back; BIND_STRICT: only those nodes; BIND_INTERLEAVE: page by page across them).
   * 0 or -errno. */
  int (*bind)(void *p, size_t len, uint64_t nodemask, int mode);
  /* For each page address, its node (>= 0) or -errno (-ENOENT: not present). 0 or -errno. */
  int (*where)(void *const *pages, size_t n, int *status);
  /* Move each page to nodes[i]; status as for where. 0 or -errno. */
  int (*move)(void *const *pages, size_t n, const int *nodes, int *status);
  /* The machine's topology, or NULL to discover it from sysfs. 0 or -errno. */
  int (*topology)(strata_topology_t *t);
} strata_machine_t;

/* Defined by the emulated machine when the program is linked with it. */
__attribute__((weak, visibility("default"))) const strata_machine_t *strata_emu_machine(void);

#endif
