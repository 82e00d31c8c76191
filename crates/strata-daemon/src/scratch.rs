//! A page and a userfaultfd of the daemon's own, for the probes that try a kernel feature for
//! real (`strata daemon --probe`, and each tracker's and mover's probe) instead of inferring it
//! from the kernel's version. Nothing here touches another process.

// userfaultfd (linux/userfaultfd.h)
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_API: u64 = 0xAA;
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const UFFDIO_MOVE: libc::c_ulong = 0xc028_aa05;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;

/// A page of this process's own, mapped and touched; unmapped on drop.
pub struct Page(*mut u8);

impl Page {
    pub fn new() -> Result<Page, String> {
        // SAFETY: an anonymous private mapping of one page; checked for failure
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let page = Page(p as *mut u8);
        page.write(1);
        Ok(page)
    }

    pub fn write(&self, v: u8) {
        // SAFETY: the page is mapped read-write by new()
        unsafe { std::ptr::write_volatile(self.0, v) }
    }

    pub fn read(&self) -> u8 {
        // SAFETY: the page is mapped by new()
        unsafe { std::ptr::read_volatile(self.0) }
    }

    pub fn addr(&self) -> u64 {
        self.0 as u64
    }

    /// Drop its contents (the next read finds a zero page, or a fault where registered).
    pub fn discard(&self) {
        // SAFETY: our own page, mapped by new()
        unsafe { libc::madvise(self.0 as *mut libc::c_void, 4096, libc::MADV_DONTNEED) };
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping made by new()
        unsafe { libc::munmap(self.0 as *mut libc::c_void, 4096) };
    }
}

/// A userfaultfd of this process's own; closed on drop.
pub struct Uffd(libc::c_int);

impl Uffd {
    /// One that handles faults of user space only (any user may), or a full one (the daemon's:
    /// root, /dev/userfaultfd or vm.unprivileged_userfaultfd).
    pub fn open(user_mode_only: bool) -> Result<Uffd, String> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | if user_mode_only { UFFD_USER_MODE_ONLY } else { 0 };
        // SAFETY: a plain syscall; the descriptor is closed on drop
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0 {
            return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()));
        }
        Ok(Uffd(fd as libc::c_int))
    }

    /// The API handshake, asking for `features`.
    pub fn api(&self, features: u64) -> std::io::Result<()> {
        let mut api = [UFFD_API, features, 0u64];
        // SAFETY: uffdio_api is three u64s
        match unsafe { libc::ioctl(self.0, UFFDIO_API, api.as_mut_ptr()) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Register `page` for write-protect.
    pub fn register_wp(&self, page: &Page) -> std::io::Result<()> {
        let mut reg = [page.addr(), 4096, UFFDIO_REGISTER_MODE_WP, 0u64];
        // SAFETY: uffdio_register is a range (two u64s), a mode and the ioctls reported
        match unsafe { libc::ioctl(self.0, UFFDIO_REGISTER, reg.as_mut_ptr()) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Move the page at `from` whole into `to` (registered, empty).
    pub fn move_page(&self, to: &Page, from: &Page) -> std::io::Result<()> {
        let mut mv = [to.addr(), from.addr(), 4096u64, 0u64, 0u64];
        // SAFETY: uffdio_move is dst, src, len, mode and the bytes moved
        match unsafe { libc::ioctl(self.0, UFFDIO_MOVE, mv.as_mut_ptr()) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        // SAFETY: our descriptor
        unsafe { libc::close(self.0) };
    }
}
