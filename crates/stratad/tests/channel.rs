//! A real process's channel: a shell under LD_PRELOAD=libstrata.so (`make lib` first), read
//! and steered from outside as a daemon would.
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_policy::Directive;
use stratad::channel::Channel;

#[test]
fn a_preloaded_process_shares_its_contexts_and_takes_directives() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build/libstrata.so");
    assert!(lib.exists(), "run `make lib` first ({} is missing)", lib.display());
    let mut child = Command::new("sh")
        .args(["-c", "x=$(seq 1 2000); sleep 30"])
        .env("LD_PRELOAD", &lib)
        .env("STRATA_DIRECTIVE", "slow")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let channel = loop {
        match Channel::open(pid) {
            Ok(c) => break c,
            Err(e) if start.elapsed() > Duration::from_secs(60) => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let mut channel = channel;
    assert_eq!(channel.process_directive(), Directive::Slow, "STRATA_DIRECTIVE at start");
    // the channel is there from libstrata's start, its contexts once the shell has allocated
    // (and counts reach it in batches, so a context may show no allocation yet): wait for
    // them, however busy the host
    let mut contexts = Vec::new();
    while contexts.is_empty() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
        channel.contexts(&mut contexts);
    }
    assert!(!contexts.is_empty() && contexts.iter().all(|c| c.pid == pid && c.id != 0), "{contexts:?}");
    assert!(channel.set_directive(0, Directive::Fast));
    assert_eq!(channel.process_directive(), Directive::Fast);
    let _ = child.kill();
    let _ = child.wait();
    drop(channel);
    assert!(Channel::open(pid).is_err(), "the region goes with the process");
}

/// Set in the environment of `a_rust_program_under_the_preload_has_one_channel`'s child.
const API_CHILD: &str = "STRATA_TEST_API_CHILD";

/// A program that uses the Rust API (strata-sys links a copy of libstrata in) and runs under
/// LD_PRELOAD=libstrata.so has one libstrata and one channel, holding both its arenas' records
/// and its malloc'd contexts: the engine reads one channel a process, and with two it saw one
/// of them (docs/tiering.md#two-channels). With STRATA_VERBOSE it prints one option table.
#[test]
fn a_rust_program_under_the_preload_has_one_channel() {
    use std::io::{BufRead, BufReader, Read};
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build/libstrata.so");
    assert!(lib.exists(), "run `make lib` first ({} is missing)", lib.display());
    // this test binary again, running only the child below
    let mut child = strata_util::Owned::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "api_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("LD_PRELOAD", &lib)
            .env(API_CHILD, "1")
            .env("STRATA_VERBOSE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .unwrap();
    let pid = child.0.id();
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    // (libtest writes "test api_child ... " before it, on the same line)
    let said: Vec<String> = out.by_ref().lines().map_while(Result::ok).take_while(|l| !l.ends_with("ready")).collect();
    assert!(child.0.try_wait().unwrap().is_none(), "the child ended early:\n{}", said.join("\n"));

    let channels = Channel::entries(pid).count();
    assert_eq!(channels, 1, "channels open in a Rust-API program under the preload");

    let mut channel = Channel::open(pid).unwrap();
    let mut objects = Vec::new();
    channel.objects(&mut objects);
    let in_arenas = objects.iter().filter(|o| o.arena != 0).count();
    let malloced = objects.iter().filter(|o| o.arena == 0 && o.context != 0).count();
    assert!(in_arenas >= 16, "the arena's records are in the channel: {in_arenas} of {objects:?}");
    assert!(malloced >= 16, "malloc's records are in the channel: {malloced} of {objects:?}");
    let mut contexts = Vec::new();
    channel.contexts(&mut contexts);
    assert!(!contexts.is_empty(), "malloc's contexts are in the channel");
    drop(child.0.stdin.take()); // the child's cue to end
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.0.wait().unwrap().success(), "the child failed:\n{rest}\n{err}");
    // STRATA_VERBOSE: one library speaks, once (its option table names STRATA_VERBOSE)
    let tables = err.lines().filter(|l| l.starts_with("STRATA_VERBOSE ")).count();
    assert_eq!(tables, 1, "option tables printed:\n{err}");
}

/// The child of `a_rust_program_under_the_preload_has_one_channel`: an arena of 64 KiB records
/// through the Rust API and as many malloc'd buffers, then waits for its stdin to close.
#[test]
#[ignore = "the child of a_rust_program_under_the_preload_has_one_channel, which runs it"]
fn api_child() {
    use strata_sys::*;
    if std::env::var_os(API_CHILD).is_none() {
        return;
    }
    assert!(preloaded(), "the API's calls go to the preloaded libstrata");
    // SAFETY: libstrata's C API, used as include/strata.h says
    let arena = unsafe { strata_arena_new(strata_place_t::new(STRATA_PLACE_HOT)) };
    assert!(!arena.is_null());
    let mut place = strata_place_t::new(STRATA_PLACE_ARENA);
    place.u.arena = arena;
    for _ in 0..16 {
        // SAFETY: as above; the record is written whole and kept until the process ends
        let p = unsafe { strata_malloc(64 << 10, place) };
        assert!(!p.is_null());
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 1, 64 << 10) };
    }
    let buffers: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8; 64 << 10]).collect();
    println!("ready");
    std::io::stdin().read_line(&mut String::new()).unwrap();
    drop(buffers);
}
