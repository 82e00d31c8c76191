//! A program started on the emulated machine and measured while it runs: snapshots of its
//! report between phases (`make emu` first: libstrata_emu.so).
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use strata_emu::{spawn_emulated, toolchain, Machine};

/// A program with two phases: it writes 4 MiB, says "ready", waits for a line on stdin, then
/// writes the 4 MiB again.
const TWO_PHASES: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
  char *p = malloc(4 << 20), line[16];
  for (int i = 0; i < (4 << 20); i += 64) p[i] = (char)i;
  printf("ready\n");
  fflush(stdout);
  if (!fgets(line, sizeof line, stdin)) return 1;
  for (int i = 0; i < (4 << 20); i += 64) p[i] += 1;
  printf("%d\n", p[64]);
  return 0;
}
"#;

#[test]
fn snapshots_count_the_phases_before_them() {
    let dir = std::env::temp_dir().join(format!("strata-emu-spawn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("phases.c");
    std::fs::write(&src, TWO_PHASES).unwrap();
    let exe = dir.join("phases");
    let args: Vec<String> = ["-O1".into(), src.display().to_string(), "-o".into(), exe.display().to_string()].into();
    assert!(toolchain::cc_command(&args, false).unwrap().status().unwrap().success());

    let m = Machine::preset("m2t", true).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut run = spawn_emulated(&m, &mut cmd).unwrap();
    let mut stdin = run.take_stdin().unwrap();
    let mut out = BufReader::new(run.take_stdout().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let first = run.snapshot(Duration::from_secs(30)).unwrap();
    assert!(first.totals.stores >= 65536, "the first phase's stores: {:?}", first.totals);
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let end = run.wait().unwrap();
    assert!(end.status.success());
    assert_eq!(rest.trim(), "65");
    // the second phase's stores come after the snapshot
    assert!(end.report.totals.stores >= first.totals.stores + 65536, "{:?} then {:?}", first.totals, end.report.totals);
    assert!(end.report.sim_ns > first.sim_ns);
    std::fs::remove_dir_all(&dir).ok();
}

/// A program started on the emulated machine does not outlive what started it: killed (as
/// `kill` of `strata bench` or `strata emu run` would), the thread that started it ends, and
/// so does the program, long before its own end.
#[test]
fn a_program_dies_with_the_thread_that_started_it() {
    let m = Machine::preset("m2t", true).unwrap();
    let mut run = std::thread::spawn(move || {
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        spawn_emulated(&m, &mut cmd).unwrap()
    })
    .join()
    .unwrap();
    // its status comes as soon as the kernel delivers the signal; the bound is only a stop
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = run.try_status() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(300), "sleep 600 outlived the thread that started it");
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
}
