/* check.h: the smallest test harness: CHECK records a failure with its line and goes on;
 * check_done() prints "N passed, N failed" and gives the exit status. xorshift64() is the
 * tests' seeded, repeatable stream. */
#ifndef STRATA_CHECK_H
#define STRATA_CHECK_H
#include <stdint.h>
#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) check_passed++;                                                \
    else {                                                                   \
      check_failed++;                                                        \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                        \
  } while (0)

/* Marsaglia's xorshift64 (shifts 13, 7, 17), as the Rust side's strata_util::XorShift: the next
 * number of the stream in *s (which must not be 0). */
static inline uint64_t xorshift64(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int check_done(const char *name) {
  printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
  return check_failed ? 1 : 0;
}
#endif
