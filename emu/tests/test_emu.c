/* test_emu.c: unit tests of each part of the emulated machine. This program is built with the
 * load/store hooks and linked with the emulator's objects (so it can also reach internals) and
 * with libstrata. The Makefile runs it with a small, known geometry:
 *   STRATA_EMU="l1=32K l1_ways=8 l2=256K l2_ways=8 llc=1M llc_ways=16 dtlb=64 dtlb_ways=4
 *               stlb=2048 stlb_ways=16 capacity=1G,1G" */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "../emu.h"
#include "check.h"
#include "strata.h"

#define PAGE 4096
static int64_t c(const char *n) { return strata_emu_counter(n); }

static char *fresh(size_t bytes) {
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void test_lru(void) {
  lru_t l;
  CHECK(lru_init(&l, 4, 2) == 0); /* 2 sets x 2 ways */
  CHECK(lru_touch(&l, 0) == 0);
  CHECK(lru_touch(&l, 2) == 0);   /* same set as 0 */
  CHECK(lru_touch(&l, 0) == 1);   /* 0 most recent now */
  CHECK(lru_touch(&l, 4) == 0);   /* evicts 2, the least recent */
  CHECK(lru_touch(&l, 0) == 1);
  CHECK(lru_touch(&l, 2) == 0);
  CHECK(lru_touch(&l, 1) == 0);   /* the other set is independent */
  lru_remove(&l, 1);
  CHECK(lru_touch(&l, 1) == 0);
  lru_flush(&l);
  CHECK(lru_touch(&l, 0) == 0);
  CHECK(lru_init(&l, 6, 4) == -1); /* entries must be a multiple of ways */
  CHECK(lru_init(&l, 3, 3) == 0);  /* one set: fully associative, any key */
  CHECK(lru_touch(&l, 5) == 0);
  CHECK(lru_touch(&l, 6) == 0);
  CHECK(lru_touch(&l, 7) == 0);
  CHECK(lru_touch(&l, 5) == 1);
  CHECK(lru_touch(&l, 8) == 0);    /* evicts 6, the least recent */
  CHECK(lru_touch(&l, 7) == 1);
  CHECK(lru_touch(&l, 6) == 0);
}

/* Every geometry from 1 to 20 ways (core.c compares up to 16 at once with AVX-512, more one by
 * one), wide (3 sets) and, up to 16 ways, narrow (2048 sets, 32-bit tags of key / sets, here
 * with quotients near 2^30), against a plain move-to-front list: the same hit or miss, and the
 * same keys in the same order, after every touch and removal of a pseudo-random key stream over
 * three of the sets. */
static void test_lru_ways(void) {
  enum { MAXW = 20 };
  for (int narrow = 0; narrow <= 1; narrow++)
    for (uint64_t ways = 1; ways <= (narrow ? 16 : MAXW); ways++) {
      uint64_t sets = narrow ? 2048 : 3, base = narrow ? (1ull << 30) - 8 : 0;
      lru_t l;
      CHECK(lru_init(&l, sets * ways, ways) == 0);
      CHECK(l.narrow == narrow);
      uint64_t ref[3][MAXW] = {{0}}; /* key + 1, most recent first, 0 empty */
      uint64_t x = ways, bad = 0;
      for (int n = 0; n < 20000 && !bad; n++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* a few more keys than fit: some hits, some misses */
        uint64_t set = (x >> 33) % 3, key = set + sets * (base + (x >> 40) % (ways + 3)), *r = ref[set];
        uint64_t w = 0;
        while (w < ways && r[w] != key + 1) w++;
        if ((x >> 20) % 8 == 0) { /* remove */
          lru_remove(&l, key);
          if (w < ways) {
            for (; w + 1 < ways; w++) r[w] = r[w + 1];
            r[ways - 1] = 0;
          }
        } else {
          bad += (uint64_t)lru_touch(&l, key) != (w < ways);
          for (w = w < ways ? w : ways - 1; w > 0; w--) r[w] = r[w - 1];
          r[0] = key + 1;
        }
        for (uint64_t s3 = 0; s3 < 3; s3++)
          for (w = 0; w < ways; w++) bad += lru_key_at(&l, s3, w) != ref[s3][w];
      }
      CHECK(bad == 0);
      lru_flush(&l);
      CHECK(lru_key_at(&l, 0, 0) == 0 && lru_key_at(&l, 2, ways - 1) == 0);
      lru_free(&l);
    }
}

/* The stream detector follows 16 streams: 16 interleaved ones (ascending, then descending)
 * continue on every line after their first; 17 evict each other before they come back. */
static void test_streams(void) {
  enum { AREA = 1 << 20, LINES = 64 };
  const struct { int streams, down; } rounds[] = {{16, 0}, {16, 1}, {17, 0}};
  char *base = fresh(17 * (size_t)AREA);
  for (int r = 0; r < 3; r++) {
    int k = rounds[r].streams;
    int64_t st = c("stream_misses");
    for (int i = 0; i < LINES; i++)
      for (int s = 0; s < k; s++) { /* each round on fresh lines of each stream's area */
        int line = rounds[r].down ? LINES - 1 - i : i;
        (void)*(volatile char *)(base + (size_t)s * AREA + ((size_t)r * LINES + (size_t)line) * 64);
      }
    int64_t got = c("stream_misses") - st, want = k == 16 ? 16 * (LINES - 1) : 0;
    CHECK(got >= want && got <= want + 2); /* (+2: the test's own stack) */
  }
  munmap(base, 17 * (size_t)AREA);
}

/* overlap: a stream walked with `work` L1 hits between its lines. Without it each line costs
 * the stream's share (latency / mlp) on top of the work; with it, the work hides as much of the
 * line's fetch, so a line costs the more of the two, never less than the stream delivers. */
static int64_t streamed_ns(int overlap, int work) {
  enum { PAGES = 64 };
  char *p = fresh(PAGES * PAGE);
  for (int i = 0; i < PAGES; i++) p[i * PAGE + PAGE - 64] = 1; /* fault in, past the lines read */
  volatile char *hot = p + PAGE - 64;
  int saved = emu_cfg.overlap;
  emu_cfg.overlap = overlap;
  int64_t t0 = c("sim_ns");
  for (int i = 0; i < PAGES; i++)
    for (int l = 0; l < PAGE / 64 - 1; l++) {
      (void)*(volatile char *)(p + (size_t)i * PAGE + (size_t)l * 64);
      for (int w = 0; w < work; w++) (void)*hot;
    }
  int64_t ns = c("sim_ns") - t0;
  emu_cfg.overlap = saved;
  return ns; /* (not unmapped: its lines stay in the caches, and a later test's fresh pages
              * must not find them there) */
}

static void test_overlap(void) {
  const int64_t lines = 64 * 63;
  const double line = emu_cfg.rd_ns[0] / emu_cfg.mlp; /* a streamed line from node 0 */
  for (int work = 4; work <= 20; work += 16) {
    int64_t off = streamed_ns(0, work), on = streamed_ns(1, work);
    double hidden = (double)(off - on) / (double)lines; /* ns a line the work hid */
    double want = work * emu_cfg.l1_ns < line ? work * emu_cfg.l1_ns : line;
    CHECK(hidden > 0.8 * want && hidden < 1.2 * want);
    CHECK((double)on / (double)lines >= 0.9 * line); /* never faster than the stream delivers */
  }
}

/* stream_train: a fresh page walked line by line (next_page and pair off) has its first
 * stream_train lines as demand misses, the rest streamed; train 1 is the default, in which a
 * stream is followed from its second line. */
static void test_stream_train(void) {
  int saved[3] = {emu_cfg.stream_train, emu_cfg.next_page, emu_cfg.pair};
  emu_cfg.next_page = 0, emu_cfg.pair = 0;
  for (int train = 1; train <= 4; train += 3) {
    char *p = fresh(4 * PAGE);
    p[PAGE - 64] = 1; /* present: no first-touch fault in the walk */
    emu_thread_t *t = emu_thread();
    lru_flush(&t->l1), lru_flush(&t->l2), lru_flush(&emu_llc);
    for (int s = 0; s < EMU_STREAMS; s++) t->stream_last[s] = 0; /* no stream near p's lines */
    emu_cfg.stream_train = train;
    int64_t st = c("stream_misses"), l2m = c("l2_misses");
    for (int l = 0; l < PAGE / 64 - 1; l++) (void)*(volatile char *)(p + l * 64);
    int64_t misses = c("l2_misses") - l2m, streamed = c("stream_misses") - st;
    CHECK(misses >= PAGE / 64 - 1 && misses <= PAGE / 64 + 1); /* (+2: the test's own stack) */
    CHECK(streamed == PAGE / 64 - 1 - train);
    lru_flush(&t->l1), lru_flush(&t->l2), lru_flush(&emu_llc);
    munmap(p, 4 * PAGE);
  }
  emu_cfg.stream_train = saved[0], emu_cfg.next_page = saved[1], emu_cfg.pair = saved[2];
}

/* next_page: a stream that ascends to the last line of page A has the first line of page B
 * (the next) fetched into L2 and B's translation into the STLB; that line then hits L2, and the
 * streamer, seeing the hit, goes on into B's second line. Without it, B's first line is a
 * demand miss (after a page walk) from which the streamer goes on. Page C, after B, is not
 * present: the stream reaching B's last line fetches nothing there (a prefetch never faults). */
static void test_next_page(void) {
  for (int np = 0; np <= 1; np++) {
    char *a = fresh(20 * PAGE), *b = a + PAGE, *cp = b + PAGE;
    b[PAGE - 64] = 1;                               /* B present */
    emu_thread_t *t = emu_thread();                 /* no line cached (a munmapped area's */
    lru_flush(&t->l1), lru_flush(&t->l2), lru_flush(&emu_llc); /* may be mapped here again) */
    uint64_t vb = (uintptr_t)b >> EMU_PAGE_SHIFT;
    emu_shootdown(&vb, 1);                          /* and B out of the TLBs */
    int saved = emu_cfg.next_page;
    emu_cfg.next_page = np;
    for (int l = 0; l < PAGE / 64; l++) (void)*(volatile char *)(a + l * 64);
    for (int s = 0; s < EMU_STREAMS; s++)           /* other streams: A's is forgotten, so B */
      (void)*(volatile char *)(cp + PAGE * (2 + s) + 64 * s); /* does not go on from it */
    CHECK((lru_way(&t->stlb, vb) >= 0) == np && (lru_way(&t->l2, (uintptr_t)b >> EMU_LINE_SHIFT) >= 0) == np);
    int64_t l2h = c("l2_hits"), st = c("stream_misses");
    (void)*(volatile char *)b;
    CHECK(c("l2_hits") - l2h == np);
    (void)*(volatile char *)(b + 64);               /* streamed: from the miss, or the hit */
    CHECK(c("stream_misses") - st == 1);
    for (int l = 2; l < PAGE / 64 - 1; l++) (void)*(volatile char *)(b + l * 64);
    int64_t faults = c("page_faults");
    CHECK(c("l2_hits") - l2h == np);                /* B's lines after its first were misses */
    (void)*(volatile char *)(b + PAGE - 64);        /* B's last line: the stream's, C next */
    (void)*(volatile char *)cp;
    CHECK(c("page_faults") - faults == 1);          /* C faulted in by the program, not before */
    CHECK(c("l2_hits") - l2h == np);
    emu_cfg.next_page = saved;
    munmap(a, 20 * PAGE);
  }
  /* An L2 hit continues a stream but starts one only at its page's first line: a reused line
   * mid-page (line 10, in L2 only) followed by a miss beside it (line 11) is no stream. */
  char *d = fresh(4 * PAGE);
  emu_thread_t *t = emu_thread();
  lru_flush(&t->l1), lru_flush(&t->l2), lru_flush(&emu_llc); /* (as above) */
  int saved = emu_cfg.next_page;
  emu_cfg.next_page = 1;
  (void)*(volatile char *)(d + 10 * 64);
  for (int s = 0; s < EMU_STREAMS; s++)             /* every slot taken by lines two apart */
    (void)*(volatile char *)(d + 2 * PAGE + 128 * s);
  lru_flush(&t->l1);
  int64_t l2h = c("l2_hits"), st = c("stream_misses");
  (void)*(volatile char *)(d + 10 * 64);
  (void)*(volatile char *)(d + 11 * 64);
  CHECK(c("l2_hits") - l2h == 1 && c("stream_misses") - st == 0);
  emu_cfg.next_page = saved;
  lru_flush(&t->l1), lru_flush(&t->l2), lru_flush(&emu_llc); /* none of d's lines left cached */
  munmap(d, 4 * PAGE);
}

/* One load walking a constant stride: the stride prefetcher follows it within stride_bytes,
 * and into other pages only with stride_pages (the defaults: m2t's 2 KiB, not across pages). */
static void test_strides(void) {
  enum { AREA = 64 << 20 };
  char *base = fresh(AREA);
  const struct { uint64_t stride; int pages; uint64_t bytes; } rounds[] = {
      {1024, 0, 2048},      /* 4 a page: the first of each page is not followed */
      {48 << 10, 0, 2048},  /* beyond the reach */
      {48 << 10, 1, 64 << 10}, /* AMD's: across pages, far */
      {4096 + 64, 1, 2048}, /* across pages, but beyond the reach */
  };
  uint64_t saved_bytes = emu_cfg.stride_bytes;
  int saved_pages = emu_cfg.stride_pages;
  size_t off = 0;
  for (int r = 0; r < 4; r++) {
    emu_cfg.stride_bytes = rounds[r].bytes, emu_cfg.stride_pages = rounds[r].pages;
    enum { N = 512 };
    off += 128; /* fresh lines each round */
    int64_t st = c("stride_misses"), l2 = c("l2_misses");
    for (int i = 0; i < N; i++) (void)*(volatile char *)(base + (off + (size_t)i * rounds[r].stride) % AREA);
    int64_t got = c("stride_misses") - st, misses = c("l2_misses") - l2;
    int64_t want = r == 0 ? N * 3 / 4 - 2 : r == 2 ? N - 2 : 0; /* (the first two train) */
    CHECK(misses >= N - 8); /* (a few lines of earlier rounds may still be cached) */
    CHECK(got >= want - 2 && got <= want + 2);
  }
  emu_cfg.stride_bytes = saved_bytes, emu_cfg.stride_pages = saved_pages;
  munmap(base, AREA);
}

/* Two sequential passes over 64 KiB with 8-byte loads: exact counts for LRU caches. */
static void test_caches(void) {
  volatile uint64_t *a = (volatile uint64_t *)fresh(64 << 10);
  for (int i = 0; i < (64 << 10) / 8; i++) a[i] = (uint64_t)i; /* first touch, warm TLB */
  int64_t l1 = c("l1_misses"), l2 = c("l2_misses"), l2h = c("l2_hits"), acc = c("accesses");
  uint64_t sum = 0;
  for (int i = 0; i < (64 << 10) / 8; i++) sum += a[i];
  CHECK(sum == (uint64_t)8191 * 8192 / 2);
  /* (a few more than the array's: the test's own stack, at -O1) */
  CHECK(c("accesses") - acc >= 8192 && c("accesses") - acc < 8192 + 16);
  CHECK(c("l1_misses") - l1 >= 1024 && c("l1_misses") - l1 <= 1028); /* 64 KiB > 32 KiB L1 */
  CHECK(c("l2_hits") - l2h >= 1024 && c("l2_hits") - l2h <= 1028);  /* ... in the 256 KiB L2 */
  CHECK(c("l2_misses") - l2 <= 2);
  munmap((void *)a, 64 << 10);
}

/* Twelve lines 32 KiB apart, the span of one way of the 256 KiB 8-way L2, read twice. By
 * virtual address (physical=0, the default) they share one L2 set, twelve lines for eight
 * ways, and LRU misses every one again; by frame (physical=1) their pages take colours of their
 * own and the second round hits. (They share an L1 set either way, so every read reaches the
 * L2.) Mapped at a fixed address so that the frames, a fixed function of the page numbers, are
 * the same every run. */
static void test_frames(void) {
  enum { N = 12, WAY = 32 << 10 };
  void *at = (void *)0x300000000000;
  char *p = mmap(at, N * WAY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(p == at);
  if (p != at) return;
  int saved = emu_cfg.physical;
  for (int physical = 1; physical >= 0; physical--) {
    emu_cfg.physical = physical;
    int64_t misses = 0;
    for (int round = 0; round < 2; round++) {
      misses = c("l2_misses");
      for (int i = 0; i < N; i++) (void)*(volatile char *)(p + (size_t)i * WAY + 64 * physical);
      misses = c("l2_misses") - misses;
    }
    if (physical) CHECK(misses <= 1); /* (+1: the test's own stack) */
    else CHECK(misses >= N);
  }
  emu_cfg.physical = saved;
  munmap(p, N * WAY);
}

/* The pair prefetcher: two lines of a 128-byte pair read one after the other on each of 64
 * pages, fresh lines each round. Without it (pair=0) the second misses as the first does (but
 * where a first touch left the line cached); with it, each of those misses is an LLC hit. */
static void test_pair(void) {
  enum { N = 64 };
  char *p = fresh(N * PAGE);
  for (int i = 0; i < N; i++) p[i * PAGE + 1024] = 1; /* fault in, away from the lines read */
  int saved = emu_cfg.pair;
  int64_t llc[2], miss[2];
  for (int pair = 0; pair <= 1; pair++) {
    emu_cfg.pair = pair;
    size_t at = 2048 + 256 * (size_t)pair; /* fresh lines each round */
    llc[pair] = c("llc_hits"), miss[pair] = c("llc_misses");
    for (int i = 0; i < N; i++) {
      (void)*(volatile char *)(p + i * PAGE + at);
      (void)*(volatile char *)(p + i * PAGE + at + 64);
    }
    llc[pair] = c("llc_hits") - llc[pair], miss[pair] = c("llc_misses") - miss[pair];
  }
  /* a stream's lines are not paired: the streamer has them on their way (only the misses
   * before it is trained bring their pairs): as many LLC hits as without the pairs */
  int64_t streamed[2];
  for (int pair = 0; pair <= 1; pair++) {
    emu_cfg.pair = pair;
    char *q = fresh(8 * PAGE);
    for (int i = 0; i < 8; i++) q[i * PAGE] = 1;
    streamed[pair] = c("llc_hits");
    for (int i = 1; i < 8 * PAGE / 64; i++) (void)*(volatile char *)(q + (size_t)i * 64);
    streamed[pair] = c("llc_hits") - streamed[pair];
    munmap(q, 8 * PAGE);
  }
  emu_cfg.pair = saved;
  CHECK(llc[0] <= 2 && miss[0] >= N);
  CHECK(llc[1] >= N / 4 && miss[1] <= miss[0] - llc[1] + 2);
  CHECK(streamed[1] <= streamed[0] + 2);
  munmap(p, N * PAGE);
}

/* 100 pages, one access each, twice: the DTLB (16 sets x 4) cannot hold them, the STLB can. */
static void test_tlb(void) {
  volatile char *p = fresh(100 * PAGE);
  int64_t faults = c("page_faults");
  for (int i = 0; i < 100; i++) p[i * PAGE] = 1;
  CHECK(c("page_faults") - faults == 100);
  int64_t d = c("dtlb_misses"), s = c("stlb_misses");
  for (int i = 0; i < 100; i++) (void)p[i * PAGE];
  CHECK(c("dtlb_misses") - d == 100);
  CHECK(c("stlb_misses") - s == 0);
  munmap((void *)p, 100 * PAGE);
}

/* Two lines on two pages, accessed alternately: each stays the most recent of its L1 set and
 * DTLB set, the case core.c handles with counters only. No misses, exact per-page counts,
 * and a store to a page that was only read still marks it dirty. */
static void test_alternate(void) {
  volatile char *p = fresh(2 * PAGE);
  (void)p[0];        /* first touch; L1 set 0, DTLB set of page 0 */
  (void)p[PAGE + 64]; /* L1 set 1, the next DTLB set */
  uint8_t f[2];
  CHECK(strata_emu_scan((void *)p, 2 * PAGE, f, 1) == 2); /* clear accessed and dirty */
  int64_t l1 = c("l1_misses"), d = c("dtlb_misses");
  for (int i = 0; i < 100; i++) {
    (void)p[8];
    (void)p[PAGE + 72];
  }
  CHECK(c("l1_misses") == l1 && c("dtlb_misses") == d);
  uint32_t counts[2];
  CHECK(strata_emu_page_accesses((void *)p, 2 * PAGE, counts) == 2);
  CHECK(counts[0] == 101 && counts[1] == 101);
  p[16] = 1;
  CHECK(strata_emu_scan((void *)p, 2 * PAGE, f, 0) == 2);
  CHECK(f[0] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY));
  CHECK(f[1] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED));
  /* bits cleared while the program stays on one line are set again by its next load */
  (void)p[24];
  size_t cleared = strata_emu_scan((void *)p, 1, f, 1);
  (void)p[32]; /* no instrumented access in between: the same line as p[24] */
  size_t seen = strata_emu_scan((void *)p, 1, f, 0);
  CHECK(cleared == 1 && seen == 1 && f[0] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED));
  munmap((void *)p, 2 * PAGE);
}

