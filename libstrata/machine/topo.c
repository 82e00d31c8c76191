/* topo.c: which NUMA nodes exist, what the kernel and the firmware say about them, and the
 * tier order Strata uses, with the source of each decision.
 *
 * The one implementation of topology discovery: the Rust crate strata-topo calls it too.
 * Reads sysfs with open/read/getdents64 only (no stdio, no opendir: they allocate), so it is
 * safe inside malloc under LD_PRELOAD.
 *
 * Tier order, first rule that applies:
 *   1. the override (STRATA_TIERS / strata_topology_discover's argument);
 *   2. the kernel's memory tiers (/sys/devices/virtual/memory_tiering), if there are two or more;
 *   3. HMAT read latency (access0/initiators/read_latency), nodes of equal latency together;
 *   4. CPU-less nodes below nodes with CPUs (how CXL memory appears);
 *   5. one tier. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static ssize_t read_text(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t len = 0, r;
  while ((size_t)len + 1 < n && (r = read(fd, buf + len, n - 1 - (size_t)len)) > 0) len += r;
  close(fd);
  buf[len] = 0;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) buf[--len] = 0;
  return len;
}

static ssize_t read_node_file(const char *root, int node, const char *name, char *buf, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/devices/system/node/node%d/%s", root, node, name);
  return read_text(path, buf, n);
}

/* "0-3,8,10-11" -> bit mask (ids >= 64 are ignored); -1 on a syntax error */
static int parse_list(const char *s, uint64_t *mask) {
  *mask = 0;
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0) return -1;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      if (end == s + 1 || b < a) return -1;
      s = end;
    }
    for (long i = a; i <= b && i < STRATA_MAX_NODES; i++) *mask |= 1ull << i;
    if (*s == ',' && s[1]) s++;
    else if (*s) return -1;
  }
  return 0;
}

static int64_t read_int(const char *root, int node, const char *name) {
  char buf[64];
  if (read_node_file(root, node, name, buf, sizeof buf) <= 0) return -1;
  char *end;
  long long v = strtoll(buf, &end, 10);
  return end == buf ? -1 : (int64_t)v;
}

/* "Node 0 MemTotal:  24606104 kB" lines */
static uint64_t meminfo_field(const char *text, const char *field) {
  const char *p = strstr(text, field);
  if (!p) return 0;
  p += strlen(field);
  while (*p == ' ' || *p == ':') p++;
  return strtoull(p, NULL, 10) * 1024;
}

struct linux_dirent64 { /* what getdents64 returns; glibc has no public type for it */
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Kernel memory tiers: for each memory_tierN directory, mark its nodes with N. */
static void read_kernel_tiers(const char *root, strata_topology_t *t) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/devices/virtual/memory_tiering", root);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  long n;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
    for (long off = 0; off < n;) {
      struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
      off += d->d_reclen;
      int id;
      if (sscanf(d->d_name, "memory_tier%d", &id) != 1) continue;
      char path[600], list[256];
      uint64_t mask;
      snprintf(path, sizeof path, "%s/%s/nodelist", dir, d->d_name);
      if (read_text(path, list, sizeof list) < 0 || parse_list(list, &mask)) continue;
      for (int i = 0; i < t->nnodes; i++)
        if (mask >> t->nodes[i].id & 1) t->nodes[i].kernel_tier = id;
    }
  }
  close(fd);
}

static strata_node_info_t *node_by_id(strata_topology_t *t, int id) {
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i].id == id) return &t->nodes[i];
  return NULL;
}

/* Assign tiers by a key per node (lower key = faster); equal keys share a tier. */
static void tiers_by_key(strata_topology_t *t, const int64_t *key) {
  int64_t done_below = INT64_MIN;
  t->ntiers = 0;
  for (;;) {
    int64_t next = INT64_MAX;
    int found = 0;
    for (int i = 0; i < t->nnodes; i++)
      if (key[i] > done_below && key[i] <= next) { next = key[i]; found = 1; }
    if (!found || t->ntiers == STRATA_MAX_TIERS) break;
    for (int i = 0; i < t->nnodes; i++)
      if (key[i] == next) {
        t->nodes[i].tier = t->ntiers;
        t->tier_nodemask[t->ntiers] |= 1ull << t->nodes[i].id;
      }
    t->ntiers++;
    done_below = next;
  }
}

