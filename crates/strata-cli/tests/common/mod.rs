//! What the daemon's test files share: running strata, a folder and a daemon of the test's
//! own, waiting for a status.
#![allow(dead_code)] // each test file uses some of these

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn strata(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("run strata");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn json(args: &[&str]) -> Value {
    let (code, out, err) = strata(args);
    assert_eq!(code, 0, "strata {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("strata {args:?}: not JSON ({e}): {out}"))
}

pub fn repo(p: &str) -> String {
    format!("{}/../../{p}", env!("CARGO_MANIFEST_DIR"))
}

/// `program` under Strata (libstrata preloaded), announcing itself to the daemon on `sock`.
pub fn under_strata(program: &str, sock: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", repo("build/libstrata.so")).env("STRATA_DAEMON_SOCKET", sock);
    c
}

/// A folder of the test's own, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("strata-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    pub fn path(&self, f: &str) -> String {
        self.0.join(f).to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A daemon in the background, stopped when dropped.
pub struct Daemon(pub strata_util::Owned);

impl Daemon {
    pub fn start(args: &[&str]) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Daemon(strata_util::Owned(child))
    }
    /// Stop it (SIGTERM) and return what it said on stderr.
    pub fn stop(mut self) -> String {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let mut err = String::new();
        let _ = self.0.stderr.take().unwrap().read_to_string(&mut err);
        let _ = self.0.wait();
        err
    }
}

/// Poll `strata stats --json` on `socket` until `ok` holds (15 s at most); the last status.
pub fn stats_until(socket: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let v = json(&["stats", "--json", "--socket", socket]);
        if ok(&v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// GET /metrics from a server on `port`.
pub fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// `strata stats --metrics 127.0.0.1:0` for the daemon on `sock`, started by `cmd` (a strata
/// command, perhaps as another user): the server and the port it bound (from its first line).
pub fn exporter(cmd: &mut Command, sock: &str) -> (Child, u16) {
    let mut server =
        cmd.args(["stats", "--metrics", "127.0.0.1:0", "--socket", sock]).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = server.stderr.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8];
    while err.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let port: u16 = line
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches("/metrics").parse().ok())
        .unwrap_or_else(|| panic!("no address in {line}"));
    (server, port)
}

/// A daemon tracking with hint-fault (and ambix, rounds every `period_ms`) on a socket in
/// `dir`, once it answers; None, saying why, where the kernel does not allow hint-fault.
pub fn hint_fault_daemon(dir: &Dir, period_ms: &str) -> Option<(Daemon, String)> {
    let probe = json(&["daemon", "--probe", "--json"]);
    let hint = probe["trackers"].as_array().unwrap().iter().find(|t| t["name"] == "hint-fault").cloned().unwrap();
    if hint["available"] != true {
        eprintln!("skipped: {}", hint["reason"]);
        return None;
    }
    let (sock, cfg) = (dir.path("sock"), dir.path("strata.toml"));
    std::fs::write(&cfg, "[daemon]\npolicy = \"ambix\"\ntrackers = [\"hint-fault\", \"pagemap-scan\"]\n").unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "--period-ms", period_ms, "-q", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    Some((daemon, sock))
}

/// A daemon with configuration `text`, rounds every `period_ms`, on a socket in `dir`, once it
/// answers.
pub fn daemon_with(dir: &Dir, text: &str, period_ms: &str) -> (Daemon, String) {
    let (sock, cfg) = (dir.path("sock"), dir.path("strata.toml"));
    std::fs::write(&cfg, text).unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "--period-ms", period_ms, "-q", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    (daemon, sock)
}

/// The process `pid` in a status's daemon part, if the daemon manages it.
pub fn managed(v: &Value, pid: u32) -> Option<Value> {
    v["daemon"]["processes"].as_array()?.iter().find(|p| p["pid"] == pid).cloned()
}