/* First touch fills node 0 up to its capacity, then node 1. */
static void test_first_touch(void) {
  uint64_t res[2];
  strata_emu_residency(res, 2);
  uint64_t saved = emu_cfg.cap_bytes[0];
  emu_cfg.cap_bytes[0] = (res[0] + 8) * PAGE; /* room for 8 more pages */
  volatile char *p = fresh(16 * PAGE);
  for (int i = 0; i < 16; i++) p[i * PAGE] = 1;
  /* (the test's stack and the mapping's neighbours may take a page or two of the room) */
  int on0 = 0, on1 = 0, order = 1;
  for (int i = 0; i < 16; i++) {
    int n = strata_emu_node_of((const void *)(p + i * PAGE));
    on0 += n == 0;
    on1 += n == 1;
    if (i && n < strata_emu_node_of((const void *)(p + (i - 1) * PAGE))) order = 0;
  }
  CHECK(on0 + on1 == 16 && on0 >= 5 && on0 <= 8 && order);
  CHECK(strata_emu_node_of(&on0) == 0);
  char *untouched = fresh(PAGE);
  CHECK(strata_emu_node_of(untouched) == -1);
  /* capacity 0 (far-only runs): every new page starts on node 1, and the peak counts them */
  emu_cfg.cap_bytes[0] = 0;
  volatile char *q = fresh(4 * PAGE);
  for (int i = 0; i < 4; i++) q[i * PAGE] = 1;
  int far = 0;
  for (int i = 0; i < 4; i++) far += strata_emu_node_of((const void *)(q + i * PAGE)) == 1;
  strata_emu_residency(res, 2);
  CHECK(far == 4 && emu_peak_resident >= res[0] + res[1]);
  emu_cfg.cap_bytes[0] = saved;
}