static int apply_override(strata_topology_t *t, const char *spec) {
  int64_t key[STRATA_MAX_NODES];
  for (int i = 0; i < t->nnodes; i++) key[i] = STRATA_MAX_TIERS; /* unlisted: slowest */
  char part[256];
  int tier = 0;
  for (const char *s = spec; *s; tier++) {
    const char *e = strchr(s, ';');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 0 || n >= sizeof part || tier >= STRATA_MAX_TIERS) return -EINVAL;
    memcpy(part, s, n);
    part[n] = 0;
    uint64_t mask;
    if (parse_list(part, &mask) || !mask) return -EINVAL;
    for (int id = 0; id < STRATA_MAX_NODES; id++) {
      if (!(mask >> id & 1)) continue;
      strata_node_info_t *nd = node_by_id(t, id);
      if (!nd) return -EINVAL; /* naming a node that does not exist is a mistake */
      key[nd - t->nodes] = tier;
    }
    s = e ? e + 1 : s + n;
  }
  tiers_by_key(t, key);
  return 0;
}

int strata_topology_discover(const char *root, const char *override, strata_topology_t *out) {
  strata_topology_t *t = _strata_meta_alloc(sizeof *t);
  if (!t) return -ENOMEM;
  char buf[4096];
  uint64_t online = 0;
  snprintf(buf, sizeof buf, "%s/devices/system/node/online", root);
  char list[256];
  if (read_text(buf, list, sizeof list) > 0 && parse_list(list, &online) == 0 && online) {
    snprintf(t->nodes_source, sizeof t->nodes_source, "%s/devices/system/node", root);
  } else {
    online = 1; /* a kernel without NUMA: one node, sizes from /proc/meminfo */
    snprintf(t->nodes_source, sizeof t->nodes_source, "no NUMA in sysfs: one node assumed");
  }
  for (int id = 0; id < STRATA_MAX_NODES; id++) {
    if (!(online >> id & 1)) continue;
    strata_node_info_t *nd = &t->nodes[t->nnodes++];
    nd->id = id;
    nd->kernel_tier = -1;
    if (read_node_file(root, id, "cpulist", nd->cpulist, sizeof nd->cpulist) < 0)
      nd->cpulist[0] = 0;
    nd->has_cpus = nd->cpulist[0] != 0;
    if (read_node_file(root, id, "meminfo", buf, sizeof buf) > 0) {
      nd->total_bytes = meminfo_field(buf, "MemTotal");
      nd->free_bytes = meminfo_field(buf, "MemFree");
    } else if (t->nnodes == 1 && read_text("/proc/meminfo", buf, sizeof buf) > 0 &&
               !strcmp(root, "/sys")) {
      nd->total_bytes = meminfo_field(buf, "MemTotal");
      nd->free_bytes = meminfo_field(buf, "MemFree");
    }
    nd->read_latency_ns = read_int(root, id, "access0/initiators/read_latency");
    nd->write_latency_ns = read_int(root, id, "access0/initiators/write_latency");
    nd->read_bandwidth_mbps = read_int(root, id, "access0/initiators/read_bandwidth");
    nd->write_bandwidth_mbps = read_int(root, id, "access0/initiators/write_bandwidth");
  }
  /* distances: the i-th number of nodeN/distance is the distance to the i-th online node */
  for (int i = 0; i < t->nnodes; i++) {
    if (read_node_file(root, t->nodes[i].id, "distance", buf, sizeof buf) <= 0) continue;
    char *s = buf, *end;
    for (int j = 0; j < t->nnodes; j++, s = end) {
      long d = strtol(s, &end, 10);
      if (end == s) break;
      t->nodes[i].distance[t->nodes[j].id] = (uint8_t)(d > 255 ? 255 : d);
    }
  }
  read_kernel_tiers(root, t);

  int64_t key[STRATA_MAX_NODES] = {0};
  int all_hmat = 1, hmat_differs = 0, kernel_tiers_differ = 0, all_kernel = 1;
  int cpuless = 0, with_cpus = 0;
  for (int i = 0; i < t->nnodes; i++) {
    strata_node_info_t *nd = &t->nodes[i];
    if (nd->read_latency_ns < 0) all_hmat = 0;
    else if (nd->read_latency_ns != t->nodes[0].read_latency_ns) hmat_differs = 1;
    if (nd->kernel_tier < 0) all_kernel = 0;
    else if (nd->kernel_tier != t->nodes[0].kernel_tier) kernel_tiers_differ = 1;
    if (nd->has_cpus) with_cpus = 1;
    else cpuless = 1;
  }
  int rc = 0;
  if (override && *override) {
    rc = apply_override(t, override);
    snprintf(t->tier_source, sizeof t->tier_source, "override '%.40s'", override);
  } else if (all_kernel && kernel_tiers_differ) {
    for (int i = 0; i < t->nnodes; i++) key[i] = t->nodes[i].kernel_tier;
    tiers_by_key(t, key);
    snprintf(t->tier_source, sizeof t->tier_source, "kernel memory_tiering");
  } else if (all_hmat && hmat_differs) {
    for (int i = 0; i < t->nnodes; i++) key[i] = t->nodes[i].read_latency_ns;
    tiers_by_key(t, key);
    snprintf(t->tier_source, sizeof t->tier_source, "HMAT read_latency");
  } else if (cpuless && with_cpus) {
    for (int i = 0; i < t->nnodes; i++) key[i] = t->nodes[i].has_cpus ? 0 : 1;
    tiers_by_key(t, key);
    snprintf(t->tier_source, sizeof t->tier_source, "CPU-less nodes are slower");
  } else {
    for (int i = 0; i < t->nnodes; i++) key[i] = 0;
    tiers_by_key(t, key);
    snprintf(t->tier_source, sizeof t->tier_source,
             t->nnodes == 1 ? "one node: every tier is node %d" : "no tier information: one tier",
             t->nodes[0].id);
  }
  if (rc == 0) memcpy(out, t, sizeof *t);
  _strata_meta_free(t, sizeof *t);
  return rc;
}

