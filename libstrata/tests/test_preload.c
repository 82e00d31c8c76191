/* test_preload.c: the malloc family as glibc defines it, run with LD_PRELOAD=libstrata.so
 * (make c-test does). Checks that Strata really serves the calls (strata_owns), the edge
 * cases of each function, fork from a multi-threaded process, and thread exit.
 * Linked with -ldl only: strata_owns is looked up in the preloaded library. */
#include "check.h"
#include "own_channel.h"
#include "util/uapi.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*owns)(const void *);

/* ---- write tracking (machine/track.c), seen as a daemon sees it: PAGEMAP_SCAN ---------- */

/* Pages of [p, p+len) written since the last call (which protects them again); -1 with errno
 * EPERM when the range is not registered for asynchronous write-protect. */
static long written_pages(const void *p, size_t len) {
  static struct page_region vec[64];
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  struct pm_scan_arg a = {.size = sizeof a, .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                          .start = (uintptr_t)p, .end = (uintptr_t)p + len, .vec = (uintptr_t)vec,
                          .vec_len = 64, .category_mask = PAGE_IS_WRITTEN, .return_mask = PAGE_IS_WRITTEN};
  long n = ioctl(fd, PAGEMAP_SCAN, &a);
  int e = errno;
  close(fd);
  errno = e;
  if (n < 0) return -1;
  long pages = 0;
  for (long i = 0; i < n; i++) pages += (long)((vec[i].end - vec[i].start) / 4096);
  return pages;
}

/* Whether this kernel offers asynchronous write-protect (6.7+). */
static int kernel_has_wp_async(void) {
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
  if (fd < 0) return 0;
  struct uffdio_api api = {.api = UFFD_API, .features = (1 << 15) /* WP_ASYNC */};
  int ok = ioctl(fd, UFFDIO_API, &api) == 0;
  close(fd);
  return ok;
}

/* A daemon sees exactly the pages written since its last scan of a medium object (a run in a
 * segment) and of a large one (a mapping of its own); with STRATA_TRACK_WRITES=0, or on a
 * kernel without asynchronous write-protect, nothing is registered. */
static void check_write_tracking(const char *who) {
  const char *opt = getenv("STRATA_TRACK_WRITES");
  int expect = kernel_has_wp_async() && !(opt && !strcmp(opt, "0"));
  size_t sizes[] = {64 * 1024, 3 << 20};
  for (int k = 0; k < 2; k++) {
    char *p = malloc(sizes[k]);
    memset(p, 1, sizes[k]);
    long first = written_pages(p, sizes[k]);
    if (!expect) {
      CHECK(first == -1 && errno == EPERM);
      free(p);
      continue;
    }
    if (first < 0) fprintf(stderr, "%s: PAGEMAP_SCAN: %s\n", who, strerror(errno));
    CHECK(first == (long)(sizes[k] / 4096));        /* every page was written */
    CHECK(written_pages(p, sizes[k]) == 0);         /* ...and is protected again */
    p[5 * 4096] = 2;
    p[9 * 4096 + 100] = 2;
    volatile char r = p[11 * 4096];                 /* a read is not a write */
    (void)r;
    CHECK(written_pages(p, sizes[k]) == 2);
    CHECK(p[5 * 4096] == 2 && p[9 * 4096 + 100] == 2 && p[6 * 4096] == 1); /* nothing lost */
    free(p);
  }
}

/* ---- small objects by block (alloc/blocks.c), seen as a daemon sees them: the channel ---- */

#define SMALL 256          /* a size class: 256 blocks a 64 KiB span */
#define PER_SITE 3000      /* 750 KiB a site: past STRATA_SMALL_BLOCKS (256 KiB), many spans */
__attribute__((noinline)) static void *site_a(void) { return malloc(SMALL); }
__attribute__((noinline)) static void *site_b(void) { return malloc(SMALL); }

/* Once a context has allocated STRATA_SMALL_BLOCKS bytes, its small objects are in spans of its
 * own, each span one record with the context's index; before, and with STRATA_SMALL_BLOCKS=0
 * always, they share spans and have no record. Allocated alternately, the two sites' objects
 * in blocks never share a record. */
