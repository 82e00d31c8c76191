//! A process's channel (include/strata_channel.h): the allocation contexts and tracked objects
//! libstrata shares, and the directive of each context, which the engine may rewrite.
//!
//! The region is a memfd the process made. The daemon is handed it with the process's hello
//! (SCM_RIGHTS, [`Channel::from_file`]) or finds it, started later, as the `/proc/PID/fd` link
//! that reads `/memfd:strata.channel (deleted)` ([`Channel::open`]). Either way it is the
//! process's memory, written by someone the daemon does not trust, so before a byte is read:
//!
//! - the file must be sealed against shrinking and growing (only a memfd can be), so nothing
//!   can change its size under a reader;
//! - its owner must be root or every uid of the process (a channel made by a user and
//!   inherited across the exec of a setuid program is not that program's);
//! - its size and its tables must be at most libstrata's own;
//! - the header's magic, version, sizes and pid must be this build's and the process's.
//!
//! Then every read is a `pread` (`FileExt::read_at`): a copy, never a mapping, so no fault of the
//! region can reach the reader as a signal, and a hole reads as zeros without being allocated.
//! Fields are read whole, not as a consistent snapshot; nothing read after the header's check is
//! trusted: the tables' places and sizes are the checked header's, kept by the daemon, and an
//! object record that libstrata could not have written (empty, longer than a record, or past the
//! address space) is skipped, never walked page by page.
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use strata_policy::{ContextObs, Directive, ObjectObs};
use strata_sys::{
    strata_channel_header_t as Header, strata_context_t as Context, strata_object_t as Object, STRATA_CHANNEL_MAGIC,
    STRATA_CHANNEL_NAME, STRATA_CHANNEL_VERSION, STRATA_CONTEXT_CAPACITY, STRATA_DIRECTIVE_DEFAULT,
    STRATA_DIRECTIVE_FAST, STRATA_DIRECTIVE_SLOW, STRATA_DIRECTIVE_TIER0, STRATA_OBJECT_CAPACITY,
    STRATA_OBJECT_RECORD_MAX, STRATA_PRIORITY_MAX, STRATA_PRIORITY_MIN, STRATA_TRACKING_WP_ASYNC,
};

/// Why a channel could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The process has no channel (yet): it runs without libstrata, or has made no context.
    #[error("process {0} has no channel")]
    Absent(u32),
    /// A region that is not this build's channel, or not the process's: refused, with the reason.
    #[error("process {pid}'s channel is refused: {why}")]
    Bad { pid: u32, why: String },
    /// Another process's channel, which this one holds for a moment: a child made by vfork or
    /// posix_spawn keeps its parent's descriptor until its exec.
    #[error("process {pid} holds a channel that belongs to process {owner}")]
    Inherited { pid: u32, owner: i64 },
}

pub struct Channel {
    pid: u32,
    file: File,
    len: u64,
    header: Header,
    /// the indices of used contexts, and the count they were taken at
    known: Vec<u32>,
    known_used: u64,
}

/// Above any x86-64 user address, with 5-level page tables too (57 bits): a sanity bound on
/// what a process may claim, not the end of the space the daemon scans (strata-daemon's tracker::pagemap_scan::USER_TOP).
const ANY_USER_END: u64 = 1 << 57;

/// The largest region accepted: libstrata's tables at their capacities, with room for alignment.
const MAX_LEN: u64 = (64 << 10)
    + (STRATA_CONTEXT_CAPACITY * size_of::<Context>() as u64 + STRATA_OBJECT_CAPACITY * size_of::<Object>() as u64);

/// The link a process's channel shows in /proc/PID/fd.
fn channel_link() -> String {
    format!("/memfd:{STRATA_CHANNEL_NAME} (deleted)")
}

/// Whether an object record is one libstrata could have written: 1 byte to a record long,
/// within user space.
fn sane(addr: u64, len: u64) -> bool {
    (1..=STRATA_OBJECT_RECORD_MAX).contains(&len) && addr.checked_add(len).is_some_and(|end| end <= ANY_USER_END)
}

fn directive_of(raw: i32) -> Directive {
    match raw {
        STRATA_DIRECTIVE_FAST => Directive::Fast,
        STRATA_DIRECTIVE_SLOW => Directive::Slow,
        d if d >= STRATA_DIRECTIVE_TIER0 => Directive::Tier((d - STRATA_DIRECTIVE_TIER0).min(255) as u8),
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

/// A process's uids (real, effective, saved, filesystem), from /proc/PID/status.
pub(crate) fn process_uids(pid: u32) -> Option<[u32; 4]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|u| u.parse::<u32>().ok());
    Some([ids.next()??, ids.next()??, ids.next()??, ids.next()??])
}

