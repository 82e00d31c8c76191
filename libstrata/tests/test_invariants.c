/* test_invariants.c: the level-2 invariant walks (alloc/check.c) catch what they are for. In
 * the build with STRATA_DEBUG=2 (the AddressSanitizer one), each case breaks one invariant in a
 * forked child and checks the child aborts on its next allocator call; in the other builds the
 * walks are compiled out, which is checked too (the same corruption passes unnoticed). */
#include "internal.h"
#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run f in a child with stderr silenced: did it abort? */
static int aborts(void (*f)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    f();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* A mixed page whose `used` no longer counts its granules. */
static void break_mixed_count(void) {
  strata_arena_t *a = strata_arena_new(strata_default());
  void *p = strata_malloc(100, strata_in_arena(a)), *q = strata_malloc(100, strata_in_arena(a));
  _strata_page_of(p)->u.mixed.used += 3;
  strata_free(q);
}

/* A span whose `used` disagrees with its free list, found when a block goes back to it. */
static void break_span_count(void) {
  void *p = strata_malloc(48, strata_default());
  page_t *span = _strata_page_of(p);
  central_t *c = &span->arena->central[span->cls];
  pthread_mutex_lock(&c->lock);
  span->u.span.used--;
  pthread_mutex_unlock(&c->lock);
  strata_free(p);             /* into this thread's cache */
  _strata_tcache_flush_all(); /* and back to the span */
}

/* A segment whose used-page count is off, found when a run's pages go back. */
static void break_segment_count(void) {
  void *p = strata_malloc(5000, strata_in_arena(strata_arena_new(strata_default())));
  _strata_segment_of_page(_strata_page_of(p))->used_pages--;
  strata_free(p);
}

int main(void) {
  int on = STRATA_DEBUG >= 2;
  CHECK(aborts(break_mixed_count) == on);
  CHECK(aborts(break_span_count) == on);
  CHECK(aborts(break_segment_count) == on);
  printf("level-2 invariant walks %s\n", on ? "on: every broken invariant aborted" : "compiled out");
  return check_done("test_invariants");
}
