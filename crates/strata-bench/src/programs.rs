//! The whole-program cost of transparent mode (`strata bench alloc --program`): real,
//! allocation-heavy programs run plain (glibc), under Strata without contexts, and under
//! Strata with contexts (the configuration the context policies need).
//!
//! Programs: perl building a large hash, python building and parsing a JSON document, and
//! Debian's `redis-server` under `redis-benchmark` (the server is what is measured: started
//! under each configuration, driven by a fixed number of requests, then shut down).
//!
//! Two measures: wall time (median of rounds; noisy on shared machines, +-20 % between
//! identical runs here) and instructions counted by valgrind's callgrind on a smaller run
//! (repeatable to a few parts in a million), which is the figure overheads are judged by.
//! A program whose executable is missing is skipped and named in the report.
use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use strata_util::{io, median};

use crate::{failed, Error};

/// The configurations, in the order they run.
#[derive(Clone, Copy, PartialEq)]
enum Config {
    /// the program's own allocator (glibc's, or what it links: redis's jemalloc)
    Own,
    ContextsOff,
    ContextsOn,
    /// the system's jemalloc and mimalloc, preloaded: what a user would pick instead (timed and
    /// their memory measured, not counted under callgrind)
    Jemalloc,
    Mimalloc,
}

const CONFIGS: [Config; 5] = [Config::Own, Config::ContextsOff, Config::ContextsOn, Config::Jemalloc, Config::Mimalloc];

impl Config {
    /// its key in the report
    fn name(self) -> &'static str {
        match self {
            Config::Own => "glibc",
            Config::ContextsOff => "strata-contexts-off",
            Config::ContextsOn => "strata-contexts-on",
            Config::Jemalloc => "jemalloc",
            Config::Mimalloc => "mimalloc",
        }
    }

    /// Its environment; None when its library is not installed.
    fn env(self, lib: &str) -> Option<Env> {
        let strata = |contexts: &str| vec![("LD_PRELOAD", lib.into()), ("STRATA_CONTEXTS", contexts.into())];
        let system = |soname: &str| {
            crate::alloc::system_lib(soname).map(|l| vec![("LD_PRELOAD", l.to_string_lossy().into_owned())])
        };
        match self {
            Config::Own => Some(vec![]),
            Config::ContextsOff => Some(strata("0")),
            Config::ContextsOn => Some(strata("1")),
            Config::Jemalloc => system("libjemalloc.so.2"),
            Config::Mimalloc => system("libmimalloc.so.2"),
        }
    }

    /// Counted under callgrind too (Strata's overheads are judged by instructions).
    fn counted(self) -> bool {
        matches!(self, Config::Own | Config::ContextsOff | Config::ContextsOn)
    }
}

#[derive(Serialize, Deserialize)]
pub struct ProgramResult {
    /// perl, python or redis
    pub name: String,
    /// what was timed
    pub command: String,
    pub rounds: usize,
    /// median wall seconds per configuration (noisy on shared machines)
    pub seconds: BTreeMap<String, f64>,
    /// median peak resident set per configuration, bytes (ru_maxrss; absent in older runs)
    #[serde(default)]
    pub peak_rss_bytes: BTreeMap<String, u64>,
    /// instructions per configuration, counted by callgrind on a smaller run (repeatable);
    /// empty when valgrind is not installed
    pub instructions: BTreeMap<String, u64>,
    pub instructions_command: String,
    /// (contexts on) / (contexts off) - 1 in instructions (wall time when no valgrind)
    pub context_overhead: f64,
    /// (strata, contexts on) / the program without Strata - 1, same measure (its own allocator:
    /// glibc's, or what it links, as redis its jemalloc; the key keeps the name "glibc")
    pub vs_glibc: f64,
    /// peak RSS with contexts on / the program's own allocator's - 1 (absent in older runs)
    #[serde(default)]
    pub rss_vs_glibc: Option<f64>,
}

type Env = Vec<(&'static str, String)>;

/// A program: how to run it at a size (`big` for timing, small under callgrind).
enum Program {
    /// an interpreter and its arguments
    Script { exe: String, big: Vec<String>, small: Vec<String> },
    /// redis-server driven by redis-benchmark with this many requests per test (big, small)
    Redis { big: u32, small: u32 },
}

fn perl_script(keys: u32) -> String {
    format!(
        "my %h; for my $i (1..{keys}) {{ $h{{\"k$i\"}} = \"v\" x ($i % 97) }} \
         my $s = 0; $s += length($h{{$_}}) for keys %h; my @a = sort keys %h; print \"$s\\n\""
    )
}

fn python_script(items: u32) -> String {
    format!(
        "import json\n\
         d = [{{'id': i, 'name': 'item%d' % i, 'tags': ['a', 'b', str(i)], 'v': i * 1.5, 'text': 'x' * (i % 300)}} for i in range({items})]\n\
         s = json.dumps(d)\n\
         back = json.loads(s)\n\
         parts = [json.dumps(x) for x in back]\n\
         print(len(s), len(back), sum(map(len, parts)))\n"
    )
}

const REDIS_TESTS: &str = "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,lrange_100,mset";

/// The interpreter itself, not a wrapper script in front of it (pyenv's shims are shell
/// scripts: callgrind would count the shell): what it reports as its own executable.
fn interpreter(exe: &str, flag: &str, ask: &str) -> String {
    Command::new(exe)
        .args([flag, ask])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| exe.to_string())
}

