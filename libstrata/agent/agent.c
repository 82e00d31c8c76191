/* agent.c: the thread in a process under Strata that carries out a daemon's moves
 * transactionally (migrate.c), since only the process can use its userfaultfd this way.
 *
 * It exists only when a daemon asked for it: a process whose userfaultfd can move pages offers
 * an agent in its hello (channel.c), and a daemon whose mover is transactional answers
 * {"agent":true} on that connection and keeps it. The thread then waits on two things: the
 * connection, for requests (include/strata_channel.h: a move of up to 512 pages to a node,
 * shadows to drop, or pages to sample: sample.c), each answered with a reply; and the userfaultfd, for the missing-page
 * faults of pages being committed (answered after the request: by then the page is back, and
 * a zero page is placed only where one is really missing, after a free that returned the page
 * to the kernel). If the daemon goes away the agent drops its shadows (their memory is the
 * slow tier's) and asks again every few seconds, so a restarted daemon takes it back.
 *
 * The thread blocks every signal (the program's signals are the program's threads' business)
 * and takes none of the allocator's locks. A fork child has no agent. */
#include "internal.h"

#include <errno.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t _strata_agent_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool started;
static int conn = -1; /* the agent thread's */

/* Read or write exactly n bytes; false on EOF or an error. */
static bool full_io(int fd, void *buf, size_t n, bool out) {
  for (size_t done = 0; done < n;) {
    ssize_t r = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    done += (size_t)r;
  }
  return true;
}

/* Missing-page faults: each waits at a sampled page (sample.c: moved back), at a page being
 * committed (back by now: a wake is enough) or at a page freed to the kernel while its range
 * took such faults (a zero page, as the kernel would have given it). */
void _strata_agent_answer_faults(int uffd) {
  struct uffd_msg m[16];
  ssize_t r;
  while ((r = read(uffd, m, sizeof m)) > 0) {
    for (size_t i = 0; i < (size_t)r / sizeof m[0]; i++) {
      if (m[i].event != UFFD_EVENT_PAGEFAULT) continue;
      uint64_t page = m[i].arg.pagefault.address & ~(uint64_t)(PAGE_SIZE - 1);
      if (_strata_sample_fault(page, m[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE)) continue;
      struct uffdio_zeropage z = {.range = {page, PAGE_SIZE}, .mode = 0};
      if (ioctl(uffd, UFFDIO_ZEROPAGE, &z) != 0) {
        struct uffdio_range w = {page, PAGE_SIZE};
        ioctl(uffd, UFFDIO_WAKE, &w);
      }
    }
  }
}

/* One request from the daemon, answered. False when the connection is gone or talks nonsense. */
static bool serve(int fd) {
  strata_agent_request_t req;
  if (!full_io(fd, &req, sizeof req, false) || req.magic != STRATA_AGENT_MAGIC) return false;
  static void *pages[STRATA_AGENT_MAX_PAGES];
  static int32_t status[STRATA_AGENT_MAX_PAGES];
  static uint64_t touched[STRATA_AGENT_MAX_PAGES];
  static uint64_t sampled, samples_touched;
  strata_agent_reply_t rep = {.magic = STRATA_AGENT_MAGIC};
  if (req.op == STRATA_AGENT_MOVE || req.op == STRATA_AGENT_SAMPLE) {
    if (req.count > STRATA_AGENT_MAX_PAGES) return false;
    uint64_t addrs[STRATA_AGENT_MAX_PAGES];
    if (!full_io(fd, addrs, req.count * sizeof addrs[0], false)) return false;
    for (uint32_t i = 0; i < req.count; i++) pages[i] = (void *)(uintptr_t)(addrs[i] & ~(uint64_t)(PAGE_SIZE - 1));
  }
  if (req.op == STRATA_AGENT_MOVE) {
    rep.count = (uint32_t)_strata_migrate(pages, req.count, req.node, req.attempts, req.flags, status);
  } else if (req.op == STRATA_AGENT_DROP_SHADOWS) {
    rep.count = (uint32_t)_strata_shadows_drop(req.count);
  } else if (req.op == STRATA_AGENT_SAMPLE) {
    size_t taken;
    rep.count = (uint32_t)_strata_sample(pages, req.count, touched, &taken);
    sampled += taken;
    samples_touched += rep.count;
  } else {
    return false;
  }
  rep.counters = *_strata_migrate_counters();
  rep.counters.samples = sampled;
  rep.counters.samples_touched = samples_touched;
  if (!full_io(fd, &rep, sizeof rep, true)) return false;
  if (req.op == STRATA_AGENT_SAMPLE) return full_io(fd, touched, rep.count * sizeof touched[0], true);
  return req.op != STRATA_AGENT_MOVE || full_io(fd, status, rep.count * sizeof status[0], true);
}

static time_t seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

static void *agent_main(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "strata-agent");
  bool move;
  int uffd = _strata_uffd(&move);
  time_t swept = seconds();
  for (;;) {
    if (conn < 0) { /* the daemon went away: ask again every few seconds */
      _strata_shadows_drop(0);
      _strata_sample_return_all();
      struct pollfd u = {uffd, POLLIN, 0};
      if (poll(&u, 1, 3000) > 0) _strata_agent_answer_faults(uffd);
      conn = _strata_daemon_hello(true);
      continue;
    }
    struct pollfd fds[2] = {{uffd, POLLIN, 0}, {conn, POLLIN, 0}};
    int ready = poll(fds, 2, 1000);
    time_t now = seconds();
    if (now != swept) { /* every second: shadows of pages written since go */
      _strata_shadows_sweep();
      swept = now;
    }
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) _strata_agent_answer_faults(uffd);
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      bool ok = (fds[1].revents & POLLIN) && serve(conn);
      _strata_agent_answer_faults(uffd); /* the request's commits are done: let their waiters go */
      if (!ok) {
        close(conn);
        conn = -1;
      }
    }
  }
  return NULL;
}

void _strata_agent_start(int fd) {
  bool move;
  int uffd = _strata_uffd(&move);
  bool no = false;
  if (fd < 0 || uffd < 0 || !move || !atomic_compare_exchange_strong(&started, &no, true)) {
    if (fd >= 0) close(fd);
    return;
  }
  if (_strata_migrate_init(uffd) != 0 || _strata_sample_init() != 0) {
    _strata_message("strata: the agent cannot reserve its staging and shadow areas\n");
    close(fd);
    return;
  }
  conn = fd;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread starts with every signal blocked */
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  if (pthread_create(&t, &at, agent_main, NULL) != 0) {
    close(fd);
    conn = -1;
  }
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void _strata_agent_forget(void) { /* fork child: the thread is the parent's */
  if (!atomic_load(&started)) return;
  atomic_store(&started, false);
  if (conn >= 0) close(conn);
  conn = -1;
  _strata_migrate_forget();
  _strata_sample_forget();
}
