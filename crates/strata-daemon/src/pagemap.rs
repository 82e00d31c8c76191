//! What `/proc/PID/pagemap` tells about a process's pages, read from outside: each page's entry
//! (present, soft-dirty, its frame), `PAGEMAP_SCAN` (Linux 6.7: pages written since the last
//! scan, for memory the process registered for asynchronous write-protect), and the node a
//! frame belongs to.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst)
const PRESENT: u64 = 1 << 63;
const SOFT_DIRTY: u64 = 1 << 55;
const PFN_MASK: u64 = (1 << 55) - 1;

pub fn present(e: u64) -> bool {
    e & PRESENT != 0
}
pub fn soft_dirty(e: u64) -> bool {
    e & SOFT_DIRTY != 0
}
/// The page's frame number; 0 when the reader lacks CAP_SYS_ADMIN (the kernel hides it).
pub fn pfn(e: u64) -> u64 {
    e & PFN_MASK
}

/// The pagemap entries of `n` pages from `addr`.
pub fn entries(pagemap: &File, addr: u64, n: usize) -> std::io::Result<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    let mut raw = vec![0u8; n * 8];
    pagemap.read_exact_at(&mut raw, addr / 4096 * 8)?;
    Ok(raw.chunks_exact(8).map(|e| u64::from_ne_bytes(e.try_into().expect("8 bytes"))).collect())
}

// PAGEMAP_SCAN (linux/fs.h, 6.7)
const PAGEMAP_SCAN: libc::c_ulong = 0xc060_6610;
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// A run of pages with the same categories.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// What to ask PAGEMAP_SCAN for: pages whose categories, with `inverted` flipped, have all of
/// `mask`; report `report` of them.
#[derive(Clone, Copy, Debug)]
pub struct Query {
    pub flags: u64,
    pub inverted: u64,
    pub mask: u64,
    pub report: u64,
}

/// PAGEMAP_SCAN over [start, end), at most `max_pages` pages (0: no limit), regions appended to
/// `out`. Returns where the walk stopped (`end` when it got there).
pub fn scan(
    pagemap: &File,
    start: u64,
    end: u64,
    max_pages: u64,
    q: Query,
    out: &mut Vec<Region>,
) -> std::io::Result<u64> {
    let mut buf = [Region::default(); 512];
    let mut at = start;
    let mut left = max_pages;
    while at < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: q.flags,
            start: at,
            end,
            walk_end: 0,
            vec: buf.as_mut_ptr() as u64,
            vec_len: buf.len() as u64,
            max_pages: left,
            category_inverted: q.inverted,
            category_mask: q.mask,
            category_anyof_mask: 0,
            return_mask: q.report,
        };
        // SAFETY: arg and buf outlive the call; the kernel writes at most vec_len regions
        let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let got = &buf[..n as usize];
        out.extend_from_slice(got);
        if max_pages > 0 {
            let pages: u64 = got.iter().map(|r| (r.end - r.start) / 4096).sum();
            left = left.saturating_sub(pages);
            if left == 0 {
                return Ok(arg.walk_end);
            }
        }
        if arg.walk_end <= at {
            break;
        }
        at = arg.walk_end;
    }
    Ok(at.max(end))
}

/// The node of each physical frame, from the memory blocks each node lists in sysfs
/// (`node/nodeN/memoryM`, blocks of `memory/block_size_bytes`).
#[derive(Clone, Debug, Default)]
pub struct Frames {
    block_pages: u64,
    /// node of each block, u8::MAX where unknown
    node_of_block: Vec<u8>,
}

impl Frames {
    pub fn load(sysfs: &Path) -> Frames {
        let system = sysfs.join("devices/system");
        let Some(block_bytes) = std::fs::read_to_string(system.join("memory/block_size_bytes"))
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        else {
            return Frames::default();
        };
        let mut node_of_block = Vec::new();
        for node in std::fs::read_dir(system.join("node")).into_iter().flatten().flatten() {
            let name = node.file_name();
            let Some(n) = name.to_str().and_then(|s| s.strip_prefix("node")).and_then(|s| s.parse::<u8>().ok()) else {
                continue;
            };
            for e in std::fs::read_dir(node.path()).into_iter().flatten().flatten() {
                let Some(b) =
                    e.file_name().to_str().and_then(|s| s.strip_prefix("memory")).and_then(|s| s.parse::<usize>().ok())
                else {
                    continue;
                };
                if node_of_block.len() <= b {
                    node_of_block.resize(b + 1, u8::MAX);
                }
                node_of_block[b] = n;
            }
        }
        Frames { block_pages: block_bytes / 4096, node_of_block }
    }

    /// The node of frame `pfn` (None: unknown, or frame 0, which an unprivileged reader sees).
    pub fn node(&self, pfn: u64) -> Option<u8> {
        if pfn == 0 || self.block_pages == 0 {
            return None;
        }
        self.node_of_block.get((pfn / self.block_pages) as usize).copied().filter(|&n| n != u8::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_map_to_nodes_through_memory_blocks() {
        let dir = std::env::temp_dir().join(format!("strata-frames-{}", std::process::id()));
        let sys = dir.join("devices/system");
        std::fs::create_dir_all(sys.join("memory")).unwrap();
        std::fs::write(sys.join("memory/block_size_bytes"), "8000000\n").unwrap(); // 128 MiB
        for (node, blocks) in [(0, [0, 1]), (1, [2, 5])] {
            for b in blocks {
                std::fs::create_dir_all(sys.join(format!("node/node{node}/memory{b}"))).unwrap();
            }
        }
        let f = Frames::load(&dir);
        let per_block = (128 << 20) / 4096;
        assert_eq!(f.node(1), Some(0));
        assert_eq!(f.node(2 * per_block + 7), Some(1));
        assert_eq!(f.node(3 * per_block), None, "a block no node lists");
        assert_eq!(f.node(5 * per_block + per_block - 1), Some(1));
        assert_eq!(f.node(0), None, "frame 0: the reader cannot see frames");
        assert_eq!(Frames::load(&dir.join("nothing")).node(1), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn this_machines_frames_of_a_touched_page_are_on_a_node_when_root() {
        let v = vec![1u8; 1 << 16];
        let page = (v.as_ptr() as u64).next_multiple_of(4096);
        let f = File::open("/proc/self/pagemap").unwrap();
        let e = entries(&f, page, 1).unwrap()[0];
        assert!(present(e));
        let frames = Frames::load(Path::new("/sys"));
        if unsafe { libc::geteuid() } == 0 {
            assert!(frames.node(pfn(e)).is_some(), "pfn {:#x}", pfn(e));
        } else {
            assert_eq!(pfn(e), 0);
        }
    }
}