fn programs() -> Vec<(&'static str, Program)> {
    let script = |exe: String, flag: &str, big: String, small: String| Program::Script {
        exe,
        big: vec![flag.into(), big],
        small: vec![flag.into(), small],
    };
    let perl = interpreter("perl", "-e", "print $^X");
    let python = interpreter("python3", "-c", "import sys; print(sys.executable)");
    vec![
        ("perl", script(perl, "-e", perl_script(400_000), perl_script(60_000))),
        ("python", script(python, "-c", python_script(200_000), python_script(20_000))),
        ("redis", Program::Redis { big: 100_000, small: 5_000 }),
    ]
}

fn exists(exe: &str) -> bool {
    Command::new(exe).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

fn describe(p: &Program, big: bool) -> String {
    match p {
        Program::Script { exe, big: b, small: s } => {
            let args = if big { b } else { s };
            format!("{exe} {} '{}'", args[0], args[1])
        }
        Program::Redis { big: b, small: s } => format!(
            "redis-server --port P --save '' --appendonly no, driven by redis-benchmark -p P -q -n {} -t {REDIS_TESTS}",
            if big { b } else { s }
        ),
    }
}

/// Run once; returns wall seconds and, when `callgrind`, the instructions it counted.
/// Wait for `child` as wait4(2) does, with its peak resident set (ru_maxrss, bytes): Child::wait
/// does not give it. The child is reaped here (its Child must not be waited for again).
fn wait_rss(child: &Child) -> Result<(std::process::ExitStatus, u64), Error> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for this child, which is ours
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: status and ru are this frame's
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((std::process::ExitStatus::from_raw(status), ru.ru_maxrss.max(0) as u64 * 1024));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(failed(format!("waiting for pid {pid}: {e}")));
        }
    }
}

