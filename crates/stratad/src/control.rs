//! The daemon's control socket: one JSON request a line, one JSON reply a line.
//!
//! ```text
//! {"op":"hello","pid":1234}                  a process under Strata made its channel (no reply)
//! {"op":"hello","pid":1234,"agent":true}     ... and offers an agent -> {"agent":true|false};
//!                                            kept, the connection carries the agent's requests
//! {"op":"status"}                            -> {"ok":true,"status":{...}}
//! {"op":"attach","pid":1234,"priority":10}   -> {"ok":true} or {"ok":false,"error":"..."}
//! {"op":"detach","pid":1234}
//! {"op":"reload"}                            re-read the configuration, as SIGHUP does
//! ```
//!
//! Anyone may connect (the socket is mode 0666), so that programs run by any user can announce
//! themselves and read the status, as `ps` would show it. Changing anything (attach, detach,
//! reload) takes root or membership of `daemon.socket_group`, checked on the peer's
//! credentials. The server runs on a thread of its own, and each connection on one of its own;
//! what needs the machine is handed to the daemon's loop, which answers between rounds (within
//! 50 ms). Since anyone may connect, what a client can take is bounded: a line of at most
//! `MAX_LINE` bytes (a longer one is answered with an error and the connection closed), and
//! `MAX_CLIENTS` connections at once (more are told so and closed).
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::status::DaemonStatus;
use crate::Error;

/// The longest request line: requests are a few dozen bytes.
pub const MAX_LINE: usize = 64 << 10;
/// Connections served at once, each on a thread of its own (agents' connections, once handed
/// to the daemon's loop, no longer count).
pub const MAX_CLIENTS: usize = 256;

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<DaemonStatus>>,
}

impl Reply {
    fn done(r: Result<(), String>) -> Reply {
        match r {
            Ok(()) => Reply { ok: true, ..Reply::default() },
            Err(e) => Reply { ok: false, error: Some(e), ..Reply::default() },
        }
    }
}

/// What the daemon's loop is asked to do; `reply` takes the outcome.
pub enum Command {
    Hello(u32),
    /// a process's agent, on the connection it said hello on
    Agent(u32, UnixStream),
    Attach {
        pid: u32,
        priority: Option<i32>,
        reply: Sender<Result<(), String>>,
    },
    Detach {
        pid: u32,
        reply: Sender<Result<(), String>>,
    },
    Reload {
        reply: Sender<Result<(), String>>,
    },
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

/// The peer's uid and every gid it has (from /proc/PID/status, as SO_PEERCRED gives only the
/// primary one).
fn peer(stream: &UnixStream) -> Option<(u32, Vec<u32>)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    use std::os::fd::AsRawFd;
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
    if rc != 0 {
        return None;
    }
    let mut gids = vec![cred.gid];
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", cred.pid)) {
        if let Some(line) = s.lines().find_map(|l| l.strip_prefix("Groups:")) {
            gids.extend(line.split_whitespace().filter_map(|g| g.parse::<u32>().ok()));
        }
    }
    Some((cred.uid, gids))
}

