/* channel.c: the region a process shares with a tiering daemon (include/strata_channel.h):
 * its creation, the context table's slots and the tracked objects' records. What goes into a
 * context (its stack, rules, counters) is context/context.c's business.
 *
 * The region is an anonymous memfd (no name anyone else can plant or open), sealed at its size
 * so that no one, this process included, can shrink or grow it under a reader's feet. It lives
 * exactly as long as the process. Where no memfd can be made it is private memory, said once on
 * stderr, and the process keeps its contexts to itself. Once it exists, a running daemon is
 * handed it on its socket (daemon_hello, SCM_RIGHTS) and Strata's memory is offered to the
 * daemon's write tracker (track.c). docs/security.md says what the daemon checks. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CONTEXT_CAPACITY STRATA_CONTEXT_CAPACITY
#define OBJECT_CAPACITY STRATA_OBJECT_CAPACITY
#define CONTEXT_PROBES 64                    /* the index's open addressing: slots tried per id */
#define INDEX_CLAIMED UINT16_MAX              /* an index slot whose context is being made */

static strata_channel_header_t *_Atomic channel;
pthread_mutex_t _strata_channel_lock = PTHREAD_MUTEX_INITIALIZER;
#define channel_lock _strata_channel_lock
static size_t channel_size;
static int channel_fd = -1; /* kept open: the region's only handle once its name is gone */
static uint32_t object_free_head; /* free list of objects[] slots, via next; channel_lock */
/* id -> contexts[] index, private to the process (open addressing, 0 = empty slot). Contexts
 * themselves are laid out densely in contexts[] from index 1, in the order they are first
 * seen, so a process with a few hundred contexts keeps a few hundred entries resident, not a
 * page per context (the table is 12 MiB of address space), and so does a reader. */
static _Atomic uint16_t *context_index;
static int32_t initial_directive = STRATA_DIRECTIVE_DEFAULT; /* STRATA_DIRECTIVE */

static strata_context_t *contexts(strata_channel_header_t *h) {
  return (strata_context_t *)((char *)h + h->contexts_offset);
}
static strata_object_t *objects(strata_channel_header_t *h) {
  return (strata_object_t *)((char *)h + h->objects_offset);
}

/* Create this process's region (a sealed memfd, else private memory).
 *
 * Its pages are not reserved up front: a memfd lives on the kernel's internal shmem mount,
 * which has no size limit another user could fill (a full /dev/shm is nothing to it), and a
 * page the process first touches is charged to its memory cgroup like its heap, so the worst a
 * first write meets is the cgroup's OOM handling, never SIGBUS. Reserving would cost every
 * process the whole region (about 36 MiB) for tables it mostly leaves empty. */
static strata_channel_header_t *channel_create(void) {
  size_t hdr = align_up(sizeof(strata_channel_header_t), 64);
  size_t ctx_off = hdr, obj_off = align_up(ctx_off + CONTEXT_CAPACITY * sizeof(strata_context_t), 4096);
  size_t size = align_up(obj_off + OBJECT_CAPACITY * sizeof(strata_object_t), 4096);
  long pid = (long)getpid();
  void *m = MAP_FAILED;
  const char *failed = "memfd_create";
  int fd = memfd_create(STRATA_CHANNEL_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0) {
    failed = "ftruncate";
    if (ftruncate(fd, (off_t)size) == 0) {
      failed = "sealing";
      if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
        failed = "mmap";
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
    }
    int e = errno;
    if (m == MAP_FAILED) close(fd);
    else channel_fd = fd;
    errno = e;
  }
  if (m == MAP_FAILED) {
    _strata_warn("strata: no channel (%s: %s); this process keeps its contexts to itself and no "
                 "daemon manages it\n", failed, strerror(errno));
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
  }
  strata_channel_header_t *h = m;
  h->magic = STRATA_CHANNEL_MAGIC;
  h->version = STRATA_CHANNEL_VERSION;
  h->header_bytes = sizeof *h;
  h->pid = pid;
  h->context_capacity = CONTEXT_CAPACITY;
  h->context_bytes = sizeof(strata_context_t);
  h->contexts_offset = ctx_off;
  h->object_capacity = OBJECT_CAPACITY;
  h->object_bytes = sizeof(strata_object_t);
  h->objects_offset = obj_off;
  h->objects_high = 1; /* slot 0 means "no record" */
  h->default_directive = initial_directive;
  h->priority = STRATA_PRIORITY_NORMAL;
  const char *prio = _strata_option_str(OPT_PRIORITY);
  if (prio && _strata_parse_priority(prio, &h->priority))
    _strata_warn("strata: STRATA_PRIORITY='%s' is not a priority (high, normal, low, or %d..%d); "
                    "keeping normal\n", prio, STRATA_PRIORITY_MIN, STRATA_PRIORITY_MAX);
  context_index = mmap(NULL, CONTEXT_CAPACITY * sizeof *context_index, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (context_index == MAP_FAILED) {
    context_index = NULL;
    munmap(m, size);
    if (channel_fd >= 0) close(channel_fd);
    channel_fd = -1;
    return NULL;
  }
  channel_size = size;
  object_free_head = 0;
  return h;
}

int _strata_parse_priority(const char *s, int32_t *out) {
  if (!strcmp(s, "high")) *out = STRATA_PRIORITY_HIGH;
  else if (!strcmp(s, "normal")) *out = STRATA_PRIORITY_NORMAL;
  else if (!strcmp(s, "low")) *out = STRATA_PRIORITY_LOW;
  else {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < STRATA_PRIORITY_MIN || v > STRATA_PRIORITY_MAX) return -1;
    *out = (int32_t)v;
  }
  return 0;
}

