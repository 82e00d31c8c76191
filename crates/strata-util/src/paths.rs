//! Where `make` put the libraries and programs Strata runs.
use std::path::{Path, PathBuf};

/// A file that has to be built first.
#[derive(Debug, thiserror::Error)]
#[error("{name} not found (looked at {tried}); build it with `{make}`{set}")]
pub struct NotBuilt {
    name: String,
    tried: String,
    make: String,
    set: String,
}

/// A file `make` builds into build/: `$env_var` (when the file has one), beside the running
/// binary, or the build/ folder of the repository this crate was built from.
pub fn find_built(name: &str, env_var: Option<&str>, make: &str) -> Result<PathBuf, NotBuilt> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(e) = env_var.and_then(std::env::var_os) {
        candidates.push(e.into());
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join(name));
            candidates.push(dir.join("../../build").join(name));
            candidates.push(dir.join("../lib").join(name));
        }
    }
    candidates.push(repo_root().join("build").join(name));
    let mut tried = Vec::new();
    for c in candidates {
        if c.exists() {
            return Ok(std::fs::canonicalize(&c).unwrap_or(c));
        }
        tried.push(c.display().to_string());
    }
    Err(NotBuilt {
        name: name.into(),
        tried: tried.join(", "),
        make: make.into(),
        set: env_var.map(|v| format!(", or set {v}")).unwrap_or_default(),
    })
}

/// The repository this crate was built from (examples, fixtures, build/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The public C headers: PREFIX/include beside an installed binary (PREFIX/bin), else the
/// repository's include/.
pub fn paths_include() -> PathBuf {
    let installed = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("../include")));
    match installed {
        Some(dir) if dir.join("strata.h").exists() => std::fs::canonicalize(&dir).unwrap_or(dir),
        _ => repo_root().join("include"),
    }
}
