//! Small helpers every Strata crate shares.
//!
//! - [`size`]: "512M" into bytes and bytes into "1.5 KiB";
//! - [`median`]: the statistic benchmarks report (it resists a noisy run);
//! - [`thread_cpu_ns`]: the calling thread's CPU time, for timings a busy machine must not skew;
//! - [`XorShift`]: the seeded pseudo-random stream workloads and fuzz tests draw from;
//! - [`Progress`]: progress lines on stderr, never mixed into data on stdout;
//! - [`find_built`]: where `make` put a library or program;
//! - [`dies_with_parent`]: a child that does not outlive the command that started it, and
//!   [`Owned`], one that is also killed when dropped;
//! - [`Host`]: the machine a figure was measured on (CPU model first: figures are meaningless
//!   without it).
pub mod size;

mod host;
mod paths;

pub use host::Host;

/// A file or program that could not be read, written or started: what was being done, and the
/// system's reason. Every crate's error type wraps it. The reason is part of its message and not
/// a `source` too, so that a chain printed whole (`{:#}`) says it once.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct IoError {
    pub what: String,
    pub reason: std::io::Error,
}

/// For `map_err`: an `std::io::Error` as an [`IoError`] saying what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> IoError {
    let what = what.into();
    move |reason| IoError { what, reason }
}
pub use paths::{find_built, paths_include, repo_root, NotBuilt};

/// Today's date in UTC, YYYY-MM-DD.
pub fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 as a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The median of some measurements (NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Have the program `cmd` starts killed (SIGKILL) when the thread that starts it ends, which is
/// when this process ends, however it ends: a program run for a result (an emulated run, a
/// benchmark's workload) must not outlive the command waiting for it (`kill` of `strata bench`
/// left its workloads running to the end). So the thread that starts it must be the one that
/// waits for it. Returns `cmd`, to chain.
pub fn dies_with_parent(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the hook calls only async-signal-safe functions (prctl, getppid, raise).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL); // the parent ended before the prctl
            }
            Ok(())
        });
    }
    cmd
}

/// A program this one started and owns: killed (SIGKILL) and reaped when dropped, on any return
/// path, and when the thread that started it ends ([`dies_with_parent`]). For the programs a
/// benchmark runs beside itself (a workload, a daemon, a peer server) while it measures.
pub struct Owned(pub std::process::Child);

impl Owned {
    pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<Owned> {
        dies_with_parent(cmd).spawn().map(Owned)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Owned {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Owned {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// The calling thread's CPU time, ns: what a single-threaded measurement should be timed by
/// when other programs share the CPUs (time spent preempted is not counted, as wall time is).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Marsaglia's xorshift64 (shifts 13, 7, 17): a cheap, seeded, repeatable stream for workloads
/// and fuzz tests, not for anything that must be unpredictable.
#[derive(Clone, Copy, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// The stream from `seed` (0, which would stay 0, starts as 1).
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    /// The next number.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }

    /// The next number reduced to `0..n` (n > 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Progress lines on stderr, "[what] message", unless quiet.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    what: &'static str,
    quiet: bool,
}

impl Progress {
    pub fn new(what: &'static str, quiet: bool) -> Progress {
        Progress { what, quiet }
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    pub fn say(&self, msg: &str) {
        if !self.quiet {
            eprintln!("[{}] {msg}", self.what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_marsaglias() {
        let mut x = XorShift::new(1);
        assert_eq!(x.next_u64(), 1_082_269_761); // 1 -> 8193 -> 8257 -> 8257 ^ 8257 << 17
        assert_eq!(XorShift::new(0).next_u64(), 1_082_269_761);
        assert!((0..1000).all(|_| x.below(7) < 7));
    }

    #[test]
    fn dates_from_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(20_781), (2026, 11, 24));
        assert_eq!(today().len(), 10);
    }

    /// The status of a child that was not reaped: SIGKILL'd within the bound, or not.
    fn killed(pid: libc::pid_t) -> bool {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(300) {
            let mut status = 0;
            // SAFETY: status is this frame's; pid is our child
            match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
                0 => std::thread::sleep(std::time::Duration::from_millis(20)),
                r => return r == pid && libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
            }
        }
        false
    }

    #[test]
    fn an_owned_program_dies_with_the_thread_that_started_it() {
        // never dropped (forgotten), so only the thread's end can kill it
        let pid = std::thread::spawn(|| {
            let owned = Owned::spawn(std::process::Command::new("sleep").arg("600")).unwrap();
            let pid = owned.0.id() as libc::pid_t;
            std::mem::forget(owned);
            pid
        })
        .join()
        .unwrap();
        assert!(killed(pid), "sleep 600 outlived the thread that started it");
    }

    #[test]
    fn an_owned_program_is_killed_and_reaped_when_dropped() {
        let owned = Owned::spawn(std::process::Command::new("sleep").arg("600")).unwrap();
        let pid = owned.0.id() as libc::pid_t;
        drop(owned);
        let mut status = 0;
        // SAFETY: status is this frame's; the drop reaped the child, so there is none to wait for
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert_eq!(r, -1, "the dropped program was not reaped");
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
