//! A process's agent, as the daemon talks to it: the connection a process under Strata offered
//! in its hello and the daemon kept (include/strata_channel.h, libstrata/agent/). Requests and
//! replies are the header's fixed layouts, in this machine's byte order; a reply's statuses are
//! move_pages(2)'s (the node a page is on, or minus an errno; -EAGAIN: written while copied on
//! every attempt).
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_sys::{
    strata_agent_counters_t, strata_agent_reply_t, strata_agent_request_t, STRATA_AGENT_DROP_SHADOWS,
    STRATA_AGENT_FORCE, STRATA_AGENT_MAGIC, STRATA_AGENT_MAX_PAGES, STRATA_AGENT_MOVE, STRATA_AGENT_SAMPLE,
};

/// What an agent has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounters {
    /// pages moved by a copy that committed
    pub commits: u64,
    /// copies abandoned because the page was written while copied
    pub aborts: u64,
    /// demotions by remapping a valid shadow: no copy
    pub shadow_demotions: u64,
    /// shadows found written over at demotion, dropped
    pub shadows_stale: u64,
    /// shadows dropped on request (reclaimed)
    pub shadows_dropped: u64,
    /// shadow copies held now
    pub shadows: u64,
    /// pages moved by move_pages(2) instead (memory that is not Strata's)
    pub fallbacks: u64,
    /// pages sampled for the hint-fault tracker, and those the program touched meanwhile
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub samples_touched: u64,
}

impl From<strata_agent_counters_t> for AgentCounters {
    fn from(c: strata_agent_counters_t) -> AgentCounters {
        AgentCounters {
            commits: c.commits,
            aborts: c.aborts,
            shadow_demotions: c.shadow_demotions,
            shadows_stale: c.shadows_stale,
            shadows_dropped: c.shadows_dropped,
            shadows: c.shadows,
            fallbacks: c.fallbacks,
            samples: c.samples,
            samples_touched: c.samples_touched,
        }
    }
}

pub struct Agent {
    stream: UnixStream,
    /// a request and its whole reply must be done within this (not each read: an agent that
    /// drips its reply a byte at a time is dropped as surely as a silent one); a move of
    /// STRATA_AGENT_MAX_PAGES pages takes milliseconds (`[mover] agent_deadline_ms`)
    limit: Duration,
    /// when the request going on must be answered by
    deadline: Instant,
    pub counters: AgentCounters,
}

/// The bytes of a plain struct (repr(C), no padding read back).
fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a repr(C) struct of integers; its bytes are initialized
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

impl Agent {
    pub fn new(stream: UnixStream, limit: Duration) -> Agent {
        Agent { stream, limit, deadline: Instant::now(), counters: AgentCounters::default() }
    }

