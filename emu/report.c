/* report.c: the report written at exit to $STRATA_EMU_REPORT, which `strata emu run` reads
 * (crates/strata-emu's Report mirrors it; bump "version" when its shape changes). */
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/json.h"

static void put_counters(strata_json_t *o, const uint64_t *v) {
  static const char *const names[] = {
#define X(n) #n,
#define D(n, e) #n,
      EMU_COUNTERS(X, D)
#undef X
#undef D
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    _strata_json_put(o, "%s\"%s\": %llu", i ? ", " : "", names[i], (unsigned long long)v[i]);
}

static void counters_of(const emu_thread_t *t, uint64_t *v) {
  int i = 0;
#define X(n) v[i++] = t->n;
#define D(n, e) v[i++] = (e);
  EMU_COUNTERS(X, D)
#undef X
#undef D
}

/* The report into fd, with buf for its text; the engine's statistics only at exit (a
 * snapshot is taken in a signal handler, where the engine's report cannot be asked for). */
static void write_report(int fd, char *buf, size_t size, int at_exit) {
  strata_json_t o;
  _strata_json_init(&o, fd, buf, size);
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
  _strata_json_put(&o, "{\"version\": 4, \"preset\": ");
  _strata_json_str(&o, emu_cfg.preset);
  _strata_json_put(&o, ", \"kernel\": \"%s\", \"sim_ns\": %llu, \"threads\": %d,\n \"peak_resident_pages\": %llu,\n",
                   emu_kernel_name(emu_cfg.kernel), (unsigned long long)(sim_ps / 1000), nt,
                   (unsigned long long)emu_peak_resident);
  _strata_json_put(&o, " \"totals\": {");
  put_counters(&o, total);
  _strata_json_put(&o, "},\n \"background\": {\"ns\": %llu, \"moved_pages\": %llu, \"promoted_pages\": %llu, "
                       "\"demoted_pages\": %llu, \"shootdowns\": %llu, \"scan_ns\": %llu, \"scanned_pages\": %llu},\n",
                   (unsigned long long)(atomic_load(&emu_bg_ps) / 1000), (unsigned long long)emu_bg_counter(0),
                   (unsigned long long)emu_bg_counter(1), (unsigned long long)emu_bg_counter(2),
                   (unsigned long long)emu_bg_counter(3), (unsigned long long)(atomic_load(&emu_scan_ps) / 1000),
                   (unsigned long long)emu_walked_pages());
  _strata_json_put(&o, " \"pingpong_pages\": %llu, \"pingpong_window_ms\": %g,\n",
                   (unsigned long long)emu_pingpong_pages(), emu_cfg.pingpong_window_ms);
  _strata_json_put(&o, " \"transactional\": {\"commits\": %llu, \"aborts\": %llu, \"shadow_demotions\": %llu, "
                       "\"shadows\": %llu, \"shadows_written\": %llu, \"shadows_reclaimed\": %llu},\n",
                   (unsigned long long)emu_tx_counter(0), (unsigned long long)emu_tx_counter(1),
                   (unsigned long long)emu_tx_counter(2), (unsigned long long)emu_tx_counter(3),
                   (unsigned long long)emu_tx_counter(4), (unsigned long long)emu_tx_counter(5));
  if (emu_cfg.kernel == KERNEL_LINUX) {
    const lx_t *x = emu_linux_state();
    uint64_t th = x->threshold_ps ? x->threshold_ps : x->hot_threshold_ps;
    _strata_json_put(&o,
                     " \"linux\": {\"time_scale\": %g, \"scans\": %llu, \"passes\": %llu, \"marked_pages\": %llu, "
                     "\"scan_period_ns\": %llu, \"hot_threshold_ns\": %llu, \"candidates\": %llu, "
                     "\"promoted_pages\": %llu, \"refused_cold\": %llu, \"refused_rate\": %llu, "
                     "\"refused_unbalanced\": %llu, \"kswapd_wakeups\": %llu, \"kswapd_demoted_pages\": %llu, "
                     "\"direct_demoted_pages\": %llu, \"spilled_allocations\": %llu},\n",
                     emu_cfg.time_scale, (unsigned long long)x->scans, (unsigned long long)x->passes,
                     (unsigned long long)x->marked, (unsigned long long)(x->scan_period_ps / 1000),
                     (unsigned long long)(th / 1000), (unsigned long long)x->candidates,
                     (unsigned long long)x->promoted, (unsigned long long)x->refused_cold,
                     (unsigned long long)x->refused_rate, (unsigned long long)x->refused_unbalanced,
                     (unsigned long long)x->kswapd_wakeups, (unsigned long long)x->kswapd_demoted,
                     (unsigned long long)x->direct_demoted, (unsigned long long)x->spilled);
  }
  _strata_json_put(&o, " \"nodes\": [");
  for (int n = 0; n < emu_cfg.nnodes; n++)
    _strata_json_put(&o, "%s{\"node\": %d, \"resident_pages\": %llu, \"capacity_pages\": %llu, \"memory_accesses\": %llu}",
                     n ? ", " : "", n, (unsigned long long)atomic_load(&emu_resident[n]),
                     (unsigned long long)(emu_cfg.cap_bytes[n] >> EMU_PAGE_SHIFT), (unsigned long long)node_acc[n]);
  _strata_json_put(&o, "],\n \"samples_lost\": %llu, \"hint_fault_events_lost\": %llu,\n \"per_thread\": [",
                   (unsigned long long)emu_samples_lost(), (unsigned long long)emu_fault_events_lost());
  for (int i = 0; i < nt; i++) {
    emu_thread_t *t = emu_thread_at(i);
    counters_of(t, v);
    _strata_json_put(&o, "%s\n  {\"thread\": %d, \"sim_ns\": %llu, ", i ? "," : "", i,
                     (unsigned long long)(t->clock_ps / 1000));
    put_counters(&o, v);
    _strata_json_put(&o, "}");
  }
  _strata_json_put(&o, "]");
  const char *engine = at_exit ? emu_engine_report(emu_self) : NULL;
  if (engine) {
    _strata_json_put(&o, ",\n \"engine\": ");
    _strata_json_put(&o, "%s", engine);
  }
  _strata_json_put(&o, "}\n");
  _strata_json_flush(&o);
}

__attribute__((destructor)) static void report(void) {
  const char *path = emu_getenv("STRATA_EMU_REPORT");
  if (!path || !*path) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  static char buf[1 << 16];
  write_report(fd, buf, sizeof buf, 1);
  close(fd);
}

/* Snapshots: STRATA_EMU_SNAPSHOT_SIGNAL makes the program write its report so far to
 * $STRATA_EMU_REPORT.snapshot (written aside and renamed, so a reader never sees half of
 * one). A driver takes one before and one after the phase it measures, e.g. a server's
 * requests. The handler reads the counters of threads that may be running: a snapshot is
 * exact to within the accesses in flight. */
static char snapshot_path[4096], snapshot_tmp[4096 + 8];

static void on_snapshot(int sig) {
  (void)sig;
  int saved = errno;
  int fd = open(snapshot_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    static char buf[1 << 16];
    write_report(fd, buf, sizeof buf, 0);
    close(fd);
    rename(snapshot_tmp, snapshot_path);
  }
  errno = saved;
}

__attribute__((constructor)) static void snapshot_setup(void) {
  const char *path = emu_getenv("STRATA_EMU_REPORT");
  if (!path || !*path || strlen(path) + 16 > sizeof snapshot_path) return;
  snprintf(snapshot_path, sizeof snapshot_path, "%s.snapshot", path);
  snprintf(snapshot_tmp, sizeof snapshot_tmp, "%s.tmp", snapshot_path);
  struct sigaction sa = {0};
  sa.sa_handler = on_snapshot;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(STRATA_EMU_SNAPSHOT_SIGNAL, &sa, NULL);
}
