/* evilchan: a program that lies to the daemon through its channel and its socket, as a local
 * user without privileges could (docs/security.md; tests/security.rs runs it as such a user).
 *
 *   evilchan unsealed SOCK SECS     a channel that is not sealed, handed over, then truncated
 *   evilchan huge SOCK SECS         a sealed channel of 1 TiB (sparse) claiming 2^40 records
 *   evilchan own SECS               (under libstrata) shrink, grow and scribble over its own
 *                                   channel: claims priority INT32_MAX and huge tables
 *   evilchan exec PROG [ARGS...]    a channel of its own kept open across the exec of PROG
 *                                   (setuid: the channel is not the program's)
 *   evilchan drip SOCK SECS         an agent that answers each request a byte every 2 s
 *   evilchan hello-for SOCK PID     an agent offered for another process: prints the reply
 *
 * Each prints what it did on stdout, one line, and exits 0 unless it could not do it. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "strata_channel.h"

static void die(const char *what) {
  fprintf(stderr, "evilchan: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* A channel region for this process: a memfd of `size` bytes with a header claiming
 * `objects` object records, sealed when asked. */
static int make_channel(uint64_t size, uint64_t objects, int seal, uint32_t tracking) {
  int fd = memfd_create(STRATA_CHANNEL_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) die("memfd_create");
  if (ftruncate(fd, (off_t)size) != 0) die("ftruncate");
  strata_channel_header_t h = {0};
  h.magic = STRATA_CHANNEL_MAGIC;
  h.version = STRATA_CHANNEL_VERSION;
  h.header_bytes = sizeof h;
  h.pid = getpid();
  h.context_capacity = 16;
  h.context_bytes = sizeof(strata_context_t);
  h.contexts_offset = 4096;
  h.object_capacity = objects;
  h.object_bytes = sizeof(strata_object_t);
  h.objects_offset = 4096 + 16 * sizeof(strata_context_t);
  h.objects_high = objects;
  h.priority = 1000;
  h.tracking = tracking;
  if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) die("pwrite");
  if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) die("seal");
  return fd;
}

/* Connect to the daemon and send `line` with `fd` attached. */
static int hello(const char *sock, const char *line, int fd) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
  if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) die("connect");
  struct iovec iov = {(void *)line, strlen(line)};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(s, &msg, MSG_NOSIGNAL) < 0) die("sendmsg");
  return s;
}

static int channel_of_this_process(void) {
  char link[256], want[64];
  snprintf(want, sizeof want, "/memfd:%s (deleted)", STRATA_CHANNEL_NAME);
  for (int fd = 0; fd < 1024; fd++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0 && (link[n] = 0, !strcmp(link, want))) return fd;
  }
  return -1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: evilchan MODE ARGS (see the file)\n");
    return 2;
  }
  const char *mode = argv[1];
  setvbuf(stdout, NULL, _IONBF, 0);
  char line[128];
  snprintf(line, sizeof line, "{\"op\":\"hello\",\"pid\":%d}\n", getpid());
  if (!strcmp(mode, "unsealed") && argc == 4) {
    int fd = make_channel(1 << 20, 16, 0, 0);
    close(hello(argv[2], line, fd));
    sleep(1);
    if (ftruncate(fd, 0) != 0) die("ftruncate");
    printf("truncated\n");
    sleep((unsigned)atoi(argv[3]));
    return 0;
  }
  if (!strcmp(mode, "huge") && argc == 4) {
    int fd = make_channel((uint64_t)1 << 40, (uint64_t)1 << 40, 1, 0);
    close(hello(argv[2], line, fd));
    printf("offered 1 TiB\n");
    sleep((unsigned)atoi(argv[3]));
    return 0;
  }
  if (!strcmp(mode, "own")) {
    static void *volatile sink; /* (so the compiler keeps the calls) */
    for (int i = 0; i < 2000; i++) free(sink = malloc(100 + (size_t)i)); /* make the channel */
    void *keep = sink = malloc(1 << 20);
    int fd = channel_of_this_process();
    if (fd < 0) {
      printf("no channel\n");
      return 1;
    }
    sleep(1); /* the daemon has taken the channel: now lie in it */
    int shrink = ftruncate(fd, 0) == 0 ? 0 : errno;
    int grow = ftruncate(fd, (off_t)1 << 40) == 0 ? 0 : errno;
    strata_channel_header_t h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) die("pread");
    h.priority = INT32_MAX;
    h.object_capacity = (uint64_t)1 << 40;
    h.objects_high = (uint64_t)1 << 40;
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) die("pwrite");
    printf("shrink=%s grow=%s scribbled\n", shrink == EPERM ? "EPERM" : shrink ? strerror(shrink) : "DONE",
           grow == EPERM ? "EPERM" : grow ? strerror(grow) : "DONE");
    sleep((unsigned)atoi(argv[2]));
    free(keep);
    return 0;
  }
  if (!strcmp(mode, "exec")) {
    int fd = make_channel(1 << 20, 16, 1, 0);
    fcntl(fd, F_SETFD, 0); /* kept across exec */
    strata_channel_header_t h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) die("pread");
    h.priority = -1000;
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) die("pwrite");
    printf("exec %s with channel fd %d\n", argv[2], fd);
    execv(argv[2], argv + 2);
    die("execv");
  }
  if (!strcmp(mode, "drip") && argc == 4) {
    int fd = make_channel(1 << 20, 16, 1, STRATA_TRACKING_WP_ASYNC);
    snprintf(line, sizeof line, "{\"op\":\"hello\",\"pid\":%d,\"agent\":true}\n", getpid());
    int s = hello(argv[2], line, fd);
    char reply[64] = {0};
    if (read(s, reply, sizeof reply - 1) <= 0 || !strstr(reply, "\"agent\":true")) {
      printf("not taken: %s\n", reply);
      return 1;
    }
    printf("agent taken; dripping\n");
    time_t end = time(NULL) + atoi(argv[3]);
    strata_agent_request_t r;
    while (time(NULL) < end && read(s, &r, sizeof r) == (ssize_t)sizeof r) {
      uint64_t page;
      for (uint32_t i = 0; i < r.count && i < STRATA_AGENT_MAX_PAGES; i++)
        if (read(s, &page, sizeof page) != (ssize_t)sizeof page) return 0;
      strata_agent_reply_t rep = {.magic = STRATA_AGENT_MAGIC, .count = 0};
      const char *b = (const char *)&rep;
      for (size_t k = 0; k < sizeof rep && time(NULL) < end; k++) {
        if (write(s, b + k, 1) != 1) return 0;
        sleep(2);
      }
    }
    return 0;
  }
  if (!strcmp(mode, "hello-for") && argc == 4) {
    int fd = make_channel(1 << 20, 16, 1, 0);
    snprintf(line, sizeof line, "{\"op\":\"hello\",\"pid\":%s,\"agent\":true}\n", argv[3]);
    int s = hello(argv[2], line, fd);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char reply[64] = {0};
    ssize_t n = read(s, reply, sizeof reply - 1);
    printf("reply: %s\n", n > 0 ? reply : "none");
    return 0;
  }
  fprintf(stderr, "evilchan: unknown mode or arguments: %s\n", mode);
  return 2;
}
