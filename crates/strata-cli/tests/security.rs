//! The security review's attacks (docs/security.md says what each row is and what holds), run
//! by an unprivileged user the tests make (`strata-mallory`) against a daemon, `strata stats`
//! and the metrics exporter run by root. The attack tools are tests/security/ (evilchan.c,
//! flood.py). These tests need root (to make the user, and to be the victim); elsewhere they
//! say so and pass.
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use strata_util::Owned;

mod common;
use common::*;
use strata_daemon::control::MAX_HELLOS_PER_USER;

/// The unprivileged user, and a folder every user may read holding what she runs.
struct Mallory {
    uid: u32,
    gid: u32,
    bin: PathBuf,
}

fn mallory() -> Option<&'static Mallory> {
    static M: OnceLock<Option<Mallory>> = OnceLock::new();
    M.get_or_init(|| {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: the security tests run as root (they make a user to attack with)");
            return None;
        }
        let useradd = if Path::new("/usr/sbin/useradd").exists() { "/usr/sbin/useradd" } else { "useradd" };
        let _ = Command::new(useradd) // (made by an earlier run, or now)
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "strata-mallory"])
            .stderr(Stdio::null())
            .status();
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, "strata-mallory"]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("the test user exists")
        };
        let bin = std::env::temp_dir().join(format!("strata-security-bin-{}", std::process::id()));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (from, to) in [
            (repo("build/security/evilchan"), "evilchan"),
            (repo("tests/security/flood.py"), "flood.py"),
            (repo("build/libstrata.so"), "libstrata.so"),
            (env!("CARGO_BIN_EXE_strata").to_string(), "strata"),
        ] {
            assert!(Path::new(&from).exists(), "{from}: run `make build/security/evilchan lib` first");
            std::fs::copy(&from, bin.join(to)).unwrap();
            std::fs::set_permissions(bin.join(to), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Some(Mallory { uid: id("-u"), gid: id("-g"), bin })
    })
    .as_ref()
}

impl Mallory {
    /// `program` (a name in her folder, or a path), run as her.
    fn run(&self, program: &str) -> Command {
        let path = if program.contains('/') { PathBuf::from(program) } else { self.bin.join(program) };
        let mut c = Command::new(path);
        c.uid(self.uid).gid(self.gid).current_dir(&self.bin).env("HOME", &self.bin);
        c
    }

    fn python(&self, mode: &[&str]) -> Command {
        let mut c = self.run("/usr/bin/python3");
        c.arg(self.bin.join("flood.py")).args(mode);
        c
    }

    fn lib(&self) -> String {
        self.bin.join("libstrata.so").to_str().unwrap().to_string()
    }
}

