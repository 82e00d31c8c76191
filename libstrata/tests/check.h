/* check.h: the smallest test harness: CHECK records a failure with its line and goes on;
 * check_done() prints "N passed, N failed" and gives the exit status. */
#ifndef STRATA_CHECK_H
#define STRATA_CHECK_H
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

static int check_done(const char *name) {
  printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
  return check_failed ? 1 : 0;
}
#endif
