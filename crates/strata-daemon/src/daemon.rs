//! The live daemon: the engine on real Linux ([`crate::linux`]), one round every scanner
//! period, with its control socket ([`crate::control`]), until stopped (SIGINT or SIGTERM in
//! `strata daemon`) or for a number of rounds.
//!
//! - Between rounds it answers the socket: processes announcing themselves, attach and detach,
//!   reloads. A reload (SIGHUP, or `{"op":"reload"}`) reads the configuration file again; a
//!   file that does not check is refused with its key and line, and the configuration in force
//!   stays.
//! - Attachments are kept in `attached.json` beside the socket, so a restarted daemon takes
//!   them back (with the process's start time, so a reused pid is not mistaken for it); the
//!   processes under Strata it finds by their channels anyway.
//! - Stopping leaves every program as it is: the daemon only ever moved pages, wrote directives
//!   and left write-protection that the kernel lifts on the next write, so a program loses
//!   nothing when the daemon goes.
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::control::{Command, Inbox, Request, Server};
use crate::linux::Linux;
use crate::status::{DaemonProcess, DaemonStatus};
use stratad::config::Mechanism;
use stratad::machine::Machine;
use stratad::{Config, Engine, Error, ProcessObs, Stats};

/// What the command line says; each given value wins over the configuration file's.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// the configuration file, read again on every reload
    pub config: Option<PathBuf>,
    pub policy: Option<String>,
    pub period_ms: Option<f64>,
    pub socket: Option<PathBuf>,
    /// stop after this many rounds
    pub rounds: Option<u64>,
}

impl Options {
    /// The configuration and policy these options give, checked.
    pub fn load(&self) -> Result<(Config, String), Error> {
        let (mut cfg, policy) = match &self.config {
            Some(p) => Config::load_with(p, self.policy.as_deref())?,
            None => {
                let c = Config::default();
                let policy = self.policy.clone().unwrap_or_else(|| c.daemon.policy.clone());
                (c, policy)
            }
        };
        if let Some(ms) = self.period_ms {
            cfg.scanner.period_ms = ms;
        }
        if let Some(s) = &self.socket {
            cfg.daemon.socket = s.clone();
        }
        cfg.check(&policy)?;
        cfg.check_live()?;
        Ok((cfg, policy))
    }
}

/// An attachment as kept on disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Attachment {
    pid: u32,
    start_time: u64,
    priority: Option<i32>,
}

/// Keep the attachments in `path`: written to a new file beside it (never through a link a
/// user planted in a shared folder) and renamed over it.
fn save_attachments(path: &Path, m: &Linux) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let list: Vec<Attachment> = m
        .managed()
        .into_iter()
        .filter(|p| p.attached)
        .filter_map(|p| {
            let (start_time, _) = crate::pidfd::identity(p.pid)?;
            Some(Attachment { pid: p.pid, start_time, priority: p.given_priority })
        })
        .collect();
    let Ok(text) = serde_json::to_vec_pretty(&list) else { return };
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp); // a link or a file left there: removed, not followed
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&text))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        eprintln!(
            "strata daemon: cannot keep attachments in {} ({e}); a restarted daemon will not know them",
            path.display()
        );
    }
}

/// The attachments a daemon kept, trusted only from a regular file (not a link) that this
/// daemon's user owns and no one else may write.
fn read_attachments(path: &Path) -> Result<Vec<Attachment>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    // SAFETY: geteuid cannot fail
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!("not a file of user {me} that only it may write"));
    }
    let mut text = Vec::new();
    f.by_ref().take(1 << 20).read_to_end(&mut text).map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| e.to_string())
}

fn restore_attachments(path: &Path, m: &mut Linux) {
    if !path.exists() && path.symlink_metadata().is_err() {
        return;
    }
    let list = match read_attachments(path) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("strata daemon: attachments in {} are ignored: {why}", path.display());
            return;
        }
    };
    for a in list {
        if crate::pidfd::identity(a.pid).is_some_and(|(start, _)| start == a.start_time) {
            if let Err(e) = m.attach(a.pid, a.priority) {
                eprintln!("strata daemon: process {} was attached before and cannot be now: {e}", a.pid);
            }
        }
    }
}

