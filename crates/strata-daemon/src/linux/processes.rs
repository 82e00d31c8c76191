//! The processes the machine manages. Every process under Strata (`strata run`, or any with
//! `LD_PRELOAD=libstrata.so`) has a channel (a sealed memfd): the machine finds channels by
//! looking through `/proc/*/fd` (at start and then every `daemon.discovery_ms`), and at once for
//! a process that announces itself ([`Processes::hello`]). A channel with a bad magic, version
//! or sizes is refused for that process, once, with a line on stderr; the others carry on. Any
//! other process can be attached by hand ([`Processes::attach`]): its anonymous memory is
//! managed page by page. A process that exits is forgotten (its start time tells a reused pid).
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stratad::channel::{Channel, ChannelError};
use stratad::config::TrackerKind;

use crate::agent::{Agent, AgentCounters};
use crate::pidfd::{identity, Identity, Pidfd};
use crate::tracker::Offers;

/// A process the machine manages.
pub(crate) struct Proc {
    /// the process itself, for as long as it lives (a reused pid is another process)
    pub pidfd: Option<Pidfd>,
    /// its channel, for a process under Strata
    pub channel: Option<Channel>,
    /// attached by hand (`strata attach`): managed until detached or gone
    pub attached: bool,
    /// a priority given from outside, over the one it claims
    pub given_priority: Option<i32>,
    pub command: String,
    /// from /proc/PID/stat: a different one is another process with the same pid
    pub start_time: u64,
    /// why its last scan failed, if it did
    pub scan_error: Option<String>,
    /// its agent, when it offered one and the daemon kept it (transactional moves, hint-fault
    /// samples)
    pub agent: Option<Agent>,
}

impl Proc {
    fn new(command: String, start_time: u64) -> Proc {
        Proc {
            pidfd: None,
            channel: None,
            attached: false,
            given_priority: None,
            command,
            start_time,
            scan_error: None,
            agent: None,
        }
    }

    /// What it offers the trackers.
    pub fn offers(&self) -> Offers {
        Offers { wp_async: self.channel.as_ref().is_some_and(|c| c.wp_async()), agent: self.agent.is_some() }
    }
}

/// A managed process, as `strata stats` shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Managed {
    pub pid: u32,
    pub command: String,
    /// what rules match besides the command
    #[serde(default, flatten)]
    pub ids: stratad::ProcessIds,
    /// it runs under Strata (it has a channel)
    pub strata: bool,
    pub attached: bool,
    pub claimed_priority: i32,
    pub given_priority: Option<i32>,
    pub tracker: TrackerKind,
    /// present pages its tracker reported in the last whole pass (None: no pass ended yet)
    pub tracked_pages: Option<u64>,
    /// why its tracker failed in the last round, if it did
    pub tracker_error: Option<String>,
    /// what its agent did, when it has one (transactional moves)
    pub agent: Option<AgentCounters>,
}

/// The managed processes, and those whose channel was refused.
pub(crate) struct Processes {
    pub procs: BTreeMap<u32, Proc>,
    /// processes whose channel was refused, with why (said once, then left alone)
    pub refused: BTreeMap<u32, String>,
    discovered: Option<Instant>,
    pub discovery: Duration,
    /// say on stderr why a channel is refused (the daemon does; `strata stats` only lists them)
    pub say_refusals: bool,
}

impl Processes {
    pub fn new() -> Processes {
        Processes {
            procs: BTreeMap::new(),
            refused: BTreeMap::new(),
            discovered: None,
            discovery: Duration::from_secs(10),
            say_refusals: false,
        }
    }

    /// A process handed over its channel (or said hello without one), and perhaps its agent's
    /// connection: taken if it is still the process that said hello. Whether anything changed.
    pub fn hello(&mut self, who: Identity, channel: Option<File>, agent: Option<Agent>) -> bool {
        let pid = who.pid;
        if pid == std::process::id() || !who.alive() {
            return false;
        }
        if self.procs.get(&pid).is_some_and(|p| p.start_time != who.start_time) {
            self.procs.remove(&pid); // the pid's earlier process, gone
        }
        self.refused.remove(&pid);
        let handed = channel.is_some();
        if let Some(p) = self.procs.get_mut(&pid).filter(|_| handed) {
            p.channel = None; // a process that exec'd says hello again with its new channel
        }
        let known = self.procs.get(&pid).is_some_and(|p| p.channel.is_some());
        if self.open_channel(&who, channel).is_err() {
            return true;
        }
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        if p.pidfd.is_none() {
            p.pidfd = Some(who.pidfd);
        }
        if let Some(agent) = agent {
            p.agent = Some(agent);
            return true;
        }
        handed || !known
    }