/// A folder for one test that every user may enter (and, with `open`, write, as /tmp).
fn shared_dir(name: &str, mode: u32) -> Dir {
    let d = Dir::new(name);
    std::fs::set_permissions(&d.0, std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// Start `c` with its stdout piped and wait for its first line (what it did); the child is
/// killed when dropped (a failed assertion leaves nothing running).
fn started(c: &mut Command) -> (Owned, String) {
    let mut child = Owned(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let mut line = Vec::new();
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8];
    while std::io::Read::read(&mut out, &mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    (child, String::from_utf8_lossy(&line).into_owned())
}

fn alive(c: &mut Child) -> bool {
    c.try_wait().unwrap().is_none()
}

/// Held by the tests in which mallory passes descriptors (SCM_RIGHTS): the kernel caps the
/// descriptors one user has in flight, and the flood of hellos carrying 200 each took the
/// dripping agent's hello over it when both ran at once (its hello-for then said nothing).
static PASSING_FDS: Mutex<()> = Mutex::new(());

/// Names planted ahead of the next pid: more than the other tests of this file start meanwhile.
const PLANTED: u32 = 2000;

/// Rows 2.2 and 2.3: symbolic links and 0666 files planted by another user at the names
/// channels had (/dev/shm/strata.PID) for the next pids; a root program under Strata writes
/// none of them and none of them becomes its channel.
#[test]
fn planted_links_and_files_at_the_old_channel_names_are_never_written() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-plant", 0o755);
    let target = dir.path("root_target");
    std::fs::write(&target, "precious root data").unwrap();
    let (daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"first-touch\"\n", "100");
    let read = |f: &str| -> u32 { std::fs::read_to_string(f).unwrap().trim().parse().unwrap() };
    for kind in ["symlink", "file"] {
        // the next pids, wrapping at pid_max to the kernel's first unreserved pid (300), as
        // pids do (a host with pid_max 32768 wrapped during a run)
        let (next, max) = (read("/proc/sys/kernel/ns_last_pid"), read("/proc/sys/kernel/pid_max"));
        let planted: Vec<u32> =
            (next + 1..next + PLANTED).map(|p| if p >= max { 300 + (p - max) } else { p }).collect();
        let list = planted.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",");
        let plant = format!(
            "import os, sys\nfor p in [{list}]:\n    n = '/dev/shm/strata.%d' % p\n    try:\n        \
             os.symlink(sys.argv[1], n) if sys.argv[2] == 'symlink' else os.close(os.open(n, os.O_CREAT | os.O_WRONLY, 0o666))\n        \
             os.chmod(n, 0o666) if sys.argv[2] == 'file' else None\n    except OSError:\n        pass\n"
        );
        let ok = m.run("/usr/bin/python3").args(["-c", &plant, &target, kind]).status().unwrap();
        assert!(ok.success());
        let victim = Owned(under_strata("sh", &sock).args(["-c", "x=$(seq 1 3000); sleep 30"]).spawn().unwrap());
        let pid = victim.id();
        let v = stats_until(&sock, |v| managed(v, pid).is_some());
        drop(victim);
        assert!(managed(&v, pid).is_some_and(|p| p["strata"] == true), "its own channel is taken: {v}");
        assert!(v["daemon"]["refused"][pid.to_string()].is_null(), "{v}");
        for p in &planted {
            let n = format!("/dev/shm/strata.{p}");
            if let Ok(meta) = std::fs::symlink_metadata(&n) {
                assert!(meta.file_type().is_symlink() || meta.len() == 0, "{n} was written ({kind})");
                let _ = std::fs::remove_file(&n);
            }
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious root data", "{kind}");
        assert!(planted.contains(&pid), "{pid}: the test planted the wrong names");
    }
    drop(daemon);
}

/// Rows 2.4, 2.5, 2.8, 2.10, 5.7: channels that are truncated, unsealed, a sparse terabyte,
/// or scribbled over by their own process, while the root daemon, `strata stats` and the
/// exporter read them: none of them dies, the bad ones are refused, a priority claimed beyond
/// the range is clamped.
#[test]
fn a_channel_truncated_grown_or_lying_leaves_the_daemon_stats_and_exporter_running() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-channel", 0o755);
    let (mut daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"ambix\"\ndiscovery_ms = 200\n", "100");
    let (exporter, port) = exporter(&mut Command::new(env!("CARGO_BIN_EXE_strata")), &sock);
    let mut exporter = Owned(exporter);
    let (unsealed, said) = started(m.run("evilchan").args(["unsealed", &sock, "8"]));
    assert_eq!(said, "truncated");
    let (huge, said) = started(m.run("evilchan").args(["huge", &sock, "8"]));
    assert_eq!(said, "offered 1 TiB");
    let (own, said) =
        started(m.run("evilchan").args(["own", "8"]).env("LD_PRELOAD", m.lib()).env("STRATA_DAEMON_SOCKET", &sock));
    assert_eq!(said, "shrink=EPERM grow=EPERM scribbled", "the seals hold against the process itself");
    let (u, h, o) = (unsealed.id(), huge.id(), own.id());
    let v = stats_until(&sock, |v| {
        let r = &v["daemon"]["refused"];
        let claimed = managed(v, o).map(|p| p["claimed_priority"].clone());
        r[u.to_string()].is_string() && r[h.to_string()].is_string() && claimed == Some(1000.into())
    });
    for _ in 0..5 {
        let s = json(&["stats", "--json", "--socket", &sock]);
        assert!(s["daemon"].is_object(), "{s}");
        assert!(scrape(port).starts_with("HTTP/1.1 200"), "the exporter answers");
    }
    assert!(alive(&mut daemon.0) && alive(&mut exporter), "the daemon and the exporter live");
    let r = &v["daemon"]["refused"];
    assert!(r[u.to_string()].as_str().unwrap().contains("not a memfd sealed"), "{v}");
    assert!(r[h.to_string()].as_str().unwrap().contains("not the size of a channel"), "{v}");
    let p = managed(&v, o).unwrap();
    assert_eq!(p["claimed_priority"], 1000, "i32::MAX claimed, clamped: {p}");
    drop((unsealed, huge, own, exporter));
    let err = daemon.stop();
    assert!(!err.contains("panicked"), "{err}");
}

/// Row 4.3: /dev/shm full before a program under Strata starts, and filled while it runs: the
/// channel is a memfd, which a full /dev/shm does not touch; the program runs to its end.
#[test]
fn a_full_dev_shm_before_and_during_a_run_kills_no_program() {
    if mallory().is_none() {
        return;
    }
    let lib = repo("build/libstrata.so");
    let script = format!(
        "mount -t tmpfs -o size=2m,mode=1777 strata-test /dev/shm || exit 77\n\
         dd if=/dev/zero of=/dev/shm/fill bs=64k 2>/dev/null\n\
         LD_PRELOAD={lib} /usr/bin/python3 -c 'print(sum(len(str(i)) for i in range(300000)))'; echo before=$?\n\
         rm /dev/shm/fill\n\
         LD_PRELOAD={lib} /usr/bin/python3 -c 'import time\na=[bytes(9000) for _ in range(3000)]\ntime.sleep(1)\nb=[str(i) for i in range(300000)]\nprint(len(a), len(b))' & P=$!\n\
         sleep 0.3; dd if=/dev/zero of=/dev/shm/fill bs=64k 2>/dev/null; wait $P; echo during=$?\n"
    );
    let out = Command::new("unshare").args(["--mount", "sh", "-c", &script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(77) {
        eprintln!("skipped: no private mount of /dev/shm here");
        return;
    }
    assert!(text.contains("1688890\nbefore=0"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("3000 300000\nduring=0"), "{text}{}", String::from_utf8_lossy(&out.stderr));
}

/// A copy of `program` owned by root and setuid, in a folder every user may enter.
fn setuid_copy(dir: &Dir, program: &str) -> String {
    let to = dir.path(Path::new(program).file_name().unwrap().to_str().unwrap());
    std::fs::copy(program, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o4755)).unwrap();
    to
}

/// Row 2.7: a user's channel kept open across the exec of a setuid-root program is not that
/// program's: the daemon refuses it and does not manage the program at her priority.
#[test]
fn a_channel_inherited_across_a_setuid_exec_is_refused() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-suid", 0o755);
    let suid = setuid_copy(&dir, "/bin/sleep");
    let (daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"ambix\"\ndiscovery_ms = 200\n", "100");
    let (child, said) = started(m.run("evilchan").args(["exec", &suid, "20"]));
    assert!(said.starts_with("exec"), "{said}");
    let pid = child.id();
    // (it said so just before its exec: wait for the exec)
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{pid}/exe")).ok() != Some(PathBuf::from(&suid)) {
        assert!(Instant::now() < deadline, "evilchan did not exec {suid}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let euid = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    if !euid.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")) {
        eprintln!("skipped: setuid does not take effect in {}", dir.0.display());
        return;
    }
    let v = stats_until(&sock, |v| v["daemon"]["refused"][pid.to_string()].is_string());
    let why = v["daemon"]["refused"][pid.to_string()].as_str().unwrap_or_default().to_string();
    drop((child, daemon));
    assert!(why.contains(&format!("user {} made it", m.uid)), "{v}");
    assert!(managed(&v, pid).is_none(), "{v}");
}

/// Rows 1.9 and 1.10: one user holds 300 connections that never read and floods hellos;
/// root's attach is answered all the while, and the daemon's memory stays bounded.
#[test]
fn root_is_answered_while_a_user_holds_connections_and_floods_hellos() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-flood", 0o755);
    let (mut daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"first-touch\"\n", "100");
    let (hold, said) = started(&mut m.python(&["hold", &sock, "300", "25"]));
    assert!(said.starts_with("holding"), "{said}");
    let flood = m.python(&["hello", &sock, "15"]).stdout(Stdio::piped()).spawn().unwrap();
    let victim = Owned(Command::new("sleep").arg("60").spawn().unwrap());
    let mut slowest = Duration::ZERO;
    for k in 0..5 {
        std::thread::sleep(Duration::from_secs(2));
        let t = Instant::now();
        let (code, _, err) =
            strata(&["attach", &victim.id().to_string(), "--priority", &k.to_string(), "--socket", &sock]);
        slowest = slowest.max(t.elapsed());
        assert_eq!(code, 0, "root's attach while a user floods: {err}");
    }
    let flooded = flood.wait_with_output().unwrap();
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{}/status", daemon.0.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap();
    eprintln!(
        "root's attach answered in {:.3} s at worst; daemon RSS {} MiB; {}",
        slowest.as_secs_f64(),
        rss_kb >> 10,
        String::from_utf8_lossy(&flooded.stdout).trim()
    );
    assert!(alive(&mut daemon.0));
    assert!(rss_kb < 256 << 10, "the daemon grew to {rss_kb} kB");
    let v = json(&["stats", "--json", "--socket", &sock]);
    assert_eq!(managed(&v, victim.id()).unwrap()["given_priority"], 4, "{v}");
    drop((hold, victim));
}

