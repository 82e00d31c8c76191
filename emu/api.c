/* api.c: the emulated machine's edges: its configuration (STRATA_EMU), the machine interface
 * it gives libstrata, the observation interface of strata_emu.h, and the report written at
 * exit (STRATA_EMU_REPORT), which `strata emu run` reads. */
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "machine/machine.h"

/* glibc's own copies: memcpy and memset are interposed by core.c, so the emulator calls these */
extern void *__memset_chk(void *d, int c, size_t n, size_t dn);
extern void *__memcpy_chk(void *d, const void *s, size_t n, size_t dn);

/* The built-in machine: the m2t preset (Ice Lake server caches and TLBs), everything fits in
 * the fast tier. `strata emu run` always passes a full configuration. */
emu_config_t emu_cfg = {
    .nnodes = 2,
    .rd_ns = {84.6, 156},
    .wr_ns = {84.6, 156},
    .rd_mbps = {176000, 55000},
    .wr_mbps = {176000, 55000},
    .cap_bytes = {64ull << 30, 128ull << 30},
    .l1_bytes = 48 << 10, .l1_ways = 12,
    .l2_bytes = 1280 << 10, .l2_ways = 20,
    .llc_bytes = 60ull << 20, .llc_ways = 12,
    .l1_ns = 1, .l2_ns = 5, .llc_ns = 25,
    .dtlb = 64, .dtlb_ways = 4, .dtlb2m = 32, .stlb = 2048, .stlb_ways = 16,
    .stlb_ns = 3, .walk_ns = 30,
    .mlp = 10,
    .epoch_ns = 10000,
    .fault_ns = 1000,
    .migrate_ns = 2000,
    .copy_mbps = 8000,
    .shootdown_ns = 2000,
    .kernel = KERNEL_NONE,
    .tpp_scan_period_ns = 1e9,
    .tpp_scan_bytes = 256ull << 20,
    .tpp_hint_fault_ns = 1500,
    .tpp_promote_mbps = 65536,
    .tpp_wmark_low = 0.01,
    .tpp_wmark_high = 0.02,
};
static char preset_name[32] = "m2t";

double emu_ps(double ns) { return ns * 1000.0 + 0.5; }

/* ---- configuration: STRATA_EMU="key=value key=v1,v2 ..." ----------------------------------- */

enum { T_DOUBLE, T_U64, T_INT, T_DLIST, T_ULIST };
static const struct {
  const char *key;
  int type;
  size_t off;
} settings[] = {
#define S(key, type, field) {key, type, offsetof(emu_config_t, field)}
    S("nodes", T_INT, nnodes),          S("read_ns", T_DLIST, rd_ns),
    S("write_ns", T_DLIST, wr_ns),      S("read_mbps", T_DLIST, rd_mbps),
    S("write_mbps", T_DLIST, wr_mbps),  S("capacity", T_ULIST, cap_bytes),
    S("l1", T_U64, l1_bytes),           S("l1_ways", T_U64, l1_ways),
    S("l2", T_U64, l2_bytes),           S("l2_ways", T_U64, l2_ways),
    S("llc", T_U64, llc_bytes),         S("llc_ways", T_U64, llc_ways),
    S("l1_ns", T_DOUBLE, l1_ns),        S("l2_ns", T_DOUBLE, l2_ns),
    S("llc_ns", T_DOUBLE, llc_ns),      S("dtlb", T_U64, dtlb),
    S("dtlb_ways", T_U64, dtlb_ways),   S("dtlb2m", T_U64, dtlb2m),
    S("stlb", T_U64, stlb),             S("stlb_ways", T_U64, stlb_ways),
    S("stlb_ns", T_DOUBLE, stlb_ns),    S("walk_ns", T_DOUBLE, walk_ns),
    S("huge", T_INT, huge),             S("physical", T_INT, physical),
    S("mlp", T_DOUBLE, mlp),
    S("epoch_ns", T_DOUBLE, epoch_ns),  S("fault_ns", T_DOUBLE, fault_ns),
    S("migrate_ns", T_DOUBLE, migrate_ns), S("copy_mbps", T_DOUBLE, copy_mbps),
    S("shootdown_ns", T_DOUBLE, shootdown_ns), S("kernel", T_INT, kernel),
    S("tpp_scan_period_ns", T_DOUBLE, tpp_scan_period_ns),
    S("tpp_scan_bytes", T_U64, tpp_scan_bytes),
    S("tpp_hint_fault_ns", T_DOUBLE, tpp_hint_fault_ns),
    S("tpp_promote_mbps", T_DOUBLE, tpp_promote_mbps),
    S("tpp_wmark_low", T_DOUBLE, tpp_wmark_low), S("tpp_wmark_high", T_DOUBLE, tpp_wmark_high),
    S("sample_period", T_U64, sample_period),
#undef S
};

