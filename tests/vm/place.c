/* place.c: run inside the two-tier guest (`strata vm run`): every placement of the explicit
 * API lands on the node it should, as strata_where reports it and, independently, as
 * /proc/self/numa_maps does. Expects node 0 = CPUs + fast tier, node 1 = CPU-less slow tier,
 * HMAT latencies 100 and 250 ns (the harness defaults). */
#include "strata.h"
#include "../../libstrata/tests/check.h"
#include "numa_maps.h"

#include <string.h>

#define MB (1024 * 1024)

static void topology(void) {
  const strata_topology_t *t = strata_topology();
  CHECK(t->nnodes == 2 && t->ntiers == 2);
  CHECK(t->tier_nodemask[0] == 1 && t->tier_nodemask[1] == 2);
  CHECK(strcmp(t->tier_source, "kernel memory_tiering") == 0);
  CHECK(t->nodes[0].has_cpus && !t->nodes[1].has_cpus);
  CHECK(t->nodes[0].read_latency_ns == 100 && t->nodes[1].read_latency_ns == 250);
  CHECK(t->nodes[0].kernel_tier == 4 && t->nodes[1].kernel_tier > 4);
}

/* allocate `n` objects of `size` as `place`, touch them, and check every byte is on `node`;
 * `policy` is what numa_maps must show for their mapping (NULL: do not check) */
static void lands(const char *what, strata_place_t place, size_t size, int n, int node,
                  const char *policy) {
  char *objs[64];
  for (int i = 0; i < n; i++) {
    objs[i] = strata_malloc(size, i && place.kind == STRATA_PLACE_NEXT_TO
                                      ? strata_next_to(objs[i - 1]) : place);
    CHECK(objs[i] != NULL);
    memset(objs[i], i + 1, size);
  }
  int ok_where = 1, ok_maps = 1;
  for (int i = 0; i < n; i++) {
    strata_residency_t r;
    if (strata_where(objs[i], size, &r) != 0) { ok_where = 0; continue; }
    uint64_t total = 0;
    for (int k = 0; k < STRATA_MAX_NODES; k++) total += r.node_bytes[k];
    vma_info_t v;
    int have_vma = vma_of(objs[i], &v) == 0;
    if (r.node_bytes[node] != total || total == 0 || r.tier_bytes[node] != total) {
      if (ok_where)
        fprintf(stderr, "%s: strata_where node0 %llu node1 %llu absent %llu (vma %s N0=%ld N1=%ld)\n",
                what, (unsigned long long)r.node_bytes[0], (unsigned long long)r.node_bytes[1],
                (unsigned long long)r.absent_bytes, have_vma ? v.policy : "?", v.pages[0], v.pages[1]);
      ok_where = 0;
    }
    if (!have_vma) { ok_maps = 0; continue; }
    if (v.pages[node] == 0 || v.pages[1 - node] != 0) ok_maps = 0;
    if (policy && strcmp(v.policy, policy) != 0) {
      ok_maps = 0;
      fprintf(stderr, "%s: numa_maps policy %s, expected %s\n", what, v.policy, policy);
    }
  }
  printf("%-34s size %8zu x %2d -> node %d: strata_where %s, numa_maps %s\n", what, size, n, node,
         ok_where ? "ok" : "WRONG", ok_maps ? "ok" : "WRONG");
  CHECK(ok_where);
  CHECK(ok_maps);
}

int main(void) {
  topology();
  strata_arena_t *cold = strata_arena_new(strata_cold()), *hot = strata_arena_new(strata_hot());
  size_t sizes[] = {64, 3000, 40000, 200000, 3 * MB};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t s = sizes[k];
    int n = s >= MB ? 2 : 16;
    lands("hot", strata_hot(), s, n, 0, "prefer:0");
    lands("cold", strata_cold(), s, n, 1, "prefer:1");
    lands("tier(0)", strata_tier(0), s, n, 0, "prefer:0");
    lands("tier(1)", strata_tier(1), s, n, 1, "prefer:1");
    lands("tier(7) (clamped to the last)", strata_tier(7), s, n, 1, "prefer:1");
    lands("arena(cold)", strata_in_arena(cold), s, n, 1, "prefer:1");
    lands("arena(hot)", strata_in_arena(hot), s, n, 0, "prefer:0");
    lands("default (first touch on node 0)", strata_default(), s, n, 0, "default");
  }
  /* next_to chains inherit their arena's node */
  char *c = strata_malloc(48, strata_in_arena(cold));
  lands("next_to chain in a cold arena", strata_next_to(c), 100, 40, 1, "prefer:1");
  char *h = strata_malloc(48, strata_in_arena(hot));
  lands("next_to chain in a hot arena", strata_next_to(h), 100, 40, 0, "prefer:0");
  CHECK(strata_stat("bind_failed") == 0);
  CHECK(strata_arena_destroy(cold) == 0 && strata_arena_destroy(hot) == 0);
  return check_done("vm-place");
}
