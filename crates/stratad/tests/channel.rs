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
            Err(e) if start.elapsed() > Duration::from_secs(10) => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let mut channel = channel;
    assert_eq!(channel.process_directive(), Directive::Slow, "STRATA_DIRECTIVE at start");
    let mut contexts = Vec::new();
    channel.contexts(&mut contexts);
    // (counts reach the channel in batches, so a context may show no allocation yet)
    assert!(!contexts.is_empty() && contexts.iter().all(|c| c.pid == pid && c.id != 0), "{contexts:?}");
    assert!(channel.set_directive(0, Directive::Fast));
    assert_eq!(channel.process_directive(), Directive::Fast);
    let _ = child.kill();
    let _ = child.wait();
    drop(channel);
    assert!(Channel::open(pid).is_err(), "the region goes with the process");
}
