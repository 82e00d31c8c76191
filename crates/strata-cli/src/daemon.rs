//! `strata daemon`: the live tiering daemon. What exists so far is `--probe`: which trackers
//! this machine's kernel and hardware offer a daemon, each with the reason.
use std::fmt::Write;

use crate::output::{emit, emit_json};

#[derive(clap::Args)]
pub struct Args {
    /// Print the trackers a daemon could use on this machine (available, and why or why not)
    #[arg(long)]
    probe: bool,
    /// With --probe: JSON, [{name, sees, available, reason}]
    #[arg(long, requires = "probe")]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !a.probe {
        anyhow::bail!(
            "the live daemon is not built yet (issue #22); `strata daemon --probe` shows what it could \
             track on this machine, and `strata emu run --policy NAME` runs the tiering engine on the \
             emulated machine"
        );
    }
    let trackers = stratad::probe::probe();
    if a.json {
        return emit_json(&trackers);
    }
    let mut s = String::from("Trackers on this machine (tried on this process's own memory):\n\n");
    for t in &trackers {
        let _ = writeln!(s, "{:<13} {:<3} {}", t.name, if t.available { "yes" } else { "no" }, t.sees);
        let _ = writeln!(s, "{:<17} {}", "", t.reason);
    }
    emit(&s)
}
