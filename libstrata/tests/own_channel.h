/* own_channel.h: a test's view of its own process's channel, as a daemon reads it. */
#ifndef STRATA_OWN_CHANNEL_H
#define STRATA_OWN_CHANNEL_H
#include "strata_channel.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* This process's channel, mapped read-only the way a daemon finds it (/proc/PID/fd). */
static const strata_channel_header_t *own_channel(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return NULL;
  const strata_channel_header_t *h = NULL;
  for (struct dirent *e; !h && (e = readdir(d));) {
    char path[300], link[128];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = 0;
    struct stat st;
    int fd = atoi(e->d_name);
    if (!strstr(link, "memfd:" STRATA_CHANNEL_NAME) || fstat(fd, &st)) continue;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) h = m;
  }
  closedir(d);
  return h;
}

/* The live record holding p, NULL if none. */
static const strata_object_t *record_of(const strata_channel_header_t *h, const void *p) {
  const strata_object_t *o = (const void *)((const char *)h + h->objects_offset);
  uint64_t a = (uint64_t)(uintptr_t)p;
  for (uint64_t i = 1; i < h->objects_high; i++)
    if (o[i].addr && o[i].addr <= a && a < o[i].addr + o[i].len) return &o[i];
  return NULL;
}
#endif
