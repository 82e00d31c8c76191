//! Measured runs as data: a benchmark's report saved as JSON with what it was measured on,
//! when, and by which command, so a figure never travels without them. `--out DIR` writes
//! DIR/BENCHMARK.json; the repository keeps its runs under bench/results/CPU/ (one folder per
//! processor model) and `strata bench summary` turns them into a document.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_util::Host;

use strata_util::io;

use crate::Error;

/// What a saved report was measured on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    /// locality, alloc, ycsb-native, ycsb-emulated-m2t, ...
    pub benchmark: String,
    /// the command line that produced it
    pub command: String,
    /// UTC, YYYY-MM-DD
    pub date: String,
    pub host: Host,
}

impl Measured {
    /// This process: its command line (after the libstrata options the environment set, such
    /// as STRATA_COLOUR=1, which change what is measured), today, this host.
    pub fn now(benchmark: &str) -> Measured {
        let mut args: Vec<String> = std::env::args().collect();
        if let Some(a0) = args.first_mut() {
            *a0 = "strata".into();
        }
        let options = strata::options_text();
        let set = options
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter_map(|name| std::env::var(name).ok().map(|v| format!("{name}={v}")));
        Measured {
            benchmark: benchmark.into(),
            command: set.chain(args).collect::<Vec<_>>().join(" "),
            date: strata_util::today(),
            host: Host::detect(),
        }
    }
}

/// A report as saved: `measured` beside the report's own fields.
#[derive(Debug, Serialize, Deserialize)]
pub struct Saved<T> {
    pub measured: Measured,
    #[serde(flatten)]
    pub report: T,
}

/// Save `report` as DIR/BENCHMARK.json (the folder is created); the file's path.
pub fn save<T: Serialize>(dir: &Path, benchmark: &str, report: &T) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let path = dir.join(format!("{benchmark}.json"));
    let saved = Saved { measured: Measured::now(benchmark), report };
    let text = serde_json::to_string_pretty(&saved).expect("reports serialize") + "\n";
    std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
    Ok(path)
}
