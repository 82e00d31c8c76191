/* lru.h: the inline half of lru.c, for the per-access path (core.c): where a key lives, and
 * touching it. Built with AVX-512 where the Makefile's EMU_SIMD says so (core.c and lru.c
 * alike), with plain loops otherwise; both give the same results. */
#ifndef STRATA_EMU_LRU_H
#define STRATA_EMU_LRU_H

#include "emu.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

enum { NARROW_SLOTS = 16, NARROW_MIN_SETS = 2048 };

/* Where a key lives: its set and the tag it has there. Sets are indexed by the key's low bits
 * (as cachegrind does), modulo the set count when it is not a power of two (a 60 MiB 12-way
 * LLC has 81920 sets): a division, but only on an L2 miss, and one for both the set and a
 * narrow tag. Hashing instead would scatter consecutive lines over the tag array and cost the
 * emulator a host cache miss per lookup. */
typedef struct {
  void *set;
  uint64_t tag;
} lru_where_t;

static inline lru_where_t lru_where(const lru_t *c, uint64_t key) {
  int pow2 = likely(c->mask != UINT64_MAX);
  if (c->narrow) { /* the quotient only here: a wide set (the L1's, on the hot path) needs none */
    uint64_t q = pow2 ? key >> c->shift : key / c->sets;
    uint64_t s = pow2 ? key & c->mask : key - q * c->sets;
    return (lru_where_t){(uint32_t *)c->tags + s * NARROW_SLOTS, q + 1};
  }
  uint64_t s = pow2 ? key & c->mask : key % c->sets;
  return (lru_where_t){(uint64_t *)c->tags + s * c->ways, key + 1};
}

static inline uint64_t lru_slot(const void *set, int narrow, uint64_t i) {
  return narrow ? ((const uint32_t *)set)[i] : ((const uint64_t *)set)[i];
}
static inline void lru_set_slot(void *set, int narrow, uint64_t i, uint64_t tag) {
  if (narrow) ((uint32_t *)set)[i] = (uint32_t)tag;
  else ((uint64_t *)set)[i] = tag;
}

/* Is the key the most recent of its set? (then touching it changes nothing) */
static inline int lru_is_mru(const lru_t *c, uint64_t key) {
  lru_where_t w = lru_where(c, key);
  return lru_slot(w.set, c->narrow, 0) == w.tag;
}

#ifdef __AVX512F__
/* lru_touch_at for up to 16 ways with AVX-512: compare every way at once, then write ways
 * 0..p (p = the key's way, or the last way on a miss) as the tag followed by the old ways
 * 0..p-1. The same result as the loop in lru_touch_at, in about 33 instructions for two 8-lane
 * vectors of wide tags where the loop takes 7 for each way it passes (objdump of access_slow:
 * 84-112 for a miss in 12-16 ways); a narrow set is one 16-lane vector. */
static inline __attribute__((always_inline)) int lru_touch_wide(uint64_t *set, unsigned ways, uint64_t k) {
  unsigned all = (1u << ways) - 1;
  __mmask8 m0 = (__mmask8)all, m1 = (__mmask8)(all >> 8);
  __m512i kv = _mm512_set1_epi64((long long)k);
  __m512i a = _mm512_maskz_loadu_epi64(m0, set), b = _mm512_maskz_loadu_epi64(m1, set + 8);
  unsigned hit = _mm512_mask_cmpeq_epi64_mask(m0, a, kv) |
                 (unsigned)_mm512_mask_cmpeq_epi64_mask(m1, b, kv) << 8;
  unsigned p = hit ? (unsigned)__builtin_ctz(hit) : ways - 1, upd = (2u << p) - 1;
  /* each way takes the one before it: way 0 the tag, way 8 the old way 7 */
  _mm512_mask_storeu_epi64(set, (__mmask8)upd, _mm512_alignr_epi64(a, kv, 7));
  if (upd >> 8) _mm512_mask_storeu_epi64(set + 8, (__mmask8)(upd >> 8), _mm512_alignr_epi64(b, a, 7));
  return hit != 0;
}

static inline __attribute__((always_inline)) int lru_touch_narrow(uint32_t *set, unsigned ways, uint32_t k) {
  __mmask16 m = (__mmask16)((1u << ways) - 1);
  __m512i kv = _mm512_set1_epi32((int)k);
  __m512i a = _mm512_maskz_loadu_epi32(m, set);
  unsigned hit = _mm512_mask_cmpeq_epi32_mask(m, a, kv);
  unsigned p = hit ? (unsigned)__builtin_ctz(hit) : ways - 1;
  _mm512_mask_storeu_epi32(set, (__mmask16)((2u << p) - 1), _mm512_alignr_epi32(a, kv, 15));
  return hit != 0;
}
#endif

/* Touch a key where it lives: a hit moves it to way 0; a miss inserts it at way 0 and drops
 * the least recent. One pass: shift ways down until the tag (or the end) is reached. */
static inline __attribute__((always_inline)) int lru_touch_at(const lru_t *c, lru_where_t w) {
  int narrow = c->narrow;
  if (lru_slot(w.set, narrow, 0) == w.tag) return 1;
#ifdef __AVX512F__
  if (narrow) return lru_touch_narrow(w.set, (unsigned)c->ways, (uint32_t)w.tag);
  if (c->ways <= 16) return lru_touch_wide(w.set, (unsigned)c->ways, w.tag);
#endif
  uint64_t prev = lru_slot(w.set, narrow, 0);
  lru_set_slot(w.set, narrow, 0, w.tag);
  for (uint64_t i = 1; i < c->ways; i++) {
    uint64_t cur = lru_slot(w.set, narrow, i);
    lru_set_slot(w.set, narrow, i, prev);
    if (cur == w.tag) return 1;
    prev = cur;
  }
  return 0;
}

static inline __attribute__((always_inline)) int lru_touch_inline(const lru_t *c, uint64_t key) {
  return lru_touch_at(c, lru_where(c, key));
}

#endif