/* mremap moves pages with their nodes: a page touched on node 1 is still on node 1 at its new
 * address, costs no fault there, and the old address is untouched again. */
static void test_remap(void) {
  uint64_t saved = emu_cfg.cap_bytes[0];
  emu_cfg.cap_bytes[0] = 0; /* every new page on node 1 */
  volatile char *p = fresh(4 * PAGE);
  for (int i = 0; i < 4; i++) p[i * PAGE] = (char)i;
  emu_cfg.cap_bytes[0] = saved;
  char *to = fresh(16 * PAGE); /* a free place to move to */
  volatile char *q = mremap((void *)p, 4 * PAGE, 8 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  CHECK(q == to);
  int64_t faults = c("page_faults");
  int moved = 0;
  for (int i = 0; i < 4; i++) moved += q[i * PAGE] == (char)i && strata_emu_node_of((const void *)(q + i * PAGE)) == 1;
  CHECK(moved == 4 && c("page_faults") == faults);
  CHECK(strata_emu_node_of((const void *)p) == -1);
  q[5 * PAGE] = 1; /* the new tail faults in as any page does */
  CHECK(c("page_faults") == faults + 1);
  munmap((void *)q, 8 * PAGE);
  munmap(to + 8 * PAGE, 8 * PAGE);
}

/* madvise(MADV_DONTNEED) frees the pages from their node: the node's residency falls, and the
 * next touch is a fault that places the page afresh. */
static void test_discard(void) {
  volatile char *p = fresh(4 * PAGE);
  for (int i = 0; i < 4; i++) p[i * PAGE] = 1;
  uint64_t before[2], after[2];
  strata_emu_residency(before, 2);
  int node = strata_emu_node_of((const void *)p);
  CHECK(node >= 0 && madvise((void *)p, 4 * PAGE, MADV_DONTNEED) == 0);
  strata_emu_residency(after, 2);
  CHECK(after[node] + 4 <= before[node] && strata_emu_node_of((const void *)p) == -1);
  int64_t faults = c("page_faults");
  CHECK(p[0] == 0); /* zero-filled again, as Linux does */
  CHECK(c("page_faults") == faults + 1 && strata_emu_node_of((const void *)p) >= 0);
  munmap((void *)p, 4 * PAGE);
}

/* libstrata on the emulated machine: its topology, and its binds, come from the emulator. */
static void test_libstrata(void) {
  CHECK(strata_emulated() == 1);
  const strata_topology_t *t = strata_topology();
  CHECK(t->ntiers == 2 && t->nnodes == 2);
  CHECK(strstr(t->tier_source, "emulated") != NULL);
  CHECK(t->nodes[1].read_latency_ns == 156);
  size_t n = 1 << 20;
  char *cold = strata_malloc(n, strata_cold());
  char *hot = strata_malloc(n, strata_hot());
  CHECK(cold && hot);
  for (size_t i = 0; i < n; i += PAGE) cold[i] = hot[i] = 1;
  strata_residency_t r;
  CHECK(strata_where(cold, n, &r) == 0);
  CHECK(r.tier_bytes[1] == (uint64_t)n && r.tier_bytes[0] == 0);
  CHECK(strata_where(hot, n, &r) == 0);
  CHECK(r.tier_bytes[0] == (uint64_t)n);
  char *a = strata_malloc(48, strata_cold());
  char *b = strata_malloc(48, strata_next_to(a));
  *a = *b = 2;
  CHECK(strata_emu_node_of(a) == 1 && strata_emu_node_of(b) == 1); /* next_to keeps a's tier */
  strata_free(cold);
  strata_free(hot);
  CHECK(strata_now_ns() == strata_emu_now_ns());
}

/* Moving a page: it changes node, costs the caller, and its TLB entry is gone. */
static void test_move(void) {
  volatile char *p = fresh(PAGE);
  p[0] = 1;
  void *pages[1] = {(void *)p};
  int to[1] = {1}, st[1] = {-1};
  int64_t clock = c("sim_ns"), moved = c("moved_pages"), sd = c("shootdowns");
  CHECK(strata_emu_move(pages, 1, to, st, 0) == 0);
  CHECK(st[0] == 1 && strata_emu_node_of((void *)p) == 1);
  CHECK(c("moved_pages") - moved == 1 && c("demoted_pages") >= 1);
  CHECK(c("shootdowns") - sd == 1);
  CHECK(c("sim_ns") - clock >= (int64_t)emu_cfg.migrate_ns);
  int64_t d = c("dtlb_misses");
  (void)p[0];
  CHECK(c("dtlb_misses") - d == 1); /* the shootdown dropped the entry */
  char *never = fresh(PAGE);
  void *np[1] = {never};
  CHECK(strata_emu_move(np, 1, to, st, 0) == 0 && st[0] == -ENOENT);
  int bad[1] = {7};
  CHECK(strata_emu_move(pages, 1, bad, st, 0) == 0 && st[0] == -ENODEV);
  /* an asynchronous move costs the background budget, not the caller */
  to[0] = 0;
  clock = c("sim_ns");
  moved = c("moved_pages");
  uint64_t bg[4];
  for (int i = 0; i < 4; i++) bg[i] = emu_bg_counter(i);
  int64_t all_promoted = c("process.promoted_pages"), all_moved = c("process.moved_pages");
  CHECK(all_promoted >= c("promoted_pages") && c("process.no_such_counter") == -1 && c("process.sim_ns") == -1);
  CHECK(strata_emu_move(pages, 1, to, st, 1) == 0 && st[0] == 0);
  /* the process's sums include the background's moves */
  CHECK(c("process.promoted_pages") - all_promoted == 1 && c("process.moved_pages") - all_moved == 1);
  CHECK(c("sim_ns") - clock < 1000 && c("moved_pages") == moved);
  CHECK(emu_bg_counter(0) - bg[0] == 1 && emu_bg_counter(1) - bg[1] == 1); /* moved, promoted */
  CHECK(emu_bg_counter(2) == bg[2] && emu_bg_counter(3) - bg[3] == 1);     /* demoted, shootdowns */
}

/* A page demoted within pingpong_window_ms of its promotion is counted, once; one demoted
 * later, or a new page at the address of a promoted one, is not. */
static void test_pingpong(void) {
  double window = emu_cfg.pingpong_window_ms;
  emu_cfg.pingpong_window_ms = 1; /* simulated ms */
  volatile char *p = fresh(2 * PAGE);
  p[0] = p[PAGE] = 1;
  void *pages[2] = {(void *)p, (void *)(p + PAGE)};
  int down[2] = {1, 1}, up[2] = {0, 0}, st[2];
  uint64_t before = emu_pingpong_pages();
  CHECK(strata_emu_move(pages, 2, down, st, 0) == 0 && st[0] == 1 && st[1] == 1);
  CHECK(emu_pingpong_pages() == before); /* born fast, never promoted */
  CHECK(strata_emu_move(pages, 2, up, st, 0) == 0 && st[0] == 0 && st[1] == 0);
  CHECK(strata_emu_move(pages, 1, down, st, 0) == 0 && st[0] == 1);
  CHECK(emu_pingpong_pages() - before == 1); /* at once: ping-pong */
  emu_self->clock_ps += 2000000000; /* two simulated ms on */
  CHECK(strata_emu_move(pages + 1, 1, down, st, 0) == 0 && st[0] == 1);
  CHECK(emu_pingpong_pages() - before == 1); /* too late to count */
  munmap((void *)p, 2 * PAGE);
  emu_cfg.pingpong_window_ms = window;
}

static void test_observe(void) {
  volatile char *p = fresh(2 * PAGE);
  p[0] = 1;         /* page 0: written */
  (void)p[PAGE];    /* page 1: read */
  uint8_t f[2];
  CHECK(strata_emu_scan((void *)p, 2 * PAGE, f, 1) == 2);
  CHECK(f[0] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED | STRATA_EMU_DIRTY));
  CHECK(f[1] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED));
  CHECK(strata_emu_scan((void *)p, 2 * PAGE, f, 0) == 2);
  CHECK(f[0] == STRATA_EMU_PRESENT && f[1] == STRATA_EMU_PRESENT); /* cleared */
  (void)p[1];
  CHECK(strata_emu_scan((void *)p, 1, f, 0) == 1 && f[0] == (STRATA_EMU_PRESENT | STRATA_EMU_ACCESSED));
  uint32_t counts[2];
  for (int i = 0; i < 10; i++) (void)p[PAGE + 8];
  CHECK(strata_emu_page_accesses((void *)p, 2 * PAGE, counts) == 2);
  CHECK(counts[0] == 2 && counts[1] == 11);
  /* LLC-miss samples: every miss with period 1 */
  strata_emu_sample_t s[64];
  while (strata_emu_samples(s, 64)) {}
  strata_emu_set_sample_period(1);
  volatile char *q = fresh(8 << 20);
  for (int i = 0; i < 32; i++) q[(size_t)i * 200 * 64] = 1;
  strata_emu_set_sample_period(0);
  size_t n = strata_emu_samples(s, 64);
  CHECK(n >= 32);
  int found = 0;
  for (size_t i = 0; i < n; i++) found += s[i].addr == (uint64_t)(uintptr_t)q && s[i].store == 1 && s[i].node == 0;
  CHECK(found == 1);
  uint64_t res[2];
  CHECK(strata_emu_residency(res, 2) == 2 && res[0] > 0);
}