/// Rows 3.1, 3.2 and 1.5-1.7: an agent that drips its replies is dropped within the deadline
/// and the daemon goes on with its rounds; an agent offered for another process is refused.
#[test]
fn a_dripping_agent_is_dropped_and_no_one_speaks_for_another_process() {
    let Some(m) = mallory() else { return };
    let _passing = PASSING_FDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = shared_dir("sec-agent", 0o755);
    let Some((mut daemon, sock)) = hint_fault_daemon(&dir, "200") else { return };
    let other = Owned(under_strata("sh", &sock).args(["-c", "x=$(seq 1 5000); sleep 60"]).spawn().unwrap());
    let (drip, said) = started(m.run("evilchan").args(["drip", &sock, "60"]));
    assert_eq!(said, "agent taken; dripping");
    let rounds = |v: &Value| v["daemon"]["stats"]["rounds"].as_u64().unwrap_or(0);
    let has_agent = |v: &Value| managed(v, drip.id()).is_some_and(|p| !p["agent"].is_null());
    let v = stats_until(&sock, |v| managed(v, drip.id()).is_some() && managed(v, other.id()).is_some());
    assert!(has_agent(&v), "{v}");
    // dropped after one request's deadline, however long the drip goes on
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut v = v;
    while has_agent(&v) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        v = json(&["stats", "--json", "--socket", &sock]);
    }
    assert!(!has_agent(&v), "the dripping agent is still kept: {v}");
    let before = rounds(&v);
    let v = stats_until(&sock, |v| rounds(v) >= before + 10);
    assert!(rounds(&v) >= before + 10, "the rounds go on: {v}");
    assert!(managed(&v, other.id()).is_some(), "{v}");
    // a hello for root's process, from her own: refused (the kernel says who she is)
    let (mut hello, said) = started(m.run("evilchan").args(["hello-for", &sock, &other.id().to_string()]));
    if !said.contains("\"agent\":false") {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(hello.stderr.as_mut().unwrap(), &mut err);
        panic!("hello-for said '{said}', and on stderr: {err}");
    }
    if !alive(&mut daemon.0) {
        let status = daemon.0.try_wait().unwrap();
        panic!("the daemon died ({status:?}): {}", daemon.stop());
    }
    drop((drip, hello, other));
}