/* Something the emulator cannot run with. The message goes into the report when there is one
 * (as {"error": ...}, which `strata emu run` prints), else to stderr. Running on a machine the
 * program did not ask for, or without modelling part of it, would give wrong figures. */
void emu_die(const char *msg) {
  const char *path = getenv("STRATA_EMU_REPORT");
  int fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
  size_t len = strlen(msg);
  if (fd < 0) {
    (void)!write(2, msg, len);
    (void)!write(2, "\n", 1);
    _exit(2);
  }
  char json[1100];
  size_t j = 0;
  for (const char *p = "{\"error\": \""; *p; p++) json[j++] = *p;
  for (size_t i = 0; i < len && j + 8 < sizeof json; i++) { /* a JSON string */
    unsigned char ch = (unsigned char)msg[i];
    if (ch == '"' || ch == '\\') json[j++] = '\\';
    json[j++] = ch < 0x20 ? '?' : (char)ch;
  }
  for (const char *p = "\"}\n"; *p; p++) json[j++] = *p;
  (void)!write(fd, json, j);
  close(fd);
  _exit(2);
}

/* A bad configuration: what is wrong, and the setting. */
static void die(const char *what, const char *s, size_t n) {
  char msg[512];
  snprintf(msg, sizeof msg, "strata-emu: %s '%.*s' in STRATA_EMU", what, (int)n, s);
  emu_die(msg);
}

/* core.c may be built for AVX-512 (the Makefile's EMU_SIMD, on by default where the building
 * machine has it): on a CPU without it, say so when the library loads, before any access,
 * instead of dying later on an illegal instruction. */
__attribute__((constructor)) static void check_cpu(void) {
  __builtin_cpu_init();
  if (emu_avx512 && !__builtin_cpu_supports("avx512f"))
    emu_die("strata-emu: this libstrata_emu.so was built for AVX-512, which this CPU lacks: "
            "rebuild it with make emu EMU_SIMD=0");
}

static int parse_num(const char *s, const char *end, int integer, double *out) {
  char buf[64];
  size_t n = (size_t)(end - s);
  if (!n || n >= sizeof buf) return -1;
  for (size_t i = 0; i < n; i++) buf[i] = s[i];
  buf[n] = 0;
  char *e;
  double v = strtod(buf, &e);
  if (e == buf) return -1;
  if (integer && *e) { /* size suffixes */
    double m = *e == 'K' || *e == 'k' ? 1024.0 : *e == 'M' ? 1048576.0 : *e == 'G' ? 1073741824.0 : 0;
    if (!m || e[1]) return -1;
    v *= m;
  } else if (*e) {
    return -1;
  }
  if (v < 0) return -1;
  *out = v;
  return 0;
}

static void parse_setting(const char *s, size_t n) {
  const char *eq = memchr(s, '=', n);
  if (!eq) die("expected key=value, not", s, n);
  size_t klen = (size_t)(eq - s);
  const char *v = eq + 1, *vend = s + n;
  if (klen == 6 && !strncmp(s, "preset", 6)) {
    size_t m = (size_t)(vend - v) < sizeof preset_name - 1 ? (size_t)(vend - v) : sizeof preset_name - 1;
    for (size_t i = 0; i < m; i++) preset_name[i] = v[i];
    preset_name[m] = 0;
    return;
  }
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    if (strlen(settings[i].key) != klen || strncmp(settings[i].key, s, klen)) continue;
    char *field = (char *)&emu_cfg + settings[i].off;
    int type = settings[i].type, list = type == T_DLIST || type == T_ULIST;
    int integer = type != T_DOUBLE && type != T_DLIST;
    for (int k = 0; v <= vend; k++) {
      const char *c = memchr(v, ',', (size_t)(vend - v));
      const char *e = c ? c : vend;
      double x;
      if (parse_num(v, e, integer, &x) || k >= (list ? EMU_MAX_NODES : 1)) die("bad value in", s, n);
      if (type == T_DOUBLE) *(double *)field = x;
      else if (type == T_U64) *(uint64_t *)field = (uint64_t)x;
      else if (type == T_INT) *(int *)field = (int)x;
      else if (type == T_DLIST) ((double *)field)[k] = x;
      else ((uint64_t *)field)[k] = (uint64_t)x;
      if (!c) break;
      v = c + 1;
    }
    return;
  }
  die("unknown setting", s, n);
}