/// Bytes migrated per second over a window of rounds.
struct Rate {
    window: Duration,
    seen: VecDeque<(Instant, u64)>,
}

impl Rate {
    fn mbps(&mut self, now: Instant, migrated_bytes: u64) -> f64 {
        self.seen.push_back((now, migrated_bytes));
        while self.seen.len() > 2 && now.duration_since(self.seen[1].0) >= self.window {
            self.seen.pop_front();
        }
        let (t0, b0) = self.seen[0];
        let dt = now.duration_since(t0).as_secs_f64();
        if dt > 0.0 {
            (migrated_bytes - b0) as f64 / dt / 1e6
        } else {
            0.0
        }
    }
}

/// The daemon, between rounds.
struct Daemon {
    options: Options,
    machine: Linux,
    engine: Engine,
    attached_file: PathBuf,
    started: Instant,
    rate: Rate,
    migration_rate_mbps: f64,
    last_reload: Option<String>,
    trackers: Vec<crate::probe::TrackerVerdict>,
    /// the status the control socket answers with
    shared: Arc<Mutex<Option<DaemonStatus>>>,
    /// whether hellos that offer an agent are taken (the mover is transactional)
    wants_agents: Arc<AtomicBool>,
}

impl Daemon {
    /// Make the status the socket answers with this moment's.
    fn publish(&self) -> DaemonStatus {
        let status = self.status();
        if let Ok(mut s) = self.shared.lock() {
            *s = Some(status.clone());
        }
        status
    }

    fn status(&self) -> DaemonStatus {
        let cfg = self.engine.config();
        DaemonStatus {
            pid: std::process::id(),
            policy: self.engine.stats().policy.clone(),
            config: self.options.config.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            period_ms: cfg.scanner.period_ms,
            processes: self
                .machine
                .managed()
                .into_iter()
                .map(|p| {
                    let obs = ProcessObs {
                        pid: p.pid,
                        command: p.command.clone(),
                        ids: p.ids.clone(),
                        claimed_priority: p.claimed_priority,
                        given_priority: p.given_priority,
                    };
                    DaemonProcess {
                        priority: self.engine.priority(&obs),
                        max_fast_bytes: cfg.rule(&obs).and_then(|r| r.max_fast_bytes),
                        heat: self.engine.heat().and_then(|h| h.of(p.pid)),
                        process: p,
                    }
                })
                .collect(),
            refused: self.machine.refused().clone(),
            trackers: self.trackers.clone(),
            migration_rate_mbps: self.migration_rate_mbps,
            last_reload: self.last_reload.clone(),
            stats: self.engine.stats().clone(),
        }
    }

    /// Read the configuration again; the one in force stays if the new one is refused.
    fn reload(&mut self) -> Result<(), String> {
        let outcome = self.options.load().map_err(|e| e.to_string()).and_then(|(cfg, policy)| {
            let discovery = Duration::from_millis(cfg.daemon.discovery_ms);
            let reserve = cfg.reserve();
            let (trackers, damon_max) = (cfg.trackers(), cfg.daemon.damon_max_processes);
            let mover = cfg.mover.clone();
            let wants_agents = cfg.wants_agents();
            let round = Duration::from_secs_f64(cfg.scanner.period_ms / 1e3);
            let socket_changed = cfg.daemon.socket != self.engine.config().daemon.socket
                || cfg.daemon.socket_group != self.engine.config().daemon.socket_group;
            self.engine.reconfigure(&policy, cfg, &mut self.machine).map_err(|e| e.to_string())?;
            self.machine.set_discovery(discovery);
            self.machine.set_reserve(reserve);
            self.wants_agents.store(wants_agents, Ordering::Relaxed);
            self.machine.set_mover(mover);
            if let Some(why) = self.machine.set_trackers(&trackers, damon_max, round) {
                eprintln!("strata daemon: DAMON is not used: {why}");
            }
            if socket_changed {
                eprintln!("strata daemon: daemon.socket and daemon.socket_group take effect at the next start");
            }
            Ok(())
        });
        let file = self.options.config.as_ref().map_or("(no file)".into(), |p| p.display().to_string());
        let said = match &outcome {
            Ok(()) => format!("configuration reloaded from {file}"),
            Err(e) => format!("configuration refused, the one in force stays: {e}"),
        };
        eprintln!("strata daemon: {said}");
        self.last_reload = Some(said);
        outcome
    }

