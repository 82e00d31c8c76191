/* config.c: the emulated machine's settings, in one table. The table is the documentation:
 * `strata emu settings` prints it, and the host side (crates/strata-emu) reads presets and
 * checks settings through emu_config_json before it runs anything.
 *
 * A machine is given as "key=value key=v1,v2 ..." in $STRATA_EMU. Sizes accept K, M and G;
 * per-node lists are comma separated, node 0 first (node 0 is the fastest tier and has the
 * CPUs). A leading preset=NAME applies a preset first. The defaults are the m2t preset with
 * everything fitting in the fast tier. This file depends on nothing else of the emulator, so
 * the host side can compile it alone. */
#include "emu.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

/* The built-in machine: the m2t preset (Ice Lake server caches and TLBs, M2T's tiers). */
#define EMU_DEFAULTS                                                                    \
  {                                                                                     \
    .nnodes = 2, .rd_ns = {84.6, 156}, .wr_ns = {84.6, 156}, .rd_mbps = {176000, 55000}, \
    .wr_mbps = {176000, 55000}, .cap_bytes = {64ull << 30, 128ull << 30},               \
    .tier = {0, 1, 2, 3, 4, 5, 6, 7}, .distance = {10, 20, 20, 20, 20, 20, 20, 20},        \
    .l1_bytes = 48 << 10, .l1_ways = 12, .l2_bytes = 1280 << 10, .l2_ways = 20,         \
    .llc_bytes = 60ull << 20, .llc_ways = 12, .l1_ns = 1, .l2_ns = 5, .llc_ns = 25,     \
    .dtlb = 64, .dtlb_ways = 4, .dtlb2m = 32, .stlb = 2048, .stlb_ways = 16,            \
    .stlb_ns = 3, .walk_ns = 30, .walk_near_ns = 30, .mlp = 10, .next_page = 1,            \
    .stream_train = 1,                                                                  \
    .stride_bytes = 2048, .stride_mlp = 10, .epoch_ns = 10000, .fault_ns = 1000,          \
    .migrate_ns = 2000, .copy_mbps = 8000, .shootdown_ns = 2000, .kernel = KERNEL_NONE,  \
    .tpp_scan_period_ns = 1e9, .tpp_scan_bytes = 256ull << 20, .tpp_hint_fault_ns = 1500, \
    .tpp_promote_mbps = 65536, .tpp_wmark_low = 0.01, .tpp_wmark_high = 0.02,            \
    .time_scale = 1, .nb_scan_delay_ms = 1000, .nb_scan_period_min_ms = 1000,             \
    .nb_scan_period_max_ms = 60000, .nb_scan_size_mb = 256, .nb_hot_threshold_ms = 1000,  \
    .nb_promote_rate_limit_mbps = 65536, .nb_enough_min_bytes = 0,                        \
    .watermark_scale_factor = 10, .min_free_kbytes = 0,                                   \
    .tx_user_ns = 5000, .tx_wp_fault_ns = 1000, .scan_ns = 25, .pingpong_window_ms = 10000,\
    .preset = "m2t",                                                                    \
  }

emu_config_t emu_cfg = EMU_DEFAULTS;

void emu_config_defaults(emu_config_t *c) {
  static const emu_config_t d = EMU_DEFAULTS;
  /* byte by byte: a struct copy may become a call to memcpy, which the emulator interposes */
  const volatile char *s = (const volatile char *)&d;
  volatile char *o = (volatile char *)c;
  for (size_t i = 0; i < sizeof d; i++) o[i] = s[i];
}

/* ---- the settings ------------------------------------------------------------------------ */

enum { T_DOUBLE, T_U64, T_INT, T_DLIST, T_ULIST };
typedef struct {
  const char *key;
  int type;
  size_t off;
  const char *unit;
  const char *doc;
} setting_t;

