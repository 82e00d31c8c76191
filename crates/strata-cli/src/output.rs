//! Printing: data to stdout (a closed pipe surfaces as a BrokenPipe error, which main turns
//! into a quiet exit), progress to stderr, and the flags every data-printing command shares.
use std::io::Write;
use std::path::PathBuf;

use strata_util::Progress;

/// Write data to stdout.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Write a value as pretty JSON to stdout.
pub fn emit_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    emit(&(serde_json::to_string_pretty(v)? + "\n"))
}

/// --json and --quiet.
#[derive(clap::Args, Clone, Debug)]
pub struct Output {
    /// Print JSON instead of the table (the fields are documented in docs/)
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr
    #[arg(long, short)]
    pub quiet: bool,
}

impl Output {
    pub fn progress(&self, what: &'static str) -> Progress {
        Progress::new(what, self.quiet)
    }

    /// The report as JSON, or its table.
    pub fn print<T: serde::Serialize>(&self, report: &T, table: impl FnOnce(&T) -> String) -> anyhow::Result<()> {
        if self.json {
            emit_json(report)
        } else {
            emit(&table(report))
        }
    }
}

/// --out DIR, for the measured runs a benchmark saves as data.
#[derive(clap::Args, Clone, Debug)]
pub struct Save {
    /// Also write the report as JSON (with machine, date and command) into DIR, and its plots;
    /// the repository keeps its runs in bench/results/CPU-MODEL/
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}