/// A plain struct of integers read from bytes (any bytes are a valid value).
fn read_struct<T: Copy>(bytes: &[u8]) -> T {
    assert!(bytes.len() >= size_of::<T>());
    // SAFETY: T is a repr(C) struct of integers, the slice holds enough bytes, and the read is
    // unaligned
    unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) }
}

impl Channel {
    /// Find process pid's channel among its open files (a daemon started after the process, or
    /// `strata stats`).
    /// A channel of another process's (vfork, posix_spawn) is none of this one's: Absent.
    pub fn open(pid: u32) -> Result<Channel, ChannelError> {
        let path = Channel::find(pid).ok_or(ChannelError::Absent(pid))?;
        let f = OpenOptions::new().read(true).write(true).open(&path).map_err(|_| ChannelError::Absent(pid))?;
        match Channel::from_file(pid, f) {
            Err(ChannelError::Inherited { .. }) => Err(ChannelError::Absent(pid)),
            r => r,
        }
    }

    /// The `/proc/PID/fd` entry of process pid's channel, if it has one (nothing is opened).
    pub fn find(pid: u32) -> Option<std::path::PathBuf> {
        Channel::entries(pid).next()
    }

    /// Every `/proc/PID/fd` entry of process pid that is a channel (one, in a process with one
    /// libstrata; nothing is opened).
    pub fn entries(pid: u32) -> impl Iterator<Item = std::path::PathBuf> {
        let want = channel_link();
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(move |p| std::fs::read_link(p).is_ok_and(|l| l.to_string_lossy() == want))
    }

    /// Take `file` as process pid's channel, once it passes every check (module doc).
    pub fn from_file(pid: u32, file: File) -> Result<Channel, ChannelError> {
        let bad = |why: String| ChannelError::Bad { pid, why };
        // SAFETY: fcntl on a descriptor this File owns
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & need != need {
            return Err(bad("it is not a memfd sealed against shrinking and growing".into()));
        }
        let meta = file.metadata().map_err(|e| bad(format!("fstat: {e}")))?;
        let uids = process_uids(pid).ok_or(ChannelError::Absent(pid))?;
        if meta.uid() != 0 && uids.iter().any(|&u| u != meta.uid()) {
            return Err(bad(format!(
                "user {} made it, and the process runs as {}/{}/{}/{} (real/effective/saved/fs): a channel \
                 inherited across a setuid exec is not the program's",
                meta.uid(),
                uids[0],
                uids[1],
                uids[2],
                uids[3]
            )));
        }
        let len = meta.len();
        if len < size_of::<Header>() as u64 || len > MAX_LEN {
            return Err(bad(format!("{len} bytes, not the size of a channel")));
        }
        let mut c = Channel { pid, file, len, header: Header::default(), known: Vec::new(), known_used: u64::MAX };
        c.header = c.read_header().ok_or_else(|| bad("its header cannot be read".into()))?;
        c.check().map_err(bad)?;
        if c.header.pid != pid as i64 {
            return Err(ChannelError::Inherited { pid, owner: c.header.pid });
        }
        Ok(c)
    }

    fn read_header(&self) -> Option<Header> {
        let mut b = [0u8; size_of::<Header>()];
        self.file.read_exact_at(&mut b, 0).ok()?;
        Some(read_struct(&b))
    }

    fn check(&self) -> Result<(), String> {
        let h = &self.header;
        if h.magic != STRATA_CHANNEL_MAGIC {
            return Err(format!("bad magic {:#x}", h.magic));
        }
        if h.version != STRATA_CHANNEL_VERSION {
            return Err(format!("version {}, this strata reads {STRATA_CHANNEL_VERSION}", h.version));
        }
        if h.header_bytes as usize != size_of::<Header>()
            || h.context_bytes as usize != size_of::<Context>()
            || h.object_bytes as usize != size_of::<Object>()
        {
            return Err("the sizes of its structures are not this build's".into());
        }
        if h.context_capacity > STRATA_CONTEXT_CAPACITY || h.object_capacity > STRATA_OBJECT_CAPACITY {
            return Err("its tables are larger than libstrata makes them".into());
        }
        let end = |off: u64, n: u64, size: u64| off.checked_add(n.checked_mul(size)?);
        let fits = |e: Option<u64>| e.is_some_and(|e| e <= self.len);
        if !fits(end(h.contexts_offset, h.context_capacity, h.context_bytes))
            || !fits(end(h.objects_offset, h.object_capacity, h.object_bytes))
        {
            return Err("its tables do not fit in the region".into());
        }
        Ok(())
    }

    /// The header as it is now (its counters and the process's claims change); the checked
    /// one where it cannot be read.
    fn header_now(&self) -> Header {
        self.read_header().unwrap_or(self.header)
    }

