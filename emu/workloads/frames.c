/* frames.c: which physical frames does the kernel give a heap? The evidence for the emulator's
 * physical indexing (emu/core.c, frame_line). Allocates N blocks of 40 bytes with malloc and
 * touches each (the layout benchmark's malloc build: a 32-byte node and glibc's header), then
 * reads every heap page's frame from /proc/self/pagemap (frame numbers need root: without it
 * the kernel reports 0).
 *
 * What matters to a physically indexed cache is the colour of a page (its frame modulo
 * COLOURS: 32 for a 2 MiB 16-way L2, whose ways span 128 KiB) along the strides a program
 * walks. The layout benchmark's malloc lists step STRIDE = 12 pages (48 KiB) from node to
 * node. For the pages of each of the STRIDE residue classes this prints the colours'
 * concentration, COLOURS x the sum of the squared shares of each colour, averaged: 1 when the
 * class spreads evenly over every colour, COLOURS / k when over only k of them. Indexed by
 * virtual page number, a 12-page stride uses 8 of 32 colours: 4.00.
 *
 *   frames [N [STRIDE [COLOURS]]]    defaults 8192000, 12, 32 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FRAME(e) ((e) & ((1ull << 55) - 1))

/* the colours' concentration along the stride, colouring page i of n by its frame or by its
 * virtual page number (first + i) */
static double concentration(const uint64_t *map, uintptr_t first, size_t n, unsigned stride,
                            unsigned colours, int by_frame) {
  double sum = 0;
  size_t *count = calloc(colours, sizeof *count);
  for (unsigned r = 0; r < stride; r++) {
    size_t total = 0;
    for (unsigned c = 0; c < colours; c++) count[c] = 0;
    for (size_t i = r; i < n; i += stride) {
      count[(by_frame ? FRAME(map[i]) : first + i) % colours]++;
      total++;
    }
    double sq = 0;
    for (unsigned c = 0; c < colours; c++) sq += (double)count[c] * (double)count[c];
    if (total) sum += sq * colours / ((double)total * (double)total);
  }
  free(count);
  return sum / stride;
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 8192000;
  unsigned stride = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 12;
  unsigned colours = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 0) : 32;
  if (!n || !stride || !colours || colours > 65536) {
    fprintf(stderr, "usage: frames [N [STRIDE [COLOURS <= 65536]]]\n");
    return 2;
  }
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (size_t i = 0; i < n; i++) {
    char *p = malloc(40);
    if (!p) {
      perror("frames: malloc");
      return 1;
    }
    *(volatile char *)p = 1;
    uintptr_t a = (uintptr_t)p;
    if (a < lo) lo = a;
    if (a > hi) hi = a;
  }
  uintptr_t first = lo >> 12;
  size_t pages = (hi >> 12) - first + 1;
  uint64_t *map = malloc(pages * sizeof *map);
  int fd = open("/proc/self/pagemap", O_RDONLY);
  if (!map || fd < 0) {
    perror("frames: /proc/self/pagemap");
    return 1;
  }
  if (pread(fd, map, pages * sizeof *map, (off_t)(first * sizeof *map)) != (ssize_t)(pages * sizeof *map)) {
    perror("frames: reading /proc/self/pagemap");
    return 1;
  }
  size_t present = 0, zero = 0, next = 0;
  for (size_t i = 0; i < pages; i++) {
    if (!(map[i] >> 63)) continue;
    present++;
    zero += FRAME(map[i]) == 0;
    next += i && (map[i - 1] >> 63) && FRAME(map[i]) == FRAME(map[i - 1]) + 1;
  }
  if (present < pages || zero == present) {
    fprintf(stderr, "frames: %s\n", zero == present ? "every frame number reads 0: run as root"
                                                    : "some heap pages are not present");
    return 1;
  }
  printf("heap pages %zu, next page on the next frame %.1f %%\n", pages, 100.0 * (double)next / (double)pages);
  printf("colour concentration along a %u-page stride, %u colours (1 = even over all): "
         "by frame %.2f, by virtual page %.2f\n",
         stride, colours, concentration(map, first, pages, stride, colours, 1),
         concentration(map, first, pages, stride, colours, 0));
  return 0;
}
