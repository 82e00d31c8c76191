//! Raw bindings to libstrata (`include/strata.h`), compiled from source by build.rs.
//!
//! Hand-written mirror of the header; `tests::layout_matches_c` checks every struct against
//! the C compiler's layout. Use the safe `strata` crate unless you need the raw calls.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub const STRATA_MAX_NODES: usize = 64;
pub const STRATA_MAX_TIERS: usize = 8;

#[repr(C)]
pub struct strata_arena_t {
    _private: [u8; 0],
}

pub const STRATA_PLACE_DEFAULT: c_int = 0;
pub const STRATA_PLACE_NEXT_TO: c_int = 1;
pub const STRATA_PLACE_HOT: c_int = 2;
pub const STRATA_PLACE_COLD: c_int = 3;
pub const STRATA_PLACE_TIER: c_int = 4;
pub const STRATA_PLACE_ARENA: c_int = 5;

#[repr(C)]
#[derive(Clone, Copy)]
pub union strata_place_u {
    pub ptr: *const c_void,
    pub arena: *mut strata_arena_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct strata_place_t {
    pub kind: c_int,
    pub tier: c_uint,
    pub u: strata_place_u,
}

impl strata_place_t {
    pub const fn new(kind: c_int) -> Self {
        strata_place_t { kind, tier: 0, u: strata_place_u { ptr: std::ptr::null() } }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct strata_residency_t {
    pub node_bytes: [u64; STRATA_MAX_NODES],
    pub tier_bytes: [u64; STRATA_MAX_TIERS],
    pub absent_bytes: u64,
    pub pages: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct strata_node_info_t {
    pub id: c_int,
    pub has_cpus: c_int,
    pub cpulist: [c_char; 64],
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub kernel_tier: c_int,
    pub tier: c_int,
    pub read_latency_ns: i64,
    pub write_latency_ns: i64,
    pub read_bandwidth_mbps: i64,
    pub write_bandwidth_mbps: i64,
    pub distance: [u8; STRATA_MAX_NODES],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct strata_topology_t {
    pub nnodes: c_int,
    pub nodes: [strata_node_info_t; STRATA_MAX_NODES],
    pub ntiers: c_int,
    pub tier_nodemask: [u64; STRATA_MAX_TIERS],
    pub tier_source: [c_char; 64],
    pub nodes_source: [c_char; 64],
}

// ---- include/strata_channel.h: the shared-memory channel a daemon reads ------------------

pub const STRATA_CHANNEL_MAGIC: u64 = 0x4c4e_4843_4152_5453;
pub const STRATA_CHANNEL_VERSION: u32 = 6;
pub const STRATA_CHANNEL_NAME: &str = "strata.channel";
pub const STRATA_CONTEXT_CAPACITY: u64 = 1 << 16;
pub const STRATA_OBJECT_CAPACITY: u64 = 1 << 20;
pub const STRATA_DAEMON_SOCKET_DEFAULT: &str = "/run/strata/stratad.sock";
pub const STRATA_PRIORITY_LOW: i32 = -10;
pub const STRATA_PRIORITY_NORMAL: i32 = 0;
pub const STRATA_PRIORITY_HIGH: i32 = 10;
pub const STRATA_PRIORITY_MIN: i32 = -1000;
pub const STRATA_PRIORITY_MAX: i32 = 1000;
pub const STRATA_TRACKING_WP_ASYNC: u32 = 1;
pub const STRATA_TRACKING_MOVE: u32 = 2;
pub const STRATA_AGENT_MAGIC: u32 = 0x5447_4153;
pub const STRATA_AGENT_MAX_PAGES: usize = 512;
pub const STRATA_AGENT_MAX_ATTEMPTS: u32 = 64;
pub const STRATA_AGENT_MOVE: u32 = 1;
pub const STRATA_AGENT_DROP_SHADOWS: u32 = 2;
pub const STRATA_AGENT_SAMPLE: u32 = 3;
pub const STRATA_AGENT_FORCE: u32 = 1;
pub const STRATA_CONTEXT_FRAMES: usize = 16;
pub const STRATA_OBJECT_RECORD_MAX: u64 = 64 << 20;
pub const STRATA_DIRECTIVE_DEFAULT: i32 = 0;
pub const STRATA_DIRECTIVE_FAST: i32 = 1;
pub const STRATA_DIRECTIVE_SLOW: i32 = 2;
pub const STRATA_DIRECTIVE_TIER0: i32 = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct strata_channel_header_t {
    pub magic: u64,
    pub version: u32,
    pub header_bytes: u32,
    pub pid: i64,
    pub context_capacity: u64,
    pub context_bytes: u64,
    pub contexts_offset: u64,
    pub object_capacity: u64,
    pub object_bytes: u64,
    pub objects_offset: u64,
    pub objects_high: u64,
    pub contexts_used: u64,
    pub contexts_dropped: u64,
    pub objects_dropped: u64,
    pub default_directive: i32,
    pub priority: i32,
    pub tracking: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct strata_context_t {
    pub id: u64,
    pub size_class: u32,
    pub directive: i32,
    pub allocs: u64,
    pub frees: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
    pub bytes_allocated: u64,
    pub nframes: u32,
    pub rule: u32,
    pub frames: [u64; STRATA_CONTEXT_FRAMES],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct strata_object_t {
    pub addr: u64,
    pub len: u64,
    pub context: u32,
    pub next: u32,
    pub arena: u32,
    pub hint: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct strata_agent_request_t {
    pub magic: u32,
    pub op: u32,
    pub node: i32,
    pub count: u32,
    pub attempts: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct strata_agent_counters_t {
    pub commits: u64,
    pub aborts: u64,
    pub shadow_demotions: u64,
    pub shadows_stale: u64,
    pub shadows_dropped: u64,
    pub shadows: u64,
    pub fallbacks: u64,
    pub samples: u64,
    pub samples_touched: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct strata_agent_reply_t {
    pub magic: u32,
    pub count: u32,
    pub counters: strata_agent_counters_t,
}

pub type strata_output_fn = unsafe extern "C" fn(text: *const c_char, arg: *mut c_void);

/// Declares libstrata's functions once, and calls each through the one libstrata of the
/// process.
///
/// A program that uses this crate and runs under `LD_PRELOAD=libstrata.so` (transparent mode,
/// or any `strata run`) would otherwise hold two allocators: the copy build.rs links in, and
/// the preloaded one that serves `malloc`. Each would keep its own heap and publish its own
/// channel, and a tiering engine reads one channel a process, so it would see either the
/// program's arenas or its malloc'd contexts, never both (docs/tiering.md#two-channels). So
/// every call below goes to the preloaded library when one is loaded (found by `dlsym`, which
/// sees only libraries: an executable does not export the linked copy's symbols) and to the
/// linked copy otherwise; the choice is made at the first call and kept, so memory is always
/// freed by the allocator that gave it.
macro_rules! libstrata {
    ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        mod linked {
            use super::*;
            extern "C" {
                $( pub fn $name($($arg: $ty),*) $(-> $ret)?; )*
            }
        }

        /// libstrata's functions, from one copy of it.
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        impl Api {
            const LINKED: Api = Api { $( $name: linked::$name, )* };

            /// The preloaded library's functions: None unless it exports every one of them.
            fn loaded() -> Option<Api> {
                Some(Api {
                    $( $name: {
                        let f = exported(concat!(stringify!($name), "\0"))?;
                        // SAFETY: libstrata.so exports this name with the signature
                        // include/strata.h gives, which the declaration above mirrors
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(f)
                        }
                    }, )*
                })
            }
        }

        $(
            /// # Safety
            /// As the C function of the same name in include/strata.h.
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                unsafe { (api().$name)($($arg),*) }
            }
        )*
    };
}

libstrata! {
    fn strata_malloc(size: usize, place: strata_place_t) -> *mut c_void;
    fn strata_calloc(n: usize, size: usize, place: strata_place_t) -> *mut c_void;
    fn strata_malloc_aligned(size: usize, align: usize, place: strata_place_t) -> *mut c_void;
    fn strata_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn strata_free(p: *mut c_void);
    fn strata_usable_size(p: *const c_void) -> usize;
    fn strata_owns(p: *const c_void) -> c_int;
    fn strata_arena_new(place: strata_place_t) -> *mut strata_arena_t;
    fn strata_arena_destroy(a: *mut strata_arena_t) -> c_int;
    fn strata_arena_of(p: *const c_void) -> *mut strata_arena_t;
    fn strata_arena_tier(a: *const strata_arena_t) -> c_int;
    fn strata_where(p: *const c_void, len: usize, r: *mut strata_residency_t) -> c_int;
    fn strata_topology() -> *const strata_topology_t;
    fn strata_topology_discover(
        sysfs_root: *const c_char,
        tiers_override: *const c_char,
        t: *mut strata_topology_t,
    ) -> c_int;
    fn strata_stats_print(json: c_int, out: Option<strata_output_fn>, arg: *mut c_void);
    fn strata_stat(name: *const c_char) -> i64;
    fn strata_now_ns() -> u64;
    fn strata_emulated() -> c_int;
    fn strata_emulated_counter(name: *const c_char) -> i64;
    fn strata_options_print(out: Option<strata_output_fn>, arg: *mut c_void);
    fn strata_rules_check(path: *const c_char, err: *mut c_char, errn: usize) -> c_int;
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    #[doc(hidden)]
    pub fn strata_abi_layout(out: *mut usize, n: usize) -> usize;
}

/// glibc's RTLD_DEFAULT: the global scope, in load order
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The address a loaded library exports `name` (NUL-terminated) at.
fn exported(name: &str) -> Option<*mut c_void> {
    // SAFETY: name is NUL-terminated (the macro appends it) and dlsym only reads it
    let f = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr().cast()) };
    (!f.is_null()).then_some(f)
}

/// The copy of libstrata this process uses: the preloaded one if there is one, else ours.
fn api() -> &'static Api {
    static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();
    // (an executable linked with --export-dynamic finds its own copy: that is no other one)
    API.get_or_init(|| Api::loaded().filter(|api| !api.is_linked()).unwrap_or(Api::LINKED))
}

impl Api {
    fn is_linked(&self) -> bool {
        self.strata_malloc as usize == Api::LINKED.strata_malloc as usize
    }
}

/// Whether this process's libstrata is a preloaded library rather than the copy linked in.
pub fn preloaded() -> bool {
    !api().is_linked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_c() {
        let rust = [
            size_of::<strata_place_t>(),
            offset_of!(strata_place_t, kind),
            offset_of!(strata_place_t, tier),
            offset_of!(strata_place_t, u),
            size_of::<strata_residency_t>(),
            offset_of!(strata_residency_t, tier_bytes),
            offset_of!(strata_residency_t, absent_bytes),
            offset_of!(strata_residency_t, pages),
            size_of::<strata_node_info_t>(),
            offset_of!(strata_node_info_t, cpulist),
            offset_of!(strata_node_info_t, total_bytes),
            offset_of!(strata_node_info_t, kernel_tier),
            offset_of!(strata_node_info_t, read_latency_ns),
            offset_of!(strata_node_info_t, write_bandwidth_mbps),
            offset_of!(strata_node_info_t, distance),
            size_of::<strata_topology_t>(),
            offset_of!(strata_topology_t, nodes),
            offset_of!(strata_topology_t, ntiers),
            offset_of!(strata_topology_t, tier_nodemask),
            offset_of!(strata_topology_t, tier_source),
            offset_of!(strata_topology_t, nodes_source),
            size_of::<strata_channel_header_t>(),
            offset_of!(strata_channel_header_t, version),
            offset_of!(strata_channel_header_t, pid),
            offset_of!(strata_channel_header_t, contexts_offset),
            offset_of!(strata_channel_header_t, objects_high),
            offset_of!(strata_channel_header_t, objects_dropped),
            offset_of!(strata_channel_header_t, priority),
            offset_of!(strata_channel_header_t, tracking),
            size_of::<strata_context_t>(),
            offset_of!(strata_context_t, size_class),
            offset_of!(strata_context_t, directive),
            offset_of!(strata_context_t, allocs),
            offset_of!(strata_context_t, bytes_allocated),
            offset_of!(strata_context_t, nframes),
            offset_of!(strata_context_t, rule),
            offset_of!(strata_context_t, frames),
            size_of::<strata_object_t>(),
            offset_of!(strata_object_t, len),
            offset_of!(strata_object_t, context),
            offset_of!(strata_object_t, next),
            offset_of!(strata_object_t, arena),
            offset_of!(strata_object_t, hint),
            STRATA_CHANNEL_VERSION as usize,
            STRATA_CONTEXT_FRAMES,
            STRATA_DIRECTIVE_TIER0 as usize,
            STRATA_PRIORITY_HIGH as usize,
            STRATA_PRIORITY_MAX as usize,
            STRATA_TRACKING_WP_ASYNC as usize,
            STRATA_DAEMON_SOCKET_DEFAULT.len(),
            size_of::<strata_agent_request_t>(),
            offset_of!(strata_agent_request_t, attempts),
            size_of::<strata_agent_counters_t>(),
            offset_of!(strata_agent_counters_t, fallbacks),
            offset_of!(strata_agent_counters_t, samples_touched),
            STRATA_AGENT_SAMPLE as usize,
            size_of::<strata_agent_reply_t>(),
            offset_of!(strata_agent_reply_t, counters),
            STRATA_AGENT_MAGIC as usize,
            STRATA_AGENT_MAX_PAGES,
            STRATA_TRACKING_MOVE as usize,
            STRATA_OBJECT_RECORD_MAX as usize,
            STRATA_AGENT_MAX_ATTEMPTS as usize,
            STRATA_CHANNEL_NAME.len(),
            STRATA_CONTEXT_CAPACITY as usize,
            STRATA_OBJECT_CAPACITY as usize,
        ];
        let mut c = [0usize; 96];
        let n = unsafe { strata_abi_layout(c.as_mut_ptr(), c.len()) };
        assert_eq!(n, rust.len(), "abi_check.c and this test list different fields");
        assert_eq!(&c[..n], &rust[..], "a struct in strata.h and its Rust mirror differ");
    }
}