void emu_config_load(void) {
  const char *s = getenv("STRATA_EMU");
  while (s && *s) {
    while (*s == ' ') s++;
    const char *e = s;
    while (*e && *e != ' ') e++;
    if (e > s) parse_setting(s, (size_t)(e - s));
    s = e;
  }
  emu_config_t *c = &emu_cfg;
  if (c->nnodes < 1 || c->nnodes > EMU_MAX_NODES) die("nodes must be 1..8:", "nodes", 5);
  for (int i = 0; i < c->nnodes; i++)
    if (c->rd_mbps[i] <= 0 || c->wr_mbps[i] <= 0 || (c->cap_bytes[i] == 0 && i == c->nnodes - 1))
      die("every node needs a bandwidth, the last one a capacity (a faster node may have 0: "
          "everything then starts below it):", "read_mbps/capacity", 18);
  if (c->mlp < 1 || c->epoch_ns <= 0 || c->copy_mbps <= 0 || c->tpp_promote_mbps <= 0)
    die("mlp >= 1, epoch_ns, copy_mbps and tpp_promote_mbps > 0:", "", 0);
  /* every cache and TLB splits into whole sets of its ways (an LLC of 1M with 15 ways does
   * not); l2, llc and stlb may be 0 (absent), l1 and the DTLB may not */
  const struct { const char *key; uint64_t entries, ways; int optional; } geo[] = {
      {"l1/l1_ways", c->l1_bytes >> EMU_LINE_SHIFT, c->l1_ways, 0},
      {"l2/l2_ways", c->l2_bytes >> EMU_LINE_SHIFT, c->l2_ways, 1},
      {"llc/llc_ways", c->llc_bytes >> EMU_LINE_SHIFT, c->llc_ways, 1},
      {"dtlb/dtlb_ways", c->huge ? c->dtlb2m : c->dtlb, c->dtlb_ways, 0},
      {"stlb/stlb_ways", c->stlb, c->stlb_ways, 1},
  };
  for (size_t i = 0; i < sizeof geo / sizeof geo[0]; i++) {
    if (!lru_geometry_ok(geo[i].entries, geo[i].ways) || (!geo[i].entries && !geo[i].optional))
      die("a cache must hold whole sets (bytes a multiple of 64 x ways; a TLB, entries of ways), "
          "and only l2, llc and stlb may be 0:", geo[i].key, strlen(geo[i].key));
  }
  if (c->kernel == KERNEL_TPP) emu_next_tick_ps = (uint64_t)emu_ps(c->tpp_scan_period_ns);
}

/* ---- the machine interface for libstrata ------------------------------------------------ */

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

/* The emulated nodes as libstrata's topology: node i is tier i. */
static int m_topology(strata_topology_t *t) {
  emu_thread();
  __memset_chk(t, 0, sizeof *t, sizeof *t); /* not memset: that one is interposed */
  t->nnodes = t->ntiers = emu_cfg.nnodes;
  for (int i = 0; i < emu_cfg.nnodes; i++) {
    strata_node_info_t *nd = &t->nodes[i];
    nd->id = nd->tier = i;
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
    for (int j = 0; j < emu_cfg.nnodes; j++) nd->distance[j] = i == j ? 10 : 20;
    t->tier_nodemask[i] = 1ull << i;
  }
  snprintf(t->tier_source, sizeof t->tier_source, "emulated preset %s", preset_name);
  snprintf(t->nodes_source, sizeof t->nodes_source, "strata-emu");
  return 0;
}

static const strata_machine_t emu_machine = {"emulated", m_bind, m_where, m_move, m_topology};
__attribute__((visibility("default"))) const strata_machine_t *strata_emu_machine(void) {
  return &emu_machine;
}

/* ---- observation ------------------------------------------------------------------------- */

uint64_t strata_emu_now_ns(void) {
  emu_thread_t *t = emu_thread();
  return t ? t->clock_ps / 1000 : 0;
}

