//! The configuration file: one TOML block per component, units in field names, unknown
//! fields rejected. See examples/strata.toml.
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub topology: TopologyConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Tier override, fastest first, in the STRATA_TIERS syntax: "0;1", "0,2;1,3".
    pub tiers: Option<String>,
    /// Read sysfs from here instead of /sys (fixture trees, dry runs).
    pub sysfs: Option<String>,
}

/// Read the file (if any) and hand its settings to libstrata, which reads them as
/// STRATA_* variables on first use. The environment wins over the file.
pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg: Config = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    set_default_env("STRATA_TIERS", cfg.topology.tiers.as_deref());
    set_default_env("STRATA_SYSFS", cfg.topology.sysfs.as_deref());
    Ok(cfg)
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
    fn unknown_fields_are_errors() {
        assert!(toml::from_str::<Config>("[topology]\ntiers = \"0;1\"\n").is_ok());
        assert!(toml::from_str::<Config>("[topology]\ntier = \"0;1\"\n").is_err());
        assert!(toml::from_str::<Config>("[nonsense]\n").is_err());
    }

    #[test]
    fn the_example_config_parses() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/strata.toml");
        let text = std::fs::read_to_string(p).unwrap();
        toml::from_str::<Config>(&text).unwrap();
    }
}
