//! `libstratad_emu.so`: the tiering engine ([`stratad::emulated`]) as the library the emulator
//! loads into an emulated program when `$STRATA_ENGINE_LIB` names it.
//!
//! The engine stands for a daemon on a core of its own, so it allocates from a heap of its own
//! (dlmalloc over mmap), not through the program's malloc. Through the program's malloc
//! (libstrata, preloaded in transparent mode) its buffers were the program's objects and its
//! call sites the program's allocation contexts: the object policies ranked them, and a
//! setting that changed only the engine's allocations (its configuration file's text) moved the
//! program's figure by up to 3 % (docs/tiering.md "Tracing a run").
use std::ffi::{c_char, c_int};

#[global_allocator]
static ENGINE_HEAP: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The entry point the emulator calls (include/strata_emu.h): start the engine, fill in its
/// hooks; 0, or -1 with the reason in err.
///
/// # Safety
/// `hooks` points to a strata_emu_engine_t and `err` to `errlen` bytes (the emulator's).
#[no_mangle]
pub unsafe extern "C" fn strata_engine_start(
    hooks: *mut stratad::emulated::EngineHooks,
    err: *mut c_char,
    errlen: usize,
) -> c_int {
    stratad::emulated::start_engine(hooks, err, errlen)
}