    /// Forget processes that exited (or whose pid now names another process).
    fn prune(&mut self) {
        self.procs.retain(|pid, p| {
            p.pidfd.as_ref().is_none_or(|f| f.alive()) && identity(*pid).is_some_and(|(start, _)| start == p.start_time)
        });
        self.refused.retain(|pid, _| Path::new(&format!("/proc/{pid}")).exists());
    }

    /// Take process `who`'s channel, `file` if it handed one over, else the one found among its
    /// open files: Ok(false) when it has none.
    fn open_channel(&mut self, who: &Identity, file: Option<File>) -> Result<bool, String> {
        let pid = who.pid;
        if self.procs.get(&pid).is_some_and(|p| p.channel.is_some()) {
            return Ok(true);
        }
        let opened = match file {
            Some(f) => Channel::from_file(pid, f),
            None => Channel::open(pid),
        };
        match opened {
            Ok(c) if who.alive() => {
                self.procs.entry(pid).or_insert_with(|| Proc::new(who.command.clone(), who.start_time)).channel =
                    Some(c);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e @ (ChannelError::Bad { .. } | ChannelError::Inherited { .. })) => {
                // (Inherited only from a hello: a process handed over another's channel)
                let why = match e {
                    ChannelError::Bad { why, .. } => why,
                    other => other.to_string(),
                };
                if self.refused.insert(pid, why.clone()).is_none() && self.say_refusals {
                    eprintln!("strata daemon: process {pid}: its channel is refused: {why}");
                }
                Err(why)
            }
            Err(_) => Ok(false),
        }
    }

    /// Forget those that exited, and look for processes with a channel if it is time (`now`:
    /// whatever the time).
    pub fn discover(&mut self, now: bool) {
        self.prune();
        if !now && self.discovered.is_some_and(|t| t.elapsed() < self.discovery) {
            return;
        }
        self.discovered = Some(Instant::now());
        let Ok(dir) = std::fs::read_dir("/proc") else { return };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid != std::process::id()
                && !self.procs.contains_key(&pid)
                && !self.refused.contains_key(&pid)
                && Channel::find(pid).is_some()
            {
                if let Some(who) = Identity::of(pid) {
                    if self.open_channel(&who, None) == Ok(true) {
                        self.procs.get_mut(&pid).expect("just taken").pidfd = Some(who.pidfd);
                    }
                }
            }
        }
    }

    /// Manage process `pid`, with `priority` over the one it claims: a process under Strata
    /// by its channel, any other by its anonymous memory, page by page.
    pub fn attach(&mut self, pid: u32, priority: Option<i32>) -> Result<(), String> {
        if pid == std::process::id() {
            return Err("the daemon does not manage itself".into());
        }
        let Some(who) = Identity::of(pid) else { return Err(format!("no process {pid}")) };
        if self.procs.get(&pid).is_some_and(|p| p.start_time != who.start_time) {
            self.procs.remove(&pid);
        }
        self.open_channel(&who, None).map_err(|why| format!("process {pid}: its channel is refused: {why}"))?;
        let p = self.procs.entry(pid).or_insert_with(|| Proc::new(who.command.clone(), who.start_time));
        p.pidfd.get_or_insert(who.pidfd);
        p.attached = true;
        if let Some(given) = priority {
            p.given_priority = Some(given.clamp(strata_sys::STRATA_PRIORITY_MIN, strata_sys::STRATA_PRIORITY_MAX));
        }
        Ok(())
    }

    /// Stop managing an attached process (a process under Strata stays, with its own priority).
    pub fn detach(&mut self, pid: u32) -> Result<(), String> {
        let Some(p) = self.procs.get_mut(&pid) else { return Err(format!("process {pid} is not managed")) };
        if p.channel.is_some() {
            p.attached = false;
            p.given_priority = None;
        } else {
            self.procs.remove(&pid);
        }
        Ok(())
    }
}
