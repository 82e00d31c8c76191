/* options.c: every option of libstrata in one table. The table is the documentation.
 *
 * Each option is read from STRATA_<NAME> on first use. Sizes accept K/M/G suffixes,
 * booleans 1/true/yes/on (and 0/false/no/off). A value that does not parse keeps the default
 * and says so on stderr (once). */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum opt_type_e { T_BOOL, T_SIZE, T_STRING, T_ENUM } opt_type_t;

typedef struct option_s {
  const char *name;     /* STRATA_ + upper case of this */
  opt_type_t type;
  int64_t def;
  const char *unit;
  const char *doc;
  const char *choices;  /* T_ENUM: comma separated, value = index */
} option_t;

static const option_t options[OPT__COUNT] = {
    [OPT_VERBOSE] = {"verbose", T_BOOL, 0, "bool",
                     "print options at start and statistics at exit, to stderr", NULL},
    [OPT_TIERS] = {"tiers", T_STRING, 0, "node lists",
                   "tier override, fastest first: '0,2;1' = tier 0 nodes 0,2; tier 1 node 1", NULL},
    [OPT_BIND] = {"bind", T_ENUM, BIND_PREFERRED, "mode",
                  "how tier arenas bind pages: preferred (the tier's nodes nearest first, then any "
                  "node when they are full) or strict",
                  "preferred,strict"},
    [OPT_SYSFS] = {"sysfs", T_STRING, 0, "path",
                   "sysfs root for topology discovery (tests use fixture trees)", NULL},
    [OPT_TCACHE_BYTES] = {"tcache_bytes", T_SIZE, 64 * 1024, "bytes",
                          "most bytes a thread caches per size class", NULL},
    [OPT_COLOUR] = {"colour", T_BOOL, 0, "bool",
                    "mixed pages: an arena's k-th new page starts its first object at cache "
                    "line 37k mod 64, so objects laid out alike on every page spread over the "
                    "cache's sets (costs some packing)",
                    NULL},
    [OPT_CONTEXTS] = {"contexts", T_BOOL, 1, "bool",
                      "preload: track allocation contexts (call stack + size class)", NULL},
    [OPT_CONTEXT_DEPTH] = {"context_depth", T_SIZE, 16, "frames",
                           "preload: return addresses hashed into a context (1..16)", NULL},
    [OPT_CONTEXT_MIN] = {"context_min", T_SIZE, 64, "bytes",
                         "preload: smaller allocations get no context", NULL},
    [OPT_FAST_BELOW] = {"fast_below", T_SIZE, 64, "bytes",
                        "preload: smaller allocations always go to the fast tier (hmalloc)", NULL},
    [OPT_TRACK_MIN] = {"track_min", T_SIZE, 4096, "bytes",
                       "preload: from this size objects are page aligned and recorded (bkmalloc)",
                       NULL},
    [OPT_UNWIND] = {"unwind", T_ENUM, UNWIND_CACHED, "mode",
                    "preload: stack capture: cached (each return address's unwind-table rule, read "
                    "once) or dwarf (libgcc's unwinder every time)",
                    "cached,dwarf"},
    [OPT_SMALL_BLOCKS] = {"small_blocks", T_SIZE, 256 * 1024, "bytes",
                          "preload: once a context has allocated this much, its objects below "
                          "track_min live in spans of its own, recorded for a daemon as blocks "
                          "(bkmalloc's small-object blocks); 0: never",
                          NULL},
    [OPT_DIRECTIVE] = {"directive", T_STRING, 0, "directive",
                       "preload: where allocations go that no rule or daemon places (default, fast, "
                       "slow, tier:N); a daemon may change it",
                       NULL},
    [OPT_RULES] = {"rules", T_STRING, 0, "path", "preload: placement rules file for contexts",
                   NULL},
    [OPT_REPORT] = {"report", T_STRING, 0, "path",
                    "preload: write the per-context report here at exit (%p = pid)", NULL},
    [OPT_PRIORITY] = {"priority", T_STRING, 0, "priority",
                      "preload: the process's claim on the fast tier for a daemon (high, normal, "
                      "low, or -1000..1000; unset: normal); higher is promoted first, demoted last",
                      NULL},
    [OPT_TRACK_WRITES] = {"track_writes", T_BOOL, 1, "bool",
                          "preload: register Strata's memory for a daemon's write tracker "
                          "(userfaultfd asynchronous write-protect, Linux 6.7+); nothing is "
                          "protected until a daemon scans",
                          NULL},
    [OPT_DAEMON_SOCKET] = {"daemon_socket", T_STRING, 0, "path",
                           "preload: the daemon's control socket, told of this process when it "
                           "makes its channel (unset: /run/strata/stratad.sock)",
                           NULL},
};