/* Bulk copies count as the ranges they touch. */
static void test_bulk(void) {
  char *a = fresh(64 << 10), *b = fresh(64 << 10);
  int64_t bulk = c("bulk_bytes"), st = c("stores");
  memset(a, 1, 64 << 10);
  char *volatile src = a; /* or the compiler turns the copy of a memset into a memset */
  memcpy(b, src, 64 << 10);
  CHECK(c("bulk_bytes") - bulk == 3 * (64 << 10));
  /* one store per line, memset and memcpy (and the store of src) */
  CHECK(c("stores") - st >= 2 * 1024 && c("stores") - st <= 2 * 1024 + 2);
  CHECK(b[100] == 1 && strata_emu_node_of(b + 5000) == 0);
}

/* tpp: the scanner protects slow pages; a page faulted twice is promoted; a full fast node
 * demotes cold pages in the background. */
static void test_tpp(void) {
  volatile char *p = fresh(4 * PAGE);
  for (int i = 0; i < 4; i++) p[i * PAGE] = 1;
  void *pages[4];
  int to[4] = {1, 1, 1, 1}, st[4];
  for (int i = 0; i < 4; i++) pages[i] = (void *)(p + i * PAGE);
  CHECK(strata_emu_move(pages, 4, to, st, 0) == 0 && st[3] == 1);
  strata_emu_fault_t ev[64];
  while (strata_emu_hint_faults(ev, 64)) {}
  emu_cfg.kernel = KERNEL_TPP;
  emu_cfg.tpp_scan_period_ns = 10000; /* 10 us */
  emu_memory_init(); /* schedule the scanner: its first pass is due at once */
  int64_t hf = c("hint_faults"), pr = c("promoted_pages");
  volatile char *spin = fresh(PAGE);
  for (int round = 0; round < 2; round++) {
    /* let simulated time pass (and the scanner run) by touching another page, then touch
     * page 0 of the slow ones */
    int64_t until = c("sim_ns") + 20000;
    while (c("sim_ns") < until) (void)spin[(c("accesses") * 64) % PAGE];
    for (int k = 0; k < 64; k++) (void)spin[k * 64]; /* pass through the translate path */
    (void)p[0];
    (void)p[PAGE]; /* also page 1: next to be promoted, too */
  }
  CHECK(c("hint_faults") - hf >= 2);
  CHECK(c("promoted_pages") - pr >= 1);
  CHECK(strata_emu_node_of((void *)p) == 0);
  CHECK(strata_emu_node_of((void *)(p + 3 * PAGE)) == 1); /* never touched again */
  size_t n = strata_emu_hint_faults(ev, 64);
  int promoted = 0;
  for (size_t i = 0; i < n; i++) promoted += ev[i].promoted && ev[i].addr == (uint64_t)(uintptr_t)p;
  CHECK(promoted == 1);
  /* demotion: shrink node 0 to just above what is resident, then fault in more */
  uint64_t res[2];
  strata_emu_residency(res, 2);
  uint64_t saved = emu_cfg.cap_bytes[0];
  emu_cfg.cap_bytes[0] = (res[0] + 200) * PAGE;
  uint64_t dem = emu_bg_counter(2);
  volatile char *more = fresh(400 * PAGE);
  for (int i = 0; i < 400; i++) more[i * PAGE] = 1;
  CHECK(emu_bg_counter(2) > dem);
  strata_emu_residency(res, 2);
  CHECK(res[0] <= emu_cfg.cap_bytes[0] / PAGE);
  emu_cfg.cap_bytes[0] = saved;
  emu_cfg.kernel = KERNEL_NONE;
  emu_memory_init();
  /* a mark the scanner left on a page is no fault once the mode is off (tests switch modes) */
  pte_t *left = emu_pte((uintptr_t)(p + 3 * PAGE) / PAGE);
  CHECK(left && (atomic_load(&left->flags) & STRATA_EMU_HINT));
  hf = c("hint_faults");
  for (int k = 0; k < 2; k++) (void)p[3 * PAGE]; /* the second would promote under tpp */
  CHECK(c("hint_faults") == hf && strata_emu_node_of((void *)(p + 3 * PAGE)) == 1);
}