    /// One request from the socket; what it changed is in the status at once.
    fn handle(&mut self, cmd: Command) {
        let (request, ticket) = match cmd {
            Command::Hello { who, channel, agent } => {
                if self.machine.hello(who, channel, agent) {
                    self.publish();
                }
                return;
            }
            Command::Ask { request, ticket } => (request, ticket),
        };
        if !ticket.take() {
            return; // withdrawn at its deadline: the client was told it was not applied
        }
        let r = match request {
            Request::Attach { pid, priority } => {
                self.machine.attach(pid, priority).map(|()| self.machine.unseen_because(pid))
            }
            Request::Detach { pid } => self.machine.detach(pid).map(|()| None),
            Request::Reload => self.reload().map(|()| None),
            Request::Hello { .. } | Request::Status {} => Err("answered by the server".into()),
        };
        if r.is_ok() {
            save_attachments(&self.attached_file, &self.machine);
        }
        self.publish();
        ticket.answer(r);
    }
}

/// Allow as many open files as the hard limit does: the daemon holds a pidfd and a channel for
/// every process under Strata (and an agent's connection for some), more than the usual soft
/// limit of 1,024 allows past a few hundred processes.
fn raise_open_files() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit on a struct of this process's
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// What this daemon can do here, said once at start: the tiers it found, the trackers it tries
/// (in order, the first a process allows) and what each sees, the mover; on a machine with one
/// tier, that it will watch and report but move nothing.
fn what_it_can_do(machine: &mut Linux, engine: &Engine) -> String {
    let cfg = engine.config();
    let tiers = machine.tiers();
    let nodes = machine.nodes();
    let (policy, stats) = (&engine.stats().policy, engine.stats());
    let mut s = format!("strata daemon: policy {policy}, a round every {} ms. ", cfg.scanner.period_ms);
    if stats.samples_from_pages {
        s += "It takes no LLC-miss samples (perf sampling is not built): the page scan's accessed pages stand in for the samples the policy needs. ";
    }
    let each: Vec<String> = tiers
        .iter()
        .map(|t| {
            let on: Vec<String> =
                nodes.iter().filter(|n| n.tier == t.tier).map(|n| format!("node {}", n.node)).collect();
            format!("tier {} ({}, {})", t.tier, on.join(" and "), strata_util::size::format(t.capacity_bytes))
        })
        .collect();
    s += &format!("Tiers: {}. ", each.join(", "));
    if tiers.len() < 2 {
        s +=
            "With one tier there is nowhere to move pages: it will watch and report (strata stats), and move nothing. ";
    }
    let probed = crate::probe::probe();
    let trackers: Vec<String> = cfg
        .trackers()
        .iter()
        .map(|t| match probed.iter().find(|p| p.name == t.name()) {
            Some(p) if p.available => format!("{} (sees {})", p.name, p.sees),
            Some(p) => format!("{} (not here: {})", p.name, p.reason),
            None => t.name().to_string(),
        })
        .collect();
    s += &format!("Trackers, the first a process allows: {}. ", trackers.join("; "));
    let mechanism = match cfg.mover.mechanism {
        Mechanism::MovePages => "move_pages",
        Mechanism::Transactional => "transactional",
    };
    let mover = crate::probe::movers().into_iter().find(|m| m.name == mechanism);
    s += &match mover {
        Some(m) if m.available => format!("Mover: {} ({}), at most {} MB/s.", m.name, m.how, cfg.mover.rate_mbps),
        Some(m) => format!("Mover: {} is not available here ({}); move_pages instead.", m.name, m.reason),
        None => format!("Mover: {mechanism}."),
    };
    s
}

