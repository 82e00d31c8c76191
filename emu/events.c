/* events.c: what the emulated machine reports as it happens, for a tiering policy to read
 * through strata_emu.h: LLC-miss samples (like PEBS) and the tpp mode's hint faults. Two rings,
 * one mechanism: when nobody reads, the oldest element is overwritten and counted as lost. */
#include "emu.h"

#include <pthread.h>

/* glibc's own copy: memcpy is interposed by core.c */
extern void *__memcpy_chk(void *d, const void *s, size_t n, size_t dn);

#define RING 4096
typedef struct {
  char *buf;
  size_t elem;
  uint64_t head, tail, lost;
} ring_t;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static strata_emu_sample_t sample_buf[RING];
static strata_emu_fault_t fault_buf[RING];
static ring_t samples = {(char *)sample_buf, sizeof sample_buf[0], 0, 0, 0};
static ring_t faults = {(char *)fault_buf, sizeof fault_buf[0], 0, 0, 0};

static void ring_put(ring_t *r, const void *e) {
  pthread_mutex_lock(&ring_lock);
  if (r->head - r->tail == RING) r->tail++, r->lost++;
  __memcpy_chk(r->buf + (r->head++ % RING) * r->elem, e, r->elem, r->elem);
  pthread_mutex_unlock(&ring_lock);
}

static size_t ring_take(ring_t *r, void *out, size_t max) {
  pthread_mutex_lock(&ring_lock);
  size_t n = 0;
  for (; n < max && r->tail < r->head; n++)
    __memcpy_chk((char *)out + n * r->elem, r->buf + (r->tail++ % RING) * r->elem, r->elem, r->elem);
  pthread_mutex_unlock(&ring_lock);
  return n;
}

void emu_sample(emu_thread_t *t, uint64_t addr, int node, int store) {
  strata_emu_sample_t e = {addr, t->clock_ps / 1000, node, t->index, store, 0};
  ring_put(&samples, &e);
}

void emu_fault_event(uint64_t addr, uint64_t time_ps, int node, int promoted) {
  strata_emu_fault_t e = {addr, time_ps / 1000, node, promoted};
  ring_put(&faults, &e);
}

size_t strata_emu_samples(strata_emu_sample_t *out, size_t max) { return ring_take(&samples, out, max); }
size_t strata_emu_hint_faults(strata_emu_fault_t *out, size_t max) { return ring_take(&faults, out, max); }
uint64_t emu_samples_lost(void) { return samples.lost; }
uint64_t emu_fault_events_lost(void) { return faults.lost; }