size_t strata_emu_scan(const void *p, size_t len, uint8_t *flags, int clear) {
  uint64_t first = (uintptr_t)p >> EMU_PAGE_SHIFT;
  uint64_t end = ((uintptr_t)p + len + (1u << EMU_PAGE_SHIFT) - 1) >> EMU_PAGE_SHIFT;
  for (uint64_t v = first; v < end; v++) {
    pte_t *e = emu_pte(v);
    uint8_t f = e ? atomic_load(&e->flags) : 0;
    flags[v - first] = f & (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY | STRATA_EMU_HINT);
    if (clear && e) atomic_fetch_and(&e->flags, (uint8_t) ~(STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY));
  }
  /* cleared bits are set again by the next access (the emulator sets them on every access,
   * so no TLB flush is needed for them to be seen) */
  return (size_t)(end - first);
}

size_t strata_emu_page_accesses(const void *p, size_t len, uint32_t *counts) {
  uint64_t first = (uintptr_t)p >> EMU_PAGE_SHIFT;
  uint64_t end = ((uintptr_t)p + len + (1u << EMU_PAGE_SHIFT) - 1) >> EMU_PAGE_SHIFT;
  for (uint64_t v = first; v < end; v++) {
    pte_t *e = emu_pte(v);
    counts[v - first] = e ? e->accesses : 0;
  }
  return (size_t)(end - first);
}

int strata_emu_node_of(const void *p) {
  pte_t *e = emu_pte((uintptr_t)p >> EMU_PAGE_SHIFT);
  return e && (atomic_load(&e->flags) & STRATA_EMU_PRESENT) ? e->node : -1;
}

int strata_emu_residency(uint64_t *pages, int n) {
  emu_thread();
  for (int i = 0; i < n && i < emu_cfg.nnodes; i++) pages[i] = atomic_load(&emu_resident[i]);
  return emu_cfg.nnodes;
}

int strata_emu_move(void *const *pages, size_t n, const int *nodes, int *status, int async) {
  emu_thread_t *t = emu_thread();
  if (!t) return -ENOMEM;
  return emu_move_pages(t, pages, n, nodes, status, async);
}

/* Rings of samples and hint-fault events: one mechanism, two element types. When nobody
 * reads, the oldest element is overwritten and counted as lost. */
#define RING 4096
typedef struct {
  char *buf;
  size_t elem;
  uint64_t head, tail, lost;
} ring_t;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static strata_emu_sample_t sample_buf[RING];
static strata_emu_fault_t fault_buf[RING];
static ring_t samples = {(char *)sample_buf, sizeof sample_buf[0], 0, 0, 0};
static ring_t faults = {(char *)fault_buf, sizeof fault_buf[0], 0, 0, 0};

static void ring_put(ring_t *r, const void *e) {
  pthread_mutex_lock(&ring_lock);
  if (r->head - r->tail == RING) r->tail++, r->lost++;
  __memcpy_chk(r->buf + (r->head++ % RING) * r->elem, e, r->elem, r->elem);
  pthread_mutex_unlock(&ring_lock);
}

static size_t ring_take(ring_t *r, void *out, size_t max) {
  pthread_mutex_lock(&ring_lock);
  size_t n = 0;
  for (; n < max && r->tail < r->head; n++)
    __memcpy_chk((char *)out + n * r->elem, r->buf + (r->tail++ % RING) * r->elem, r->elem, r->elem);
  pthread_mutex_unlock(&ring_lock);
  return n;
}

void strata_emu_set_sample_period(uint64_t misses) {
  emu_thread_t *t = emu_thread();
  emu_cfg.sample_period = misses;
  for (int i = 0; t && i < emu_nthreads(); i++) emu_thread_at(i)->sample_countdown = misses;
}

void emu_sample(emu_thread_t *t, uint64_t addr, int node, int store) {
  strata_emu_sample_t e = {addr, t->clock_ps / 1000, node, t->index, store, 0};
  ring_put(&samples, &e);
}

void emu_fault_event(uint64_t addr, uint64_t time_ps, int node, int promoted) {
  strata_emu_fault_t e = {addr, time_ps / 1000, node, promoted};
  ring_put(&faults, &e);
}

size_t strata_emu_samples(strata_emu_sample_t *out, size_t max) { return ring_take(&samples, out, max); }
size_t strata_emu_hint_faults(strata_emu_fault_t *out, size_t max) { return ring_take(&faults, out, max); }