    fn context_off(&self, i: u32) -> u64 {
        self.header.contexts_offset + i as u64 * self.header.context_bytes
    }

    /// Records `from..to` of a table at `offset` of `size` bytes each, read in pieces of at
    /// most 1 MiB, each handed to `each` with its index.
    fn each_record<T: Copy>(&self, offset: u64, from: u64, to: u64, mut each: impl FnMut(u64, T)) {
        let size = size_of::<T>() as u64;
        let per = ((1 << 20) / size).max(1);
        let mut buf = Vec::new();
        let mut i = from;
        while i < to {
            let n = per.min(to - i);
            buf.resize((n * size) as usize, 0);
            if self.file.read_exact_at(&mut buf, offset + i * size).is_err() {
                return;
            }
            for (k, rec) in buf.chunks_exact(size as usize).enumerate() {
                each(i + k as u64, read_struct(rec));
            }
            i += n;
        }
    }

    /// The used contexts (entries 1..=contexts_used, made in order; read again only when their
    /// count changed).
    pub fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        let used = self.header_now().contexts_used;
        if used != self.known_used {
            let mut known = Vec::new();
            let to = used.saturating_add(1).min(self.header.context_capacity);
            self.each_record(self.header.contexts_offset, 1, to, |i, c: Context| {
                if c.id != 0 {
                    known.push(i as u32);
                }
            });
            self.known = known;
            self.known_used = used;
        }
        let mut b = [0u8; size_of::<Context>()];
        for &i in &self.known {
            if self.file.read_exact_at(&mut b, self.context_off(i)).is_err() {
                return;
            }
            let c: Context = read_struct(&b);
            out.push(ContextObs {
                pid: self.pid,
                index: i,
                id: c.id,
                size_class: c.size_class,
                allocs: c.allocs,
                frees: c.frees,
                live_bytes: c.live_bytes,
                bytes_allocated: c.bytes_allocated,
                directive: directive_of(c.directive),
            });
        }
    }

    /// The tracked objects alive now (records of 64 MiB at most), in address order; records
    /// libstrata could not have written are skipped.
    pub fn objects(&self, out: &mut Vec<ObjectObs>) {
        let h = &self.header;
        let high = self.header_now().objects_high.min(h.object_capacity);
        let start = out.len();
        self.each_record(h.objects_offset, 1, high, |_, o: Object| {
            if o.addr != 0 && sane(o.addr, o.len) {
                out.push(ObjectObs {
                    pid: self.pid,
                    addr: o.addr,
                    len: o.len,
                    context: o.context,
                    arena: o.arena,
                    hint: if o.arena == 0 { Directive::Default } else { directive_of(o.hint) },
                    ..ObjectObs::default()
                });
            }
        });
        out[start..].sort_by_key(|o| o.addr);
    }

    /// The process's default directive (STRATA_DIRECTIVE at its start, or what was set since).
    pub fn process_directive(&self) -> Directive {
        directive_of(self.header_now().default_directive)
    }

    /// The priority the process claims (STRATA_PRIORITY), within the documented range.
    pub fn priority(&self) -> i32 {
        self.header_now().priority.clamp(STRATA_PRIORITY_MIN, STRATA_PRIORITY_MAX)
    }

    /// Whether the process registered Strata's memory for asynchronous write-protect, so a
    /// scan with PAGEMAP_SCAN sees its writes (STRATA_TRACKING_WP_ASYNC). Read every time: the
    /// process sets it just after making the channel.
    pub fn wp_async(&self) -> bool {
        self.header_now().tracking & STRATA_TRACKING_WP_ASYNC != 0
    }

    /// Set context `index`'s directive (where its next allocations go); index 0 sets the
    /// process's default (for contexts with the default directive and allocations without one).
    /// One aligned 4-byte write, as the process reads it.
    pub fn set_directive(&self, index: u32, d: Directive) -> bool {
        let o = match index {
            0 => std::mem::offset_of!(Header, default_directive) as u64,
            i if (i as u64) < self.header.context_capacity => {
                self.context_off(i) + std::mem::offset_of!(Context, directive) as u64
            }
            _ => return false,
        };
        self.file.write_all_at(&raw_of(d).to_ne_bytes(), o).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The tests' regions are found by this process's pid: one at a time.
    static REGIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A memfd named as libstrata names its channel, sealed with `seals`.
    fn memfd(bytes: &[u8], seals: i32) -> File {
        let name = std::ffi::CString::new(STRATA_CHANNEL_NAME).unwrap();
        // SAFETY: a NUL-terminated name; the descriptor is owned by the File
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0);
        let mut f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        f.write_all(bytes).unwrap();
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) }, 0);
        f
    }

    const SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

    /// A region laid out as libstrata lays it out, sealed as libstrata seals it.
    fn region(pid: i64, edit: impl FnOnce(&mut Header)) -> File {
        memfd(&region_bytes(pid, edit), SEALS)
    }

    fn region_bytes(pid: i64, edit: impl FnOnce(&mut Header)) -> Vec<u8> {
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
            contexts_used: 5, // entries 1..=5 (1, 2 and 4 left empty: a reader skips them)
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
            let o = Object { addr, len: 4096, context: ctx, next: 0, arena: 0, hint: 0 };
            put(&mut bytes, obj_off + k * ob, unsafe {
                std::slice::from_raw_parts(&o as *const Object as *const u8, ob)
            });
        }
        bytes
    }

    fn take(pid: u32, f: &File) -> Result<Channel, ChannelError> {
        Channel::from_file(pid, f.try_clone().unwrap())
    }

    #[test]
    fn a_channel_is_read_steered_and_refused_when_it_is_not_this_builds() {
        let _one = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        assert_eq!(Channel::open(me).err(), Some(ChannelError::Absent(me)));

        let f = region(me as i64, |_| {});
        let mut c = Channel::open(me).unwrap();
        assert_eq!(c.header.pid, me as i64, "found among this process's files");
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
        assert_eq!(c.header_now().default_directive, STRATA_DIRECTIVE_FAST);
        contexts.clear();
        c.contexts(&mut contexts);
        assert_eq!(contexts[1].directive, Directive::Fast, "the process sees what the engine wrote");
        drop((c, f));

        let refused = |edit: fn(&mut Header), why: &str| {
            let f = region(me as i64, edit);
            let e = take(me, &f).err().unwrap().to_string();
            assert!(e.contains(why), "{e}");
        };
        refused(|h| h.magic = 1, "bad magic");
        refused(|h| h.version = 99, "version 99");
        refused(|h| h.context_bytes = 8, "sizes");
        refused(|h| h.object_capacity = 1 << 40, "larger than libstrata");
        refused(|h| h.object_capacity = 1 << 10, "do not fit");
        refused(|h| h.pid = 1, "belongs to process 1");
        // found among this process's files, another's channel is not this one's
        let f = region(1, |_| {});
        assert_eq!(Channel::open(me).err(), Some(ChannelError::Absent(me)));
        drop(f);
    }

    /// The review's rows 2.4, 2.5, 2.8: a region that can be truncated or grown under a
    /// reader, or that is not a memfd, is refused before a byte of it is read; a sealed one
    /// cannot be truncated by anyone.
    #[test]
    fn a_region_that_could_change_size_or_is_not_the_processs_is_refused() {
        let _one = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let bytes = region_bytes(me as i64, |_| {});
        for seals in [0, libc::F_SEAL_SHRINK, libc::F_SEAL_GROW] {
            let e = take(me, &memfd(&bytes, seals)).err().unwrap().to_string();
            assert!(e.contains("not a memfd sealed"), "seals {seals}: {e}");
        }
        let plain = std::env::temp_dir().join(format!("strata-channel-plain-{me}"));
        std::fs::write(&plain, &bytes).unwrap();
        let e = take(me, &File::options().read(true).write(true).open(&plain).unwrap()).err().unwrap().to_string();
        assert!(e.contains("not a memfd sealed"), "{e}");
        std::fs::remove_file(&plain).unwrap();
        let sealed = region(me as i64, |_| {});
        assert_ne!(unsafe { libc::ftruncate(sealed.as_raw_fd(), 0) }, 0, "the seal holds");
        assert_ne!(unsafe { libc::ftruncate(sealed.as_raw_fd(), 1 << 40) }, 0, "the seal holds");
        let c = take(me, &sealed).unwrap();
        assert_eq!(c.len, bytes.len() as u64);
        // made by another user: not a root process's channel (root only can give a file away)
        if unsafe { libc::geteuid() } == 0 {
            let given = region(me as i64, |_| {});
            assert_eq!(unsafe { libc::fchown(given.as_raw_fd(), 4321, 4321) }, 0);
            let e = take(me, &given).err().unwrap().to_string();
            assert!(e.contains("user 4321 made it"), "{e}");
        }
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
            match take(me, &f) {
                Ok(mut c) => {
                    opened += 1;
                    read_all(&mut c);
                }
                Err(ChannelError::Bad { .. } | ChannelError::Inherited { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(opened > 0 && refused > 0, "opened {opened}, refused {refused}");
        let f = region(me as i64, |_| {});
        let len = f.metadata().unwrap().len();
        let mut c = take(me, &f).unwrap();
        for _ in 0..20_000 {
            scribble(&f, len, 8);
            read_all(&mut c);
        }
    }
}
