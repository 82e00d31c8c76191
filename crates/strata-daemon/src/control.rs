//! The daemon's control socket: one JSON request a line, one JSON reply a line.
//!
//! ```text
//! {"op":"hello","pid":1234}                  a process under Strata hands over its channel
//!                                            (the descriptor attached, SCM_RIGHTS; no reply)
//! {"op":"hello","pid":1234,"agent":true}     ... and offers an agent -> {"agent":true|false};
//!                                            kept, the connection carries the agent's requests
//! {"op":"status"}                            -> {"ok":true,"status":{...}}
//! {"op":"attach","pid":1234,"priority":10}   -> {"ok":true} (with "note":"..." when no tracker
//!                                                can see the process) or {"ok":false,"error":"..."}
//! {"op":"detach","pid":1234}
//! {"op":"reload"}                            re-read the configuration, as SIGHUP does
//! ```
//!
//! Anyone may connect (the socket is mode 0666), so that programs run by any user can announce
//! themselves and read the status, as `ps` would show it. What the kernel says of the peer
//! decides, never what it writes: a hello counts only from the process it names (SO_PEERCRED),
//! identified from then on by a pidfd ([`crate::pidfd`]); changing anything (attach, detach,
//! reload) takes root or membership of `daemon.socket_group`. The server runs on a thread of
//! its own, and each connection on one of its own; what needs the machine goes into the
//! daemon's [`Inbox`], which the loop empties between rounds, privileged requests first.
//!
//! Since anyone may connect, what one user can take is bounded (docs/security.md):
//! - a line of at most `MAX_LINE` bytes, arriving within `LINE_DEADLINE` (a longer one is
//!   answered with an error and the connection closed; a slower or idle one is closed);
//! - a reply written within `LINE_DEADLINE`, else the connection is closed;
//! - `MAX_PER_USER` connections a user, `MAX_CLIENTS` for all unprivileged users together, and
//!   `MAX_PRIVILEGED` more kept for root and the socket's group;
//! - `MAX_HELLOS` hellos waiting for the loop, `MAX_HELLOS_PER_USER` of one user's, one a
//!   process (a newer one replaces it);
//! - a privileged request not taken up by the loop within `ASK_DEADLINE` is withdrawn and said
//!   so; it is never applied later.
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_sys::{STRATA_PRIORITY_MAX, STRATA_PRIORITY_MIN};

use crate::pidfd::{peer_cred, Identity};
use crate::status::DaemonStatus;
use stratad::Error;

/// The longest request line: requests are a few dozen bytes.
pub const MAX_LINE: usize = 64 << 10;
/// Unprivileged connections served at once, all users together, each on a thread of its own
/// (agents' connections, once handed to the daemon's loop, no longer count).
pub const MAX_CLIENTS: usize = 256;
/// Connections one unprivileged user may hold at once.
pub const MAX_PER_USER: usize = 32;
/// Connections kept for root and the socket's group, whatever other users hold.
pub const MAX_PRIVILEGED: usize = 64;
/// Hellos waiting for the daemon's loop, of every user and of one.
pub const MAX_HELLOS: usize = 4096;
pub const MAX_HELLOS_PER_USER: usize = 256;
/// A line must arrive, and a reply be taken, within this.
pub const LINE_DEADLINE: Duration = Duration::from_secs(10);
/// A privileged request the loop has not taken up by then is withdrawn.
pub const ASK_DEADLINE: Duration = Duration::from_secs(10);

/// A request on the socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    Hello {
        pid: u32,
        /// the process offers an agent (it can move its pages transactionally)
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        agent: bool,
    },
    Status {},
    Attach {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<i32>,
    },
    Detach {
        pid: u32,
    },
    Reload,
}

/// The reply to every request but hello.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// done, but the client should know something (an attached process no tracker can see)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<DaemonStatus>>,
}

/// A privileged request's outcome: done (with a note for the client, or none), or refused.
pub type Outcome = Result<Option<String>, String>;

impl Reply {
    fn done(r: Outcome) -> Reply {
        match r {
            Ok(note) => Reply { ok: true, note, ..Reply::default() },
            Err(e) => Reply { ok: false, error: Some(e), ..Reply::default() },
        }
    }
}