int64_t strata_emu_counter(const char *name) {
  emu_thread_t *t = emu_thread();
  if (!t) return -1;
  if (!strcmp(name, "sim_ns")) return (int64_t)(t->clock_ps / 1000);
#define X(n) if (!strcmp(name, #n)) return (int64_t)t->n;
#define D(n, e) if (!strcmp(name, #n)) return (int64_t)(e);
  EMU_COUNTERS(X, D)
#undef X
#undef D
  return -1;
}

/* ---- the report ---------------------------------------------------------------------------- */

typedef struct {
  char buf[1 << 16];
  size_t n;
  int fd;
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (o->n + 1024 > sizeof o->buf) {
    (void)!write(o->fd, o->buf, o->n);
    o->n = 0;
  }
  int k = vsnprintf(o->buf + o->n, sizeof o->buf - o->n, fmt, ap);
  if (k > 0) o->n += (size_t)k;
  va_end(ap);
}

static void put_counters(out_t *o, const uint64_t *v) {
  static const char *const names[] = {
#define X(n) #n,
#define D(n, e) #n,
      EMU_COUNTERS(X, D)
#undef X
#undef D
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    put(o, "%s\"%s\": %llu", i ? ", " : "", names[i], (unsigned long long)v[i]);
}

static void counters_of(const emu_thread_t *t, uint64_t *v) {
  int i = 0;
#define X(n) v[i++] = t->n;
#define D(n, e) v[i++] = (e);
  EMU_COUNTERS(X, D)
#undef X
#undef D
}
__attribute__((destructor)) static void report(void) {
  const char *path = getenv("STRATA_EMU_REPORT");
  if (!path || !*path) return;
  static out_t o;
  o.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o.fd < 0) return;
  enum { N = 0
#define X(n) +1
#define D(n, e) +1
               EMU_COUNTERS(X, D)
#undef X
#undef D
  };
  uint64_t total[N] = {0}, v[N], sim_ps = 0, node_acc[EMU_MAX_NODES] = {0};
  int nt = emu_nthreads();
  for (int i = 0; i < nt; i++) {
    emu_thread_t *t = emu_thread_at(i);
    counters_of(t, v);
    for (int k = 0; k < N; k++) total[k] += v[k];
    if (t->clock_ps > sim_ps) sim_ps = t->clock_ps;
    for (int n = 0; n < emu_cfg.nnodes; n++) node_acc[n] += t->node_accesses[n];
  }
  put(&o, "{\"version\": 1, \"preset\": \"%s\", \"kernel\": \"%s\", \"sim_ns\": %llu, \"threads\": %d,\n"
          " \"peak_resident_pages\": %llu,\n",
      preset_name, emu_cfg.kernel == KERNEL_TPP ? "tpp" : "none",
      (unsigned long long)(sim_ps / 1000), nt, (unsigned long long)emu_peak_resident);
  put(&o, " \"totals\": {");
  put_counters(&o, total);
  put(&o, "},\n \"background\": {\"ns\": %llu, \"moved_pages\": %llu, \"promoted_pages\": %llu, "
          "\"demoted_pages\": %llu, \"shootdowns\": %llu},\n",
      (unsigned long long)(atomic_load(&emu_bg_ps) / 1000), (unsigned long long)emu_bg_counter(0),
      (unsigned long long)emu_bg_counter(1), (unsigned long long)emu_bg_counter(2),
      (unsigned long long)emu_bg_counter(3));
  put(&o, " \"nodes\": [");
  for (int n = 0; n < emu_cfg.nnodes; n++)
    put(&o, "%s{\"node\": %d, \"resident_pages\": %llu, \"capacity_pages\": %llu, \"memory_accesses\": %llu}",
        n ? ", " : "", n, (unsigned long long)atomic_load(&emu_resident[n]),
        (unsigned long long)(emu_cfg.cap_bytes[n] >> EMU_PAGE_SHIFT), (unsigned long long)node_acc[n]);
  put(&o, "],\n \"samples_lost\": %llu, \"hint_fault_events_lost\": %llu,\n \"per_thread\": [",
      (unsigned long long)samples.lost, (unsigned long long)faults.lost);
  for (int i = 0; i < nt; i++) {
    emu_thread_t *t = emu_thread_at(i);
    counters_of(t, v);
    put(&o, "%s\n  {\"thread\": %d, \"sim_ns\": %llu, ", i ? "," : "", i,
        (unsigned long long)(t->clock_ps / 1000));
    put_counters(&o, v);
    put(&o, "}");
  }
  put(&o, "]}\n");
  (void)!write(o.fd, o.buf, o.n);
  close(o.fd);
}