static strata_topology_t *process_topo;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_init(void) {
  static strata_topology_t t;
  const strata_machine_t *m = _strata_machine();
  if (m->topology && m->topology(&t) == 0) {
    process_topo = &t;
    return;
  }
  const char *root = _strata_option_str(OPT_SYSFS);
  const char *override = _strata_option_str(OPT_TIERS);
  if (!root) root = "/sys";
  if (strata_topology_discover(root, override, &t) != 0) {
    /* a bad override is reported and ignored rather than taking the process down */
    char msg[160];
    int n = snprintf(msg, sizeof msg, "strata: STRATA_TIERS='%.60s' is not valid here; ignored\n",
                     override ? override : "");
    if (n > 0) (void)!write(2, msg, (size_t)n);
    strata_topology_discover(root, NULL, &t);
  }
  process_topo = &t;
}

/* The process topology: the machine's own (the emulated one has it), else sysfs. */
const strata_topology_t *strata_topology(void) {
  pthread_once(&topo_once, topo_init);
  return process_topo;
}

int _strata_ntiers(void) { return strata_topology()->ntiers; }

uint64_t _strata_tier_nodemask(int tier) {
  const strata_topology_t *t = strata_topology();
  if (tier < 0 || tier >= t->ntiers) return 0;
  return t->tier_nodemask[tier];
}

int _strata_node_tier(int node) {
  const strata_topology_t *t = strata_topology();
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i].id == node) return t->nodes[i].tier;
  return -1;
}
