/* linux.c: the rules of Linux's own memory tiering (the `linux` kernel mode), as functions of
 * counters and times, with no page table: memory.c applies them to the emulated pages. Each
 * rule names the kernel function it follows (Linux 6.1-6.12: kernel/sched/fair.c,
 * mm/page_alloc.c, mm/vmscan.c, mm/migrate.c); docs/tiering.md lists them. Read from the
 * kernel's source; no code is copied.
 *
 * Times are simulated picoseconds. Every period and threshold is the sysctl's value times
 * `time_scale`, so that a run of a simulated second behaves as the kernel's runs of minutes. */
#include "emu.h"

#define MS_PS 1e9 /* picoseconds in a millisecond */

static uint64_t scaled_ms(const emu_config_t *c, double ms) { return (uint64_t)(ms * c->time_scale * MS_PS); }

void lx_init(lx_t *x, const emu_config_t *c) {
  lx_t zero = {0};
  *x = zero;
  x->scan_delay_ps = scaled_ms(c, c->nb_scan_delay_ms);
  x->period_min_ps = scaled_ms(c, c->nb_scan_period_min_ms);
  x->period_max_ps = scaled_ms(c, c->nb_scan_period_max_ms);
  x->hot_threshold_ps = scaled_ms(c, c->nb_hot_threshold_ms);
  x->second_ps = scaled_ms(c, 1000);
  x->scan_pages = (c->nb_scan_size_mb << 20) >> EMU_PAGE_SHIFT;
  /* numa_balancing_promote_rate_limit_MBps, in pages a (scaled) second */
  x->rate_limit_pages = (uint64_t)(c->nb_promote_rate_limit_mbps * (1 << 20)) >> EMU_PAGE_SHIFT;
  x->next_scan_ps = x->scan_delay_ps; /* init_numa_balancing: the first scan after the delay */
}

/* task_nr_scan_windows: how many scan_size windows the task's resident memory spans */
static uint64_t scan_windows(const lx_t *x, uint64_t rss_pages) {
  uint64_t rss = rss_pages ? rss_pages : x->scan_pages;
  return (rss + x->scan_pages - 1) / x->scan_pages;
}

/* task_scan_min: the period a scan of the whole task would take at the minimum period, but no
 * faster than MAX_SCAN_WINDOW (2560 MB a second of address space) */
uint64_t lx_scan_min_ps(const lx_t *x, uint64_t rss_pages) {
  uint64_t size_mb = (x->scan_pages << EMU_PAGE_SHIFT) >> 20, windows = 1;
  if (size_mb && size_mb < 2560) windows = 2560 / size_mb;
  uint64_t floor = x->second_ps / windows, scan = x->period_min_ps / scan_windows(x, rss_pages);
  return floor > scan ? floor : scan;
}

/* task_scan_max (a task of no numa_group) */
uint64_t lx_scan_max_ps(const lx_t *x, uint64_t rss_pages) {
  uint64_t smin = lx_scan_min_ps(x, rss_pages), smax = x->period_max_ps / scan_windows(x, rss_pages);
  return smin > smax ? smin : smax;
}

/* update_task_scan_period (called by task_numa_placement once a pass over the address space
 * has completed): no local or shared faults, or a failed migration, double the period; else it
 * moves by slots of a tenth, slower when most faults are private or local (70 %), faster
 * otherwise. In tiering mode every hint fault is on a slow node (remote) and private, so the
 * period doubles up to its maximum. */
void lx_update_scan_period(lx_t *x, uint64_t rss_pages) {
  const uint64_t slots = 10, threshold = 7; /* NUMA_PERIOD_SLOTS, NUMA_PERIOD_THRESHOLD */
  uint64_t lo = lx_scan_min_ps(x, rss_pages), hi = lx_scan_max_ps(x, rss_pages);
  uint64_t local = x->faults_local, remote = x->faults_remote, priv = x->faults_private,
           shared = x->faults_shared;
  if (local + shared == 0 || x->faults_migrate_fail) {
    x->scan_period_ps = x->scan_period_ps * 2 < hi ? x->scan_period_ps * 2 : hi;
  } else {
    int64_t slot_ps = (int64_t)((x->scan_period_ps + slots - 1) / slots), diff;
    int64_t lr = (int64_t)(local * slots / (local + remote)), ps = (int64_t)(priv * slots / (priv + shared));
    if (ps >= (int64_t)threshold) {
      diff = (ps - (int64_t)threshold ? ps - (int64_t)threshold : 1) * slot_ps;
    } else if (lr >= (int64_t)threshold) {
      diff = (lr - (int64_t)threshold ? lr - (int64_t)threshold : 1) * slot_ps;
    } else {
      int64_t r = lr > ps ? lr : ps;
      diff = -((int64_t)threshold - r) * slot_ps;
    }
    int64_t p = (int64_t)x->scan_period_ps + diff;
    x->scan_period_ps = p < (int64_t)lo ? lo : p > (int64_t)hi ? hi : (uint64_t)p;
  }
  x->faults_local = x->faults_remote = x->faults_private = x->faults_shared = x->faults_migrate_fail = 0;
}

