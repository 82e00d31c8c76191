//! A process's channel (include/strata_channel.h): the allocation contexts and tracked objects
//! libstrata shares, and the directive of each context, which the engine may rewrite.
//!
//! The region is found the way a daemon finds it: the `/proc/PID/fd` link that reads
//! `/dev/shm/strata.PID (deleted)`, mapped shared. A region whose magic, version or sizes are
//! not this build's is refused. Fields are read whole (the process updates them with relaxed
//! atomics), not as a consistent snapshot.
//!
//! The region is the process's memory, so nothing read from it after the header's check is
//! trusted: the tables' places and sizes are the checked header's, kept by the daemon, and an
//! object record that libstrata could not have written (empty, longer than a record, or past the
//! address space) is skipped, never walked page by page.
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use strata_policy::{ContextObs, Directive, ObjectObs};
use strata_sys::{
    strata_channel_header_t as Header, strata_context_t as Context, strata_object_t as Object, STRATA_CHANNEL_MAGIC,
    STRATA_CHANNEL_VERSION, STRATA_DIRECTIVE_DEFAULT, STRATA_DIRECTIVE_FAST, STRATA_DIRECTIVE_SLOW,
    STRATA_DIRECTIVE_TIER0, STRATA_OBJECT_RECORD_MAX, STRATA_TRACKING_WP_ASYNC,
};

/// Why a channel could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The process has no channel (yet): it runs without libstrata, or has made no context.
    #[error("process {0} has no channel")]
    Absent(u32),
    /// A region that is not this build's channel: refused, with the reason.
    #[error("process {pid}'s channel is refused: {why}")]
    Bad { pid: u32, why: String },
}

pub struct Channel {
    pid: u32,
    base: *mut u8,
    len: usize,
    header: Header,
    /// the indices of used contexts, and the count they were taken at
    known: Vec<u32>,
    known_used: u64,
}

// The mapping is the process's shared region; fields are read and written with atomics.
unsafe impl Send for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Above any x86-64 user address, with 5-level page tables too (57 bits): a sanity bound on
/// what a process may claim, not the end of the space the daemon scans (linux.rs's USER_TOP).
const ANY_USER_END: u64 = 1 << 57;

/// Whether an object record is one libstrata could have written: 1 byte to a record long,
/// within user space.
fn sane(addr: u64, len: u64) -> bool {
    (1..=STRATA_OBJECT_RECORD_MAX).contains(&len) && addr.checked_add(len).is_some_and(|end| end <= ANY_USER_END)
}

fn directive_of(raw: i32) -> Directive {
    match raw {
        STRATA_DIRECTIVE_FAST => Directive::Fast,
        STRATA_DIRECTIVE_SLOW => Directive::Slow,
        d if d >= STRATA_DIRECTIVE_TIER0 => Directive::Tier((d - STRATA_DIRECTIVE_TIER0) as u8),
        _ => Directive::Default,
    }
}

fn raw_of(d: Directive) -> i32 {
    match d {
        Directive::Default => STRATA_DIRECTIVE_DEFAULT,
        Directive::Fast => STRATA_DIRECTIVE_FAST,
        Directive::Slow => STRATA_DIRECTIVE_SLOW,
        Directive::Tier(t) => STRATA_DIRECTIVE_TIER0 + t as i32,
    }
}

