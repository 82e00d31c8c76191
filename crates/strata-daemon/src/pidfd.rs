//! Who a process is, in a way a reused pid cannot fake: its pid, its start time and a pidfd
//! (a descriptor that names that process and no later one with the same pid).
//!
//! A peer on the control socket is identified by the kernel, never by what it writes: its pid
//! from `SO_PEERCRED` must be the pid it names, and its pidfd comes from `SO_PEERPIDFD` (Linux
//! 6.5+: the process that connected, even if it has exited since) or, on older kernels, from
//! `pidfd_open` of that pid, checked alive after its start time was read (a window of one
//! accept, docs/security.md).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// A descriptor for one process.
#[derive(Debug)]
pub struct Pidfd(OwnedFd);

/// `SO_PEERPIDFD` (Linux 6.5), not in every libc's headers.
const SO_PEERPIDFD: libc::c_int = 77;

impl Pidfd {
    /// The process that is `pid` now.
    pub fn open(pid: u32) -> std::io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just gave this process
        Ok(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }))
    }

    /// The process at the other end of a Unix socket (the one that connected), where the kernel
    /// can say (Linux 6.5+).
    fn of_peer(stream: &UnixStream) -> Option<Pidfd> {
        let mut fd: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: fd is an int and len its size
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                &mut fd as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        };
        // SAFETY: a descriptor the kernel just gave this process
        (rc == 0 && fd >= 0).then(|| Pidfd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Whether the process has not exited (a pidfd becomes readable when it does).
    pub fn alive(&self) -> bool {
        let mut p = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, no wait
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

/// The credentials of the peer of a Unix socket, as the kernel gives them.
pub fn peer_cred(stream: &UnixStream) -> Option<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred is a ucred and len its size
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(cred)
}

/// A process as the daemon knows it.
#[derive(Debug)]
pub struct Identity {
    pub pid: u32,
    /// clock ticks after boot (field 22 of /proc/PID/stat)
    pub start_time: u64,
    pub command: String,
    pub pidfd: Pidfd,
}

impl Identity {
    /// The process that is `pid` now, if there is one.
    pub fn of(pid: u32) -> Option<Identity> {
        let pidfd = Pidfd::open(pid).ok()?;
        Identity::with(pid, pidfd)
    }

    /// Its start time and command, read while the pidfd shows it alive: so they are that
    /// process's, not a later one's with the same pid.
    fn with(pid: u32, pidfd: Pidfd) -> Option<Identity> {
        let (start_time, command) = identity(pid)?;
        pidfd.alive().then_some(Identity { pid, start_time, command, pidfd })
    }

    /// The process that connected on `stream`, which names itself `pid`: refused, saying why,
    /// when the kernel says the peer is another process.
    pub fn of_peer(stream: &UnixStream, pid: u32) -> Result<Identity, String> {
        let cred = peer_cred(stream).ok_or("the peer's credentials cannot be read")?;
        if cred.pid as u32 != pid {
            return Err(format!(
                "process {} said hello for process {pid}: only a process may speak for itself",
                cred.pid
            ));
        }
        let pidfd = match Pidfd::of_peer(stream) {
            Some(p) => p,
            None => Pidfd::open(pid).map_err(|e| format!("process {pid}: {e}"))?,
        };
        Identity::with(pid, pidfd).ok_or_else(|| format!("process {pid} has exited"))
    }

    /// Whether this is still the process it was (it has not exited).
    pub fn alive(&self) -> bool {
        self.pidfd.alive()
    }
}

/// A process's start time (clock ticks after boot, field 22 of /proc/PID/stat) and command.
pub fn identity(pid: u32) -> Option<(u64, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let command = head.split_once('(')?.1.to_string();
    let start = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((start, command))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_sees_its_process_exit_and_not_a_later_one() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let id = Identity::of(child.id()).unwrap();
        assert!(id.alive() && id.command == "sleep");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!id.alive(), "the pidfd says the process exited");
    }

    #[test]
    fn a_peer_is_who_the_kernel_says_not_who_it_names() {
        let (a, _b) = UnixStream::pair().unwrap();
        let me = std::process::id();
        let id = Identity::of_peer(&a, me).unwrap();
        assert_eq!((id.pid, id.alive()), (me, true));
        let e = Identity::of_peer(&a, 1).unwrap_err();
        assert!(e.contains("only a process may speak for itself"), "{e}");
    }
}