/// Run until `stop` is set or `options.rounds` rounds have run; `reload` set (by SIGHUP) reads
/// the configuration again. `each` sees the status after every round. Returns the final
/// statistics.
pub fn run(
    options: Options,
    stop: &AtomicBool,
    reload: &AtomicBool,
    mut each: impl FnMut(&DaemonStatus),
) -> Result<Stats, Error> {
    let (cfg, policy) = options.load()?;
    raise_open_files();
    let mut machine = Linux::new();
    machine.say_refusals();
    machine.set_discovery(Duration::from_millis(cfg.daemon.discovery_ms));
    machine.set_reserve(cfg.reserve());
    machine.set_mover(cfg.mover.clone());
    // (a kernel without DAMON is the usual case: the probe in the status says why)
    let round = Duration::from_secs_f64(cfg.scanner.period_ms / 1e3);
    let _ = machine.set_trackers(&cfg.trackers(), cfg.daemon.damon_max_processes, round);
    let mut engine = Engine::new(&policy, cfg, &mut machine)?;
    let said_what_it_can = what_it_can_do(&mut machine, &engine);
    engine.watch_heat(&mut machine);
    let shared = Arc::new(Mutex::new(None));
    let inbox = Inbox::new();
    let daemon_cfg = engine.config().daemon.clone();
    let wants_agents = Arc::new(AtomicBool::new(engine.config().wants_agents()));
    let _server = Server::start(
        &daemon_cfg.socket,
        daemon_cfg.socket_group.as_deref(),
        Arc::clone(&inbox),
        Arc::clone(&shared),
        Arc::clone(&wants_agents),
    )?;
    let mut d = Daemon {
        attached_file: daemon_cfg.socket.with_file_name("attached.json"),
        options,
        machine,
        engine,
        started: Instant::now(),
        rate: Rate { window: Duration::from_secs(10), seen: VecDeque::new() },
        migration_rate_mbps: 0.0,
        last_reload: None,
        trackers: crate::probe::probe(),
        shared,
        wants_agents,
    };
    eprintln!("{said_what_it_can}");
    restore_attachments(&d.attached_file, &mut d.machine);
    let mut done = 0u64;
    while !stop.load(Ordering::Relaxed) && d.options.rounds.is_none_or(|r| done < r) {
        let start = Instant::now();
        d.machine.next_round();
        d.machine.reclaim_shadows();
        d.engine.tick(&mut d.machine);
        done += 1;
        d.migration_rate_mbps = d.rate.mbps(Instant::now(), d.engine.stats().migrated_bytes);
        each(&d.publish());
        // the rest of the period: requests as they come, a stop seen within 50 ms
        let period = Duration::from_nanos(d.engine.period_ns().max(1_000_000));
        while !stop.load(Ordering::Relaxed) && start.elapsed() < period {
            if reload.swap(false, Ordering::Relaxed) {
                let _ = d.reload();
            }
            let wait = (period.saturating_sub(start.elapsed())).min(Duration::from_millis(50));
            if let Some(cmd) = inbox.next(wait) {
                d.handle(cmd);
            }
        }
    }
    Ok(d.engine.stats().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_rate_is_over_the_last_window() {
        let mut r = Rate { window: Duration::from_secs(10), seen: VecDeque::new() };
        let t = Instant::now();
        assert_eq!(r.mbps(t, 0), 0.0);
        assert!((r.mbps(t + Duration::from_secs(5), 50_000_000) - 10.0).abs() < 1e-9);
        // 20 s on, nothing more moved: the window holds only the last 10 s
        r.mbps(t + Duration::from_secs(15), 50_000_000);
        assert_eq!(r.mbps(t + Duration::from_secs(26), 50_000_000), 0.0);
    }
}
