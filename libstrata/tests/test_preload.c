/* test_preload.c: the malloc family as glibc defines it, run with LD_PRELOAD=libstrata.so
 * (make c-test does). Checks that Strata really serves the calls (strata_owns), the edge
 * cases of each function, fork from a multi-threaded process, and thread exit.
 * Linked with -ldl only: strata_owns is looked up in the preloaded library. */
#include "check.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*owns)(const void *);

static void *thread_allocs(void *arg) {
  void **keep = arg;
  for (int i = 0; i < 10000; i++) free(malloc((size_t)i % 3000));
  *keep = malloc(777); /* freed by main after this thread is gone */
  return NULL;
}

/* Call malloc with rbp = fake, as code built without frame pointers may (regression: gas
 * under LD_PRELOAD crashed when rbp held -16 and fp + 16 wrapped past the bound check).
 * The file is built with -mno-red-zone, since the asm pushes below the stack pointer. */
__attribute__((noinline)) static void *malloc_with_rbp(size_t n, uintptr_t fake) {
  void *r;
  __asm__ volatile("push %%rbp\n\t"
                   "push %%rbx\n\t"
                   "mov %%rsp, %%rbx\n\t"
                   "and $-16, %%rsp\n\t"
                   "mov %%rdx, %%rbp\n\t"
                   "mov %%rsi, %%rdi\n\t"
                   "call malloc@PLT\n\t"
                   "mov %%rbx, %%rsp\n\t"
                   "pop %%rbx\n\t"
                   "pop %%rbp\n\t"
                   : "=a"(r), "+S"(n), "+d"(fake)
                   :
                   : "rdi", "rcx", "r8", "r9", "r10", "r11", "memory", "cc");
  return r;
}

static void *spinner(void *arg) {
  volatile int *stop = arg;
  while (!*stop) free(malloc(100)); /* busy in the allocator while main forks */
  return NULL;
}

int main(void) {
  owns = (int (*)(const void *))dlsym(RTLD_DEFAULT, "strata_owns");
  CHECK(owns != NULL); /* the test runs under the preload */
  if (!owns) return check_done("test_preload");

  void *a = malloc(0), *b = malloc(0);
  CHECK(a && b && a != b && owns(a) && owns(b));
  free(a);
  free(b);
  free(NULL);
  volatile size_t huge = SIZE_MAX; /* volatile: keep the compiler from judging the calls */
  errno = 0;
  CHECK(malloc(huge) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(huge / 2, 4) == NULL && errno == ENOMEM);
  int bad = 0;
  for (size_t n = 1; n < 300000; n = n * 3 + 1) {
    unsigned char *p = calloc(n, 1);
    if (!p || (uintptr_t)p % 16 || malloc_usable_size(p) < n || !owns(p)) bad++;
    for (size_t i = 0; i < n; i++) bad += p[i] != 0;
    memset(p, 0x5A, n);
    free(p);
  }
  CHECK(bad == 0);
  /* realloc: NULL, grow, shrink, 0 */
  char *r = realloc(NULL, 10);
  CHECK(r && owns(r));
  strcpy(r, "strata");
  r = realloc(r, 100000);
  CHECK(r && !strcmp(r, "strata"));
  r = realloc(r, 3);
  CHECK(r && !memcmp(r, "str", 3));
  errno = 0;
  CHECK(realloc(r, 0) == NULL);
  errno = 0;
  CHECK(reallocarray(NULL, huge / 2, 3) == NULL && errno == ENOMEM);
  void *ra = reallocarray(NULL, 10, 10);
  CHECK(ra && malloc_usable_size(ra) >= 100);
  free(ra);
  /* alignment family */
  void *m = NULL;
  CHECK(posix_memalign(&m, 3, 10) == EINVAL);
  CHECK(posix_memalign(&m, 4, 10) == EINVAL); /* not a multiple of sizeof(void *) */
  for (size_t al = 8; al <= ((size_t)1 << 22); al *= 2) {
    CHECK(posix_memalign(&m, al, 100) == 0 && (uintptr_t)m % al == 0 && owns(m));
    free(m);
    void *x = aligned_alloc(al, al * 2);
    CHECK(x && (uintptr_t)x % al == 0);
    free(x);
  }
  errno = 0;
  CHECK(aligned_alloc(24, 48) == NULL && errno == EINVAL);
  void *ma = memalign(24, 100); /* rounded up to 32, as glibc does */
  CHECK(ma && (uintptr_t)ma % 32 == 0);
  free(ma);
  void *v = valloc(10);
  CHECK(v && (uintptr_t)v % 4096 == 0);
  free(v);
  void *pv = pvalloc(5000);
  CHECK(pv && (uintptr_t)pv % 4096 == 0 && malloc_usable_size(pv) >= 8192);
  free(pv);
  CHECK(malloc_usable_size(NULL) == 0);
  /* garbage frame pointers: the context walk must stop, not fault. Only for the frame-pointer
   * walker: the asm has no CFI, which the DWARF unwinder rightly relies on. */
  const char *unwind = getenv("STRATA_UNWIND");
  int fp_mode = !unwind || strcmp(unwind, "dwarf") != 0;
  uintptr_t fakes[] = {(uintptr_t)-16, (uintptr_t)-8, 0, 8, 0xfe0, (uintptr_t)&fakes, (uintptr_t)1 << 47};
  for (size_t i = 0; fp_mode && i < sizeof fakes / sizeof fakes[0]; i++) {
    void *g = malloc_with_rbp(5000 + i, fakes[i]);
    CHECK(g && owns(g));
    free(g);
  }
  /* thread exit with live and cached blocks */
  void *kept = NULL;
  pthread_t t;
  pthread_create(&t, NULL, thread_allocs, &kept);
  pthread_join(t, NULL);
  CHECK(kept && owns(kept));
  free(kept);
  /* fork while another thread is inside the allocator: the child can still allocate */
  volatile int stop = 0;
  pthread_create(&t, NULL, spinner, (void *)&stop);
  for (int i = 0; i < 20; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0; k < 1000; k++) free(malloc((size_t)k * 7));
      _exit(owns(malloc(50)) ? 0 : 3);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop = 1;
  pthread_join(t, NULL);
  return check_done("test_preload");
}
