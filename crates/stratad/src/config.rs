//! The engine's configuration: one TOML file with a block per component, units in the field
//! names, unknown fields refused (with their line). `examples/engine.toml` documents every key.
use serde::{Deserialize, Serialize};

use crate::Error;

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub scanner: ScannerConfig,
    #[serde(default)]
    pub sampler: SamplerConfig,
    #[serde(default)]
    pub mover: MoverConfig,
    /// one table per policy, by name ([policy.ambix]); read by strata-policy
    #[serde(default)]
    pub policy: toml::Table,
}

/// The A/D-bit scanner: how often, and how much of the address space a round.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScannerConfig {
    /// a round every this much time (Ambix: 1 s)
    pub period_ms: f64,
    /// bytes of address space scanned a round (Ambix: 40 GB)
    pub scan_bytes: u64,
}

impl Default for ScannerConfig {
    fn default() -> ScannerConfig {
        ScannerConfig { period_ms: 1000.0, scan_bytes: 40 << 30 }
    }
}

/// The LLC-miss sampler, for policies that use samples (MAT, hmalloc).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplerConfig {
    /// one sample every this many LLC misses (MAT: 4,096)
    pub period_misses: u64,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig { period_misses: 4096 }
    }
}

/// The mover: at most `rate_mbps` on average and `max_bytes_per_round` a round.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MoverConfig {
    /// MB/s the mover may move on average (tokens accrue with time, at most one round's worth
    /// of cap is kept)
    pub rate_mbps: f64,
    /// bytes a round at most
    pub max_bytes_per_round: u64,
}

impl Default for MoverConfig {
    fn default() -> MoverConfig {
        MoverConfig { rate_mbps: 2048.0, max_bytes_per_round: 500 << 20 }
    }
}

impl Config {
    /// Parse a configuration, checking every value and the policy's own table.
    pub fn parse(text: &str, policy: &str) -> Result<Config, Error> {
        let c: Config = toml::from_str(text).map_err(|e| Error::Config(e.to_string().trim().to_string()))?;
        c.check(policy)?;
        Ok(c)
    }

    /// Read and parse a file.
    pub fn load(path: &std::path::Path, policy: &str) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        Self::parse(&text, policy).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    pub fn check(&self, policy: &str) -> Result<(), Error> {
        if !(self.scanner.period_ms > 0.0 && self.scanner.period_ms.is_finite()) {
            return Err(Error::Config(format!("scanner.period_ms must be positive, not {}", self.scanner.period_ms)));
        }
        if self.scanner.scan_bytes == 0 {
            return Err(Error::Config("scanner.scan_bytes must be positive".into()));
        }
        if self.sampler.period_misses == 0 {
            return Err(Error::Config("sampler.period_misses must be positive".into()));
        }
        if !(self.mover.rate_mbps > 0.0 && self.mover.rate_mbps.is_finite()) {
            return Err(Error::Config(format!("mover.rate_mbps must be positive, not {}", self.mover.rate_mbps)));
        }
        for name in self.policy.keys() {
            if !strata_policy::POLICIES.contains(&name.as_str()) {
                return Err(Error::Config(format!(
                    "[policy.{name}]: no such policy (known: {})",
                    strata_policy::POLICIES.join(", ")
                )));
            }
        }
        // the chosen policy's table is checked by making it
        self.make_policy(policy)?;
        Ok(())
    }

    /// The policy `name` (with its variant, `mat:lru`) with the table of its base name.
    pub fn make_policy(&self, name: &str) -> Result<Box<dyn strata_policy::Policy>, Error> {
        let base = strata_policy::base_name(name);
        let table = self.policy.get(base).and_then(|v| v.as_table());
        if self.policy.get(base).is_some() && table.is_none() {
            return Err(Error::Config(format!("policy.{base} must be a table")));
        }
        Ok(strata_policy::create(name, table)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_keys_and_values_are_refused_naming_them() {
        assert!(Config::parse("", "ambix").is_ok());
        let e = Config::parse("[scanner]\nperiod = 5\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("unknown field `period`") && e.contains("line 2"), "{e}");
        let e = Config::parse("[scanner]\nperiod_ms = -1\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("scanner.period_ms"), "{e}");
        let e = Config::parse("[policy.ambix]\nmin_scan = 3\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("min_scan"), "{e}");
        let e = Config::parse("[policy.nosuch]\n", "ambix").unwrap_err().to_string();
        assert!(e.contains("policy.nosuch"), "{e}");
        let e = Config::parse("", "nosuch").unwrap_err().to_string();
        assert!(e.contains("no policy 'nosuch'"), "{e}");
        let c = Config::parse("[scanner]\nperiod_ms = 10\n[policy.ambix]\nmin_scans = 2\n", "ambix").unwrap();
        assert_eq!(c.scanner.period_ms, 10.0);
    }

    #[test]
    fn the_example_configuration_parses() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/engine.toml");
        for name in strata_policy::POLICIES {
            Config::load(&p, name).unwrap();
        }
        // the example's values are the defaults
        let c = Config::load(&p, "ambix").unwrap();
        assert_eq!(
            (&c.scanner, &c.sampler, &c.mover),
            (&ScannerConfig::default(), &SamplerConfig::default(), &MoverConfig::default())
        );
        let table = |n: &str| c.policy.get(n).and_then(|t| t.as_table());
        use strata_policy::{ambix, dram_first, hmalloc, mat, parse_config, strata};
        assert_eq!(parse_config::<ambix::Config>("ambix", table("ambix")).unwrap(), ambix::Config::default());
        assert_eq!(parse_config::<mat::Config>("mat", table("mat")).unwrap(), mat::Config::default());
        assert_eq!(parse_config::<hmalloc::Config>("hmalloc", table("hmalloc")).unwrap(), hmalloc::Config::default());
        let d = parse_config::<dram_first::Config>("dram-first", table("dram-first")).unwrap();
        assert_eq!(d, dram_first::Config::default());
        assert_eq!(parse_config::<strata::Config>("strata", table("strata")).unwrap(), strata::Config::default());
    }
}
