/* fail.c: how the emulator stops when it cannot model what it is asked to. Running on a
 * machine the program did not ask for, or without modelling part of it, would give wrong
 * figures, so it stops, saying why: into the report file when there is one (as
 * {"error": ...}, which `strata emu run` prints), else on stderr. Exit status 2. */
#include "emu.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/json.h"

void emu_die(const char *msg) {
  const char *path = getenv("STRATA_EMU_REPORT");
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