/* numa_promotion_adjust_threshold: once a threshold period (scan_period_max) has passed, the
 * hot threshold moves by a sixteenth of twice the default toward promoting as many candidates
 * as the rate limit allows over that period (less than 90 %: raise it; more than 110 %: lower
 * it), between one step and twice the default */
static void adjust_threshold(lx_t *x, uint64_t now) {
  if (now - x->th_start_ps <= x->period_max_ps) return;
  x->th_start_ps = now;
  uint64_t ref_cand = x->rate_limit_pages * x->period_max_ps / x->second_ps;
  uint64_t diff = x->candidates - x->th_candidates;
  uint64_t unit = x->hot_threshold_ps * 2 / 16; /* NUMA_MIGRATION_ADJUST_STEPS */
  uint64_t th = x->threshold_ps ? x->threshold_ps : x->hot_threshold_ps;
  if (diff > ref_cand * 11 / 10) th = th > 2 * unit ? th - unit : unit;
  else if (diff < ref_cand * 9 / 10) th = th + unit < 2 * x->hot_threshold_ps ? th + unit : 2 * x->hot_threshold_ps;
  x->th_candidates = x->candidates;
  x->threshold_ps = th;
}

/* numa_promotion_rate_limit: every candidate counts (PGPROMOTE_CANDIDATE); once a second's
 * candidates reach the limit, the rest of that second's are refused */
static int rate_limited(lx_t *x, uint64_t now) {
  x->candidates++;
  if (now - x->rl_start_ps > x->second_ps) {
    x->rl_start_ps = now;
    x->rl_candidates = x->candidates;
  }
  return x->candidates - x->rl_candidates >= x->rate_limit_pages;
}

/* should_numa_migrate_memory, its memory-tiering branch, for a hint fault on a slow-tier page
 * whose protection was set `latency` ago: with enough free memory in the fast node, promote and
 * forget the threshold; else promote only under the (adjusted) hot threshold and within the
 * rate limit. */
int lx_should_promote(lx_t *x, uint64_t now, uint64_t latency, int free_enough) {
  if (free_enough) {
    x->threshold_ps = 0;
    return 1;
  }
  adjust_threshold(x, now);
  uint64_t th = x->threshold_ps ? x->threshold_ps : x->hot_threshold_ps;
  if (latency >= th) {
    x->refused_cold++;
    return 0;
  }
  if (rate_limited(x, now)) {
    x->refused_rate++;
    return 0;
  }
  return 1;
}

/* __setup_per_zone_wmarks for a node of `pages` (one zone a node): min is the node's share of
 * min_free_kbytes (by default int_sqrt(16 x the machine's kilobytes), within 128 KiB..256 MiB:
 * calculate_min_free_kbytes); low, high and promo each add the larger of a quarter of min and
 * watermark_scale_factor / 10000 of the node. */
void lx_watermarks(const emu_config_t *c, int node, uint64_t w[LX_NWMARK]) {
  uint64_t total_kb = 0;
  for (int n = 0; n < c->nnodes; n++) total_kb += c->cap_bytes[n] >> 10;
  uint64_t min_kb = c->min_free_kbytes;
  if (!min_kb) {
    uint64_t v = total_kb * 16, r = 0;
    for (uint64_t bit = (uint64_t)1 << 62; bit; bit >>= 2) /* integer square root */
      if (v >= r + bit) {
        v -= r + bit;
        r = (r >> 1) + bit;
      } else {
        r >>= 1;
      }
    min_kb = r < 128 ? 128 : r > 262144 ? 262144 : r;
  }
  uint64_t pages = c->cap_bytes[node] >> EMU_PAGE_SHIFT, min_total = min_kb >> (EMU_PAGE_SHIFT - 10);
  uint64_t min = total_kb ? (uint64_t)((double)min_total * (double)(c->cap_bytes[node] >> 10) / (double)total_kb) : 0;
  uint64_t step = (uint64_t)((double)pages * c->watermark_scale_factor / 10000);
  if (min / 4 > step) step = min / 4;
  w[LX_MIN] = min;
  w[LX_LOW] = min + step;
  w[LX_HIGH] = min + 2 * step;
  w[LX_PROMO] = min + 3 * step;
}

/* pgdat_free_space_enough: the fast node has more free than its promo watermark plus a
 * sixteenth of it (the kernel's floor of 1 GiB is `nb_enough_min_bytes`) */
int lx_free_space_enough(const emu_config_t *c, uint64_t free_pages, const uint64_t w[LX_NWMARK]) {
  uint64_t enough = (c->cap_bytes[0] >> EMU_PAGE_SHIFT) >> 4, floor = c->nb_enough_min_bytes >> EMU_PAGE_SHIFT;
  if (floor > enough) enough = floor;
  return free_pages > w[LX_PROMO] + enough;
}
