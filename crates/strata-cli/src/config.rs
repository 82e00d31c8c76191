//! The configuration file (`strata --config FILE`): one TOML file with a block per component,
//! units in field names, unknown fields rejected, every error with its key and line. It is
//! stratad's configuration ([`stratad::Config`]): the topology, the engine's blocks, the
//! policies' tables and the daemon's. examples/strata.toml documents every key.
use std::path::{Path, PathBuf};

/// Read the file (if any) and hand its topology to libstrata, which reads it as STRATA_TIERS
/// and STRATA_SYSFS on first use, and its daemon's socket to the programs run under Strata and
/// to the commands that talk to the daemon (STRATA_DAEMON_SOCKET). The environment wins over
/// the file.
pub fn load(path: Option<&Path>) -> anyhow::Result<Option<stratad::Config>> {
    let Some(path) = path else { return Ok(None) };
    let (cfg, _policy) = stratad::Config::load_with(path, None)?;
    set_default_env("STRATA_TIERS", cfg.topology.tiers.as_deref());
    set_default_env("STRATA_SYSFS", cfg.topology.sysfs.as_deref());
    set_default_env("STRATA_DAEMON_SOCKET", cfg.daemon.socket.to_str());
    Ok(Some(cfg))
}

/// The daemon's socket: `--socket` if given, else the configuration's (STRATA_DAEMON_SOCKET),
/// else the default.
pub fn socket(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("STRATA_DAEMON_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(strata_sys::STRATA_DAEMON_SOCKET_DEFAULT))
}

/// Set a STRATA_* variable for this process (and its children) unless already set.
pub fn set_default_env(name: &str, value: Option<&str>) {
    if let Some(v) = value {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_errors_with_their_line() {
        let dir = std::env::temp_dir().join(format!("strata-cli-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "[topology]\ntiers = \"0;1\"\n").unwrap();
        assert!(load(Some(&good)).unwrap().is_some());
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[topology]\ntier = \"0;1\"\n").unwrap();
        let e = load(Some(&bad)).unwrap_err().to_string();
        assert!(e.contains("tier") && e.contains("line 2"), "{e}");
        std::fs::write(&bad, "[nonsense]\n").unwrap();
        assert!(load(Some(&bad)).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
