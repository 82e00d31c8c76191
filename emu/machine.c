/* machine.c: the emulated machine as libstrata's machine interface (libstrata/machine/
 * machine.h): a program linked with both binds, locates and moves pages on emulated nodes,
 * and sees the nodes' tiers as the emulator is configured (node i is tier i by default). libstrata picks it up through strata_emu_machine (a weak symbol
 * there, defined here). */
#include "emu.h"

#include <errno.h>
#include <stdio.h>

#include "machine/machine.h"

/* glibc's own copy: memset is interposed by core.c */
extern void *__memset_chk(void *d, int c, size_t n, size_t dn);

static int m_bind(void *p, size_t len, uint64_t nodemask, int mode) {
  emu_thread();
  return emu_bind((uintptr_t)p, len, nodemask, mode);
}

static int m_where(void *const *pages, size_t n, int *status) {
  for (size_t i = 0; i < n; i++) {
    int node = strata_emu_node_of(pages[i]);
    status[i] = node >= 0 ? node : -ENOENT;
  }
  return 0;
}

static int m_move(void *const *pages, size_t n, const int *nodes, int *status) {
  return strata_emu_move(pages, n, nodes, status, 0);
}

/* The emulated nodes as libstrata's topology: tiers and distances as configured. */
static int m_topology(strata_topology_t *t) {
  emu_thread();
  __memset_chk(t, 0, sizeof *t, sizeof *t);
  t->nnodes = emu_cfg.nnodes;
  for (int i = 0; i < emu_cfg.nnodes; i++) {
    strata_node_info_t *nd = &t->nodes[i];
    nd->id = i;
    nd->tier = (int)emu_cfg.tier[i];
    if (nd->tier + 1 > t->ntiers) t->ntiers = nd->tier + 1;
    nd->has_cpus = i == 0;
    if (i == 0) nd->cpulist[0] = '0';
    nd->total_bytes = emu_cfg.cap_bytes[i];
    uint64_t used = atomic_load(&emu_resident[i]) << EMU_PAGE_SHIFT;
    nd->free_bytes = used < nd->total_bytes ? nd->total_bytes - used : 0;
    nd->kernel_tier = -1;
    nd->read_latency_ns = (int64_t)emu_cfg.rd_ns[i];
    nd->write_latency_ns = (int64_t)emu_cfg.wr_ns[i];
    nd->read_bandwidth_mbps = (int64_t)emu_cfg.rd_mbps[i];
    nd->write_bandwidth_mbps = (int64_t)emu_cfg.wr_mbps[i];
    /* the CPUs are on node 0: its row is the configured distances; between other nodes the
     * largest of theirs */
    for (int j = 0; j < emu_cfg.nnodes; j++) {
      uint64_t d = i == j ? 10 : i == 0 ? emu_cfg.distance[j] : j == 0 ? emu_cfg.distance[i]
                   : emu_cfg.distance[i] > emu_cfg.distance[j] ? emu_cfg.distance[i] : emu_cfg.distance[j];
      nd->distance[j] = (int)d;
    }
    t->tier_nodemask[nd->tier] |= 1ull << i;
  }
  snprintf(t->tier_source, sizeof t->tier_source, "emulated preset %s", emu_cfg.preset);
  snprintf(t->nodes_source, sizeof t->nodes_source, "strata-emu");
  return 0;
}

static const strata_machine_t emu_machine = {"emulated", m_bind, m_where, m_move, m_topology};
__attribute__((visibility("default"))) const strata_machine_t *strata_emu_machine(void) {
  return &emu_machine;
}
