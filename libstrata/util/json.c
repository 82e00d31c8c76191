/* json.c: the non-allocating JSON writer of json.h. */
#include "util/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void _strata_json_init(strata_json_t *j, int fd, char *buf, size_t cap) {
  j->fd = fd;
  j->buf = buf;
  j->cap = cap;
  j->len = 0;
  j->overflow = 0;
  if (cap) buf[0] = 0;
}

void _strata_json_flush(strata_json_t *j) {
  if (j->fd < 0) return;
  size_t off = 0;
  while (off < j->len) {
    ssize_t w = write(j->fd, j->buf + off, j->len - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  j->len = 0;
  if (j->cap) j->buf[0] = 0;
}

static void vput(strata_json_t *j, const char *fmt, va_list ap) {
  for (int attempt = 0; attempt < 2; attempt++) {
    va_list aq;
    va_copy(aq, ap);
    size_t room = j->cap - j->len;
    int n = vsnprintf(j->buf + j->len, room, fmt, aq);
    va_end(aq);
    if (n < 0) return;
    if ((size_t)n < room) {
      j->len += (size_t)n;
      return;
    }
    j->buf[j->len] = 0; /* drop the partial text */
    if (j->fd < 0 || attempt) {
      j->overflow = 1;
      return;
    }
    _strata_json_flush(j); /* then try once more in the emptied buffer */
  }
}

void _strata_json_put(strata_json_t *j, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vput(j, fmt, ap);
  va_end(ap);
}

void _strata_json_str(strata_json_t *j, const char *s) {
  if (!s) {
    _strata_json_put(j, "null");
    return;
  }
  _strata_json_put(j, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') _strata_json_put(j, "\\%c", c);
    else if (c < 0x20) _strata_json_put(j, "\\u%04x", c);
    else _strata_json_put(j, "%c", c);
  }
  _strata_json_put(j, "\"");
}
