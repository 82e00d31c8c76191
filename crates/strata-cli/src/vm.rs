//! `strata vm ...`: the two-tier QEMU guest (strata-vm).
use crate::output::emit;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Boot the two-tier guest and run CMD in it; exits with CMD's status
    Run(strata_vm::Options),
    /// Say whether this machine can run the guest, and what is missing
    Check,
}

pub fn run(c: Command) -> anyhow::Result<i32> {
    match c {
        Command::Check => {
            let missing = strata_vm::missing_tools(None);
            if missing.is_empty() {
                emit("the two-tier guest can run here\n")?;
                Ok(0)
            } else {
                emit(&format!("the guest cannot run here: {}\n", missing.join("; ")))?;
                Ok(1)
            }
        }
        Command::Run(a) => Ok(strata_vm::run(&a)?),
    }
}