/* Let simulated time pass by `ns`, going through the translate path (where due work runs). */
static void pass_time(int64_t ns) {
  static volatile char *spin;
  if (!spin) spin = fresh(2 * PAGE);
  int64_t until = c("sim_ns") + ns;
  for (int k = 0; c("sim_ns") < until; k++) (void)spin[(k % 2) * PAGE + (k % 64) * 64];
}

/* Transactional moves (the engine's transactional mover; the nomad mode queues the same way):
 * a promotion commits after its copy and keeps a shadow; a clean demotion remaps it; a write
 * drops it; a store during the copy aborts; shadows are reclaimed when their node is full. */
static void test_transactional(void) {
  volatile char *p = fresh(8 * PAGE);
  void *pages[8];
  int st[8], slow[8] = {1, 1, 1, 1, 1, 1, 1, 1}, fast[8] = {0};
  for (int i = 0; i < 8; i++) {
    p[i * PAGE] = (char)i;
    pages[i] = (void *)(p + i * PAGE);
  }
  CHECK(strata_emu_move(pages, 8, slow, st, 0) == 0 && st[7] == 1);
  pass_time(1); /* its pages first */
  uint64_t res[2], res0[2];
  strata_emu_residency(res0, 2);
  uint64_t commits = emu_tx_counter(0), aborts = emu_tx_counter(1), remaps = emu_tx_counter(2);
  uint64_t shadows = emu_tx_counter(3), written = emu_tx_counter(4), reclaimed = emu_tx_counter(5);
  /* queued: still slow until the copy is done, and the caller is not charged for it */
  int64_t clock = c("sim_ns");
  CHECK(strata_emu_move(pages, 1, fast, st, STRATA_EMU_MOVE_TRANSACTIONAL) == 0 && st[0] == 0);
  CHECK(c("sim_ns") - clock < 1000 && strata_emu_node_of((void *)p) == 1);
  pass_time(50000);
  CHECK(strata_emu_node_of((void *)p) == 0 && emu_tx_counter(0) == commits + 1);
  CHECK(emu_tx_counter(3) == shadows + 1);
  strata_emu_residency(res, 2);
  CHECK(res[1] == res0[1]); /* the old page stays, as the shadow */
  /* clean: demoted by remapping the shadow, at once */
  CHECK(strata_emu_move(pages, 1, slow, st, STRATA_EMU_MOVE_TRANSACTIONAL) == 0 && st[0] == 1);
  CHECK(strata_emu_node_of((void *)p) == 1 && emu_tx_counter(2) == remaps + 1 && emu_tx_counter(3) == shadows);
  strata_emu_residency(res, 2);
  CHECK(res[1] == res0[1]); /* the shadow is the page now */
  /* promoted again, then written: the shadow goes */
  strata_emu_move(pages, 1, fast, st, STRATA_EMU_MOVE_TRANSACTIONAL);
  pass_time(50000);
  CHECK(strata_emu_node_of((void *)p) == 0 && emu_tx_counter(3) == shadows + 1);
  p[0] = 9;
  CHECK(emu_tx_counter(3) == shadows && emu_tx_counter(4) == written + 1);
  strata_emu_residency(res, 2);
  CHECK(res[1] == res0[1] - 1);
  /* written during its copy: aborted, the page stays where it was */
  CHECK(strata_emu_move(&pages[1], 1, fast, st, STRATA_EMU_MOVE_TRANSACTIONAL) == 0);
  p[PAGE] = 7;
  pass_time(50000);
  CHECK(strata_emu_node_of((void *)(p + PAGE)) == 1 && emu_tx_counter(1) == aborts + 1);
  CHECK(p[PAGE] == 7);
  /* shadows on a full node are reclaimed before a page is refused there */
  CHECK(strata_emu_move(&pages[2], 6, fast, st, STRATA_EMU_MOVE_TRANSACTIONAL) == 0);
  pass_time(100000);
  CHECK(emu_tx_counter(3) == shadows + 6);
  strata_emu_residency(res, 2);
  uint64_t saved = emu_cfg.cap_bytes[1];
  emu_cfg.cap_bytes[1] = res[1] * PAGE; /* full, shadows included */
  CHECK(strata_emu_node_of((void *)p) == 0); /* so its move needs room on the full node */
  CHECK(strata_emu_move(pages, 1, slow, st, 0) == 0 && st[0] == 1);
  CHECK(emu_tx_counter(5) > reclaimed);
  CHECK(emu_tx_counter(3) < shadows + 6);
  emu_cfg.cap_bytes[1] = saved;
  for (int i = 0; i < 8; i++) CHECK(p[i * PAGE] == (i == 0 ? 9 : i == 1 ? 7 : (char)i));
}

