//! strata-kv: the key-value store of M2T's case study (section III.C).
//!
//! A hash table with a fixed array of bucket heads and a chain of nodes per bucket; each node
//! points to its key and value bytes. Keys and values of any size; lookup, insert, update,
//! delete; one lock per bucket, so threads working on different buckets never wait for each
//! other. Two variants, chosen at run time, with the same code otherwise:
//!
//! - `std`: nodes, keys and values from the standard allocator (glibc malloc), M2T's baseline:
//!   a bucket's nodes are scattered over the heap by everything allocated in between.
//! - `nextto`: every bucket has its own Strata arena; a new node is allocated next to the
//!   bucket's previous head, its key next to the node and its value next to the key, so a
//!   bucket's chain, keys and values share pages (M2T's NextTo hash table).
//! - `nextto-split`: as `nextto`, but a bucket's values go to a second arena of the bucket,
//!   each next to the bucket's previous value. A lookup walks nodes and compares keys, and
//!   reads one value at the end: with the values apart, the walked nodes and keys of a bucket
//!   pack into a page or two instead of being spread 1 KB apart between values.
pub mod resp;
pub mod server;

use std::alloc::Layout;
use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use allocator_api2::alloc::Allocator;
use strata::{Arena, Placement};

/// An insert or update found no memory for its node, key or value; the store is as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory;

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "out of memory")
    }
}

impl std::error::Error for OutOfMemory {}

/// Which allocator places the nodes, keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    Std,
    NextTo,
    NextToSplit,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Std, Variant::NextTo, Variant::NextToSplit];
    pub fn name(self) -> &'static str {
        match self {
            Variant::Std => "std",
            Variant::NextTo => "nextto",
            Variant::NextToSplit => "nextto-split",
        }
    }
    pub fn parse(s: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }
}

#[repr(C)]
struct Node {
    next: *mut Node,
    hash: u64,
    key: *mut u8,
    val: *mut u8,
    key_len: usize,
    val_len: usize,
    val_cap: usize,
}

struct Chain {
    head: *mut Node,
    arena: Option<Arena>,  // nextto variants, made on first insert
    values: Option<Arena>, // nextto-split's values, made on first insert
}

// The raw pointers are only touched under the bucket's lock.
unsafe impl Send for Chain {}

/// The store.
pub struct Store {
    variant: Variant,
    buckets: Box<[Mutex<Chain>]>,
    len: AtomicUsize,
}

fn hash(key: &[u8]) -> u64 {
    // FNV-1a then a final mix: cheap, and good enough to spread YCSB's keys
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^ (h >> 33)
}

impl Store {
    /// A store with `buckets` chains (rounded up to a power of two).
    pub fn new(variant: Variant, buckets: usize) -> Store {
        let n = buckets.max(1).next_power_of_two();
        let buckets = (0..n).map(|_| Mutex::new(Chain { head: ptr::null_mut(), arena: None, values: None })).collect();
        Store { variant, buckets, len: AtomicUsize::new(0) }
    }

    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Entries stored.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    fn bucket(&self, h: u64) -> &Mutex<Chain> {
        &self.buckets[(h as usize) & (self.buckets.len() - 1)]
    }

    /// `size` bytes placed as the variant says; `near` is the object to be next to (nextto
    /// variants; null: anywhere in the bucket's arena). A `value` goes to the bucket's value
    /// arena in nextto-split.
    fn alloc(&self, chain: &mut Chain, size: usize, near: *const c_void, value: bool) -> Result<*mut u8, OutOfMemory> {
        if self.variant == Variant::Std {
            let p = unsafe { libc::malloc(size.max(1)) } as *mut u8;
            return if p.is_null() { Err(OutOfMemory) } else { Ok(p) };
        }
        let slot = if value && self.variant == Variant::NextToSplit { &mut chain.values } else { &mut chain.arena };
        if slot.is_none() {
            *slot = Some(Arena::new(Placement::Default).map_err(|_| OutOfMemory)?);
        }
        let arena = slot.as_ref().expect("just made");
        let place = if near.is_null() { arena.alloc() } else { arena.next_to(near) };
        // 16-byte granules: every object is aligned for a Node
        let layout = Layout::from_size_align(size.max(1), 16).map_err(|_| OutOfMemory)?;
        place.allocate(layout).map(|p| p.as_ptr() as *mut u8).map_err(|_| OutOfMemory)
    }

    /// Give back what alloc gave (in whichever arena of the bucket it lies).
    unsafe fn free(&self, chain: &Chain, p: *mut u8) {
        if self.variant == Variant::Std {
            return libc::free(p as *mut c_void);
        }
        let layout = Layout::from_size_align(1, 16).expect("a valid layout"); // strata frees by address
        if let Some(arena) = [&chain.arena, &chain.values].into_iter().flatten().find(|a| a.contains(p)) {
            arena.alloc().deallocate(NonNull::new_unchecked(p), layout);
        }
    }

    unsafe fn find(chain: &Chain, h: u64, key: &[u8]) -> (*mut Node, *mut Node) {
        let (mut prev, mut n) = (ptr::null_mut::<Node>(), chain.head);
        while !n.is_null() {
            let node = &*n;
            if node.hash == h && node.key_len == key.len() && std::slice::from_raw_parts(node.key, node.key_len) == key
            {
                return (prev, n);
            }
            prev = n;
            n = node.next;
        }
        (prev, ptr::null_mut())
    }

