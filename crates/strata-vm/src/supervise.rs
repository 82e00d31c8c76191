//! Following the guest: its console until the init script says the command runs, then the
//! command's output (streamed to stdout) until its exit status, within a time limit.
use std::io::{BufRead, BufReader, Write};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::initramfs::{EXIT, READY};
use strata_util::io;

use crate::Error;

/// The guest's stdout and stderr as lines, in one channel.
fn lines(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = channel::<String>();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            let _ = tx.send(String::from_utf8_lossy(&line).trim_end_matches('\r').to_string());
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("qemu: {line}"));
        }
    });
    rx
}

/// Where the guest is.
#[derive(Default)]
struct State {
    booted: Option<Duration>,
    status: Option<i32>,
    console: Vec<String>,
}

/// The last 40 lines of the console.
fn tail(lines: &[String]) -> String {
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Follow the guest to its end; the command's exit status.
pub fn follow(mut child: Child, timeout_s: u64, verbose: bool) -> Result<i32, Error> {
    let started = Instant::now();
    let rx = lines(&mut child);
    let deadline = started + Duration::from_secs(timeout_s);
    let mut st = State::default();
    let mut out = std::io::stdout().lock();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix(EXIT) {
                    st.status = rest.trim().parse::<i32>().ok();
                } else if line.contains(READY) && st.booted.is_none() {
                    st.booted = Some(started.elapsed());
                    if verbose {
                        eprintln!("[vm] booted in {:.1} s", started.elapsed().as_secs_f64());
                    }
                } else if st.booted.is_some() && st.status.is_none() {
                    writeln!(out, "{line}").map_err(io("writing the guest's output"))?;
                } else {
                    if verbose {
                        eprintln!("[vm console] {line}");
                    }
                    st.console.push(line);
                }
            }
            Err(RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let what = if st.booted.is_some() { "the command did not finish" } else { "it did not finish booting" };
                return Err(Error::Guest(format!(
                    "the guest timed out after {timeout_s} s ({what}); console:\n{}",
                    tail(&st.console)
                )));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.wait();
    out.flush().map_err(io("writing the guest's output"))?;
    match (st.booted, st.status) {
        (Some(t), Some(rc)) => {
            eprintln!(
                "[vm] guest booted in {:.1} s, ran for {:.1} s in all, command exited {rc}",
                t.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            Ok(rc)
        }
        (None, _) if st.console.iter().any(|l| l.contains("Kernel panic")) => Err(Error::Panicked(tail(&st.console))),
        (None, _) => Err(Error::Guest(format!("the guest did not boot; console:\n{}", tail(&st.console)))),
        (Some(_), None) => {
            Err(Error::Guest(format!("the guest stopped before the command finished; console:\n{}", tail(&st.console))))
        }
    }
}
