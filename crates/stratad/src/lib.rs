//! Strata's tiering engine: machine observations -> trackers -> the policy (pure, from
//! strata-policy) -> actions -> the mover -> the machine, with statistics of every step.
//!
//! ```text
//!  Machine ──scan, samples, hint faults──▶ trackers ──Observations──▶ Policy::decide
//!     ▲                                                                   │ Actions
//!     └──────────── move_pages (rate-limited, capped per round) ◀── Mover ┘
//! ```
//!
//! [`Machine`] is the seam: the emulated machine ([`emulated`], inside an emulated program,
//! on simulated time) and real Linux (`strata_daemon::linux`, the live daemon's) implement it. [`Engine::tick`]
//! is one round; on the emulated machine the emulator calls it every scanner period of
//! simulated time, through the C entry point `strata_engine_start` of `libstratad_emu.so` (the
//! stratad-emu crate: this engine on a heap of its own), which the emulator loads when
//! `$STRATA_ENGINE_LIB` names it.
pub mod cgroup;
pub mod channel;
pub mod config;
pub mod emulated;
mod engine;
pub mod heat;
pub mod machine;
mod mover;
pub mod share;
mod stats;

pub use config::Config;
pub use engine::Engine;
pub use machine::{Machine, MoveStatus, ProcessIds, ProcessObs, Refusal};
pub use mover::Mover;
pub use stats::{ProcessStats, Stats, TierStats};

/// What can go wrong making or running an engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration that does not parse or makes no sense (the message names the key).
    #[error("engine configuration: {0}")]
    Config(String),
    /// The policy refused its name or parameters.
    #[error(transparent)]
    Policy(#[from] strata_policy::PolicyError),
    /// The machine is not there (e.g. not running on the emulated machine).
    #[error("{0}")]
    Machine(String),
}
