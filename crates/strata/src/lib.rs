//! Strata's safe Rust API: say where memory should go, and let collections use it.
//!
//! ```
//! use allocator_api2::{boxed::Box, vec::Vec};
//! use strata::{Arena, Placement, StrataAlloc};
//!
//! // a vector whose buffer lives in the fastest tier
//! let mut v = Vec::new_in(StrataAlloc::new(Placement::Hot));
//! v.extend([1u64, 2, 3]);
//!
//! // a chain whose nodes share pages: each node next to the previous one, in one arena
//! let arena = Arena::new(Placement::Default).unwrap();
//! let first = Box::new_in(1u64, arena.alloc());
//! let second = Box::new_in(2u64, arena.next_to(&*first));
//! assert_eq!(strata::page_of(&*first), strata::page_of(&*second));
//! ```
//!
//! Objects allocated in an arena borrow it (`StrataAlloc<'a>`), so the borrow checker keeps
//! an arena alive while anything in it is; dropping the arena frees all of it at once.
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use std::alloc::{GlobalAlloc, Layout};

use allocator_api2::alloc::{AllocError, Allocator};
use strata_sys as sys;

pub use sys::{STRATA_MAX_NODES as MAX_NODES, STRATA_MAX_TIERS as MAX_TIERS};

/// Where an allocation should go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// The default arena: unbound, the kernel (or a tiering daemon) decides.
    Default,
    /// The shared arena bound to the fastest tier.
    Hot,
    /// The shared arena bound to the slowest tier.
    Cold,
    /// The shared arena bound to tier n (0 = fastest); clamped to the last tier.
    Tier(u32),
}

impl Placement {
    fn raw(self) -> sys::strata_place_t {
        match self {
            Placement::Default => sys::strata_place_t::new(sys::STRATA_PLACE_DEFAULT),
            Placement::Hot => sys::strata_place_t::new(sys::STRATA_PLACE_HOT),
            Placement::Cold => sys::strata_place_t::new(sys::STRATA_PLACE_COLD),
            Placement::Tier(n) => {
                let mut p = sys::strata_place_t::new(sys::STRATA_PLACE_TIER);
                p.tier = n;
                p
            }
        }
    }
}

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The library could not get memory (ENOMEM).
    OutOfMemory,
    /// The machine could not answer (an errno value, e.g. ENOSYS without NUMA).
    Machine(i32),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OutOfMemory => write!(f, "out of memory"),
            Error::Machine(e) => {
                write!(f, "the machine could not answer: {}", std::io::Error::from_raw_os_error(*e))
            }
        }
    }
}

impl std::error::Error for Error {}

/// An arena: the unit of locality. Its objects share its pages and nothing else's; dropping
/// it frees every object in it and returns its pages to the OS.
pub struct Arena {
    raw: NonNull<sys::strata_arena_t>,
}

// The C arena is internally locked; it can be shared and sent between threads.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Arena {
    /// A new arena whose pages are bound as `place` says.
    pub fn new(place: Placement) -> Result<Arena, Error> {
        let raw = unsafe { sys::strata_arena_new(place.raw()) };
        NonNull::new(raw).map(|raw| Arena { raw }).ok_or(Error::OutOfMemory)
    }

    /// The tier this arena is bound to, `None` when unbound.
    pub fn tier(&self) -> Option<u32> {
        u32::try_from(unsafe { sys::strata_arena_tier(self.raw.as_ptr()) }).ok()
    }

    /// An allocator that places in this arena.
    pub fn alloc(&self) -> StrataAlloc<'_> {
        let mut p = sys::strata_place_t::new(sys::STRATA_PLACE_ARENA);
        p.u.arena = self.raw.as_ptr();
        StrataAlloc { place: p, _arena: PhantomData }
    }

    /// An allocator that places next to `target` (on its page when it fits, else on the
    /// next page of this arena). When `target` is not in this arena, it places in this
    /// arena all the same, so the result can never outlive what it borrows.
    pub fn next_to<T: ?Sized>(&self, target: *const T) -> StrataAlloc<'_> {
        let t = target as *const c_void;
        if unsafe { sys::strata_arena_of(t) } != self.raw.as_ptr() {
            return self.alloc();
        }
        let mut p = sys::strata_place_t::new(sys::STRATA_PLACE_NEXT_TO);
        p.u.ptr = t;
        StrataAlloc { place: p, _arena: PhantomData }
    }

    /// Whether `p` lies in this arena.
    pub fn contains<T: ?Sized>(&self, p: *const T) -> bool {
        unsafe { sys::strata_arena_of(p as *const c_void) == self.raw.as_ptr() }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        unsafe { sys::strata_arena_destroy(self.raw.as_ptr()) };
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena").field("tier", &self.tier()).finish()
    }
}

/// An allocator carrying a placement. Implements `allocator_api2::alloc::Allocator`, so
/// `allocator_api2`'s `Box`/`Vec` and `hashbrown`'s maps work with it.
#[derive(Clone, Copy)]
pub struct StrataAlloc<'a> {
    place: sys::strata_place_t,
    _arena: PhantomData<&'a Arena>,
}

// A placement is plain data; the arena it may name is Sync.
unsafe impl Send for StrataAlloc<'_> {}
unsafe impl Sync for StrataAlloc<'_> {}

