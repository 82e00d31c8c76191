/* fail.c: how the emulator stops when it cannot model what it is asked to. Running on a
 * machine the program did not ask for, or without modelling part of it, would give wrong
 * figures, so it stops, saying why: into the report file when there is one (as
 * {"error": ...}, which `strata emu run` prints), else on stderr. Exit status 2.
 * Also where the emulator reads its environment (emu_getenv), which a machine it did not
 * ask for would otherwise come from. */
#include "emu.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "util/json.h"

/* The kernel's copy of the environment the program started with, read once. */
static char initial_env[1 << 20];
static size_t initial_len;
static pthread_once_t initial_once = PTHREAD_ONCE_INIT;

static void read_initial_env(void) {
  int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t r;
  while (initial_len < sizeof initial_env - 1 &&
         (r = read(fd, initial_env + initial_len, sizeof initial_env - 1 - initial_len)) > 0)
    initial_len += (size_t)r;
  close(fd);
}

const char *emu_getenv(const char *name) {
  if (getauxval(AT_SECURE)) return NULL; /* a setuid exec: its environment is not its user's to set */
  const char *v = getenv(name);
  if (v) return v;
  /* libc's environment is not set up yet when a preloaded allocator (libstrata.so) touches
   * memory from ld.so's first calls, before any constructor: the machine would then be the
   * preset's defaults. The kernel's copy has it. */
  pthread_once(&initial_once, read_initial_env);
  size_t n = strlen(name);
  for (size_t i = 0; i < initial_len; i += strlen(initial_env + i) + 1)
    if (!strncmp(initial_env + i, name, n) && initial_env[i + n] == '=') return initial_env + i + n + 1;
  return NULL;
}

void emu_die(const char *msg) {
  const char *path = emu_getenv("STRATA_EMU_REPORT");
  int fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
  if (fd < 0) {
    (void)!write(2, msg, strlen(msg));
    (void)!write(2, "\n", 1);
    _exit(2);
  }
  static char buf[2048];
  strata_json_t j;
  _strata_json_init(&j, fd, buf, sizeof buf);
  _strata_json_put(&j, "{\"error\": ");
  _strata_json_str(&j, msg);
  _strata_json_put(&j, "}\n");
  _strata_json_flush(&j);
  close(fd);
  _exit(2);
}