/// A privileged request's way back: the loop takes it up once, or the server withdraws it
/// once its deadline has passed, never both.
pub struct Ticket {
    state: Arc<AtomicU8>,
    reply: Sender<Outcome>,
}

const PENDING: u8 = 0;
const TAKEN: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Ticket {
    /// The loop takes the request up: false when it was withdrawn (then it must not be applied).
    pub fn take(&self) -> bool {
        self.state.compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    pub fn answer(self, r: Outcome) {
        let _ = self.reply.send(r);
    }
}

/// What the daemon's loop is asked to do.
pub enum Command {
    /// a process under Strata, with the channel it handed over and, if the daemon took it, its
    /// agent's connection
    Hello { who: Identity, channel: Option<File>, agent: Option<UnixStream> },
    /// attach, detach or reload, from root or the socket's group
    Ask { request: Request, ticket: Ticket },
}

/// The requests waiting for the daemon's loop: privileged ones first, then hellos (bounded,
/// one a process).
pub struct Inbox {
    queue: Mutex<Queues>,
    ready: Condvar,
    max_hellos: usize,
    max_per_user: usize,
}

#[derive(Default)]
struct Queues {
    asks: VecDeque<Command>,
    /// each with the uid of the user whose process said it
    hellos: VecDeque<(u32, Command)>,
}

impl Inbox {
    pub fn new() -> Arc<Inbox> {
        Inbox::bounded(MAX_HELLOS, MAX_HELLOS_PER_USER)
    }

    fn bounded(max_hellos: usize, max_per_user: usize) -> Arc<Inbox> {
        Arc::new(Inbox { queue: Mutex::new(Queues::default()), ready: Condvar::new(), max_hellos, max_per_user })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A hello from a process of user `uid`: replaces one waiting from the same process;
    /// refused (false) when as many wait already as may, of everyone's or of this user's.
    fn hello(&self, uid: u32, cmd: Command) -> bool {
        let Command::Hello { who, .. } = &cmd else { return false };
        let pid = who.pid;
        let mut q = self.lock();
        let same = q.hellos.iter().position(|(_, c)| matches!(c, Command::Hello { who, .. } if who.pid == pid));
        match same {
            Some(i) => q.hellos[i] = (uid, cmd),
            None if q.hellos.len() >= self.max_hellos => return false,
            None if q.hellos.iter().filter(|(u, _)| *u == uid).count() >= self.max_per_user => return false,
            None => q.hellos.push_back((uid, cmd)),
        }
        self.ready.notify_one();
        true
    }

    fn ask(&self, cmd: Command) {
        self.lock().asks.push_back(cmd);
        self.ready.notify_one();
    }

    /// The next request, privileged ones first, waiting up to `wait` for one.
    pub fn next(&self, wait: Duration) -> Option<Command> {
        let mut q = self.lock();
        if q.asks.is_empty() && q.hellos.is_empty() {
            q = self.ready.wait_timeout(q, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
        q.asks.pop_front().or_else(|| q.hellos.pop_front().map(|(_, c)| c))
    }

    /// Requests waiting now (hellos, privileged).
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        let q = self.lock();
        (q.hellos.len(), q.asks.len())
    }
}

/// The listening socket; removed when dropped.
pub struct Server {
    path: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The gid of a group by name.
fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then(|| f.nth(1)?.parse().ok())?
    })
}

/// The groups of the peer as they were when it connected (SO_PEERGROUPS).
fn peer_groups(stream: &UnixStream) -> Vec<u32> {
    let mut gids = vec![0u32; 256];
    let mut len = (gids.len() * 4) as libc::socklen_t;
    // SAFETY: gids has len bytes
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            gids.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    gids.truncate(if rc == 0 { len as usize / 4 } else { 0 });
    gids
}

/// Who a connection is: its uid, and whether it may change things (root or the group).
fn peer(stream: &UnixStream, group: Option<u32>) -> Option<(u32, bool)> {
    let cred = peer_cred(stream)?;
    let privileged = cred.uid == 0 || group.is_some_and(|g| cred.gid == g || peer_groups(stream).contains(&g));
    Some((cred.uid, privileged))
}

/// Connections held now: per unprivileged user, all unprivileged, privileged.
#[derive(Default)]
struct Held {
    per_user: HashMap<u32, usize>,
    unprivileged: usize,
    privileged: usize,
}

impl Held {
    /// Count one more connection of `uid`, or say why not.
    fn take(&mut self, uid: u32, privileged: bool) -> Result<(), String> {
        if privileged {
            if self.privileged >= MAX_PRIVILEGED {
                return Err(format!("too many connections ({MAX_PRIVILEGED} privileged at once); try again"));
            }
            self.privileged += 1;
            return Ok(());
        }
        let mine = self.per_user.entry(uid).or_default();
        if *mine >= MAX_PER_USER {
            return Err(format!("too many connections ({MAX_PER_USER} a user at once); try again"));
        }
        if self.unprivileged >= MAX_CLIENTS {
            return Err(format!("too many connections ({MAX_CLIENTS} at once); try again"));
        }
        *mine += 1;
        self.unprivileged += 1;
        Ok(())
    }

    fn give_back(&mut self, uid: u32, privileged: bool) {
        if privileged {
            self.privileged -= 1;
            return;
        }
        self.unprivileged -= 1;
        if let Some(n) = self.per_user.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&uid);
            }
        }
    }
}