static _Atomic int64_t values[OPT__COUNT];
static _Atomic int loaded[OPT__COUNT]; /* 0 no, 1 yes */

static void env_name(const option_t *o, char *buf, size_t n) {
  size_t i = 0;
  const char *pre = "STRATA_";
  for (; *pre && i + 1 < n; pre++) buf[i++] = *pre;
  for (const char *s = o->name; *s && i + 1 < n; s++)
    buf[i++] = (*s >= 'a' && *s <= 'z') ? (char)(*s - 'a' + 'A') : *s;
  buf[i] = 0;
}

static bool parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno) return false;
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return false;
  if (v > (unsigned long long)(INT64_MAX >> shift)) return false;
  *out = (int64_t)(v << shift);
  return true;
}

static bool parse_bool(const char *s, int64_t *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) { *out = 1; return true; }
    if (!strcasecmp(s, no[i])) { *out = 0; return true; }
  }
  return false;
}

static bool parse_enum(const char *s, const char *choices, int64_t *out) {
  size_t len = strlen(s);
  int64_t idx = 0;
  for (const char *c = choices; *c; idx++) {
    const char *e = strchr(c, ',');
    size_t n = e ? (size_t)(e - c) : strlen(c);
    if (n == len && !strncasecmp(c, s, n)) { *out = idx; return true; }
    if (!e) break;
    c = e + 1;
  }
  return false;
}

static void load(option_id_t id) {
  const option_t *o = &options[id];
  char name[64];
  env_name(o, name, sizeof name);
  const char *s = secure_getenv(name); /* none in a setuid, setgid or capability-raising exec */
  int64_t v = o->def;
  if (s && o->type != T_STRING) {
    bool ok = o->type == T_BOOL   ? parse_bool(s, &v)
              : o->type == T_SIZE ? parse_size(s, &v)
                                  : parse_enum(s, o->choices, &v);
    if (!ok) {
      v = o->def;
      _strata_warn("strata: %s='%s' is not a valid %s; using the default\n", name, s, o->unit);
    }
  }
  atomic_store(&values[id], v);
  atomic_store(&loaded[id], 1);
}

int64_t _strata_option(option_id_t id) {
  if (unlikely(!atomic_load_explicit(&loaded[id], memory_order_acquire))) load(id);
  return atomic_load_explicit(&values[id], memory_order_relaxed);
}

const char *_strata_option_str(option_id_t id) {
  char name[64];
  env_name(&options[id], name, sizeof name);
  const char *s = secure_getenv(name);
  return (s && *s) ? s : NULL;
}

static void say(const char *fmt, va_list ap) {
  char buf[512];
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void _strata_message(const char *fmt, ...) {
  if (!_strata_option(OPT_VERBOSE)) return;
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
}

/* Always said: a setting ignored in silence is worse than a line on stderr. */
void _strata_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
}

void _strata_assert_fail(const char *expr, const char *file, int line) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "strata: assertion failed: %s (%s:%d)\n", expr, file, line);
  if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
  abort(); /* an invariant is broken: continuing would corrupt memory */
}

void strata_options_print(strata_output_fn *out, void *arg) {
  for (int i = 0; i < OPT__COUNT; i++) {
    const option_t *o = &options[i];
    char name[64], val[96], def[32], line[512];
    env_name(o, name, sizeof name);
    if (o->type == T_STRING) {
      const char *s = _strata_option_str((option_id_t)i);
      snprintf(val, sizeof val, "%s", s ? s : "(unset)");
      snprintf(def, sizeof def, "(unset)");
    } else if (o->type == T_ENUM) {
      int64_t v = _strata_option((option_id_t)i), k = 0;
      const char *c = o->choices;
      for (; k < v && strchr(c, ','); k++) c = strchr(c, ',') + 1;
      const char *e = strchr(c, ',');
      snprintf(val, sizeof val, "%.*s", (int)(e ? (size_t)(e - c) : strlen(c)), c);
      e = strchr(o->choices, ',');
      snprintf(def, sizeof def, "%.*s", (int)(e ? (size_t)(e - o->choices) : strlen(o->choices)),
               o->choices);
    } else {
      snprintf(val, sizeof val, "%lld", (long long)_strata_option((option_id_t)i));
      snprintf(def, sizeof def, "%lld", (long long)o->def);
    }
    snprintf(line, sizeof line, "%-22s %-12s default %-10s [%s] %s\n", name, val, def, o->unit,
             o->doc);
    if (out) out(line, arg);
    else (void)!write(2, line, strlen(line));
  }
}