impl StrataAlloc<'static> {
    /// An allocator for one of the shared arenas.
    pub fn new(place: Placement) -> Self {
        StrataAlloc { place: place.raw(), _arena: PhantomData }
    }
}

impl fmt::Debug for StrataAlloc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StrataAlloc").field("kind", &self.place.kind).finish()
    }
}

unsafe impl Allocator for StrataAlloc<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let p = unsafe {
            if layout.align() <= 16 {
                sys::strata_malloc(layout.size(), self.place)
            } else {
                sys::strata_malloc_aligned(layout.size(), layout.align(), self.place)
            }
        };
        let p = NonNull::new(p as *mut u8).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _layout: Layout) {
        sys::strata_free(ptr.as_ptr() as *mut c_void);
    }
}

/// Strata as the process's global allocator (default placement):
/// `#[global_allocator] static A: strata::Global = strata::Global;`
pub struct Global;

unsafe impl GlobalAlloc for Global {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let place = Placement::Default.raw();
        if layout.align() <= 16 {
            sys::strata_malloc(layout.size(), place) as *mut u8
        } else {
            sys::strata_malloc_aligned(layout.size(), layout.align(), place) as *mut u8
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        sys::strata_free(ptr as *mut c_void)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= 16 {
            return sys::strata_realloc(ptr as *mut c_void, new_size) as *mut u8;
        }
        let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new
    }
}

/// Where the pages of a memory range are, as the machine reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Resident bytes per NUMA node id (only nodes with bytes).
    pub node_bytes: Vec<(u32, u64)>,
    /// Resident bytes per Strata tier.
    pub tier_bytes: Vec<(u32, u64)>,
    /// Bytes never touched (or swapped out).
    pub absent_bytes: u64,
    /// Pages examined.
    pub pages: u64,
}

/// Ask the machine where the pages of `[p, p + len)` are.
pub fn where_is<T: ?Sized>(p: *const T, len: usize) -> Result<Residency, Error> {
    let mut r = std::mem::MaybeUninit::<sys::strata_residency_t>::zeroed();
    let rc = unsafe { sys::strata_where(p as *const c_void, len, r.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::Machine(-rc));
    }
    let r = unsafe { r.assume_init() };
    let pick = |v: &[u64]| v.iter().enumerate().filter(|(_, b)| **b > 0).map(|(i, b)| (i as u32, *b)).collect();
    Ok(Residency {
        node_bytes: pick(&r.node_bytes),
        tier_bytes: pick(&r.tier_bytes),
        absent_bytes: r.absent_bytes,
        pages: r.pages,
    })
}

/// The 4 KiB page number of an address (for locality checks).
pub fn page_of<T: ?Sized>(p: *const T) -> usize {
    (p as *const u8 as usize) >> 12
}

/// The machine's clock in nanoseconds: monotonic time natively, the calling thread's simulated
/// clock when the program runs on the emulated machine (built with `strata emu cargo`). Time
/// benchmarks with this and they report per simulated second there.
pub fn now_ns() -> u64 {
    unsafe { sys::strata_now_ns() }
}

/// True when the program runs on the emulated machine.
pub fn emulated() -> bool {
    unsafe { sys::strata_emulated() != 0 }
}

/// A counter of the emulated machine for the calling thread ("l1_misses", "stlb_misses", ...:
/// the report's), `None` natively or for a name it does not know.
pub fn emulated_counter(name: &str) -> Option<i64> {
    let c = std::ffi::CString::new(name).ok()?;
    let v = unsafe { sys::strata_emulated_counter(c.as_ptr()) };
    (v >= 0).then_some(v)
}

/// A statistics counter of libstrata by name (see `stats_json`), `None` if unknown.
pub fn stat(name: &str) -> Option<i64> {
    let c = std::ffi::CString::new(name).ok()?;
    let v = unsafe { sys::strata_stat(c.as_ptr()) };
    (v >= 0).then_some(v)
}

unsafe extern "C" fn collect(text: *const std::ffi::c_char, arg: *mut c_void) {
    let s = &mut *(arg as *mut String);
    s.push_str(&std::ffi::CStr::from_ptr(text).to_string_lossy());
}

/// All counters of libstrata as one JSON object (text).
pub fn stats_json() -> String {
    let mut s = String::new();
    unsafe { sys::strata_stats_print(1, Some(collect), &mut s as *mut String as *mut c_void) };
    s
}

/// All counters of libstrata as a human table.
pub fn stats_text() -> String {
    let mut s = String::new();
    unsafe { sys::strata_stats_print(0, Some(collect), &mut s as *mut String as *mut c_void) };
    s
}

/// The value libstrata runs with for one option (its name without `STRATA_`, e.g.
/// "colour"), as `options_text` prints it; `None` for an unknown name.
pub fn option(name: &str) -> Option<String> {
    let env = format!("STRATA_{}", name.to_uppercase());
    options_text().lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(env.as_str())).then(|| w.next().unwrap_or_default().to_string())
    })
}

/// Every option of libstrata with its value, default, unit and doc.
pub fn options_text() -> String {
    let mut s = String::new();
    unsafe { sys::strata_options_print(Some(collect), &mut s as *mut String as *mut c_void) };
    s
}