/// What every connection's thread shares.
struct Shared {
    group: Option<u32>,
    inbox: Arc<Inbox>,
    status: Arc<Mutex<Option<DaemonStatus>>>,
    wants_agents: Arc<AtomicBool>,
    held: Mutex<Held>,
}

impl Server {
    /// Listen on `path`. A socket a live daemon answers on is refused (one daemon a machine);
    /// a stale one, left by a daemon that was killed, is replaced.
    pub fn start(
        path: &Path,
        group: Option<&str>,
        inbox: Arc<Inbox>,
        status: Arc<Mutex<Option<DaemonStatus>>>,
        wants_agents: Arc<AtomicBool>,
    ) -> Result<Server, Error> {
        let fail =
            |what: &str, e: std::io::Error| Error::Machine(format!("control socket {}: {what}: {e}", path.display()));
        if UnixStream::connect(path).is_ok() {
            return Err(Error::Machine(format!(
                "control socket {}: another daemon is running (stop it first, or give this one another socket)",
                path.display()
            )));
        }
        let gid = match group {
            Some(g) => Some(group_id(g).ok_or_else(|| Error::Config(format!("daemon.socket_group: no group '{g}'")))?),
            None => None,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail("creating its folder", e))?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| fail("bind", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(|e| fail("chmod", e))?;
        let shared = Arc::new(Shared { group: gid, inbox, status, wants_agents, held: Mutex::new(Held::default()) });
        std::thread::Builder::new()
            .name("stratad-control".into())
            .spawn(move || {
                for mut stream in listener.incoming().flatten() {
                    let _ = stream.set_write_timeout(Some(LINE_DEADLINE));
                    let Some((uid, privileged)) = peer(&stream, shared.group) else { continue };
                    let taken = shared.held.lock().unwrap_or_else(|e| e.into_inner()).take(uid, privileged);
                    if let Err(why) = taken {
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ = stream.write_all(&reply_line(&Reply::done(Err(why))));
                        continue;
                    }
                    let shared2 = Arc::clone(&shared);
                    // a thread a connection: a slow client holds up no one else
                    let spawned = std::thread::Builder::new().name("stratad-client".into()).spawn(move || {
                        serve(stream, uid, privileged, &shared2);
                        shared2.held.lock().unwrap_or_else(|e| e.into_inner()).give_back(uid, privileged);
                    });
                    if spawned.is_err() {
                        shared.held.lock().unwrap_or_else(|e| e.into_inner()).give_back(uid, privileged);
                    }
                }
            })
            .map_err(|e| fail("its thread", e))?;
        Ok(Server { path: path.to_path_buf() })
    }
}

/// A reply as the line that carries it.
fn reply_line(r: &Reply) -> Vec<u8> {
    let mut text = serde_json::to_vec(r).expect("a reply serializes");
    text.push(b'\n');
    text
}

/// One connection's input: its bytes, and the descriptors passed with them (SCM_RIGHTS).
struct Input {
    stream: UnixStream,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Input {
    /// recvmsg: bytes into `buf`, descriptors passed with them into `fds` (closed on exec).
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // room for one descriptor (CMSG_SPACE of an int): the kernel closes any more a peer
        // sends, so no connection can fill the daemon's table, even for a moment
        let mut ctl = [0u64; 3];
        // SAFETY: a zeroed msghdr is valid; its pointers are set below to live buffers
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&ctl);
        // SAFETY: msg points to buffers that outlive the call
        let n = unsafe { libc::recvmsg(self.stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the control messages are the kernel's, within msg_controllen
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c) as *const libc::c_int;
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<libc::c_int>();
                    for k in 0..count {
                        self.fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        self.fds.truncate(1); // one channel a hello
        Ok(n as usize)
    }

    /// The next line, without its newline, arriving within `LINE_DEADLINE`: None at the end of
    /// the connection, on an error or past the deadline; Some(Err) for a line over `MAX_LINE`
    /// bytes (what follows it cannot be trusted to be a line).
    fn line(&mut self) -> Option<Result<Vec<u8>, String>> {
        let deadline = Instant::now() + LINE_DEADLINE;
        let mut chunk = [0u8; 4096];
        loop {
            let newline = self.buf.iter().position(|&b| b == b'\n');
            if newline.unwrap_or(self.buf.len()) > MAX_LINE {
                return Some(Err(format!("bad request: a line of over {MAX_LINE} bytes")));
            }
            if let Some(i) = newline {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                return Some(Ok(line));
            }
            if self.buf.len() > MAX_LINE {
                return Some(Err(format!("bad request: a line of over {MAX_LINE} bytes")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
                return None;
            }
            match self.recv(&mut chunk) {
                Ok(0) if self.buf.is_empty() => return None,
                Ok(0) => return Some(Ok(std::mem::take(&mut self.buf))), // the last line, without a newline
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }
}

/// Answer one connection's requests (from user `uid`) until it closes (or becomes an agent's).
fn serve(stream: UnixStream, uid: u32, privileged: bool, shared: &Shared) {
    let Ok(mut out) = stream.try_clone() else { return };
    let mut input = Input { stream, buf: Vec::new(), fds: Vec::new() };
    while let Some(line) = input.line() {
        let line = match line {
            Ok(l) => l,
            Err(why) => {
                let _ = out.write_all(&reply_line(&Reply::done(Err(why))));
                return;
            }
        };
        if line.trim_ascii().is_empty() {
            continue;
        }
        let reply = match serde_json::from_slice::<Request>(&line) {
            Err(e) => Reply::done(Err(format!("bad request: {e}"))),
            Ok(Request::Hello { pid, agent }) => {
                let channel = input.fds.pop().map(File::from);
                let Ok(who) = Identity::of_peer(&out, pid) else {
                    // not the process it names, or gone: nothing is taken
                    if agent {
                        let _ = out.write_all(b"{\"agent\":false}\n");
                    }
                    return;
                };
                if !agent {
                    shared.inbox.hello(uid, Command::Hello { who, channel, agent: None });
                    return; // one hello a connection
                }
                let want = shared.wants_agents.load(Ordering::Relaxed);
                let _ = out.write_all(if want { b"{\"agent\":true}\n" } else { b"{\"agent\":false}\n" });
                let agent = want.then(|| out.try_clone().ok()).flatten();
                shared.inbox.hello(uid, Command::Hello { who, channel, agent });
                return; // one hello a connection
            }
            Ok(Request::Status {}) => match shared.status.lock().map(|s| s.clone()) {
                Ok(Some(mut s)) => {
                    // a process's heat (where and when it writes) only to root and its owner
                    for p in s.processes.iter_mut().filter(|p| uid != 0 && p.process.ids.uid != Some(uid)) {
                        p.heat = None;
                    }
                    Reply { ok: true, status: Some(Box::new(s)), ..Reply::default() }
                }
                _ => Reply::done(Err("the daemon has not finished its first round".into())),
            },
            Ok(_) if !privileged => {
                Reply::done(Err("not allowed: attach, detach and reload take root or the daemon's socket group".into()))
            }
            Ok(Request::Attach { priority: Some(p), .. })
                if !(STRATA_PRIORITY_MIN..=STRATA_PRIORITY_MAX).contains(&p) =>
            {
                Reply::done(Err(format!("priority {p} is outside {STRATA_PRIORITY_MIN}..{STRATA_PRIORITY_MAX}")))
            }
            Ok(r) => Reply::done(ask(&shared.inbox, r)),
        };
        if out.write_all(&reply_line(&reply)).is_err() {
            return;
        }
    }
}

/// Hand a privileged request to the daemon's loop and wait for its outcome; withdrawn, and
/// said so, if the loop has not taken it up within `ASK_DEADLINE`.
fn ask(inbox: &Inbox, request: Request) -> Outcome {
    let (tx, rx) = mpsc::channel::<Outcome>();
    let state = Arc::new(AtomicU8::new(PENDING));
    inbox.ask(Command::Ask { request, ticket: Ticket { state: Arc::clone(&state), reply: tx } });
    match rx.recv_timeout(ASK_DEADLINE) {
        Ok(r) => r,
        Err(_) if state.compare_exchange(PENDING, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire).is_ok() => Err(
            format!("the daemon did not take the request up within {} s; it was not applied", ASK_DEADLINE.as_secs()),
        ),
        // taken up just now: its outcome is on its way
        Err(_) => rx.recv().unwrap_or_else(|_| Err("the daemon is stopping".into())),
    }
}

/// The status of the daemon answering on `socket`, if one does.
pub fn daemon_status(socket: &Path) -> Option<DaemonStatus> {
    request(socket, &Request::Status {}).ok().and_then(|r| r.status).map(|s| *s)
}

/// A client: send `r` to the daemon at `path` and read its reply.
pub fn request(path: &Path, r: &Request) -> Result<Reply, String> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| format!("no daemon answers at {} ({e}); start one with `strata daemon`", path.display()))?;
    let _ = s.set_read_timeout(Some(ASK_DEADLINE + Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(LINE_DEADLINE));
    let mut line = serde_json::to_string(r).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&reply).map_err(|e| format!("{}: a reply that does not parse ({e}): {reply}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn requests_read_as_documented_and_anything_else_is_refused() {
        let r: Request = serde_json::from_str(r#"{"op":"hello","pid":12}"#).unwrap();
        assert_eq!(r, Request::Hello { pid: 12, agent: false });
        let r: Request = serde_json::from_str(r#"{"op":"hello","pid":12,"agent":true}"#).unwrap();
        assert_eq!(r, Request::Hello { pid: 12, agent: true });
        let r: Request = serde_json::from_str(r#"{"op":"attach","pid":7,"priority":-10}"#).unwrap();
        assert_eq!(r, Request::Attach { pid: 7, priority: Some(-10) });
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"attach","pid":7}"#).unwrap(),
            Request::Attach { pid: 7, priority: None }
        );
        // the control buffer Input::recv gives recvmsg holds one descriptor and no more
        assert_eq!(unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) }, 24);
        for bad in [r#"{"op":"explode"}"#, r#"{"op":"hello"}"#, r#"{"op":"status","x":1}"#, "hello", r#"{"pid":1}"#] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_server_answers_status_hands_changes_to_the_loop_and_refuses_a_second_one() {
        let dir = std::env::temp_dir().join(format!("strata-control-{}", std::process::id()));
        let path = dir.join("sock");
        let inbox = Inbox::new();
        let status = Arc::new(Mutex::new(None));
        let server =
            Server::start(&path, None, Arc::clone(&inbox), Arc::clone(&status), Arc::new(AtomicBool::new(false)))
                .unwrap();
        let r = request(&path, &Request::Status {}).unwrap();
        assert!(!r.ok && r.error.unwrap().contains("first round"));
        *status.lock().unwrap() = Some(DaemonStatus::default());
        assert!(request(&path, &Request::Status {}).unwrap().status.is_some());
        // the loop's side: answer an attach
        let loop_ = std::thread::spawn(move || match inbox.next(Duration::from_secs(30)) {
            Some(Command::Ask { request: Request::Attach { pid, priority }, ticket }) => {
                assert!(ticket.take());
                ticket.answer(if pid == 1 { Ok(None) } else { Err(format!("no process {pid}")) });
                assert_eq!(priority, Some(10));
            }
            _ => panic!("expected an attach"),
        });
        let root = unsafe { libc::geteuid() } == 0;
        let r = request(&path, &Request::Attach { pid: 1, priority: Some(10) }).unwrap();
        if root {
            assert!(r.ok, "{r:?}");
            loop_.join().unwrap();
        } else {
            assert!(r.error.unwrap().contains("not allowed"));
        }
        // a garbled line gets an error, and the connection goes on
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"nonsense\n{\"op\":\"status\"}\n").unwrap();
        let mut lines = BufReader::new(s).lines();
        assert!(lines.next().unwrap().unwrap().contains("bad request"));
        assert!(lines.next().unwrap().unwrap().contains("\"ok\":true"));
        let e = Server::start(&path, None, Inbox::new(), Arc::new(Mutex::new(None)), Arc::new(AtomicBool::new(false)))
            .err()
            .unwrap();
        assert!(e.to_string().contains("another daemon"), "{e}");
        drop(server);
        assert!(!path.exists(), "the socket goes with the server");
        assert!(request(&path, &Request::Status {}).unwrap_err().contains("no daemon answers"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A server on a socket of its own for one test, with a status to give and a loop that
    /// answers every attach, detach and reload at once: "the daemon is stopping".
    fn lone_server(name: &str) -> (Server, PathBuf) {
        let dir = std::env::temp_dir().join(format!("strata-control-{name}-{}", std::process::id()));
        let path = dir.join("sock");
        let inbox = Inbox::new();
        let status = Arc::new(Mutex::new(Some(DaemonStatus::default())));
        let server = Server::start(&path, None, Arc::clone(&inbox), status, Arc::new(AtomicBool::new(false))).unwrap();
        std::thread::spawn(move || loop {
            if let Some(Command::Ask { ticket, .. }) = inbox.next(Duration::from_secs(1)) {
                if ticket.take() {
                    ticket.answer(Err("the daemon is stopping".into()));
                }
            }
        });
        (server, path)
    }

    #[test]
    fn what_one_client_can_take_is_bounded() {
        let (server, path) = lone_server("bounds");
        // a line longer than MAX_LINE: an error, and the connection is closed
        let mut s = UnixStream::connect(&path).unwrap();
        let long = vec![b'x'; MAX_LINE + 10];
        let writer = {
            let mut s = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let _ = s.write_all(&long);
                let _ = s.write_all(b"\n{\"op\":\"status\"}\n");
            })
        };
        let mut replies = String::new();
        let _ = s.read_to_string(&mut replies);
        writer.join().unwrap();
        assert_eq!(replies.lines().count(), 1, "{replies}");
        assert!(replies.contains("a line of over"), "{replies}");
        // as many connections held open as this user may hold: the next one is told so, and
        // once they close a new one is served
        let limit = if unsafe { libc::geteuid() } == 0 { MAX_PRIVILEGED } else { MAX_PER_USER };
        let held: Vec<UnixStream> = (0..limit).map(|_| UnixStream::connect(&path).unwrap()).collect();
        let mut reply = String::new();
        BufReader::new(UnixStream::connect(&path).unwrap()).read_line(&mut reply).unwrap();
        assert!(reply.contains("too many connections"), "{reply}");
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while request(&path, &Request::Status {}).map_or(true, |r| !r.ok) {
            assert!(std::time::Instant::now() < deadline, "the server did not take connections again");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(server);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// The review's rows 1.10 and 1.13: hellos are bounded and one a process, privileged
    /// requests pass them, and a request withdrawn at its deadline is never applied.
    #[test]
    fn the_inbox_is_bounded_serves_root_first_and_never_applies_a_withdrawn_request() {
        let inbox = Inbox::new();
        let me = std::process::id();
        for _ in 0..3 {
            assert!(inbox.hello(0, Command::Hello { who: Identity::of(me).unwrap(), channel: None, agent: None }));
        }
        assert_eq!(inbox.len(), (1, 0), "one hello a process");
        let (tx, rx) = mpsc::channel();
        let state = Arc::new(AtomicU8::new(PENDING));
        inbox.ask(Command::Ask { request: Request::Reload, ticket: Ticket { state: Arc::clone(&state), reply: tx } });
        assert!(matches!(inbox.next(Duration::ZERO), Some(Command::Ask { .. })), "privileged first");
        assert!(matches!(inbox.next(Duration::ZERO), Some(Command::Hello { .. })));
        assert!(inbox.next(Duration::from_millis(10)).is_none());
        drop(rx);
        // withdrawn by the server: the loop must not take it
        let (tx, _rx) = mpsc::channel();
        let t = Ticket { state: Arc::new(AtomicU8::new(WITHDRAWN)), reply: tx };
        assert!(!t.take());
        // a hello queue at its bounds refuses more: one user's, then everyone's
        let mut children: Vec<_> =
            (0..4).map(|_| std::process::Command::new("sleep").arg("30").spawn().unwrap()).collect();
        let hello = |pid: u32| Command::Hello { who: Identity::of(pid).unwrap(), channel: None, agent: None };
        let small = Inbox::bounded(4, 2);
        assert!(small.hello(7, hello(children[0].id())) && small.hello(7, hello(children[1].id())));
        assert!(!small.hello(7, hello(children[2].id())), "a third of user 7's");
        assert!(small.hello(8, hello(children[2].id())) && small.hello(9, hello(children[3].id())));
        assert!(!small.hello(10, hello(me)), "a fifth of everyone's");
        assert_eq!(small.len(), (4, 0));
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Fuzzing the socket, which anyone may write to: mutated requests, random bytes and
    /// invalid UTF-8 get at most one reply a line, each a JSON object, and the server goes on.
    #[test]
    fn any_bytes_on_the_socket_get_json_replies_and_the_server_goes_on() {
        let (server, path) = lone_server("fuzz");
        // (hellos end their connection: one a connection, below)
        let valid: &[&[u8]] = &[
            br#"{"op":"status"}"#,
            br#"{"op":"attach","pid":7,"priority":-10}"#,
            br#"{"op":"detach","pid":7}"#,
            br#"{"op":"reload"}"#,
        ];
        let mut x = strata_util::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut below = |n: usize| x.below(n as u64) as usize;
        let (mut input, mut lines) = (Vec::new(), 0);
        for _ in 0..3000 {
            let mut l = valid[below(valid.len())].to_vec();
            for _ in 0..below(4) {
                let i = below(l.len() + 1);
                match below(4) {
                    0 if i < l.len() => l[i] = below(256) as u8,
                    1 if i < l.len() => l[i] = b"{}[]:,\"0123456789-e."[below(20)],
                    2 => l.truncate(i),
                    _ => l.insert(i, below(256) as u8),
                }
            }
            l.retain(|&b| b != b'\n');
            input.extend_from_slice(&l);
            input.push(b'\n');
            lines += 1;
        }
        let mut s = UnixStream::connect(&path).unwrap();
        let reader = {
            let s = s.try_clone().unwrap();
            std::thread::spawn(move || BufReader::new(s).lines().map(Result::unwrap).collect::<Vec<String>>())
        };
        s.write_all(&input).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let replies = reader.join().unwrap();
        assert!(!replies.is_empty() && replies.len() <= lines, "{} replies to {lines} lines", replies.len());
        for r in &replies {
            let v: serde_json::Value = serde_json::from_str(r).unwrap_or_else(|e| panic!("{e}: {r}"));
            assert!(v.get("ok").is_some() || v.get("agent").is_some(), "{r}");
        }
        assert!(request(&path, &Request::Status {}).unwrap().ok, "the server goes on");
        drop(server);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