impl Channel {
    /// Map process pid's channel.
    pub fn open(pid: u32) -> Result<Channel, ChannelError> {
        let want = format!("/dev/shm/strata.{pid} (deleted)");
        let dir = format!("/proc/{pid}/fd");
        let path = std::fs::read_dir(&dir)
            .map_err(|_| ChannelError::Absent(pid))?
            .flatten()
            .map(|e| e.path())
            .find(|p| std::fs::read_link(p).is_ok_and(|l| l.to_string_lossy() == want))
            .ok_or(ChannelError::Absent(pid))?;
        let f = OpenOptions::new().read(true).write(true).open(&path).map_err(|_| ChannelError::Absent(pid))?;
        let len = f.metadata().map(|m| m.len() as usize).unwrap_or(0);
        let bad = |why: String| ChannelError::Bad { pid, why };
        if len < std::mem::size_of::<Header>() {
            return Err(bad(format!("{len} bytes, smaller than its header")));
        }
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(bad("mmap failed".into()));
        }
        let c = Channel {
            pid,
            base: base as *mut u8,
            len,
            header: unsafe { *(base as *const Header) },
            known: Vec::new(),
            known_used: u64::MAX,
        };
        c.check().map_err(bad)?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        let h = &self.header;
        if h.magic != STRATA_CHANNEL_MAGIC {
            return Err(format!("bad magic {:#x}", h.magic));
        }
        if h.version != STRATA_CHANNEL_VERSION {
            return Err(format!("version {}, this strata reads {STRATA_CHANNEL_VERSION}", h.version));
        }
        if h.header_bytes as usize != std::mem::size_of::<Header>()
            || h.context_bytes as usize != std::mem::size_of::<Context>()
            || h.object_bytes as usize != std::mem::size_of::<Object>()
        {
            return Err("the sizes of its structures are not this build's".into());
        }
        let end = |off: u64, n: u64, size: u64| off.checked_add(n.checked_mul(size)?);
        let fits = |e: Option<u64>| e.is_some_and(|e| e <= self.len as u64);
        if !fits(end(h.contexts_offset, h.context_capacity, h.context_bytes))
            || !fits(end(h.objects_offset, h.object_capacity, h.object_bytes))
        {
            return Err("its tables do not fit in the region".into());
        }
        if h.pid != self.pid as i64 {
            return Err(format!("it belongs to process {}", h.pid));
        }
        Ok(())
    }

    fn u64_at(&self, off: usize) -> u64 {
        unsafe { (*(self.base.add(off) as *const AtomicU64)).load(Ordering::Relaxed) }
    }

    fn header_u64(&self, field: usize) -> u64 {
        self.u64_at(field)
    }

    fn context_off(&self, i: u32) -> usize {
        self.header.contexts_offset as usize + i as usize * self.header.context_bytes as usize
    }

    /// The used contexts (the table is scanned again only when their count changed).
    pub fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        let used = self.header_u64(std::mem::offset_of!(Header, contexts_used));
        if used != self.known_used {
            self.known = (1..self.header.context_capacity as u32)
                .filter(|&i| self.u64_at(self.context_off(i) + std::mem::offset_of!(Context, id)) != 0)
                .collect();
            self.known_used = used;
        }
        for &i in &self.known {
            let o = self.context_off(i);
            let f = |field: usize| self.u64_at(o + field);
            let directive = unsafe {
                (*(self.base.add(o + std::mem::offset_of!(Context, directive)) as *const AtomicI32))
                    .load(Ordering::Relaxed)
            };
            let class = unsafe { *(self.base.add(o + std::mem::offset_of!(Context, size_class)) as *const u32) };
            out.push(ContextObs {
                pid: self.pid,
                index: i,
                id: f(std::mem::offset_of!(Context, id)),
                size_class: class,
                allocs: f(std::mem::offset_of!(Context, allocs)),
                frees: f(std::mem::offset_of!(Context, frees)),
                live_bytes: f(std::mem::offset_of!(Context, live_bytes)),
                bytes_allocated: f(std::mem::offset_of!(Context, bytes_allocated)),
                directive: directive_of(directive),
            });
        }
    }

    /// The tracked objects alive now (records of 64 MiB at most), in address order; records
    /// libstrata could not have written are skipped.
    pub fn objects(&self, out: &mut Vec<ObjectObs>) {
        let h = &self.header;
        let high = self.header_u64(std::mem::offset_of!(Header, objects_high)).min(h.object_capacity);
        let start = out.len();
        for k in 1..high as usize {
            let o = h.objects_offset as usize + k * h.object_bytes as usize;
            let addr = self.u64_at(o + std::mem::offset_of!(Object, addr));
            if addr == 0 {
                continue;
            }
            let len = self.u64_at(o + std::mem::offset_of!(Object, len));
            if !sane(addr, len) {
                continue;
            }
            let context = unsafe { *(self.base.add(o + std::mem::offset_of!(Object, context)) as *const u32) };
            out.push(ObjectObs { pid: self.pid, addr, len, context, ..ObjectObs::default() });
        }
        out[start..].sort_by_key(|o| o.addr);
    }

    /// The process's default directive (STRATA_DIRECTIVE at its start, or what was set since).
    pub fn process_directive(&self) -> Directive {
        let o = std::mem::offset_of!(Header, default_directive);
        directive_of(unsafe { (*(self.base.add(o) as *const AtomicI32)).load(Ordering::Relaxed) })
    }

    /// The priority the process claims (STRATA_PRIORITY).
    pub fn priority(&self) -> i32 {
        let o = std::mem::offset_of!(Header, priority);
        unsafe { (*(self.base.add(o) as *const AtomicI32)).load(Ordering::Relaxed) }
    }

    /// Whether the process registered Strata's memory for asynchronous write-protect, so a
    /// scan with PAGEMAP_SCAN sees its writes (STRATA_TRACKING_WP_ASYNC). Read every time: the
    /// process sets it just after making the channel.
    pub fn wp_async(&self) -> bool {
        let o = std::mem::offset_of!(Header, tracking);
        let bits = unsafe { (*(self.base.add(o) as *const AtomicU32)).load(Ordering::Relaxed) };
        bits & STRATA_TRACKING_WP_ASYNC != 0
    }

    /// Set context `index`'s directive (where its next allocations go); index 0 sets the
    /// process's default (for contexts with the default directive and allocations without one).
    pub fn set_directive(&self, index: u32, d: Directive) -> bool {
        let o = match index {
            0 => std::mem::offset_of!(Header, default_directive),
            i if (i as u64) < self.header.context_capacity => {
                self.context_off(i) + std::mem::offset_of!(Context, directive)
            }
            _ => return false,
        };
        unsafe { (*(self.base.add(o) as *const AtomicI32)).store(raw_of(d), Ordering::Relaxed) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The tests' regions are found by this process's pid: one at a time.
    static REGIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A region laid out as libstrata lays it out, held open (and unlinked) by this process.
    fn region(pid: i64, edit: impl FnOnce(&mut Header)) -> std::fs::File {
        let (hb, cb, ob) = (size_of::<Header>(), size_of::<Context>(), size_of::<Object>());
        let (ctx_off, ncontexts, nobjects) = (256usize, 8usize, 4usize);
        let obj_off = ctx_off + ncontexts * cb;
        let mut h = Header {
            magic: STRATA_CHANNEL_MAGIC,
            version: STRATA_CHANNEL_VERSION,
            header_bytes: hb as u32,
            pid,
            context_capacity: ncontexts as u64,
            context_bytes: cb as u64,
            contexts_offset: ctx_off as u64,
            object_capacity: nobjects as u64,
            object_bytes: ob as u64,
            objects_offset: obj_off as u64,
            objects_high: 3,
            contexts_used: 2,
            contexts_dropped: 0,
            objects_dropped: 0,
            default_directive: STRATA_DIRECTIVE_DEFAULT,
            priority: 10,
            tracking: STRATA_TRACKING_WP_ASYNC,
            reserved: 0,
        };
        edit(&mut h);
        let mut bytes = vec![0u8; obj_off + nobjects * ob];
        let put = |bytes: &mut Vec<u8>, off: usize, v: &[u8]| bytes[off..off + v.len()].copy_from_slice(v);
        put(&mut bytes, 0, unsafe { std::slice::from_raw_parts(&h as *const Header as *const u8, hb) });
        let mut ctx = |i: usize, id: u64, directive: i32, live: u64| {
            let mut c: Context = unsafe { std::mem::zeroed() };
            (c.id, c.directive, c.allocs, c.frees, c.live_bytes, c.size_class) = (id, directive, 5, 2, live, 7);
            put(&mut bytes, ctx_off + i * cb, unsafe {
                std::slice::from_raw_parts(&c as *const Context as *const u8, cb)
            });
        };
        ctx(3, 0xabc, STRATA_DIRECTIVE_SLOW, 4096);
        ctx(5, 0xdef, STRATA_DIRECTIVE_DEFAULT, 8192);
        for (k, addr, ctx) in [(1usize, 0x20000u64, 5u32), (2, 0x10000, 3)] {
            let o = Object { addr, len: 4096, context: ctx, next: 0 };
            put(&mut bytes, obj_off + k * ob, unsafe {
                std::slice::from_raw_parts(&o as *const Object as *const u8, ob)
            });
        }
        let name = format!("/dev/shm/strata.{}", std::process::id());
        let mut f = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&name).unwrap();
        std::fs::remove_file(&name).unwrap();
        f.write_all(&bytes).unwrap();
        f
    }

    #[test]
    fn a_channel_is_read_steered_and_refused_when_it_is_not_this_builds() {
        let _one = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        assert_eq!(Channel::open(me).err(), Some(ChannelError::Absent(me)));

        let f = region(me as i64, |_| {});
        let mut c = Channel::open(me).unwrap();
        let mut contexts = Vec::new();
        c.contexts(&mut contexts);
        let got: Vec<_> = contexts.iter().map(|c| (c.index, c.id, c.directive, c.live_bytes, c.frees)).collect();
        assert_eq!(got, vec![(3, 0xabc, Directive::Slow, 4096, 2), (5, 0xdef, Directive::Default, 8192, 2)]);
        let mut objects = Vec::new();
        c.objects(&mut objects);
        let got: Vec<_> = objects.iter().map(|o| (o.addr, o.context)).collect();
        assert_eq!(got, vec![(0x10000, 3), (0x20000, 5)], "in address order");
        assert_eq!((c.priority(), c.wp_async()), (10, true));
        assert!(c.set_directive(5, Directive::Fast));
        assert!(!c.set_directive(8, Directive::Fast), "outside the table");
        assert!(c.set_directive(0, Directive::Fast), "the process's default");
        let default = unsafe { *(c.base.add(std::mem::offset_of!(Header, default_directive)) as *const i32) };
        assert_eq!(default, STRATA_DIRECTIVE_FAST);
        contexts.clear();
        c.contexts(&mut contexts);
        assert_eq!(contexts[1].directive, Directive::Fast, "the process sees what the engine wrote");
        drop((c, f));

        let refused = |edit: fn(&mut Header), why: &str| {
            let f = region(me as i64, edit);
            let e = Channel::open(me).err().unwrap().to_string();
            assert!(e.contains(why), "{e}");
            drop(f);
        };
        refused(|h| h.magic = 1, "bad magic");
        refused(|h| h.version = 99, "version 99");
        refused(|h| h.context_bytes = 8, "sizes");
        refused(|h| h.object_capacity = 1 << 40, "do not fit");
        refused(|h| h.pid = 1, "belongs to process 1");
    }

    /// What a reading returns, checked against what the daemon may trust: the records it
    /// walks are sane and the contexts are inside the table it checked.
    fn read_all(c: &mut Channel) {
        let (mut contexts, mut objects) = (Vec::new(), Vec::new());
        c.contexts(&mut contexts);
        c.objects(&mut objects);
        assert!(contexts.iter().all(|x| x.index > 0 && (x.index as u64) < c.header.context_capacity));
        assert!(objects.iter().all(|o| sane(o.addr, o.len)), "{objects:?}");
        assert!(objects.windows(2).all(|w| w[0].addr <= w[1].addr));
        let _ = (c.priority(), c.wp_async(), c.process_directive());
    }

    /// Fuzzing the channel, the input a daemon takes from any process: random bytes and
    /// extreme words written over the header before the daemon opens it (refused, or read in
    /// bounds), and over the whole region while the daemon reads it (the process may write
    /// anything at any time).
    #[test]
    fn whatever_a_process_writes_in_its_region_the_daemon_reads_in_bounds() {
        use std::os::unix::fs::FileExt;
        let _one = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let mut x = strata_util::XorShift::new(0x9e37_79b9_7f4a_7c15);
        const WORDS: [u64; 8] =
            [0, 1, u64::MAX, 1 << 63, 4096, STRATA_OBJECT_RECORD_MAX + 1, ANY_USER_END - 4096, 1 << 40];
        // 1 to `most` writes at random places below `within`
        let mut scribble = |f: &std::fs::File, within: u64, most: u64| {
            for _ in 0..1 + x.below(most) {
                let at = x.below(within);
                if x.below(2) == 0 {
                    f.write_at(&[x.next_u64() as u8], at).unwrap();
                } else {
                    let w = WORDS[x.below(WORDS.len() as u64) as usize];
                    f.write_at(&w.to_ne_bytes(), at & !7).unwrap();
                }
            }
        };
        let (mut opened, mut refused) = (0, 0);
        for _ in 0..2000 {
            let f = region(me as i64, |_| {});
            scribble(&f, size_of::<Header>() as u64, 3);
            match Channel::open(me) {
                Ok(mut c) => {
                    opened += 1;
                    read_all(&mut c);
                }
                Err(ChannelError::Bad { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(opened > 0 && refused > 0, "opened {opened}, refused {refused}");
        let f = region(me as i64, |_| {});
        let len = f.metadata().unwrap().len();
        let mut c = Channel::open(me).unwrap();
        for _ in 0..20_000 {
            scribble(&f, len, 8);
            read_all(&mut c);
        }
    }
}
