/* two_sites.c: two call sites allocate alike; a rules file sends one of them to the slow
 * tier. Run under LD_PRELOAD with STRATA_RULES (tests/preload/two_sites.rules). Checks, through
 * the preloaded library, that each site's objects are in the arena its directive names; with
 * --check-nodes (in the two-tier guest) also that their pages are on the slow and the fast
 * node, as /proc/self/numa_maps shows. Built with -rdynamic so dladdr can name the sites. */
#include "strata.h"
#include "../../libstrata/tests/check.h"
#include "../vm/numa_maps.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Both sites allocate through the same two layers, as real programs do (redis's zmalloc),
 * and the file is built without frame pointers. A site's frame has alloca, so its size is
 * known only from rbp; the layers do not touch rbp, so a frame-pointer walk would go from the
 * inner layer straight to main. The rule for alloc_slow_site matches only if the capture
 * follows each frame's own rule from the unwind tables. */
__attribute__((noinline)) void *inner(size_t n) {
  void *p = malloc(n);
  if (!p) abort();
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) void *wrapper(size_t n) {
  void *p = inner(n);
  __asm__ volatile("" ::: "memory");
  return p;
}
#define SITE(name)                                                                                 \
  __attribute__((noinline)) void *name(size_t n) {                                                 \
    volatile char *v = __builtin_alloca(16 + n % 64);                                              \
    v[0] = 0;                                                                                      \
    void *p = wrapper(n + (size_t)v[0]);                                                           \
    __asm__ volatile("" ::: "memory");                                                             \
    return p;                                                                                      \
  }
SITE(alloc_slow_site)
SITE(alloc_fast_site)

int main(int argc, char **argv) {
  int expect_rules = argc > 1 && !strcmp(argv[1], "--with-rules");
  strata_arena_t *(*arena_of)(const void *) = dlsym(RTLD_DEFAULT, "strata_arena_of");
  int (*arena_tier)(const strata_arena_t *) = dlsym(RTLD_DEFAULT, "strata_arena_tier");
  const strata_topology_t *(*topo)(void) = dlsym(RTLD_DEFAULT, "strata_topology");
  CHECK(arena_of && arena_tier && topo);
  if (!arena_of) return check_done("two_sites");
  int last = topo()->ntiers - 1;
  void *slow[100], *fast[100];
  for (int i = 0; i < 100; i++) {
    slow[i] = alloc_slow_site(20000 + (size_t)i); /* tracked (>= 4 KiB) */
    fast[i] = alloc_fast_site(20000 + (size_t)i);
    memset(slow[i], 1, 20000);
    memset(fast[i], 2, 20000);
  }
  int slow_ok = 0, fast_ok = 0;
  for (int i = 0; i < 100; i++) {
    slow_ok += arena_tier(arena_of(slow[i])) == (expect_rules ? last : -1);
    fast_ok += arena_tier(arena_of(fast[i])) == -1; /* default arena: unbound */
  }
  CHECK(slow_ok == 100);
  CHECK(fast_ok == 100);
  if (argc > 2 && !strcmp(argv[2], "--check-nodes")) {
    int slow_node = __builtin_ctzll(topo()->tier_nodemask[last]), on_slow = 0, on_fast = 0;
    for (int i = 0; i < 100; i++) {
      vma_info_t v;
      if (vma_of(slow[i], &v) == 0 && v.pages[slow_node] > 0 && v.pages[0] == 0) on_slow++;
      if (vma_of(fast[i], &v) == 0 && v.pages[0] > 0 && v.pages[slow_node] == 0) on_fast++;
    }
    printf("slow site: %d/100 objects on node %d; fast site: %d/100 on node 0\n", on_slow, slow_node, on_fast);
    CHECK(on_slow == 100);
    CHECK(on_fast == 100);
  }
  /* realloc that grows an object in place (its run's next pages are free) keeps it where its
   * site's directive put it; one that must copy makes a new object of realloc's own context */
  unsigned char *grown = realloc(slow[99], 60000);
  CHECK(grown && grown[0] == 1 && grown[19999] == 1);
  if (grown == slow[99]) CHECK(arena_tier(arena_of(grown)) == (expect_rules ? last : -1));
  slow[99] = grown;
  /* small objects (< STRATA_FAST_BELOW) always go to the fast tier, from either site */
  void *tiny = alloc_slow_site(24);
  CHECK(arena_tier(arena_of(tiny)) == 0);
  for (int i = 0; i < 100; i++) {
    free(slow[i]);
    free(fast[i]);
  }
  free(tiny);
  return check_done("two_sites");
}
