/* numa_maps.h: read /proc/self/maps and /proc/self/numa_maps to learn, independently of
 * Strata, the memory policy and per-node page counts of the mapping holding an address. */
#ifndef STRATA_VM_NUMA_MAPS_H
#define STRATA_VM_NUMA_MAPS_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vma_info {
  uintptr_t start, end;
  char policy[64];  /* "default", "prefer:1", "bind:1", ... */
  long pages[8];    /* N0=.. N7=.. */
} vma_info_t;

/* 0 on success: the VMA containing p, with its numa_maps line */
static int vma_of(const void *p, vma_info_t *v) {
  memset(v, 0, sizeof *v);
  uintptr_t a = (uintptr_t)p;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long s, e;
    if (sscanf(line, "%lx-%lx", &s, &e) == 2 && a >= s && a < e) {
      v->start = s;
      v->end = e;
      found = 1;
      break;
    }
  }
  fclose(f);
  if (!found) return -1;
  f = fopen("/proc/self/numa_maps", "r");
  if (!f) return -1;
  found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long s;
    char pol[64];
    if (sscanf(line, "%lx %63s", &s, pol) != 2 || s != v->start) continue;
    snprintf(v->policy, sizeof v->policy, "%s", pol);
    for (char *t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) {
      int n;
      long c;
      if (sscanf(t, "N%d=%ld", &n, &c) == 2 && n >= 0 && n < 8) v->pages[n] = c;
    }
    found = 1;
    break;
  }
  fclose(f);
  return found ? 0 : -1;
}
#endif