impl Server {
    /// Listen on `path`. A socket a live daemon answers on is refused (one daemon a machine);
    /// a stale one, left by a daemon that was killed, is replaced.
    pub fn start(
        path: &Path,
        group: Option<&str>,
        commands: Sender<Command>,
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
        std::thread::Builder::new()
            .name("stratad-control".into())
            .spawn(move || {
                let clients = Arc::new(AtomicUsize::new(0));
                for mut stream in listener.incoming().flatten() {
                    if clients.fetch_add(1, Ordering::Relaxed) >= MAX_CLIENTS {
                        clients.fetch_sub(1, Ordering::Relaxed);
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ = stream.write_all(&reply_line(&Reply::done(Err(format!(
                            "too many connections ({MAX_CLIENTS} at once); try again"
                        )))));
                        continue;
                    }
                    let (commands, status, agents) = (commands.clone(), Arc::clone(&status), Arc::clone(&wants_agents));
                    let count = Arc::clone(&clients);
                    // a thread a connection: a slow client holds up no one else
                    let spawned = std::thread::Builder::new().name("stratad-client".into()).spawn(move || {
                        serve(stream, gid, &commands, &status, &agents);
                        count.fetch_sub(1, Ordering::Relaxed);
                    });
                    if spawned.is_err() {
                        clients.fetch_sub(1, Ordering::Relaxed);
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

/// The next line of a connection, without its newline: None at its end (or on an error),
/// Some(Err) for a line over `MAX_LINE` bytes (what follows it cannot be trusted to be a line).
fn next_line(r: &mut impl BufRead) -> Option<Result<Vec<u8>, String>> {
    let mut line = Vec::new();
    match r.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) if line.last() == Some(&b'\n') => {
            line.pop();
            Some(Ok(line))
        }
        Ok(n) if n > MAX_LINE => Some(Err(format!("bad request: a line of over {MAX_LINE} bytes"))),
        Ok(_) => Some(Ok(line)), // the last line, without a newline
    }
}

/// Answer one connection's requests until it closes (or becomes an agent's).
fn serve(
    stream: UnixStream,
    group: Option<u32>,
    commands: &Sender<Command>,
    status: &Mutex<Option<DaemonStatus>>,
    wants_agents: &AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut out) = stream.try_clone() else { return };
    let peer = peer(&stream);
    let privileged = peer.as_ref().is_some_and(|(uid, gids)| *uid == 0 || group.is_some_and(|g| gids.contains(&g)));
    let mut input = BufReader::new(stream);
    while let Some(line) = next_line(&mut input) {
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
            Ok(Request::Hello { pid, agent: false }) => {
                let _ = commands.send(Command::Hello(pid));
                continue;
            }
            Ok(Request::Hello { pid, agent: true }) => {
                // an agent is the process's own: only the process (or root) may hand it over
                let own = peer.as_ref().is_some_and(|(uid, _)| *uid == 0 || crate::linux::owner(pid) == Some(*uid));
                let want = own && wants_agents.load(Ordering::Relaxed);
                let _ = out.write_all(if want { b"{\"agent\":true}\n" } else { b"{\"agent\":false}\n" });
                if want {
                    let _ = out.set_read_timeout(None);
                    let _ = commands.send(Command::Agent(pid, out));
                    return;
                }
                let _ = commands.send(Command::Hello(pid));
                continue;
            }
            Ok(Request::Status {}) => match status.lock().map(|s| s.clone()) {
                Ok(Some(s)) => Reply { ok: true, status: Some(Box::new(s)), ..Reply::default() },
                _ => Reply::done(Err("the daemon has not finished its first round".into())),
            },
            Ok(_) if !privileged => {
                Reply::done(Err("not allowed: attach, detach and reload take root or the daemon's socket group".into()))
            }
            Ok(r) => Reply::done(ask(commands, r)),
        };
        if out.write_all(&reply_line(&reply)).is_err() {
            return;
        }
    }
}

/// Hand a request to the daemon's loop and wait for its outcome.
fn ask(commands: &Sender<Command>, r: Request) -> Result<(), String> {
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    let cmd = match r {
        Request::Attach { pid, priority } => Command::Attach { pid, priority, reply: tx },
        Request::Detach { pid } => Command::Detach { pid, reply: tx },
        Request::Reload => Command::Reload { reply: tx },
        Request::Hello { .. } | Request::Status {} => unreachable!("answered by the server"),
    };
    commands.send(cmd).map_err(|_| "the daemon is stopping".to_string())?;
    rx.recv_timeout(Duration::from_secs(30)).map_err(|_| "the daemon did not answer".to_string())?
}

/// A client: send `r` to the daemon at `path` and read its reply.
pub fn request(path: &Path, r: &Request) -> Result<Reply, String> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| format!("no daemon answers at {} ({e}); start one with `strata daemon`", path.display()))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(40)));
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
        for bad in [r#"{"op":"explode"}"#, r#"{"op":"hello"}"#, r#"{"op":"status","x":1}"#, "hello", r#"{"pid":1}"#] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_server_answers_status_hands_changes_to_the_loop_and_refuses_a_second_one() {
        let dir = std::env::temp_dir().join(format!("strata-control-{}", std::process::id()));
        let path = dir.join("sock");
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(None));
        let server = Server::start(&path, None, tx, Arc::clone(&status), Arc::new(AtomicBool::new(false))).unwrap();
        let r = request(&path, &Request::Status {}).unwrap();
        assert!(!r.ok && r.error.unwrap().contains("first round"));
        *status.lock().unwrap() = Some(DaemonStatus::default());
        assert!(request(&path, &Request::Status {}).unwrap().status.is_some());
        // the loop's side: answer an attach
        let loop_ = std::thread::spawn(move || match rx.recv().unwrap() {
            Command::Attach { pid, priority, reply } => {
                reply.send(if pid == 1 { Ok(()) } else { Err(format!("no process {pid}")) }).unwrap();
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
        let (tx2, _rx2) = mpsc::channel();
        let e = Server::start(&path, None, tx2, Arc::new(Mutex::new(None)), Arc::new(AtomicBool::new(false)))
            .err()
            .unwrap();
        assert!(e.to_string().contains("another daemon"), "{e}");
        drop(server);
        assert!(!path.exists(), "the socket goes with the server");
        assert!(request(&path, &Request::Status {}).unwrap_err().contains("no daemon answers"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A server on a socket of its own for one test, whose loop has stopped (attach, detach
    /// and reload are answered at once: "the daemon is stopping"), with a status to give.
    fn lone_server(name: &str) -> (Server, PathBuf) {
        let dir = std::env::temp_dir().join(format!("strata-control-{name}-{}", std::process::id()));
        let path = dir.join("sock");
        let (tx, _) = mpsc::channel();
        let status = Arc::new(Mutex::new(Some(DaemonStatus::default())));
        (Server::start(&path, None, tx, status, Arc::new(AtomicBool::new(false))).unwrap(), path)
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
        // MAX_CLIENTS connections held open: the next one is told so, and once they close a
        // new one is served
        let held: Vec<UnixStream> = (0..MAX_CLIENTS).map(|_| UnixStream::connect(&path).unwrap()).collect();
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

    /// Fuzzing the socket, which anyone may write to: mutated requests, random bytes and
    /// invalid UTF-8 get at most one reply a line, each a JSON object, and the server goes on.
    #[test]
    fn any_bytes_on_the_socket_get_json_replies_and_the_server_goes_on() {
        let (server, path) = lone_server("fuzz");
        let valid: &[&[u8]] = &[
            br#"{"op":"status"}"#,
            br#"{"op":"hello","pid":12}"#,
            br#"{"op":"hello","pid":12,"agent":true}"#,
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