/* Hand a running daemon this process's channel: one line on its socket, with the region's
 * descriptor attached (SCM_RIGHTS). Nothing waits when no daemon listens (a failed connect).
 * Offering an agent (this process can move its pages transactionally, agent/), it waits up to
 * 200 ms for the daemon's answer and returns the connection when the daemon wants one, else
 * -1. The daemon takes the hello only from this process itself (its peer credentials). */
int _strata_daemon_hello(bool agent) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  const char *path = _strata_option_str(OPT_DAEMON_SOCKET);
  if (!path) path = STRATA_DAEMON_SOCKET_DEFAULT;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (!h || strlen(path) >= sizeof sa.sun_path) return -1;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  /* a full backlog (a daemon that does not answer) must not block this process */
  struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  char line[96];
  int n = snprintf(line, sizeof line, "{\"op\":\"hello\",\"pid\":%ld%s}\n", (long)h->pid,
                   agent ? ",\"agent\":true" : "");
  bool wanted = false;
  struct iovec iov = {line, (size_t)n};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &channel_fd, sizeof(int));
  if (channel_fd >= 0 && sendmsg(fd, &msg, MSG_NOSIGNAL) == n) {
    _strata_message("strata: told the daemon at %s\n", path);
    ssize_t r = agent ? read(fd, line, sizeof line - 1) : 0;
    if (r > 0) {
      line[r] = 0;
      wanted = strstr(line, "\"agent\":true") != NULL;
    }
  }
  if (wanted) {
    tv.tv_usec = 0; /* the agent's connection blocks as long as it takes */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  close(fd);
  return -1;
}

strata_channel_header_t *_strata_channel(void) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  if (likely(h)) return h;
  pthread_mutex_lock(&channel_lock);
  h = atomic_load(&channel);
  bool made = false;
  if (!h) {
    h = channel_create();
    atomic_store_explicit(&channel, h, memory_order_release);
    made = h != NULL;
  }
  pthread_mutex_unlock(&channel_lock);
  if (made) { /* outside the channel lock: tracking takes the seg lock, which nests outside it */
    __atomic_store_n(&h->tracking, _strata_track_start(), __ATOMIC_RELAXED);
    bool move;
    if (channel_fd >= 0) _strata_agent_start(_strata_daemon_hello(_strata_uffd(&move) >= 0 && move));
  }
  return h;
}

/* In a forked child: the parent's region is not ours; start a new one on first use. The
 * child's inherited objects keep tags into the old table; frees check before counting. */
void _strata_channel_forget(void) {
  strata_channel_header_t *h = atomic_load(&channel);
  atomic_store(&channel, NULL);
  if (h) munmap(h, channel_size);
  if (context_index) munmap((void *)context_index, CONTEXT_CAPACITY * sizeof *context_index);
  context_index = NULL;
  if (channel_fd >= 0) close(channel_fd);
  channel_fd = -1;
}

/* ---- contexts ------------------------------------------------------------------------------ */

/* The next free entry of contexts[] for id, 0 when the table is full. */
static uint32_t context_new(strata_channel_header_t *h, uint64_t id) {
  pthread_mutex_lock(&channel_lock);
  uint64_t used = h->contexts_used;
  uint32_t i = used + 1 < h->context_capacity && used + 1 < INDEX_CLAIMED ? (uint32_t)(used + 1) : 0;
  if (i) {
    atomic_store_explicit((_Atomic uint64_t *)&contexts(h)[i].id, id, memory_order_release);
    atomic_store_explicit((_Atomic uint64_t *)&h->contexts_used, used + 1, memory_order_release);
  }
  pthread_mutex_unlock(&channel_lock);
  return i;
}

/* The index of context id in contexts[], made when new (*created); 0 = the table is full. An
 * index slot is claimed (INDEX_CLAIMED) before its entry is made, so two threads meeting a new
 * id make one entry: the second waits the few instructions the first needs. */
