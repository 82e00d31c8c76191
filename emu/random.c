/* random.c: the emulated machine's randomness is seeded. A program that draws random bytes
 * (Rust's HashMap keys, a generator seeded from getrandom, arc4random) makes different choices
 * on every run, and its accesses differ with them; the emulator interposes glibc's entry points
 * with one seeded stream, so the same program repeats exactly. (Not for security: a program
 * on the emulated machine is measured, not deployed.) Calls glibc makes internally, through
 * the system call itself, are not seen. */
#include "emu.h"

#include <errno.h>
#include <sys/types.h>

static _Atomic uint64_t state = 0x5EED5EED5EED5EEDull;

/* splitmix64, one step of a shared stream */
static uint64_t next(void) {
  uint64_t z = atomic_fetch_add(&state, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* byte by byte: no memcpy, which the emulator interposes */
static void fill(void *buf, size_t len) {
  unsigned char *p = buf;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t r = next();
    for (size_t k = 0; k < 8 && i + k < len; k++) p[i + k] = (unsigned char)(r >> (8 * k));
  }
}

__attribute__((visibility("default"))) ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
  (void)flags;
  fill(buf, len);
  return (ssize_t)len;
}

__attribute__((visibility("default"))) int getentropy(void *buf, size_t len) {
  if (len > 256) {
    errno = EIO;
    return -1;
  }
  fill(buf, len);
  return 0;
}

__attribute__((visibility("default"))) uint32_t arc4random(void) { return (uint32_t)next(); }

__attribute__((visibility("default"))) void arc4random_buf(void *buf, size_t len) { fill(buf, len); }

__attribute__((visibility("default"))) uint32_t arc4random_uniform(uint32_t upper) {
  return upper ? (uint32_t)(((next() >> 32) * upper) >> 32) : 0;
}