/// Beyond the review's rows: hellos each passing 200 descriptors. The daemon takes one a hello (its recvmsg
/// buffer holds one; the kernel closes the rest), and holds at most a user's connections and
/// queued hellos, so its descriptor table stays bounded while a user floods it; what it held of
/// hers is closed once she stops (a /dev/null is no channel).
#[test]
fn hellos_passing_many_descriptors_leave_the_daemons_table_bounded() {
    let Some(m) = mallory() else { return };
    let _passing = PASSING_FDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = shared_dir("sec-fds", 0o755);
    let (mut daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"first-touch\"\n", "100");
    let pid = daemon.0.id();
    let count = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let before = count();
    let mut flood = m.python(&["fds", &sock, "200", "10"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut most = before;
    while flood.try_wait().unwrap().is_none() {
        most = most.max(count());
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = flood.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(said.starts_with("sent") && !said.starts_with("sent 0 "), "{said}");
    // 32 connections of hers and 256 hellos of hers waiting, one descriptor each, at most
    assert!(most < before + 32 + MAX_HELLOS_PER_USER + 16, "{before} descriptors, then {most}: {said}");
    assert!(alive(&mut daemon.0), "{said}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while count() > before + 16 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(count() <= before + 16, "{before} descriptors before, {} after the flood: {said}", count());
    eprintln!("{}; the daemon's descriptors: {before} before, {most} at most", said.trim());
}

/// Rows 5.5 and 5.6: 2,000 connections that never finish a request, against an exporter that
/// may open 1,024 descriptors: it refuses the excess, lives, and serves once they go.
#[test]
fn the_exporter_survives_2000_connections_at_1024_descriptors() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-exporter", 0o755);
    let (daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"first-touch\"\n", "100");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (exporter, port) = exporter(&mut cmd, &sock);
    let mut exporter = Owned(exporter);
    let (flood, said) = started(&mut m.python(&["http", "127.0.0.1", &port.to_string(), "2000", "15"]));
    assert!(said.starts_with("holding"), "{said}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(alive(&mut exporter), "the exporter died under the flood");
    let mut flood = flood;
    assert!(flood.wait().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut body = String::new();
    while !body.starts_with("HTTP/1.1 200") && Instant::now() < deadline {
        body = std::panic::catch_unwind(|| scrape(port)).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(alive(&mut exporter));
    drop((exporter, daemon));
}

/// Rows 6.1 and 6.2: `strata run` says when the kernel will drop LD_PRELOAD; and with
/// libstrata preloaded system-wide (/etc/ld.so.preload, in a private mount namespace), a
/// setuid program run by a user ignores her STRATA_* variables: no report over a root file, no
/// line of /etc/shadow on her terminal.
#[test]
fn a_setuid_program_ignores_the_users_strata_variables() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-env", 0o755);
    let suid = setuid_copy(&dir, "/bin/true");
    let out = m.run("strata").args(["run", "--lib", &m.lib(), "--", &suid]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("is setuid: the kernel drops LD_PRELOAD"), "{err}");
    let target = dir.path("root_target");
    std::fs::write(&target, "precious root data").unwrap();
    let etc = dir.path("etc");
    let script = format!(
        "cp -a /etc {etc} && echo {lib} > {etc}/ld.so.preload && mount --bind {etc} /etc || exit 77\n\
         exec setpriv --reuid={uid} --regid={gid} --clear-groups env STRATA_REPORT={target} \
         STRATA_RULES=/etc/shadow STRATA_VERBOSE=1 {suid}\n",
        lib = m.lib(),
        uid = m.uid,
        gid = m.gid,
    );
    let out = Command::new("unshare").args(["--mount", "sh", "-c", &script]).output().unwrap();
    if out.status.code() == Some(77) {
        eprintln!("skipped: no private mount of /etc here");
        return;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious root data");
    assert!(!err.contains("root:"), "a line of /etc/shadow reached the user: {err}");
}

/// Row 4.5: the daemon's socket in a folder anyone may write: a link planted where it keeps its
/// attachments is not written through, and a forged list is not trusted at the next start.
#[test]
fn attachments_are_not_written_through_a_link_nor_read_from_a_users_file() {
    let Some(m) = mallory() else { return };
    let open = shared_dir("sec-attach", 0o1777);
    let safe = shared_dir("sec-attach-root", 0o755);
    let target = safe.path("root_target");
    std::fs::write(&target, "precious root data").unwrap();
    let ln = |from: &str, to: &str| assert!(m.run("/bin/ln").args(["-s", from, to]).status().unwrap().success());
    ln(&target, &open.path("attached.json.tmp"));
    let (daemon, sock) = daemon_with(&open, "[daemon]\npolicy = \"first-touch\"\n", "100");
    let victim = Owned(Command::new("sleep").arg("60").spawn().unwrap());
    let (code, _, err) = strata(&["attach", &victim.id().to_string(), "--priority", "3", "--socket", &sock]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious root data");
    assert!(!std::fs::symlink_metadata(open.path("attached.json")).unwrap().file_type().is_symlink());
    drop(daemon);
    // her list, naming root's process at the lowest priority, where the daemon keeps its own
    std::fs::remove_file(open.path("attached.json")).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", victim.id())).unwrap();
    let start: u64 = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().parse().unwrap();
    let forged = PathBuf::from(open.path("forged.json"));
    let list = format!("[{{\"pid\":{},\"start_time\":{start},\"priority\":-1000}}]", victim.id());
    let wrote = m.run("/bin/sh").args(["-c", &format!("echo '{list}' > {}", forged.display())]).status().unwrap();
    assert!(wrote.success());
    ln(forged.to_str().unwrap(), &open.path("attached.json"));
    let (daemon, sock) = daemon_with(&open, "[daemon]\npolicy = \"first-touch\"\n", "100");
    std::thread::sleep(Duration::from_millis(500));
    let v = json(&["stats", "--json", "--socket", &sock]);
    assert!(managed(&v, victim.id()).is_none(), "a forged list was trusted: {v}");
    let err = daemon.stop();
    assert!(err.contains("attachments in") && err.contains("are ignored"), "{err}");
    drop(victim);
}

/// Where and when a process writes (its heat) is told to root and to its owner only: another
/// user's `strata stats` and `strata record` see the process, not its heat.
#[test]
fn another_users_status_carries_no_heat_of_a_process_not_hers() {
    let Some(m) = mallory() else { return };
    let dir = shared_dir("sec-heat", 0o755);
    let (daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"ambix\"\n", "50");
    let hold = dir.path("hold");
    let mut child = under_strata(&repo("build/preload/hot_writer"), &sock)
        .args(["4", "1", "4"])
        .env("HOT_WRITER_HOLD", &hold)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let v = stats_until(&sock, |v| managed(v, pid).is_some_and(|p| !p["heat"].is_null()));
    let out = m.run("strata").args(["stats", "--json", "--socket", &sock]).output().unwrap();
    let rec = m.run("strata").args(["record", &pid.to_string(), "--seconds", "1", "--socket", &sock]).output().unwrap();
    std::fs::write(&hold, "").unwrap();
    let _ = child.wait();
    drop(daemon);
    assert!(managed(&v, pid).is_some_and(|p| !p["heat"].is_null()), "root sees it: {v}");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hers: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = managed(&hers, pid).unwrap_or_else(|| panic!("she sees the process: {hers}"));
    assert!(p["heat"].is_null(), "but not its heat: {p}");
    assert!(!rec.status.success(), "nor can she record it");
}
