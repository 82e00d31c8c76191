//! `strata bench ...`: benchmarks that print a table (or JSON with --json) and report
//! ratios measured side by side in one run, never absolute times across runs.
mod alloc;
mod locality;

use crate::config::Config;

#[derive(clap::Subcommand)]
pub enum Command {
    /// NextTo vs malloc: distinct pages touched per list traversal, and traversal speed
    Locality(locality::Args),
    /// Allocation throughput of strata_malloc/strata_free next to glibc malloc/free
    Alloc(alloc::Args),
}

pub fn run(c: Command, _cfg: &Config) -> anyhow::Result<()> {
    match c {
        Command::Locality(a) => locality::run(a),
        Command::Alloc(a) => alloc::run(a),
    }
}

/// The median of some measurements (they are noisy: the median resists outliers).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