    /// The time left before the request's deadline: an error once it has passed.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole reply within {} ms", self.limit.as_millis()),
            ));
        }
        Ok(left)
    }

    /// Read `buf` whole by the request's deadline.
    fn read_all(&mut self, mut buf: &mut [u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            self.stream.set_read_timeout(Some(self.left()?))?;
            match self.stream.read(buf) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    self.left()?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn request(&mut self, r: strata_agent_request_t, pages: &[u64]) -> std::io::Result<strata_agent_reply_t> {
        self.deadline = Instant::now() + self.limit;
        let mut msg = bytes_of(&r).to_vec();
        for p in pages {
            msg.extend_from_slice(&p.to_ne_bytes());
        }
        self.stream.set_write_timeout(Some(self.left()?))?;
        self.stream.write_all(&msg)?;
        let mut rep = strata_agent_reply_t::default();
        // SAFETY: the reply is a repr(C) struct of integers; any bytes are a valid value
        let buf = unsafe {
            std::slice::from_raw_parts_mut(
                &mut rep as *mut strata_agent_reply_t as *mut u8,
                std::mem::size_of_val(&rep),
            )
        };
        self.read_all(buf)?;
        if rep.magic != STRATA_AGENT_MAGIC {
            return Err(std::io::Error::other("the agent's reply has a bad magic"));
        }
        self.counters = rep.counters.into();
        Ok(rep)
    }

    /// Move `pages` to `node`, `attempts` copies each at most (`force`: pages already there
    /// too); one status a page.
    pub fn move_pages(&mut self, pages: &[u64], node: u8, attempts: u32, force: bool) -> std::io::Result<Vec<i32>> {
        let mut out = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(STRATA_AGENT_MAX_PAGES) {
            let r = strata_agent_request_t {
                magic: STRATA_AGENT_MAGIC,
                op: STRATA_AGENT_MOVE,
                node: node.into(),
                count: chunk.len() as u32,
                attempts,
                flags: if force { STRATA_AGENT_FORCE } else { 0 },
            };
            let rep = self.request(r, chunk)?;
            if rep.count as usize != chunk.len() {
                return Err(std::io::Error::other("the agent answered for another number of pages"));
            }
            let mut st = vec![0u8; chunk.len() * 4];
            self.read_all(&mut st)?;
            out.extend(st.chunks_exact(4).map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes"))));
        }
        Ok(out)
    }

    /// Sample `pages` (at most STRATA_AGENT_MAX_PAGES; those the agent cannot sample are
    /// skipped) until the next call, which returns the pages touched meanwhile, each with
    /// whether the touch was a write.
    pub fn sample(&mut self, pages: &[u64]) -> std::io::Result<Vec<(u64, bool)>> {
        let pages = &pages[..pages.len().min(STRATA_AGENT_MAX_PAGES)];
        let r = strata_agent_request_t {
            magic: STRATA_AGENT_MAGIC,
            op: STRATA_AGENT_SAMPLE,
            count: pages.len() as u32,
            ..Default::default()
        };
        let rep = self.request(r, pages)?;
        if rep.count as usize > STRATA_AGENT_MAX_PAGES {
            return Err(std::io::Error::other("the agent reported more touched pages than it can sample"));
        }
        let mut buf = vec![0u8; rep.count as usize * 8];
        self.read_all(&mut buf)?;
        Ok(buf
            .chunks_exact(8)
            .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
            .map(|e| (e & !4095, e & 1 == 1))
            .collect())
    }

    /// Drop `max` shadows (0: all); how many were.
    pub fn drop_shadows(&mut self, max: u32) -> std::io::Result<u32> {
        let r = strata_agent_request_t {
            magic: STRATA_AGENT_MAGIC,
            op: STRATA_AGENT_DROP_SHADOWS,
            count: max,
            ..Default::default()
        };
        Ok(self.request(r, &[])?.count)
    }
}

/// Whether an agent's error is its connection closed: its process exited or exec'd, which is
/// not worth a line (the next prune forgets it).
pub fn closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), BrokenPipe | ConnectionReset | UnexpectedEof)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};

    /// The agent tests run busy programs: one at a time, so each has the CPUs its assertions
    /// count on (a writer fast enough to make copies abort).
    static BUSY: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// tests/preload/hot_writer with `args` under libstrata, its agent taken as a daemon takes
    /// it: the program, its connection and its folder (removed at the end); None, saying why,
    /// where the program offers no agent.
    fn hot_writer_with_agent(name: &str, args: &[&str]) -> Option<(std::process::Child, UnixStream, PathBuf)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let (lib, writer) = (root.join("build/libstrata.so"), root.join("build/preload/hot_writer"));
        assert!(lib.exists() && writer.exists(), "run `make lib build/preload/hot_writer` first");
        let dir = std::env::temp_dir().join(format!("strata-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let mut child = Command::new(&writer)
            .args(args)
            .env("LD_PRELOAD", &lib)
            .env("STRATA_DAEMON_SOCKET", &sock)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut hello = String::new();
        std::io::BufReader::new(stream.try_clone().unwrap()).read_line(&mut hello).unwrap();
        if !hello.contains("\"agent\":true") {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("skipped: this process offers no agent here (Linux 6.8+ and a full userfaultfd needed): {hello}");
            return None;
        }
        (&stream).write_all(b"{\"agent\":true}\n").unwrap();
        Some((child, stream, dir))
    }

    /// The tracked objects of process `pid` once `ready` holds for them (2 s at most).
    fn objects_when(pid: u32, ready: impl Fn(&[strata_policy::ObjectObs]) -> bool) -> Vec<strata_policy::ObjectObs> {
        let mut objects = Vec::new();
        for _ in 0..100 {
            objects.clear();
            if let Ok(c) = stratad::channel::Channel::open(pid) {
                c.objects(&mut objects);
            }
            if ready(&objects) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        objects
    }

    /// A program under Strata offers its agent to a "daemon" (this test), which moves every page
    /// of the buffer the program keeps writing, five times over at least (forced: one node
    /// here); pages written while copied abort, and the program's own check of every byte at the
    /// end passes.
    #[test]
    fn an_agent_moves_a_written_buffer_transactionally_and_nothing_is_lost() {
        let _one = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        let Some((mut child, stream, dir)) = hot_writer_with_agent("agent", &["8", "4"]) else { return };
        let pid = child.id();
        // once it says where its buffer is, every page of it is there
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(first.starts_with("hot start"), "{first}");
        // the buffer: the largest tracked object
        let objects = objects_when(pid, |o| o.iter().any(|o| o.len >= 8 << 20));
        let o = objects.iter().max_by_key(|o| o.len).copied().expect("the buffer is tracked");
        // (the object is the usable size of its mapping, whole 4 MiB chunks; the buffer is 8 MiB)
        let pages: Vec<u64> = (o.addr..o.addr + (8 << 20)).step_by(4096).collect();
        let mut a = Agent::new(stream, Duration::from_secs(5));
        let mut moved = 0;
        // five passes, and more (for 2 s at most: the program writes for 4) until a copy has
        // aborted: whether the writer runs during a pass's few ms is the scheduler's choice,
        // and other tests may hold both CPUs meanwhile
        let start = std::time::Instant::now();
        for pass in 0.. {
            if pass >= 5 && (a.counters.aborts > 0 || start.elapsed() > Duration::from_secs(2)) {
                break;
            }
            let st = a.move_pages(&pages, 0, 3, true).unwrap();
            assert_eq!(st.len(), pages.len());
            let odd: std::collections::BTreeSet<i32> =
                st.iter().copied().filter(|&s| s != 0 && s != -libc::EAGAIN).collect();
            assert!(odd.is_empty(), "statuses other than moved and aborted: {odd:?}");
            moved += st.iter().filter(|&&s| s == 0).count();
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut out, &mut text).unwrap();
        let status = child.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(status.success() && text.contains("verified"), "{text}");
        // the program writes every page of it many times a millisecond: most copies abort
        assert!(moved > 0 && a.counters.commits == moved as u64 && a.counters.aborts > 0, "{moved} {:?}", a.counters);
    }

    /// The hint-fault tracker's half in the program: a program that only reads its hot buffer
    /// and never touches its cold one; samples of both, round after round: the hot pages are
    /// reported read (not written), the cold ones never, and the program's check of every byte
    /// at the end passes.
    #[test]
    fn an_agent_reports_which_sampled_pages_were_read_and_loses_nothing() {
        let _one = BUSY.lock().unwrap_or_else(|e| e.into_inner());
        // 8 MiB hot, read for 4 s; 16 MiB cold, written once
        let Some((mut child, stream, dir)) = hot_writer_with_agent("agent-sample", &["8", "4", "16", "read"]) else {
            return;
        };
        let pid = child.id();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("cold start") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the program ended early");
        }
        let objects = objects_when(pid, |o| o.iter().filter(|o| o.len >= 8 << 20).count() >= 2);
        let cold = objects.iter().find(|o| o.len >= 16 << 20).copied().expect("the cold buffer is tracked");
        let hot = objects.iter().find(|o| (8 << 20..16 << 20).contains(&o.len)).copied().expect("the hot buffer");
        let hot_pages: Vec<u64> = (hot.addr..hot.addr + (8 << 20)).step_by(8 * 4096).collect();
        let cold_pages: Vec<u64> = (cold.addr..cold.addr + (16 << 20)).step_by(16 * 4096).collect();
        let mut a = Agent::new(stream, Duration::from_secs(5));
        let (mut hot_reads, mut cold_touched, mut writes, mut rounds) = (0, 0, 0, 0);
        let pages: Vec<u64> = hot_pages.iter().chain(&cold_pages).copied().collect();
        // (the first two rounds' reports are not counted: the program writes its hot buffer
        // once after it prints its start lines, before it only reads)
        for _ in 0..12 {
            let touched = a.sample(&pages).unwrap();
            if rounds >= 2 {
                for (page, write) in &touched {
                    hot_reads += usize::from(hot_pages.contains(page) && !write);
                    cold_touched += usize::from(cold_pages.contains(page));
                    writes += usize::from(*write);
                }
            }
            rounds += 1;
            std::thread::sleep(Duration::from_millis(150));
        }
        let last = a.sample(&[]).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut out, &mut text).unwrap();
        let status = child.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(status.success() && text.contains("verified"), "{text}");
        // the hot buffer is read through in well under 150 ms: every sample of it is touched
        let want = hot_pages.len() * (rounds - 2);
        assert!(hot_reads + last.len() >= want * 9 / 10, "{hot_reads} of {want} hot samples seen read");
        assert_eq!((cold_touched, writes), (0, 0), "the cold buffer is never touched, nothing is written");
        assert!(a.counters.samples >= pages.len() as u64 * 9, "{:?}", a.counters);
    }

    /// A process's agent answers what the process chooses, so the daemon treats the bytes as
    /// untrusted: 5,000 replies, valid or mutated (random bytes, counts far off, cut short,
    /// bytes flipped), each played by a fake agent that then closes. Every call returns a status
    /// for each page asked, at most STRATA_AGENT_MAX_PAGES samples, or an error; none panics,
    /// allocates by a count it was told, or waits past the close.
    #[test]
    fn whatever_an_agent_answers_the_daemon_takes_in_bounds_or_refuses() {
        let mut x = strata_util::XorShift::new(0x6a09_e667_f3bc_c908);
        let max = STRATA_AGENT_MAX_PAGES;
        let (mut ok, mut refused) = (0, 0);
        for _ in 0..5000 {
            let op = x.below(3);
            let pages: Vec<u64> = (0..x.below(2 * max as u64 + 2)).map(|i| 0x7f00_0000_0000 + i * 4096).collect();
            // what a truthful agent would say to the first request
            let asked = match op {
                0 => pages.len().min(max),
                1 => x.below(max as u64 + 1) as usize,
                _ => x.below(4) as usize,
            };
            let mut head =
                strata_agent_reply_t { magic: STRATA_AGENT_MAGIC, count: asked as u32, ..Default::default() };
            head.counters.commits = x.next_u64();
            let item = if op == 1 { 8 } else { 4 };
            let mut reply = bytes_of(&head).to_vec();
            reply.extend((0..asked * item).map(|_| x.next_u64() as u8));
            match x.below(6) {
                0 => {} // as it is
                1 => reply = (0..x.below(256)).map(|_| x.next_u64() as u8).collect(),
                2 => {
                    // another count, its items following when it is not absurd
                    let far = [0, 1, max as u32 + 1, 2 * max as u32, u32::MAX, x.next_u64() as u32];
                    let far = far[x.below(far.len() as u64) as usize];
                    reply[4..8].copy_from_slice(&far.to_ne_bytes());
                    if far as usize <= 2 * max {
                        reply.resize(std::mem::size_of::<strata_agent_reply_t>() + far as usize * item, 7);
                    }
                }
                3 => reply.truncate(x.below(reply.len() as u64 + 1) as usize),
                4 => {
                    for _ in 0..1 + x.below(4) {
                        let at = x.below(reply.len() as u64) as usize;
                        reply[at] ^= 1 << x.below(8);
                    }
                }
                _ => reply.extend((0..x.below(64)).map(|_| x.next_u64() as u8)),
            }
            let (ours, theirs) = UnixStream::pair().unwrap();
            let fake = std::thread::spawn(move || {
                let mut theirs = theirs;
                let _ = theirs.write_all(&reply);
                let _ = theirs.shutdown(std::net::Shutdown::Write);
                let _ = std::io::copy(&mut theirs, &mut std::io::sink()); // the requests, to the end
            });
            let mut a = Agent::new(ours, Duration::from_secs(5));
            let fine = match op {
                0 => a.move_pages(&pages, 0, 3, false).map(|st| assert_eq!(st.len(), pages.len())).is_ok(),
                1 => a.sample(&pages).map(|t| assert!(t.len() <= max)).is_ok(),
                _ => a.drop_shadows(0).is_ok(),
            };
            drop(a); // closed: the fake agent's copy ends
            fake.join().unwrap();
            if fine {
                ok += 1;
            } else {
                refused += 1;
            }
        }
        // both ways were taken, many times
        assert!(ok > 500 && refused > 500, "{ok} taken, {refused} refused");
    }
}
