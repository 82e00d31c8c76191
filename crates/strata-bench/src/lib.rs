//! Strata's benchmarks. Each is a module with its options (the command line's), a `run` that
//! measures and returns a typed report, and the report's human table; `strata bench NAME`
//! prints the table or, with `--json`, the report, and with `--out DIR` writes it as a
//! [`results`] file that names the machine, the date and the command.
//!
//! Every figure is a ratio measured side by side in one run, never an absolute time compared
//! across runs or machines.
//!
//! - [`locality`]: NextTo against malloc: pages per list traversal, traversal speed-up;
//! - [`alloc`]: allocation throughput of Strata next to glibc, jemalloc and mimalloc, and the
//!   whole-program cost of transparent mode;
//! - [`ycsb`]: M2T's key-value case study, natively, over the network and on the emulated
//!   machine, with M2T's plots ([`plot`]);
//! - [`tiering`]: workloads x policies x fast-tier sizes on the emulated machine (the tiering
//!   engine's benchmark);
//! - [`daemon`]: the live daemon's CPU against managed memory, and promotion in the guest;
//! - [`migrate`]: what moving a program's pages costs it, by move_pages and transactionally;
//! - [`summary`]: the headline figures of every results file, as a document.
pub mod alloc;
pub mod daemon;
pub mod locality;
pub mod migrate;
pub mod plot;
pub mod programs;
pub mod results;
pub mod summary;
pub mod tiering;
pub mod ycsb;

/// What can go wrong in a benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A usage error: options that make no sense together, an unknown name (the message says
    /// which). The CLI exits with 2 for it.
    #[error("{0}")]
    Invalid(String),
    /// A configuration file the command was given is wrong (the message says where).
    #[error("{0}")]
    Config(String),
    /// Something `make` builds is missing.
    #[error(transparent)]
    NotBuilt(#[from] strata_util::NotBuilt),
    /// The emulated machine refused or failed.
    #[error(transparent)]
    Emu(#[from] strata_emu::Error),
    /// A file or program could not be read, written or started.
    #[error(transparent)]
    Io(#[from] strata_util::IoError),
    /// A measurement went wrong: a corrupt list, a failed child run, an error from a server.
    #[error("{0}")]
    Failed(String),
}

pub(crate) fn failed(msg: impl Into<String>) -> Error {
    Error::Failed(msg.into())
}

/// `Err(invalid(msg))` unless `cond`.
pub(crate) fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Error> {
    if cond {
        Ok(())
    } else {
        Err(Error::Invalid(msg()))
    }
}