/* nomad: tpp's hint faults, but the promotion is queued (the faulting thread goes on, not
 * charged the copy), committed later with a shadow, and a clean cold page demotes by remap. */
static void test_nomad(void) {
  volatile char *p = fresh(2 * PAGE);
  p[0] = 1;
  p[PAGE] = 2;
  void *pages[2] = {(void *)p, (void *)(p + PAGE)};
  int slow[2] = {1, 1}, st[2];
  CHECK(strata_emu_move(pages, 2, slow, st, 0) == 0 && st[1] == 1);
  emu_cfg.kernel = KERNEL_NOMAD;
  emu_cfg.tpp_scan_period_ns = 10000;
  emu_memory_init();
  uint64_t commits = emu_tx_counter(0), shadows = emu_tx_counter(3), remaps = emu_tx_counter(2);
  int64_t migrate = c("migrate_ps"), pr = c("promoted_pages");
  for (int round = 0; round < 3 && strata_emu_node_of((void *)p) != 0; round++) {
    pass_time(20000);
    (void)p[0]; /* read only: its copy commits */
    pass_time(20000);
  }
  CHECK(strata_emu_node_of((void *)p) == 0 && emu_tx_counter(0) > commits && emu_tx_counter(3) > shadows);
  CHECK(c("migrate_ps") == migrate && c("promoted_pages") == pr); /* nothing charged to the thread */
  /* no room left on the fast node: a page faulted in wakes the clock, which demotes every page
   * the fast node holds, p (clean, with a shadow) by remap. p was accessed: the clock's first
   * lap clears its bit, the second takes it, wherever the hand stood (so the test does not
   * depend on where the mappings are) */
  uint64_t saved = emu_cfg.cap_bytes[0], dem = emu_bg_counter(2);
  uint64_t shadowed = emu_tx_counter(3); /* p's and any other (every one on the fast node) */
  remaps = emu_tx_counter(2);
  emu_cfg.cap_bytes[0] = 0;
  volatile char *more = fresh(PAGE);
  more[0] = 1;
  CHECK(strata_emu_node_of((void *)more) == 1);
  CHECK(strata_emu_node_of((void *)p) == 1 && emu_tx_counter(3) == 0);
  CHECK(emu_tx_counter(2) == remaps + shadowed); /* each by remap, p's too */
  CHECK(emu_bg_counter(2) > dem + 1);
  emu_cfg.cap_bytes[0] = saved;
  emu_cfg.kernel = KERNEL_NONE;
  emu_memory_init();
  CHECK(p[0] == 1 && p[PAGE] == 2);
}