/// One run: wall seconds, callgrind's instruction count (with `callgrind`), and the program's
/// peak resident set in bytes (without: under callgrind it would be valgrind's).
fn run_once(p: &Program, env: &Env, big: bool, callgrind: bool) -> Result<(f64, Option<u64>, u64), Error> {
    let valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"];
    let command = |exe: &str| {
        let mut c = if callgrind {
            let mut c = Command::new(valgrind[0]);
            c.args(&valgrind[1..]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        c.envs(env.iter().map(|(k, v)| (k, v)));
        strata_util::dies_with_parent(&mut c);
        c
    };
    let t = Instant::now();
    let (stderr, rss) = match p {
        Program::Script { exe, big: b, small: s } => {
            let mut child = command(exe)
                .args(if big { b } else { s })
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(io(&format!("running {exe}")))?;
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let (status, rss) = wait_rss(&child)?;
            if !status.success() {
                return Err(failed(format!("{exe} failed: {err}")));
            }
            (err, rss)
        }
        Program::Redis { big: b, small: s } => {
            let port = free_port()?;
            let mut server = command("redis-server")
                .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(io("starting redis-server"))?;
            let driven = drive_redis(&mut server, port, if big { *b } else { *s });
            let _ = Command::new("redis-cli")
                .args(["-p", &port.to_string(), "shutdown", "nosave"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let mut err = String::new();
            if let Some(mut e) = server.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            // (a server that died early was reaped by drive_redis: its error says more)
            let waited = wait_rss(&server);
            driven?;
            let (status, rss) = waited?;
            if !status.success() {
                return Err(failed(format!("redis-server failed ({status}): {err}")));
            }
            (err, rss)
        }
    };
    let seconds = t.elapsed().as_secs_f64();
    if !callgrind {
        return Ok((seconds, None, rss));
    }
    let n =
        stderr.lines().find_map(|l| l.split("Collected :").nth(1)).and_then(|v| v.trim().replace(',', "").parse().ok());
    match n {
        Some(n) => Ok((seconds, Some(n), rss)),
        None => Err(failed(format!("callgrind gave no count: {stderr}"))),
    }
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

/// Wait until the server accepts connections (it may run under valgrind: up to a minute),
/// then run the benchmark client against it.
fn drive_redis(server: &mut Child, port: u16, requests: u32) -> Result<(), Error> {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.try_wait() {
            return Err(failed(format!("redis-server exited at start ({status})")));
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(failed("redis-server did not accept connections within 60 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-q", "-n", &requests.to_string(), "-t", REDIS_TESTS])
        .output()
        .map_err(io("running redis-benchmark"))?;
    if !out.status.success() {
        return Err(failed(format!("redis-benchmark failed: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(())
}

/// Every program that is installed, each configuration `rounds` times (taking turns), then
/// once under callgrind. Returns the results and the programs skipped (with why).
pub fn measure(lib: &str, rounds: usize, say: &dyn Fn(&str)) -> Result<(Vec<ProgramResult>, Vec<String>), Error> {
    let have_valgrind = exists("valgrind");
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for (name, p) in programs() {
        let exes: &[&str] = match &p {
            Program::Script { exe, .. } => &[exe.as_str()],
            Program::Redis { .. } => &["redis-server", "redis-benchmark", "redis-cli"],
        };
        if let Some(missing) = exes.iter().find(|e| !exists(e)) {
            skipped.push(format!("program {name}: {missing} is not installed"));
            continue;
        }
        let mut times: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut rss: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in 0..rounds {
            say(&format!("{name}: round {}/{rounds}", r + 1));
            for (c, env) in CONFIGS.iter().filter_map(|c| Some((c, c.env(lib)?))) {
                let (s, _, bytes) = run_once(&p, &env, true, false)?;
                times.entry(c.name().into()).or_default().push(s);
                rss.entry(c.name().into()).or_default().push(bytes as f64);
            }
        }
        let mut instructions = BTreeMap::new();
        for c in CONFIGS.iter().filter(|c| have_valgrind && c.counted()) {
            say(&format!("{name}: counting instructions with callgrind ({})", c.name()));
            let env = c.env(lib).expect("Strata's and the program's own configurations always run");
            if let (_, Some(n), _) = run_once(&p, &env, false, true)? {
                instructions.insert(c.name().to_string(), n);
            }
        }
        let seconds: BTreeMap<String, f64> = times.into_iter().map(|(k, v)| (k, median(v))).collect();
        let peak_rss_bytes: BTreeMap<String, u64> = rss.into_iter().map(|(k, v)| (k, median(v) as u64)).collect();
        let measure = |c: Config| instructions.get(c.name()).map(|n| *n as f64).unwrap_or(seconds[c.name()]);
        let rss = |c: Config| peak_rss_bytes.get(c.name()).map(|b| *b as f64);
        let rss_vs_glibc = rss(Config::ContextsOn).zip(rss(Config::Own)).map(|(on, own)| on / own - 1.0);
        results.push(ProgramResult {
            name: name.into(),
            command: describe(&p, true),
            rounds,
            context_overhead: measure(Config::ContextsOn) / measure(Config::ContextsOff) - 1.0,
            vs_glibc: measure(Config::ContextsOn) / measure(Config::Own) - 1.0,
            seconds,
            peak_rss_bytes,
            rss_vs_glibc,
            instructions_command: format!("valgrind --tool=callgrind {}", describe(&p, false)),
            instructions,
        });
    }
    Ok((results, skipped))
}

/// The human table: one line per program.
pub fn table(results: &[ProgramResult]) -> String {
    let mut s = String::from(
        "\nWhole programs, contexts on vs glibc and vs contexts off (instructions, callgrind; wall seconds are noisy):\n",
    );
    s += &format!(
        "{:<8} {:>14} {:>14} {:>14} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
        "program", "glibc", "strata", "strata+ctx", "vs glibc", "contexts", "glibc s", "strata s", "+ctx s"
    );
    for p in results {
        let i = |c: Config| p.instructions.get(c.name()).map_or("-".to_string(), |n| n.to_string());
        let t = |c: Config| p.seconds.get(c.name()).map_or(f64::NAN, |v| *v);
        s += &format!(
            "{:<8} {:>14} {:>14} {:>14} {:>+8.1}% {:>+8.1}% {:>8.3} {:>8.3} {:>8.3}\n",
            p.name,
            i(Config::Own),
            i(Config::ContextsOff),
            i(Config::ContextsOn),
            p.vs_glibc * 100.0,
            p.context_overhead * 100.0,
            t(Config::Own),
            t(Config::ContextsOff),
            t(Config::ContextsOn),
        );
    }
    s += "\nPeak resident set, MiB (ru_maxrss, median of rounds; glibc = the program's own allocator):\n";
    s += &format!(
        "{:<8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>11}\n",
        "program", "glibc", "strata", "strata+ctx", "jemalloc", "mimalloc", "+ctx/glibc"
    );
    for p in results {
        let m = |c: Config| {
            p.peak_rss_bytes.get(c.name()).map_or("-".to_string(), |b| format!("{:.1}", *b as f64 / 1048576.0))
        };
        let vs = p.rss_vs_glibc.map_or("-".to_string(), |v| format!("{:+.1}%", v * 100.0));
        s += &format!(
            "{:<8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>11}\n",
            p.name,
            m(Config::Own),
            m(Config::ContextsOff),
            m(Config::ContextsOn),
            m(Config::Jemalloc),
            m(Config::Mimalloc),
            vs
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_rss_gives_the_childs_own_peak() {
        let mut big = Command::new("perl");
        big.args(["-e", "my $x = 'a' x (64 << 20); print length($x)"]).stdout(Stdio::null());
        let (status, rss) = wait_rss(&big.spawn().unwrap()).unwrap();
        assert!(status.success());
        assert!(rss >= 64 << 20, "a 64 MiB string: {rss} bytes peak");
        let (status, small) = wait_rss(&Command::new("true").spawn().unwrap()).unwrap();
        assert!(status.success() && small < 16 << 20, "true: {small} bytes peak");
    }
}
