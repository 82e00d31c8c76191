/* report.c: the per-context report a process writes at exit when STRATA_REPORT names a file
 * (`strata run --report` sets it): every context with its counters, directive, symbolized
 * stack (dladdr, at report time), and where its tracked objects' pages are, from the
 * machine. JSON, one object; read by `strata run`. */
#include "internal.h"
#include "util/json.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *directive_name(int32_t d, char *buf, size_t n) {
  switch (d) {
    case STRATA_DIRECTIVE_DEFAULT: return "default";
    case STRATA_DIRECTIVE_FAST: return "fast";
    case STRATA_DIRECTIVE_SLOW: return "slow";
    default: snprintf(buf, n, "tier:%d", d - STRATA_DIRECTIVE_TIER0); return buf;
  }
}

/* Open the report file for writing, refusing to follow a symbolic link in its last part or to
 * write over a file this process does not own or that has other names (a hard link planted in
 * a shared folder): -1, said on stderr. An existing file of its own is rewritten. */
static int report_open(const char *file) {
  int fd = open(file, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  struct stat st;
  const char *why = NULL;
  if (fd < 0) why = errno == ELOOP ? "it is a symbolic link" : strerror(errno);
  else if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_uid != geteuid()) why = "another user owns it";
  else if (st.st_nlink != 1) why = "it has other names (hard links)";
  else if (ftruncate(fd, 0) != 0) why = strerror(errno);
  if (!why) return fd;
  _strata_warn("strata: report not written to %s: %s\n", file, why);
  if (fd >= 0) close(fd);
  return -1;
}

void _strata_report_write(void) {
  const char *path = _strata_option_str(OPT_REPORT);
  strata_channel_header_t *h = _strata_channel();
  if (!path || !h) return;
  bool was = _strata_in_capture();
  _strata_set_in_capture(true); /* dladdr and friends may allocate: keep them out of contexts */
  char file[512];
  size_t k = 0;
  for (const char *c = path; *c && k + 24 < sizeof file; c++) { /* %p = pid */
    if (c[0] == '%' && c[1] == 'p') {
      k += (size_t)snprintf(file + k, sizeof file - k, "%lld", (long long)h->pid);
      c++;
    } else {
      file[k++] = *c;
    }
  }
  file[k] = 0;
  static char buf[16384];
  strata_json_t o;
  int fd = report_open(file);
  if (fd < 0) {
    _strata_set_in_capture(was);
    return;
  }
  _strata_json_init(&o, fd, buf, sizeof buf);
  strata_context_t *ctx = (strata_context_t *)((char *)h + h->contexts_offset);
  strata_object_t *obj = (strata_object_t *)((char *)h + h->objects_offset);
  char exe[512];
  ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[el > 0 ? el : 0] = 0;
  Dl_info main_info; /* the main program's base: where its program headers are */
  void *main_base = dladdr((void *)getauxval(AT_PHDR), &main_info) ? main_info.dli_fbase : NULL;
  _strata_json_put(&o, "{\"pid\":%lld,\"exe\":", (long long)h->pid);
  _strata_json_str(&o, exe);
  _strata_json_put(&o, ",\"contexts_used\":%llu,\"contexts_dropped\":%llu,\"objects_dropped\":%llu,\"contexts\":[",
      (unsigned long long)h->contexts_used, (unsigned long long)h->contexts_dropped,
      (unsigned long long)h->objects_dropped);
  int first = 1;
  for (uint64_t i = 1; i <= h->contexts_used && i < h->context_capacity; i++) { /* made in order */
    strata_context_t *c = &ctx[i];
    if (!c->id || !c->allocs) continue;
    char dbuf[24];
    _strata_json_put(&o, "%s{\"index\":%llu,\"id\":\"%016llx\",\"size_class\":%u,\"class_bytes\":%zu,\"directive\":\"%s\","
            "\"rule\":%u,\"allocs\":%llu,\"frees\":%llu,\"live_objects\":%llu,\"live_bytes\":%llu,"
            "\"peak_live_bytes\":%llu,\"bytes_allocated\":%llu,",
        first ? "" : ",", (unsigned long long)i, (unsigned long long)c->id, c->size_class,
        c->size_class ? _strata_class_size(c->size_class) : (size_t)0,
        directive_name(c->directive, dbuf, sizeof dbuf), c->rule, (unsigned long long)c->allocs,
        (unsigned long long)c->frees, (unsigned long long)c->live_objects,
        (unsigned long long)c->live_bytes, (unsigned long long)_strata_context_peak((uint32_t)i),
        (unsigned long long)c->bytes_allocated);
    first = 0;
    /* where the context's live tracked objects are, asked of the machine */
    strata_residency_t total, r;
    memset(&total, 0, sizeof total);
    uint64_t tracked = 0;
    for (uint64_t k = 1; k < h->objects_high; k++) {
      if (!obj[k].addr || obj[k].context != i) continue;
      tracked += obj[k].len;
      if (strata_where((void *)(uintptr_t)obj[k].addr, obj[k].len, &r) != 0) continue;
      for (int t = 0; t < STRATA_MAX_TIERS; t++) total.tier_bytes[t] += r.tier_bytes[t];
      for (int nd = 0; nd < STRATA_MAX_NODES; nd++) total.node_bytes[nd] += r.node_bytes[nd];
    }
    _strata_json_put(&o, "\"tracked_bytes\":%llu,\"resident_node_bytes\":{", (unsigned long long)tracked);
    int f2 = 1;
    for (int nd = 0; nd < STRATA_MAX_NODES; nd++)
      if (total.node_bytes[nd]) {
        _strata_json_put(&o, "%s\"%d\":%llu", f2 ? "" : ",", nd, (unsigned long long)total.node_bytes[nd]);
        f2 = 0;
      }
    _strata_json_put(&o, "},\"stack\":[");
    for (uint32_t f = 0; f < c->nframes; f++) {
      Dl_info info;
      void *a = (void *)(uintptr_t)c->frames[f];
      _strata_json_put(&o, "%s{\"addr\":\"%p\",\"symbol\":", f ? "," : "", a);
      if (dladdr((char *)a - 1, &info) && info.dli_sname) {
        char sym[300];
        snprintf(sym, sizeof sym, "%s+0x%lx", info.dli_sname,
                 (unsigned long)((char *)a - (char *)info.dli_saddr));
        _strata_json_str(&o, sym);
      } else {
        _strata_json_put(&o, "null");
      }
      _strata_json_put(&o, ",\"object\":");
      if (dladdr((char *)a - 1, &info) && info.dli_fname) {
        /* dladdr names the main program by its argv[0], which a server may have written its
         * process title over (Redis does): /proc/self/exe names it for sure */
        int main_program = main_base && info.dli_fbase == main_base;
        _strata_json_str(&o, main_program && *exe ? exe : info.dli_fname);
        _strata_json_put(&o, ",\"offset\":\"0x%lx\"", (unsigned long)((char *)a - (char *)info.dli_fbase));
      } else {
        _strata_json_put(&o, "null");
      }
      _strata_json_put(&o, "}");
    }
    _strata_json_put(&o, "]}");
  }
  _strata_json_put(&o, "]}\n");
  _strata_json_flush(&o);
  close(fd);
  _strata_set_in_capture(was);
}