/* linux.c's rules, each as the kernel function it follows computes it. */
static void test_linux_rules(void) {
  emu_config_t cfg;
  emu_config_defaults(&cfg);
  cfg.cap_bytes[0] = cfg.cap_bytes[1] = 1ull << 30;
  cfg.nnodes = 2;
  lx_t x;
  lx_init(&x, &cfg);
  const uint64_t ms = 1000000000ull;
  CHECK(x.next_scan_ps == 1000 * ms); /* the scan delay */
  /* task_scan_min/max: 64 MiB resident is one 256 MiB window: 1 s .. 60 s; 1 GiB is four */
  CHECK(lx_scan_min_ps(&x, 16384) == 1000 * ms && lx_scan_max_ps(&x, 16384) == 60000 * ms);
  CHECK(lx_scan_min_ps(&x, 262144) == 250 * ms && lx_scan_max_ps(&x, 262144) == 15000 * ms);
  /* update_task_scan_period: tiering mode's faults (remote, private) double the period to its max */
  x.scan_period_ps = 1000 * ms;
  for (int i = 0; i < 8; i++) {
    x.faults_remote = 100;
    x.faults_private = 100;
    lx_update_scan_period(&x, 16384);
  }
  CHECK(x.scan_period_ps == 60000 * ms && x.faults_remote == 0);
  /* mostly local: slower by (ratio - 7) tenths; mostly remote and shared: faster */
  x.scan_period_ps = 10000 * ms;
  x.faults_local = 9, x.faults_remote = 1, x.faults_private = 9, x.faults_shared = 1;
  lx_update_scan_period(&x, 16384);
  CHECK(x.scan_period_ps == 12000 * ms);
  x.faults_local = 1, x.faults_remote = 9, x.faults_private = 2, x.faults_shared = 8;
  lx_update_scan_period(&x, 16384);
  CHECK(x.scan_period_ps == 12000 * ms - 5 * 1200 * ms);
  x.faults_local = 1, x.faults_remote = 9, x.faults_private = 2, x.faults_shared = 8, x.faults_migrate_fail = 1;
  lx_update_scan_period(&x, 16384); /* a failed migration: slower */
  CHECK(x.scan_period_ps == 12000 * ms);
  /* should_numa_migrate_memory: enough free promotes anything and resets the threshold */
  x.threshold_ps = 5;
  CHECK(lx_should_promote(&x, 10 * ms, 1ull << 62, 1) == 1 && x.threshold_ps == 0);
  /* else only under the hot threshold (1 s) */
  CHECK(lx_should_promote(&x, 20 * ms, 1000 * ms, 0) == 0 && x.refused_cold == 1);
  CHECK(lx_should_promote(&x, 30 * ms, 999 * ms, 0) == 1);
  /* ... and within the rate limit: 4 candidates a second */
  x.rate_limit_pages = 4;
  int ok = 0;
  for (int i = 0; i < 10; i++) ok += lx_should_promote(&x, 40 * ms + i, 1, 0);
  CHECK(ok == 2 && x.refused_rate == 8); /* the earlier candidate counts in this second too */
  CHECK(lx_should_promote(&x, 1200 * ms, 1, 0) == 1); /* a new second */
  /* numa_promotion_adjust_threshold: after scan_period_max, more candidates than the limit
   * allows lower the threshold a step (1/8 of the default), fewer raise it, up to twice */
  lx_init(&x, &cfg);
  x.rate_limit_pages = 1; /* 60 candidates a period */
  for (int i = 0; i < 200; i++) lx_should_promote(&x, ms + (uint64_t)i, 1, 0);
  lx_should_promote(&x, 61000 * ms, 1, 0);
  CHECK(x.threshold_ps == 875 * ms);
  for (int k = 2; k < 12; k++) lx_should_promote(&x, (uint64_t)k * 61000 * ms, 1, 0); /* one each */
  CHECK(x.threshold_ps == 2000 * ms);
  /* __setup_per_zone_wmarks: 2 GiB in all: min_free_kbytes sqrt(16 x 2097152) = 5792 KiB,
   * half of it node 0's (724 pages); each step the larger of 181 and 0.1 % (262) */
  uint64_t w[LX_NWMARK];
  lx_watermarks(&cfg, 0, w);
  CHECK(w[LX_MIN] == 724 && w[LX_LOW] == 986 && w[LX_HIGH] == 1248 && w[LX_PROMO] == 1510);
  /* pgdat_free_space_enough: above promo by a sixteenth of the node (16384 pages) */
  CHECK(lx_free_space_enough(&cfg, 1510 + 16385, w) && !lx_free_space_enough(&cfg, 1510 + 16384, w));
  cfg.nb_enough_min_bytes = 1ull << 30;
  CHECK(!lx_free_space_enough(&cfg, 100000, w));
}

/* The linux mode on the page table, at a time scale where a second is 10 us: a slow page that
 * faults soon after it was marked is promoted while the thread waits (charged the move and a
 * shootdown); one that faults late is not; default allocations spill to the slow node at the
 * low watermark; a bind to the fast node demotes directly; a refused promotion wakes kswapd,
 * which demotes in the background to the promo watermark. */
