/* json.h: a JSON writer that never allocates, shared by libstrata's context report and the
 * emulated machine's report (emu/report.c) and configuration (emu/config.c).
 *
 * Text goes into a buffer the caller owns. With a file descriptor, a full buffer is written
 * out and reused; without one (fd -1), the text stays in the buffer, and what does not fit is
 * dropped and flagged (`overflow`). The writer formats with vsnprintf and copies nothing with
 * memcpy, so the emulator, which interposes memcpy, can use it. */
#ifndef STRATA_JSON_H
#define STRATA_JSON_H

#include <stddef.h>

typedef struct strata_json_s {
  int fd;         /* -1: into the buffer only */
  char *buf;
  size_t cap, len;
  int overflow;   /* fd -1: something did not fit */
} strata_json_t;

void _strata_json_init(strata_json_t *j, int fd, char *buf, size_t cap);
/* Raw text, printf-style: punctuation, keys, numbers. */
void _strata_json_put(strata_json_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A string value, quoted, with quotes, backslashes and control characters escaped; NULL is
 * written as null. */
void _strata_json_str(strata_json_t *j, const char *s);
/* Write out what the buffer holds (fd >= 0); the buffer is NUL-terminated either way. */
void _strata_json_flush(strata_json_t *j);

#endif
