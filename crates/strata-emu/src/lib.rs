//! The host side of Strata's emulated tiered machine (the model itself is C, in emu/).
//!
//! - [`Machine`]: a preset of the emulator's table (emu/config.c, compiled into this crate so
//!   presets are defined once) or `host` (this machine, [`calibrate`]d), with settings over it;
//!   [`Kernel`] and [`Tiering`] name the emulated kernel modes and M2T's configurations;
//!   [`MachineArgs`] are the command-line options every emulated run shares.
//! - [`toolchain`]: building C, C++ and Rust for the emulated machine; [`pkg`]: real programs
//!   from Debian's source packages built with it.
//! - [`run_emulated`]: running a program on a machine, and its [`Report`]; [`spawn_emulated`]:
//!   starting one (a server) and taking snapshots of its report while it runs.
//! - [`validate`]: the emulator against cachegrind and against native runs.
//! - [`topology`]: a preset as the nodes and tiers libstrata sees.
pub mod calibrate;
pub mod config;
pub mod pkg;
pub mod toolchain;
pub mod topology;
pub mod validate;

mod machine;
mod report;
mod run;

pub use machine::{fast_bytes_of, parse_setting, Kernel, Machine, MachineArgs, Tiering, ALL_FAST_BYTES};
pub use report::{Background, Counters, Linux, NodeReport, Report, ThreadReport, Transactional, REPORT_VERSION};
pub use run::{footprint_bytes, run_emulated, spawn_emulated, Emulated, Run, RunOutput};

/// What can go wrong on the emulated machine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A usage error: a machine, setting or argument the emulator cannot run with (the message
    /// says which). The CLI exits with 2 for it.
    #[error("{0}")]
    Invalid(String),
    /// Something `make` builds is missing.
    #[error(transparent)]
    NotBuilt(#[from] strata_util::NotBuilt),
    /// A program could not be started, or a file not read.
    #[error(transparent)]
    Io(#[from] strata_util::IoError),
    /// A program ran and failed, or wrote something unreadable.
    #[error("{0}")]
    Failed(String),
}