static const setting_t settings[] = {
#define S(key, type, field, unit, doc) {key, type, offsetof(emu_config_t, field), unit, doc}
    S("nodes", T_INT, nnodes, "count", "emulated nodes; node 0 has the CPUs and is in the fastest tier"),
    S("read_ns", T_DLIST, rd_ns, "ns per node", "load latency of each node's memory"),
    S("write_ns", T_DLIST, wr_ns, "ns per node", "store (write-back) latency of each node"),
    S("read_mbps", T_DLIST, rd_mbps, "MB/s per node", "read bandwidth of each node (queueing)"),
    S("write_mbps", T_DLIST, wr_mbps, "MB/s per node", "write bandwidth of each node"),
    S("capacity", T_ULIST, cap_bytes, "bytes per node",
      "memory of each node; a full node sends first touches to the next (0: none on that node)"),
    S("tier", T_ULIST, tier, "tier per node",
      "each node's tier (0 fastest; default node i is tier i): nodes of one tier are one tier to "
      "libstrata and the engine"),
    S("distance", T_ULIST, distance, "SLIT per node",
      "each node's distance from the CPUs: first touch and a tier's binding try nodes nearest "
      "first, ties by id (as Linux's fallback list)"),
    S("l1", T_U64, l1_bytes, "bytes", "L1 data cache per thread"),
    S("l1_ways", T_U64, l1_ways, "ways", "L1 associativity"),
    S("l2", T_U64, l2_bytes, "bytes", "L2 per thread (0: none)"),
    S("l2_ways", T_U64, l2_ways, "ways", "L2 associativity"),
    S("llc", T_U64, llc_bytes, "bytes", "last-level cache, shared (0: none)"),
    S("llc_ways", T_U64, llc_ways, "ways", "LLC associativity"),
    S("l1_ns", T_DOUBLE, l1_ns, "ns", "cost of an L1 hit (stands in for compute)"),
    S("l2_ns", T_DOUBLE, l2_ns, "ns", "cost of an L2 hit"),
    S("llc_ns", T_DOUBLE, llc_ns, "ns", "cost of an LLC hit"),
    S("dtlb", T_U64, dtlb, "entries", "first-level data TLB, 4 KiB pages"),
    S("dtlb_ways", T_U64, dtlb_ways, "ways", "DTLB associativity"),
    S("dtlb2m", T_U64, dtlb2m, "entries", "first-level data TLB for 2 MiB pages (huge=1)"),
    S("stlb", T_U64, stlb, "entries", "second-level TLB (0: none)"),
    S("stlb_ways", T_U64, stlb_ways, "ways", "STLB associativity"),
    S("stlb_ns", T_DOUBLE, stlb_ns, "ns", "a DTLB miss that hits the STLB"),
    S("walk_ns", T_DOUBLE, walk_ns, "ns", "a page walk (a miss in every TLB)"),
    S("walk_near_ns", T_DOUBLE, walk_near_ns, "ns",
      "a page walk ending on a page-table line next to one of the last 4 walks' (pages within "
      "16 of a recently walked one: its entries are cached or prefetched)"),
    S("huge", T_INT, huge, "bool", "translate with 2 MiB pages (transparent huge pages)"),
    S("physical", T_INT, physical, "bool",
      "index L2 and the LLC by an emulated physical frame instead of the virtual address"),
    S("mlp", T_DOUBLE, mlp, "misses",
      "misses in flight for a sequential stream (a streamed miss costs latency / mlp)"),
    S("stride_bytes", T_U64, stride_bytes, "bytes",
      "the largest constant stride between L2 misses that the stride prefetcher follows (by "
      "address, 16 strides at once; 0: no stride prefetcher)"),
    S("stride_mlp", T_DOUBLE, stride_mlp, "misses",
      "misses in flight for a stride the stride prefetcher follows (such a miss costs latency / "
      "stride_mlp; a pointer chase gets less ahead than a stream)"),
    S("stride_pages", T_INT, stride_pages, "bool",
      "the stride prefetcher follows a stride into another 4 KiB page (Intel's stop at the page)"),
    S("overlap", T_INT, overlap, "bool",
      "a stream's line costs what remains of its fetch when the thread reaches it: the streamer "
      "fetched it when the stream's previous line was taken, so the time the thread spent since "
      "is taken off its cost (0: every streamed line costs latency / mlp)"),
    S("next_page", T_INT, next_page, "bool",
      "the next-page prefetcher: a stream ascending to the last line of a 4 KiB page has the next "
      "page's first line fetched into L2 and its translation into the STLB, and the streamer sees "
      "every L2 access, hit or miss, so it goes on from that line (0: a stream that left its page "
      "starts again with a demand miss). Intel's cores have it (the built-in presets: on); the "
      "host preset measures it"),
    S("stream_train", T_INT, stream_train, "lines",
      "a stream's first lines that the streamer does not have on their way yet: each costs a "
      "demand miss (1: only the line that starts it; the host preset measures it)"),
    S("pair", T_INT, pair, "bool",
      "an L2 miss that no stream continues also brings the other line of its 128-byte pair into "
      "the LLC (the spatial, or adjacent-line, prefetcher)"),
    S("epoch_ns", T_DOUBLE, epoch_ns, "ns", "bandwidth accounting period (queueing)"),
    S("fault_ns", T_DOUBLE, fault_ns, "ns", "a first-touch page fault"),
    S("migrate_ns", T_DOUBLE, migrate_ns, "ns", "per moved page: unmap, fault, remap (the copy is extra)"),
    S("copy_mbps", T_DOUBLE, copy_mbps, "MB/s", "one thread's page copy, capped by the tiers' bandwidth"),
    S("shootdown_ns", T_DOUBLE, shootdown_ns, "ns", "a TLB shootdown (one per batch of moves)"),
    S("pingpong_window_ms", T_DOUBLE, pingpong_window_ms, "ms",
      "a page demoted within this much simulated time of its promotion counts as ping-pong in the "
      "report (default: ten of the papers' 1 s periods; bench tiering sets ten of its periods)"),
    S("kernel", T_INT, kernel, "mode", "emulated kernel: 0 first touch only, 1 tpp (hint faults, "
      "promotion on a second fault, watermark demotion: the mechanism alone), 2 nomad (tpp with "
      "Nomad's transactional promotion and shadows), 3 linux (Linux 6.x's own tiering rule by "
      "rule: NUMA balancing in memory-tiering mode with its adaptive scan period, hot threshold "
      "and rate limit; kswapd demotion to the promo watermark; allocations that spill to the "
      "slow node below the low watermark; direct demotion; docs/tiering.md)"),
    S("time_scale", T_DOUBLE, time_scale, "factor",
      "linux: every period and threshold of the mode (scan delay and periods, hot threshold, the "
      "rate limit's second, the threshold's adjustment period) is the sysctl's value times this, "
      "so that a short emulated run behaves as the kernel's long ones; name it beside a figure"),
    S("numa_balancing_scan_delay_ms", T_DOUBLE, nb_scan_delay_ms, "ms",
      "linux: the first NUMA scan after the program starts (kernel.numa_balancing_scan_delay_ms)"),
    S("numa_balancing_scan_period_min_ms", T_DOUBLE, nb_scan_period_min_ms, "ms",
      "linux: the shortest time to scan the whole address space (kernel.numa_balancing_scan_period_min_ms)"),
    S("numa_balancing_scan_period_max_ms", T_DOUBLE, nb_scan_period_max_ms, "ms",
      "linux: the longest, and the hot threshold's adjustment period (kernel.numa_balancing_scan_period_max_ms)"),
    S("numa_balancing_scan_size_mb", T_U64, nb_scan_size_mb, "MiB",
      "linux: address space marked per scan (kernel.numa_balancing_scan_size_mb)"),
    S("numa_balancing_hot_threshold_ms", T_DOUBLE, nb_hot_threshold_ms, "ms",
      "linux: a slow page is promoted only if it faults within this of being marked "
      "(kernel.numa_balancing_hot_threshold_ms, adjusted toward the rate limit)"),
    S("numa_balancing_promote_rate_limit_mbps", T_DOUBLE, nb_promote_rate_limit_mbps, "MB/s",
      "linux: promotion candidates a second, at most (kernel.numa_balancing_promote_rate_limit_MBps)"),
    S("numa_balancing_enough_min_bytes", T_U64, nb_enough_min_bytes, "bytes",
      "linux: with this (or a sixteenth of the fast node, whichever is more) free above the promo "
      "watermark, every hint-faulted page is promoted (pgdat_free_space_enough; the kernel's 1 GiB "
      "would never be free on an emulated node a thousand times smaller than a real one: 0)"),
    S("watermark_scale_factor", T_DOUBLE, watermark_scale_factor, "1/10000",
      "linux: the gap between a node's min, low, high and promo watermarks (vm.watermark_scale_factor)"),
    S("min_free_kbytes", T_U64, min_free_kbytes, "KiB",
      "linux: the min watermarks of all nodes together (vm.min_free_kbytes; 0: the kernel's "
      "sqrt(16 x memory in KiB), within 128..262144)"),
    S("tpp_scan_period_ns", T_DOUBLE, tpp_scan_period_ns, "ns",
      "tpp: period of the hint-fault scanner (the kernel's numa_balancing: 1 s)"),
    S("tpp_scan_bytes", T_U64, tpp_scan_bytes, "bytes", "tpp: address space marked per scan (kernel: 256 MiB)"),
    S("tpp_hint_fault_ns", T_DOUBLE, tpp_hint_fault_ns, "ns", "tpp: cost of a hint fault"),
    S("tpp_promote_mbps", T_DOUBLE, tpp_promote_mbps, "MB/s", "tpp: promotion rate limit (kernel: 65536)"),
    S("tpp_wmark_low", T_DOUBLE, tpp_wmark_low, "fraction",
      "tpp: demotion starts when the fast tier's free share falls below this"),
    S("tpp_wmark_high", T_DOUBLE, tpp_wmark_high, "fraction", "tpp: ... and stops when it is back at this"),
    S("tx_user_ns", T_DOUBLE, tx_user_ns, "ns",
      "Strata's transactional mover (libstrata's agent), per page besides its two copies and the "
      "TLB shootdown: its system calls (libstrata's agent committed a page every 6.2 us on an AMD "
      "EPYC host, copies included)"),
    S("tx_wp_fault_ns", T_DOUBLE, tx_wp_fault_ns, "ns",
      "... the first write to a page it moved (asynchronous write-protect, about 1 us; nomad "
      "charges a hint fault's)"),
    S("sample_period", T_U64, sample_period, "misses", "LLC misses per sample (0: no sampling)"),
    S("scan_ns", T_DOUBLE, scan_ns, "ns",
      "an engine's page walk, per page read and cleared (background time, as a kernel walker's)"),
#undef S
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

/* ---- the presets --------------------------------------------------------------------------- */

static const struct {
  const char *name, *doc, *settings;
} presets[] = {
    {"m2t",
     "the M2T testbed (Intel Ice Lake Xeon caches and TLBs; local DRAM 84.6 ns / 176 GB/s with a "
     "64 GiB fast tier, far memory on the other socket 156 ns / 55 GB/s, 128 GiB)",
     ""},
    {"m2t-4m",
     "the m2t preset with a 4 MiB 16-way last-level cache, so that footprints of a hundred MiB "
     "exceed it many times over, as a server's working sets exceed its LLC (strata bench tiering)",
     "llc=4M llc_ways=16"},
    {"dram-first",
     "seed 002's machine as CXL would build it: local DRAM (node 0, m2t's 84.6 ns / 176 GB/s), "
     "DRAM on the other socket (node 1, m2t's far memory: 156 ns / 55 GB/s) and slow memory "
     "attached to the local socket (node 2: Optane DC PMM as Izraelevitz et al. measured it, "
     "305 ns random loads, 39.4 GB/s reads, 13.9 GB/s writes; 64 GiB); nodes 0 and 1 are tier 0. "
     "Distances 10, 21, 17 (numactl's for such a machine): Linux fills the local DRAM, then the "
     "slow node, then the remote DRAM. Node 0 and 1 hold 32 GiB each until --fast-ratio or "
     "--fast-bytes splits the fast tier between them",
     "nodes=3 read_ns=84.6,156,305 write_ns=84.6,156,305 read_mbps=176000,55000,39400 "
     "write_mbps=176000,55000,13900 capacity=32G,32G,64G tier=0,0,1 distance=10,21,17 llc=4M llc_ways=16"},
    {"host",
     "this machine, measured by `strata emu calibrate` (one tier); the host side passes the "
     "measured settings after the name",
     ""},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

const char *emu_kernel_name(int kernel) {
  return kernel == KERNEL_TPP ? "tpp" : kernel == KERNEL_NOMAD ? "nomad" : kernel == KERNEL_LINUX ? "linux" : "none";
}

/* ---- parsing ----------------------------------------------------------------------------- */

/* "what 'setting'" and, when there is one, a hint after it */
static int fail_hint(char *err, size_t n, const char *what, const char *s, size_t len, const char *hint) {
  snprintf(err, n, "%s '%.*s'%s", what, (int)(len < 200 ? len : 200), s, hint);
  return -1;
}
static int fail(char *err, size_t n, const char *what, const char *s, size_t len) {
  return fail_hint(err, n, what, s, len, "");
}
#define SEE_SETTINGS " (see `strata emu settings`)"

/* A setting's value (`type` its field's): a finite number >= 0, with a K, M or G suffix for a
 * whole-number field, whose value must then be whole and within what the field holds (a
 * conversion out of range would be undefined). -1 otherwise. */
static int parse_num(const char *s, const char *end, int type, double *out) {
  int integer = type != T_DOUBLE && type != T_DLIST;
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
  if (!(v >= 0 && v <= DBL_MAX)) return -1; /* negative, NaN or infinite */
  if (integer && (v >= (type == T_INT ? 2147483648.0 : 18446744073709551616.0) || (double)(uint64_t)v != v))
    return -1;
  *out = v;
  return 0;
}

static int parse_setting(emu_config_t *c, const char *s, size_t n, int first, char *err, size_t errlen);

static int apply(emu_config_t *c, const char *s, char *err, size_t errlen) {
  for (int first = 1; s && *s; first = 0) {
    while (*s == ' ') s++;
    const char *e = s;
    while (*e && *e != ' ') e++;
    if (e > s && parse_setting(c, s, (size_t)(e - s), first, err, errlen)) return -1;
    s = e;
  }
  return 0;
}

static int parse_setting(emu_config_t *c, const char *s, size_t n, int first, char *err, size_t errlen) {
  const char *eq = memchr(s, '=', n);
  if (!eq) return fail(err, errlen, "expected key=value, not", s, n);
  size_t klen = (size_t)(eq - s);
  const char *v = eq + 1, *vend = s + n;
  if (klen == 6 && !strncmp(s, "preset", 6)) {
    if (!first) return fail(err, errlen, "preset= must come first:", s, n);
    for (size_t i = 0; i < NPRESETS; i++) {
      if (strlen(presets[i].name) != (size_t)(vend - v) || strncmp(presets[i].name, v, (size_t)(vend - v)))
        continue;
      snprintf(c->preset, sizeof c->preset, "%s", presets[i].name);
      return apply(c, presets[i].settings, err, errlen);
    }
    return fail_hint(err, errlen, "unknown preset", v, (size_t)(vend - v), SEE_SETTINGS);
  }
  for (size_t i = 0; i < NSETTINGS; i++) {
    if (strlen(settings[i].key) != klen || strncmp(settings[i].key, s, klen)) continue;
    char *field = (char *)c + settings[i].off;
    int type = settings[i].type, list = type == T_DLIST || type == T_ULIST;
    for (int k = 0; v <= vend; k++) {
      const char *comma = memchr(v, ',', (size_t)(vend - v));
      const char *e = comma ? comma : vend;
      double x;
      if (parse_num(v, e, type, &x) || k >= (list ? EMU_MAX_NODES : 1))
        return fail(err, errlen, "bad value in", s, n);
      if (type == T_DOUBLE) *(double *)field = x;
      else if (type == T_U64) *(uint64_t *)field = (uint64_t)x;
      else if (type == T_INT) *(int *)field = (int)x;
      else if (type == T_DLIST) ((double *)field)[k] = x;
      else ((uint64_t *)field)[k] = (uint64_t)x;
      if (!comma) break;
      v = comma + 1;
    }
    return 0;
  }
  return fail_hint(err, errlen, "unknown setting", s, n, SEE_SETTINGS);
}

/* Is the machine one the emulator can run? */
static int check(const emu_config_t *c, char *err, size_t errlen) {
  if (c->nnodes < 1 || c->nnodes > EMU_MAX_NODES) return fail(err, errlen, "nodes must be 1..8:", "nodes", 5);
  for (int i = 0; i < c->nnodes; i++)
    if (c->rd_mbps[i] <= 0 || c->wr_mbps[i] <= 0 || (c->cap_bytes[i] == 0 && i == c->nnodes - 1))
      return fail(err, errlen,
                  "every node needs a bandwidth, the last one a capacity (a faster node may have 0: "
                  "everything then starts below it):",
                  "read_mbps/capacity", 18);
  if (c->tier[0] != 0) return fail(err, errlen, "node 0 (with the CPUs) must be in tier 0:", "tier", 4);
  for (int i = 0; i < c->nnodes; i++) {
    int seen_below = c->tier[i] == 0;
    for (int j = 0; j < c->nnodes && !seen_below; j++) seen_below = c->tier[j] + 1 == c->tier[i];
    if (c->tier[i] >= (uint64_t)c->nnodes || !seen_below)
      return fail(err, errlen, "tiers must be numbered 0, 1, ... without gaps, fewer than the nodes:", "tier", 4);
    if (c->distance[i] < 10 || c->distance[i] > 254)
      return fail(err, errlen, "distances are 10..254 (10: local):", "distance", 8);
  }
  if (c->stream_train < 1 || c->stream_train > 64)
    return fail(err, errlen, "stream_train must be 1 to 64 lines (a 4 KiB page's):", "stream_train", 12);
  if (c->mlp < 1 || c->stride_mlp < 1 || c->epoch_ns <= 0 || c->copy_mbps <= 0 || c->tpp_promote_mbps <= 0)
    return fail(err, errlen, "mlp and stride_mlp >= 1, epoch_ns, copy_mbps and tpp_promote_mbps > 0:", "", 0);
  if (c->kernel < KERNEL_NONE || c->kernel > KERNEL_LINUX)
    return fail(err, errlen, "kernel must be 0 (none), 1 (tpp), 2 (nomad) or 3 (linux):", "kernel", 6);
  if (c->time_scale <= 0 || c->nb_scan_period_min_ms <= 0 || c->nb_scan_period_max_ms < c->nb_scan_period_min_ms ||
      c->nb_scan_size_mb == 0 || c->nb_hot_threshold_ms <= 0 || c->nb_promote_rate_limit_mbps <= 0)
    return fail(err, errlen,
                "time_scale, the scan periods (min <= max), scan size, hot threshold and rate limit must be positive:",
                "time_scale", 10);
  if (!(c->pingpong_window_ms >= 0))
    return fail(err, errlen, "pingpong_window_ms must be 0 or more:", "pingpong_window_ms", 18);
  if (c->kernel != KERNEL_NONE && c->tpp_scan_period_ns <= 0)
    return fail(err, errlen, "tpp needs a positive scan period:", "tpp_scan_period_ns", 18);
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
      return fail(err, errlen,
                  "a cache must hold whole sets (bytes a multiple of 64 x ways; a TLB, entries of ways), "
                  "and only l2, llc and stlb may be 0:",
                  geo[i].key, strlen(geo[i].key));
  }
  return 0;
}

void emu_node_order(const emu_config_t *c, int *order) {
  for (int i = 0; i < c->nnodes; i++) order[i] = i;
  for (int i = 1; i < c->nnodes; i++) /* insertion sort: stable, so ties keep id order */
    for (int j = i; j > 0 && c->distance[order[j - 1]] > c->distance[order[j]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
}

int emu_config_parse(emu_config_t *c, const char *s, char *err, size_t errlen) {
  if (apply(c, s, err, errlen)) return -1;
  return check(c, err, errlen);
}

/* ---- JSON for the host side ----------------------------------------------------------------- */

static void put_value(strata_json_t *j, const emu_config_t *c, const setting_t *st) {
  const char *field = (const char *)c + st->off;
  int list = st->type == T_DLIST || st->type == T_ULIST;
  if (list) _strata_json_put(j, "[");
  for (int k = 0; k < (list ? c->nnodes : 1); k++) {
    if (k) _strata_json_put(j, ", ");
    switch (st->type) {
      case T_DOUBLE: _strata_json_put(j, "%.17g", *(const double *)field); break;
      case T_U64: _strata_json_put(j, "%llu", (unsigned long long)*(const uint64_t *)field); break;
      case T_INT: _strata_json_put(j, "%d", *(const int *)field); break;
      case T_DLIST: _strata_json_put(j, "%.17g", ((const double *)field)[k]); break;
      default: _strata_json_put(j, "%llu", (unsigned long long)((const uint64_t *)field)[k]); break;
    }
  }
  if (list) _strata_json_put(j, "]");
}

static void put_config(strata_json_t *j, const emu_config_t *c) {
  _strata_json_put(j, "{\"preset\": ");
  _strata_json_str(j, c->preset);
  for (size_t i = 0; i < NSETTINGS; i++) {
    _strata_json_put(j, ", \"%s\": ", settings[i].key);
    put_value(j, c, &settings[i]);
  }
  _strata_json_put(j, "}");
}

size_t emu_config_json(const char *s, char *buf, size_t n) {
  strata_json_t j;
  _strata_json_init(&j, -1, buf, n);
  emu_config_t c;
  emu_config_defaults(&c);
  char err[512];
  if (emu_config_parse(&c, s, err, sizeof err)) {
    _strata_json_put(&j, "{\"error\": ");
    _strata_json_str(&j, err);
    _strata_json_put(&j, "}");
  } else {
    _strata_json_put(&j, "{\"config\": ");
    put_config(&j, &c);
    _strata_json_put(&j, "}");
  }
  return j.len;
}

size_t emu_settings_json(char *buf, size_t n) {
  strata_json_t j;
  _strata_json_init(&j, -1, buf, n);
  emu_config_t c;
  emu_config_defaults(&c);
  _strata_json_put(&j, "{\"settings\": [");
  for (size_t i = 0; i < NSETTINGS; i++) {
    _strata_json_put(&j, "%s{\"key\": \"%s\", \"unit\": ", i ? ", " : "", settings[i].key);
    _strata_json_str(&j, settings[i].unit);
    _strata_json_put(&j, ", \"default\": ");
    put_value(&j, &c, &settings[i]);
    _strata_json_put(&j, ", \"doc\": ");
    _strata_json_str(&j, settings[i].doc);
    _strata_json_put(&j, "}");
  }
  _strata_json_put(&j, "], \"presets\": [");
  for (size_t i = 0; i < NPRESETS; i++) {
    _strata_json_put(&j, "%s{\"name\": \"%s\", \"doc\": ", i ? ", " : "", presets[i].name);
    _strata_json_str(&j, presets[i].doc);
    _strata_json_put(&j, ", \"settings\": ");
    _strata_json_str(&j, presets[i].settings);
    _strata_json_put(&j, "}");
  }
  _strata_json_put(&j, "]}");
  return j.len;
}
