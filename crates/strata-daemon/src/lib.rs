//! Strata's live daemon: the engine ([`stratad`]) run on real Linux, for every program under
//! Strata and every process attached to it.
//!
//! ```text
//!  programs ──hello, channel, agent──▶ control ──▶ linux (the Machine) ◀── daemon (rounds)
//!                                                   │ trackers, moves       │ status, metrics
//!                                                   ▼                       ▼
//!                                          /proc, pagemap, DAMON      strata stats, Prometheus
//! ```
//!
//! [`linux`] is real Linux as the engine's machine: the processes it manages and where their
//! pages are; [`tracker`] how it sees their accesses (one module per tracker: pagemap-scan,
//! soft-dirty, DAMON, hint-fault samples through each program's [`agent`]); [`migrate`] how it
//! moves their pages. [`daemon`] runs the rounds, [`control`] serves the socket, [`status`] is
//! what `strata stats` shows and [`metrics`] serves it as Prometheus metrics; [`probe`] says
//! what this kernel and hardware offer.
pub mod agent;
pub mod control;
pub mod daemon;
mod damon;
pub mod linux;
pub mod metrics;
pub mod migrate;
mod pagemap;
pub mod pidfd;
pub mod probe;
mod scratch;
pub mod status;
pub mod tracker;

/// The base page size the daemon scans and moves by (x86-64).
pub(crate) const PAGE: u64 = 4096;