static void test_linux(void) {
  uint64_t saved0 = emu_cfg.cap_bytes[0];
  emu_cfg.kernel = KERNEL_LINUX;
  emu_cfg.time_scale = 1e-5; /* 1 s: 10 us; the hot threshold 10 us, the scan delay 10 us */
  emu_cfg.nb_enough_min_bytes = 1ull << 40; /* never enough free: the threshold decides */
  volatile char *p = fresh(8 * PAGE);
  for (int i = 0; i < 8; i++) p[i * PAGE] = (char)i;
  void *pages[8];
  int slow[8] = {1, 1, 1, 1, 1, 1, 1, 1}, st[8];
  for (int i = 0; i < 8; i++) pages[i] = (void *)(p + i * PAGE);
  CHECK(strata_emu_move(pages, 8, slow, st, 0) == 0 && st[7] == 1);
  emu_memory_init();
  const lx_t *x = emu_linux_state();
  int64_t migrate = c("migrate_ps"), sd = c("shootdowns"), kernel = c("kernel_ps");
  /* hot: touched every 2 us, so it faults within the threshold after any mark */
  for (int round = 0; round < 40 && strata_emu_node_of((void *)p) != 0; round++) {
    pass_time(2000);
    (void)p[0];
  }
  CHECK(strata_emu_node_of((void *)p) == 0 && x->promoted >= 1 && x->scans >= 1);
  CHECK(c("migrate_ps") > migrate && c("shootdowns") > sd && c("kernel_ps") > kernel);
  /* cold: touched once every 40 us, after the marks are older than the threshold (the hot page
   * keeps the scanner's clock going): its fault is refused and the page stays slow. Checked at
   * the first refusal: where the scan window lands depends on where the mappings are (ASLR), and
   * a later mark can fall just before a touch, whose fault is then rightly promoted (seen in one
   * layout of the scalar build) */
  uint64_t cold = x->refused_cold;
  for (int round = 0; round < 6 && x->refused_cold == cold; round++) {
    pass_time(40000);
    (void)p[PAGE];
  }
  CHECK(strata_emu_node_of((void *)(p + PAGE)) == 1 && x->refused_cold > cold);
  /* spill: node 0 just above its low watermark; default allocations go to node 1 */
  uint64_t res[2];
  strata_emu_residency(res, 2);
  emu_cfg.cap_bytes[0] = (res[0] + 64) * PAGE;
  emu_memory_init();
  uint64_t spilled = x->spilled, wakeups = x->kswapd_wakeups;
  volatile char *more = fresh(256 * PAGE);
  for (int i = 0; i < 256; i++) more[i * PAGE] = 1;
  strata_emu_residency(res, 2);
  CHECK(x->spilled >= 190 && strata_emu_node_of((void *)(more + 255 * PAGE)) == 1);
  CHECK(res[0] <= emu_cfg.cap_bytes[0] / PAGE && x->kswapd_wakeups == wakeups);
  /* bind to node 0: the thread demotes (directly) to make room, and is charged for it */
  volatile char *bound = fresh(128 * PAGE);
  CHECK(emu_bind((uintptr_t)bound, 128 * PAGE, 1, 1) == 0);
  int64_t dem = c("demoted_pages");
  for (int i = 0; i < 128; i++) bound[i * PAGE] = 1;
  CHECK(x->direct_demoted > 0 && c("demoted_pages") - dem == (int64_t)x->direct_demoted);
  CHECK(strata_emu_node_of((void *)(bound + 127 * PAGE)) == 0);
  /* a promotion the full node refuses wakes kswapd, which demotes in the background */
  uint64_t bg = emu_bg_counter(2), unbalanced = x->refused_unbalanced;
  for (int round = 0; round < 2000 && x->refused_unbalanced == unbalanced; round++) {
    pass_time(2000);
    (void)p[2 * PAGE];
  }
  pass_time(100000);
  CHECK(x->refused_unbalanced > unbalanced && x->kswapd_wakeups > wakeups && x->kswapd_demoted > 0);
  CHECK(emu_bg_counter(2) > bg);
  emu_cfg.cap_bytes[0] = saved0;
  emu_cfg.kernel = KERNEL_NONE;
  emu_cfg.time_scale = 1;
  emu_cfg.nb_enough_min_bytes = 0;
  emu_memory_init();
  for (int i = 0; i < 8; i++) CHECK(p[i * PAGE] == (char)i);
}

/* The settings string (STRATA_EMU, `strata emu run --set`) comes from the user: valid ones are
 * taken, values a field cannot hold are refused (not converted with undefined behaviour), and
 * 20,000 mutations of valid strings are each refused with a message or give a machine the
 * checks accept. */
static void test_settings(void) {
  emu_config_t cfg;
  char err[256];
#define PARSE(s) (emu_config_defaults(&cfg), err[0] = 0, emu_config_parse(&cfg, (s), err, sizeof err))
  CHECK(PARSE("preset=m2t capacity=64M,1G") == 0 && cfg.cap_bytes[0] == 64ull << 20);
  CHECK(PARSE("preset=dram-first") == 0 && cfg.nnodes == 3);
  CHECK(PARSE("l1=1.5K l1_ways=8") == 0 && cfg.l1_bytes == 1536);
  const char *bad[] = {"capacity=1e30,1G", "nodes=1e10",  "nodes=4294967297", "l1=inf", "epoch_ns=nan",
                       "epoch_ns=inf",     "capacity=-1", "nodes=2.5",        "l1=100.5", "capacity=1e400",
                       "read_ns=1e309",    "llc=18446744073709551616", "capacity=17179869184G"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = PARSE(bad[i]);
    CHECK(rc == -1 && strstr(err, "bad value"));
    if (rc != -1) fprintf(stderr, "  accepted '%s'\n", bad[i]);
  }
  const char *valid[] = {"preset=m2t capacity=64M,1G llc=8M llc_ways=16 kernel=1 tpp_scan_period_ns=1e8",
                         "nodes=3 read_ns=84.6,156,305 capacity=32G,32G,64G tier=0,0,1 distance=10,21,17",
                         "preset=host l1=48K l1_ways=12 mlp=10 stride_mlp=4 epoch_ns=100000"};
  static const char alphabet[] = " =,.-eE0123456789KMG";
  uint64_t x = 0x9e3779b97f4a7c15ull;
#define RND(n) (xorshift64(&x) % (n))
  int taken = 0, refused = 0, wrong = 0;
  for (int r = 0; r < 20000; r++) {
    char s[512];
    const char *v = valid[RND(3)];
    size_t len = strlen(v);
    memcpy(s, v, len + 1);
    for (uint64_t m = 0, n = 1 + RND(2); m < n; m++) {
      size_t i = (size_t)RND(len + 1);
      if (RND(3) == 0 && i < len) { /* delete */
        memmove(s + i, s + i + 1, len - i);
        len--;
      } else if (len + 2 < sizeof s) { /* insert or change a character */
        char ch = RND(4) == 0 ? (char)(1 + RND(255)) : alphabet[RND(sizeof alphabet - 1)];
        if (RND(2) && i < len) s[i] = ch;
        else {
          memmove(s + i + 1, s + i, len - i + 1);
          s[i] = ch;
          len++;
        }
      }
    }
    if (PARSE(s) == 0) {
      taken++;
      wrong += cfg.nnodes < 1 || cfg.nnodes > EMU_MAX_NODES || cfg.cap_bytes[cfg.nnodes - 1] == 0 || !(cfg.epoch_ns > 0);
    } else {
      refused++;
      wrong += !err[0];
    }
  }
  CHECK(wrong == 0);
  CHECK(taken > 200 && refused > 1000);
  printf("settings fuzz: 20000 strings, %d taken, %d refused\n", taken, refused);
#undef RND
#undef PARSE
}

int main(void) {
  test_lru();
  test_lru_ways();
  test_streams();
  test_strides();
  test_overlap();
  test_stream_train();
  test_next_page();
  test_caches();
  test_frames();
  test_pair();
  test_tlb();
  test_alternate();
  test_first_touch();
  test_remap();
  test_discard();
  test_libstrata();
  test_move();
  test_pingpong();
  test_observe();
  test_bulk();
  test_tpp();
  test_transactional();
  test_nomad();
  test_linux_rules();
  test_linux();
  test_settings();
  return check_done("test_emu");
}
