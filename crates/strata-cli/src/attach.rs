//! `strata attach`: hand a running process to the daemon (or change its priority, or let it
//! go), over the daemon's control socket.
use std::path::PathBuf;

use anyhow::bail;
use strata_daemon::control::{request, Request};

use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// The process
    pid: u32,
    /// Its priority: high, normal, low or -1000..1000 (higher is promoted first, demoted last)
    #[arg(long, value_parser = stratad::config::parse_priority, allow_hyphen_values = true)]
    priority: Option<i32>,
    /// Stop managing it (a process under Strata keeps being managed, with its own priority)
    #[arg(long, conflicts_with = "priority")]
    detach: bool,
    /// The daemon's control socket [default: --config's daemon.socket, else $STRATA_DAEMON_SOCKET,
    /// else /run/strata/stratad.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the daemon's reply as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let r =
        if a.detach { Request::Detach { pid: a.pid } } else { Request::Attach { pid: a.pid, priority: a.priority } };
    let reply = request(&crate::config::socket(a.socket.clone()), &r).map_err(anyhow::Error::msg)?;
    if a.json {
        emit_json(&reply)?;
    }
    if !reply.ok {
        bail!("{}", reply.error.unwrap_or_else(|| "the daemon refused".into()));
    }
    if a.json {
        return Ok(());
    }
    if let Some(note) = &reply.note {
        eprintln!("strata attach: {note}");
    }
    emit(&match (a.detach, a.priority) {
        (true, _) => format!("process {} detached\n", a.pid),
        (false, Some(p)) => format!("process {} attached, priority {p}\n", a.pid),
        (false, None) => format!("process {} attached\n", a.pid),
    })
}
