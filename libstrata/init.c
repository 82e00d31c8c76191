/* init.c: what libstrata sets up once per process: the machine it places memory on, and the
 * fork handlers that keep its locks usable in a child.
 *
 * The machine is Linux's (machine/linux.c) unless the program is linked with the emulated
 * machine, which then provides strata_emu_machine() (emu/machine.c). It is chosen on first use,
 * not in a constructor: under LD_PRELOAD, malloc runs before any constructor does. */
#include "internal.h"

static const strata_machine_t *machine;
static pthread_once_t machine_once = PTHREAD_ONCE_INIT;

static void machine_select(void) {
  machine = strata_emu_machine ? strata_emu_machine() : &_strata_machine_linux;
}

const strata_machine_t *_strata_machine(void) {
  pthread_once(&machine_once, machine_select);
  return machine;
}

/* fork: hold every process-wide lock across fork() (in the order they nest in use), so the
 * child starts with none held by a thread that no longer exists. User arenas are the
 * application's: a fork while another thread is inside one of them leaves it locked. */
static void fork_prepare(void) {
  _strata_shared_lock_all();
  _strata_blocks_lock_all();
  pthread_mutex_lock(&_strata_seg_lock);
  pthread_mutex_lock(&_strata_meta_lock);
  pthread_mutex_lock(&_strata_channel_lock);
  pthread_mutex_lock(&_strata_agent_lock); /* no page missing for a commit while copied */
  _strata_sample_return_all();              /* nor for a sample: the child could not get it */
}

static void fork_parent(void) {
  pthread_mutex_unlock(&_strata_agent_lock);
  pthread_mutex_unlock(&_strata_channel_lock);
  pthread_mutex_unlock(&_strata_meta_lock);
  pthread_mutex_unlock(&_strata_seg_lock);
  _strata_blocks_unlock_all();
  _strata_shared_unlock_all();
}

static void fork_child(void) {
  fork_parent();
  _strata_agent_forget();
  _strata_track_forget();
  _strata_channel_forget(); /* the parent's, not ours: its records are the parent's pages */
  _strata_blocks_forget();  /* the parent's contexts' arenas: its context numbers */
}

__attribute__((constructor)) static void fork_handlers(void) {
  _strata_shared(0); /* the shared arenas exist before the first fork */
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
