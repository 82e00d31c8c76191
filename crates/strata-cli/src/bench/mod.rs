//! `strata bench ...`: benchmarks that print a table (or JSON with --json) and report
//! ratios measured side by side in one run, never absolute times across runs.
mod alloc;
mod locality;
mod ycsb;

use crate::config::Config;

#[derive(clap::Subcommand)]
pub enum Command {
    /// NextTo vs malloc: distinct pages touched per list traversal, and traversal speed
    Locality(locality::Args),
    /// Allocation throughput of Strata (explicit and preloaded) next to glibc, jemalloc, mimalloc
    Alloc(alloc::Args),
    /// YCSB on strata-kv: the std and nextto engines side by side (M2T's case study)
    Ycsb(ycsb::Args),
}

pub fn run(c: Command, _cfg: &Config) -> anyhow::Result<()> {
    match c {
        Command::Locality(a) => locality::run(a),
        Command::Alloc(a) => alloc::run(a),
        Command::Ycsb(a) => ycsb::run(a),
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