uint32_t _strata_channel_context(uint64_t id, bool *created) {
  strata_channel_header_t *h = _strata_channel();
  *created = false;
  if (!h) return 0;
  strata_context_t *t = contexts(h);
  uint64_t mask = h->context_capacity - 1;
  for (uint64_t probe = 0; probe < CONTEXT_PROBES; probe++) {
    _Atomic uint16_t *slot = &context_index[(id + probe) & mask];
    uint16_t cur = atomic_load_explicit(slot, memory_order_acquire);
    if (cur == 0) {
      uint16_t zero = 0;
      if (atomic_compare_exchange_strong_explicit(slot, &zero, INDEX_CLAIMED, memory_order_acq_rel,
                                                  memory_order_acquire)) {
        uint32_t i = context_new(h, id);
        atomic_store_explicit(slot, (uint16_t)i, memory_order_release); /* 0 again when full */
        if (!i) break;
        *created = true;
        return i;
      }
      cur = zero;
    }
    while (cur == INDEX_CLAIMED) {
      sched_yield();
      cur = atomic_load_explicit(slot, memory_order_acquire);
    }
    if (cur == 0) break; /* the claim found the table full */
    if (atomic_load_explicit((_Atomic uint64_t *)&t[cur].id, memory_order_acquire) == id) return cur;
  }
  atomic_fetch_add_explicit((_Atomic uint64_t *)&h->contexts_dropped, 1, memory_order_relaxed);
  return 0;
}

/* The process's default directive (STRATA_DIRECTIVE at start, then the daemon's to set), for
 * allocations whose context has the default directive or that have none. Never creates the
 * channel. */
void _strata_process_directive_init(void) {
  const char *s = _strata_option_str(OPT_DIRECTIVE);
  if (s && *s && _strata_parse_directive(s, &initial_directive))
    _strata_warn("strata: STRATA_DIRECTIVE='%s' is not a directive (default, fast, slow, tier:N); "
                    "keeping the default\n", s);
}

int32_t _strata_process_directive(void) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  return h ? __atomic_load_n(&h->default_directive, __ATOMIC_RELAXED) : initial_directive;
}

strata_context_t *_strata_context(uint32_t idx) {
  strata_channel_header_t *h = atomic_load_explicit(&channel, memory_order_acquire);
  return h && idx && idx < h->context_capacity ? &contexts(h)[idx] : NULL;
}

/* ---- tracked objects ----------------------------------------------------------------------- */

/* Record [p, p+len) in channel h for context idx or user arena `arena` (with its hint), in
 * 64 MiB pieces; returns the first record, 0 if none. */
static uint32_t track(strata_channel_header_t *h, void *p, size_t len, uint32_t idx, uint32_t arena,
                      int32_t hint) {
  if (!h) return 0;
  strata_object_t *o = objects(h);
  uint32_t first = 0, prev = 0;
  pthread_mutex_lock(&channel_lock);
  for (size_t off = 0; off < len; off += STRATA_OBJECT_RECORD_MAX) {
    uint32_t r = object_free_head;
    if (r) object_free_head = o[r].next;
    else if (h->objects_high < h->object_capacity) r = (uint32_t)h->objects_high++;
    else {
      h->objects_dropped++;
      break;
    }
    o[r].len = len - off < STRATA_OBJECT_RECORD_MAX ? len - off : STRATA_OBJECT_RECORD_MAX;
    o[r].context = idx;
    o[r].next = 0;
    o[r].arena = arena;
    o[r].hint = hint;
    atomic_store_explicit((_Atomic uint64_t *)&o[r].addr, (uint64_t)(uintptr_t)p + off, memory_order_release);
    if (prev) o[prev].next = r;
    else first = r;
    prev = r;
  }
  pthread_mutex_unlock(&channel_lock);
  return first;
}

uint32_t _strata_track(void *p, size_t len, uint32_t idx) {
  return track(_strata_channel(), p, len, idx, 0, 0);
}

/* The channel is not made here: an arena's allocation holds its lock, and strata_arena_new
 * made it (a forked child records its inherited arenas' pages once something else has made
 * its own). */
uint32_t _strata_track_arena(void *p, size_t len, uint32_t arena, int32_t hint) {
  return arena ? track(atomic_load_explicit(&channel, memory_order_acquire), p, len, 0, arena, hint) : 0;
}

void _strata_untrack(uint32_t first, const void *p) {
  strata_channel_header_t *h = atomic_load(&channel);
  if (!h || !first) return;
  strata_object_t *o = objects(h);
  pthread_mutex_lock(&channel_lock); /* objects_high grows under it */
  /* (the address: not a stale record from before a fork) */
  if (first < h->objects_high && o[first].addr == (uint64_t)(uintptr_t)p) {
    for (uint32_t r = first, next; r; r = next) {
      next = o[r].next;
      atomic_store_explicit((_Atomic uint64_t *)&o[r].addr, 0, memory_order_release);
      o[r].next = object_free_head;
      object_free_head = r;
    }
  }
  pthread_mutex_unlock(&channel_lock);
}