static void check_small_blocks(const char *who) {
  const char *opt = getenv("STRATA_SMALL_BLOCKS");
  int blocks = !(opt && !strcmp(opt, "0"));
  static void *a[PER_SITE], *b[PER_SITE];
  for (int i = 0; i < PER_SITE; i++) {
    a[i] = site_a();
    b[i] = site_b();
    CHECK(a[i] && b[i]);
    memset(a[i], 0xa, SMALL);
    memset(b[i], 0xb, SMALL);
  }
  const strata_channel_header_t *h = own_channel();
  CHECK(h != NULL);
  if (!h) return;
  const int last = PER_SITE - 1, from = PER_SITE / 2; /* the later half: well past 256 KiB */
  const strata_object_t *ra = record_of(h, a[last]), *rb = record_of(h, b[last]);
  if (!blocks) {
    CHECK(!ra && !rb);
  } else {
    CHECK(ra && rb && ra->context && rb->context && ra->context != rb->context);
    CHECK(ra && ra->len == 64 * 1024 && ra->arena == 0);
    int own = 0, mixed = 0;
    for (int i = from; ra && rb && i < PER_SITE; i++) {
      const strata_object_t *x = record_of(h, a[i]), *y = record_of(h, b[i]);
      own += x && y && x->context == ra->context && y->context == rb->context;
      mixed += x == y;
    }
    if (own != PER_SITE - from || mixed)
      fprintf(stderr, "%s: %d of %d in their own blocks, %d shared\n", who, own, PER_SITE - from, mixed);
    CHECK(own == PER_SITE - from && mixed == 0);
    if (!opt) CHECK(!record_of(h, a[0])); /* its first 256 KiB in the shared spans */
    /* =1: blocks as soon as the context's counters show a byte (a thread hands its counts on
     * every 256 events) */
    else if (!strcmp(opt, "1")) CHECK(record_of(h, a[300]) != NULL);
  }
  for (int i = 0; i < PER_SITE; i++) {
    const unsigned char *x = a[i], *y = b[i];
    CHECK(x[0] == 0xa && x[SMALL - 1] == 0xa && y[0] == 0xb && y[SMALL - 1] == 0xb); /* intact */
    free(a[i]);
    free(b[i]);
  }
  /* freed, a context's spans go back (of its six): it keeps one empty, and the thread's cache
   * holds at most 32 of its blocks, which keep up to two more */
  if (blocks && ra && rb) {
    uint32_t ca = ra->context, cb = rb->context;
    const strata_object_t *o = (const void *)((const char *)h + h->objects_offset);
    int left = 0;
    for (uint64_t i = 1; i < h->objects_high; i++) left += o[i].addr && (o[i].context == ca || o[i].context == cb);
    if (left > 6) fprintf(stderr, "%s: %d blocks left\n", who, left);
    CHECK(left <= 6);
  }
}

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
  /* contexts on: objects from 4 KiB are page aligned and recorded where whole pages cost at
   * most an eighth more than their size class (interpose.c, tracked()); a 4097-byte buffer
   * would take 8 KiB of pages for its 5 KiB class, and stays a class block */
  void *t16 = malloc(16384), *t20 = malloc(20000), *odd = malloc(4097);
  CHECK((uintptr_t)t16 % 4096 == 0 && (uintptr_t)t20 % 4096 == 0 && malloc_usable_size(t20) == 20480);
  CHECK(malloc_usable_size(odd) == 5120);
  free(t16);
  free(t20);
  free(odd);
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

  check_write_tracking("parent");
  check_small_blocks("parent");
  /* a fork child registers its copy of the parent's memory again, with its own userfaultfd */
  char *inherited = malloc(256 * 1024);
  memset(inherited, 7, 256 * 1024);
  pid_t pid = fork();
  if (pid == 0) {
    free(malloc(4321)); /* a new context: the child makes its channel */
    check_write_tracking("child");
    check_small_blocks("child");
    const char *opt = getenv("STRATA_TRACK_WRITES");
    if (kernel_has_wp_async() && !(opt && !strcmp(opt, "0"))) {
      CHECK(written_pages(inherited, 256 * 1024) >= 0); /* registered in the child too */
      inherited[4096] = 8;
      CHECK(written_pages(inherited, 256 * 1024) == 1);
    }
    _exit(check_failed ? 4 : 0);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(inherited[4096] == 7); /* the child's write stayed in the child */
  free(inherited);
  return check_done("test_preload");
}
