/* rules.c: placement directives for allocation contexts from a rules file (STRATA_RULES, or
 * `strata run --rules FILE`), until a daemon sets them. One rule a line:
 *
 *   # comment
 *   slow    func=build_cache                 any frame of the stack is build_cache
 *   fast    func=lookup caller=main          a frame is lookup and the next one out is main
 *   tier:1  id=0x8c3f2a91d4e0b7a5            the context with this id (from a report)
 *   default func=g_malloc0                   the first matching rule wins
 *
 * Symbols come from dladdr, so they are the dynamic symbols of each object: functions of a
 * program need -rdynamic (or to be in a shared library) to be matched by name.
 * This is the only parser of the format; the CLI checks files through strata_rules_check. */
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RULES 64
#define NAME_MAX_LEN 128

typedef struct rule_s {
  int32_t directive;
  uint64_t id;                 /* 0: not matched by id */
  char func[NAME_MAX_LEN];     /* "": any */
  char caller[NAME_MAX_LEN];   /* "": any */
} rule_t;

static rule_t rules[MAX_RULES];
static int nrules;

int _strata_parse_directive(const char *s, int32_t *out) {
  if (!strcmp(s, "default")) *out = STRATA_DIRECTIVE_DEFAULT;
  else if (!strcmp(s, "fast")) *out = STRATA_DIRECTIVE_FAST;
  else if (!strcmp(s, "slow")) *out = STRATA_DIRECTIVE_SLOW;
  else if (!strncmp(s, "tier:", 5) && s[5] >= '0' && s[5] <= '9' && !s[6])
    *out = STRATA_DIRECTIVE_TIER0 + (s[5] - '0');
  else return -1;
  return 0;
}

/* Parse text into out[]; on error, a message with the line number in err. Returns the
 * number of rules, or -1. */
static int parse(char *text, rule_t *out, int max, char *err, size_t errn) {
  int n = 0, lineno = 0;
  for (char *line = text, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save, *tok = strtok_r(line, " \t\r", &save);
    if (!tok) continue;
    if (n == max) {
      snprintf(err, errn, "line %d: more than %d rules", lineno, max);
      return -1;
    }
    rule_t r;
    memset(&r, 0, sizeof r);
    if (_strata_parse_directive(tok, &r.directive)) {
      snprintf(err, errn, "line %d: '%s' is not a directive (default, fast, slow, tier:N)", lineno, tok);
      return -1;
    }
    int matchers = 0;
    while ((tok = strtok_r(NULL, " \t\r", &save))) {
      char *eq = strchr(tok, '=');
      if (!eq || !eq[1]) {
        snprintf(err, errn, "line %d: '%s' is not key=value (func=, caller=, id=)", lineno, tok);
        return -1;
      }
      *eq = 0;
      const char *v = eq + 1;
      if (!strcmp(tok, "func") || !strcmp(tok, "caller")) {
        if (strlen(v) >= NAME_MAX_LEN) {
          snprintf(err, errn, "line %d: name too long", lineno);
          return -1;
        }
        strcpy(!strcmp(tok, "func") ? r.func : r.caller, v);
      } else if (!strcmp(tok, "id")) {
        char *end;
        errno = 0;
        r.id = strtoull(v, &end, 16);
        if (*end || errno || !r.id) {
          snprintf(err, errn, "line %d: id '%s' is not a non-zero hex number", lineno, v);
          return -1;
        }
      } else {
        snprintf(err, errn, "line %d: unknown key '%s' (func, caller, id)", lineno, tok);
        return -1;
      }
      matchers++;
    }
    if (!matchers) {
      snprintf(err, errn, "line %d: a rule needs func=, caller= or id=", lineno);
      return -1;
    }
    if (r.caller[0] && !r.func[0]) {
      snprintf(err, errn, "line %d: caller= needs func=", lineno);
      return -1;
    }
    out[n++] = r;
  }
  return n;
}

static int read_file(const char *path, char *buf, size_t n, char *err, size_t errn) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errn, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  size_t len = 0;
  ssize_t r;
  while (len + 1 < n && (r = read(fd, buf + len, n - 1 - len)) > 0) len += (size_t)r;
  close(fd);
  if (len + 1 >= n) {
    snprintf(err, errn, "%s is larger than %zu bytes", path, n - 1);
    return -1;
  }
  buf[len] = 0;
  return 0;
}

int strata_rules_check(const char *path, char *err, size_t errn) {
  static char text[65536];
  static rule_t tmp[MAX_RULES];
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  int n = read_file(path, text, sizeof text, err, errn) ? -1 : parse(text, tmp, MAX_RULES, err, errn);
  pthread_mutex_unlock(&lock);
  return n;
}

/* Load STRATA_RULES (called once, at preload start). A bad file is reported and ignored. */
void _strata_rules_load(void) {
  const char *path = _strata_option_str(OPT_RULES);
  if (!path) return;
  static char text[65536];
  char err[256];
  int n = read_file(path, text, sizeof text, err, sizeof err) ? -1 : parse(text, rules, MAX_RULES, err, sizeof err);
  if (n < 0) {
    char msg[400];
    int k = snprintf(msg, sizeof msg, "strata: rules file ignored: %s\n", err);
    if (k > 0) (void)!write(2, msg, (size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1);
    return;
  }
  nrules = n;
}

static bool frame_is(uint64_t addr, const char *name) {
  Dl_info info;
  /* addr - 1: inside the call instruction, not after it (tail of a function) */
  return dladdr((void *)(uintptr_t)(addr - 1), &info) && info.dli_sname && !strcmp(info.dli_sname, name);
}

/* Set a new context's directive from the first rule that matches it. */
void _strata_rules_apply(strata_context_t *c) {
  for (int i = 0; i < nrules; i++) {
    const rule_t *r = &rules[i];
    if (r->id && r->id != c->id) continue;
    bool ok = !r->func[0];
    for (uint32_t f = 0; !ok && f < c->nframes; f++)
      ok = frame_is(c->frames[f], r->func) &&
           (!r->caller[0] || (f + 1 < c->nframes && frame_is(c->frames[f + 1], r->caller)));
    if (ok) {
      c->directive = r->directive;
      c->rule = (uint32_t)i + 1;
      return;
    }
  }
}