    /// Look `key` up and hand its value to `f`, under the bucket's lock.
    pub fn get<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let h = hash(key);
        let chain = self.bucket(h).lock().unwrap();
        unsafe {
            let (_, n) = Self::find(&chain, h, key);
            (!n.is_null()).then(|| f(std::slice::from_raw_parts((*n).val, (*n).val_len)))
        }
    }

    /// Whether `key` is stored.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.get(key, |_| ()).is_some()
    }

    /// Store `val` under `key`; true when the key is new.
    pub fn set(&self, key: &[u8], val: &[u8]) -> Result<bool, OutOfMemory> {
        Ok(self.update(key, |_| Some(val.to_vec()))?.0)
    }

    /// Read-modify-write under the bucket's lock: `f` gets the current value (if any) and
    /// returns the new one, or None to leave the entry as it is. Returns (inserted, updated);
    /// without memory for the new node, key or value, nothing changes.
    pub fn update(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<(bool, bool), OutOfMemory> {
        let h = hash(key);
        let mut chain = self.bucket(h).lock().unwrap();
        unsafe {
            let (_, n) = Self::find(&chain, h, key);
            if !n.is_null() {
                let node = &mut *n;
                let Some(new) = f(Some(std::slice::from_raw_parts(node.val, node.val_len))) else {
                    return Ok((false, false));
                };
                if new.len() <= node.val_cap {
                    ptr::copy_nonoverlapping(new.as_ptr(), node.val, new.len());
                // in place
                } else {
                    let near = if self.variant == Variant::NextToSplit { node.val } else { n as *mut u8 };
                    let v = self.alloc(&mut chain, new.len(), near as *const c_void, true)?;
                    ptr::copy_nonoverlapping(new.as_ptr(), v, new.len());
                    self.free(&chain, node.val);
                    node.val = v;
                    node.val_cap = new.len();
                }
                node.val_len = new.len();
                return Ok((false, true));
            }
            let Some(new) = f(None) else { return Ok((false, false)) };
            let head = chain.head;
            let node = self.alloc(&mut chain, std::mem::size_of::<Node>(), head as *const c_void, false)? as *mut Node;
            let k = match self.alloc(&mut chain, key.len(), node as *const c_void, false) {
                Ok(k) => k,
                Err(e) => {
                    self.free(&chain, node as *mut u8);
                    return Err(e);
                }
            };
            // nextto: the value next to its key; nextto-split: next to the bucket's last value
            let vnear = match self.variant {
                Variant::NextToSplit if head.is_null() => ptr::null(),
                Variant::NextToSplit => (*head).val as *const c_void,
                _ => k as *const c_void,
            };
            let v = match self.alloc(&mut chain, new.len(), vnear, true) {
                Ok(v) => v,
                Err(e) => {
                    self.free(&chain, k);
                    self.free(&chain, node as *mut u8);
                    return Err(e);
                }
            };
            ptr::copy_nonoverlapping(key.as_ptr(), k, key.len());
            ptr::copy_nonoverlapping(new.as_ptr(), v, new.len());
            node.write(Node {
                next: head,
                hash: h,
                key: k,
                val: v,
                key_len: key.len(),
                val_len: new.len(),
                val_cap: new.len(),
            });
            chain.head = node;
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok((true, false))
    }

    /// Remove `key`; true when it was there.
    pub fn delete(&self, key: &[u8]) -> bool {
        let h = hash(key);
        let mut chain = self.bucket(h).lock().unwrap();
        unsafe {
            let (prev, n) = Self::find(&chain, h, key);
            if n.is_null() {
                return false;
            }
            if prev.is_null() {
                chain.head = (*n).next;
            } else {
                (*prev).next = (*n).next;
            }
            self.free(&chain, (*n).key);
            self.free(&chain, (*n).val);
            self.free(&chain, n as *mut u8);
        }
        self.len.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Every key, in no particular order (for tests and small stores).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for b in self.buckets.iter() {
            let chain = b.lock().unwrap();
            let mut n = chain.head;
            while !n.is_null() {
                unsafe {
                    out.push(std::slice::from_raw_parts((*n).key, (*n).key_len).to_vec());
                    n = (*n).next;
                }
            }
        }
        out
    }

    /// Remove everything (and, for the nextto variants, give every bucket's pages back).
    pub fn clear(&self) {
        for b in self.buckets.iter() {
            let mut chain = b.lock().unwrap();
            self.clear_chain(&mut chain);
        }
    }

    fn clear_chain(&self, chain: &mut Chain) {
        unsafe {
            if self.variant != Variant::Std {
                let mut n = chain.head;
                while !n.is_null() {
                    n = (*n).next;
                    self.len.fetch_sub(1, Ordering::Relaxed);
                }
                // dropping an arena frees every node, key and value in it
                chain.arena = None;
                chain.values = None;
            } else {
                let mut n = chain.head;
                while !n.is_null() {
                    let next = (*n).next;
                    self.free(chain, (*n).key);
                    self.free(chain, (*n).val);
                    self.free(chain, n as *mut u8);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    n = next;
                }
            }
            chain.head = ptr::null_mut();
        }
    }

    /// Mean distinct 4 KiB pages holding one bucket's nodes, keys and values (non-empty
    /// buckets): the locality NextTo is for.
    pub fn pages_per_bucket(&self) -> f64 {
        let (mut pages, mut used) = (0usize, 0usize);
        for b in self.buckets.iter() {
            let chain = b.lock().unwrap();
            let mut set = Vec::new();
            let mut n = chain.head;
            while !n.is_null() {
                unsafe {
                    set.extend([n as usize >> 12, (*n).key as usize >> 12, (*n).val as usize >> 12]);
                    n = (*n).next;
                }
            }
            if !set.is_empty() {
                set.sort_unstable();
                set.dedup();
                pages += set.len();
                used += 1;
            }
        }
        if used == 0 {
            0.0
        } else {
            pages as f64 / used as f64
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.clear();
    }
}
