//! An emulated machine as the host side builds it: a preset, then settings over it, checked
//! against the emulator's own table before anything runs.
use serde::{Deserialize, Serialize};

use crate::config::{self, Resolved};
use crate::{calibrate, Error};

/// The emulated kernel's tiering mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// first touch, nothing moves
    None,
    /// the tiering mechanism alone: hint faults on slow pages, promotion at a second fault (rate
    /// limited), demotion between two watermarks; no hot threshold, fixed scan period
    Tpp,
    /// tpp with Nomad's transactional migration: promotions copied in the background while the
    /// page stays in use, shadows kept on the slow node so clean demotions are remaps
    Nomad,
    /// Linux 6.x's own tiering rule by rule (NUMA balancing in memory-tiering mode, hot
    /// threshold, rate limit, adaptive scan period, kswapd and direct demotion): emu/linux.c
    Linux,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::None => "none",
            Kernel::Tpp => "tpp",
            Kernel::Nomad => "nomad",
            Kernel::Linux => "linux",
        }
    }
    fn setting(self) -> &'static str {
        match self {
            Kernel::None => "0",
            Kernel::Tpp => "1",
            Kernel::Nomad => "2",
            Kernel::Linux => "3",
        }
    }
}

/// Where a program's memory may go, as the tiering comparisons name it (M2T's configurations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tiering {
    /// everything on the slow tier: the baseline
    FarOnly,
    /// a fast tier of the given size, first touch, nothing moves
    FirstTouch,
    /// the same fast tier, with the emulated kernel's tpp mode moving pages
    Tpp,
    /// everything fits in the fast tier: the upper bound
    AllFast,
}

impl Tiering {
    pub fn name(self) -> &'static str {
        match self {
            Tiering::FarOnly => "far-only",
            Tiering::FirstTouch => "first-touch",
            Tiering::Tpp => "tpp",
            Tiering::AllFast => "all-fast",
        }
    }

    /// The machine for this configuration, with a fast tier of `fast_bytes` where it has one.
    pub fn apply(self, m: &Machine, fast_bytes: u64) -> Result<Machine, Error> {
        let mut m = m.clone();
        let (fast, kernel) = match self {
            Tiering::FarOnly => (0, Kernel::None),
            Tiering::FirstTouch => (fast_bytes, Kernel::None),
            Tiering::Tpp => (fast_bytes, Kernel::Tpp),
            Tiering::AllFast => (ALL_FAST_BYTES, Kernel::None),
        };
        m.set_fast_bytes(fast)?;
        m.set_kernel(kernel);
        Ok(m)
    }

    /// The fast tier this configuration had for a footprint: none, all of it, or `fast_bytes`.
    pub fn fast_bytes(self, fast_bytes: u64, footprint_bytes: u64) -> u64 {
        match self {
            Tiering::FarOnly => 0,
            Tiering::AllFast => footprint_bytes,
            _ => fast_bytes,
        }
    }
}

/// A fast tier larger than any program's footprint.
pub const ALL_FAST_BYTES: u64 = 1 << 50;

/// A fast tier of `ratio` of a footprint, at least a page (`--fast-ratio`).
pub fn fast_bytes_of(footprint_bytes: u64, ratio: f64) -> u64 {
    ((footprint_bytes as f64 * ratio) as u64).max(4096)
}

/// An emulated machine: a preset's name, then key=value settings in order (later ones win),
/// as $STRATA_EMU gives them to the emulator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub preset: String,
    pub settings: Vec<(String, String)>,
}

impl Machine {
    /// A preset of the emulator's table (`strata emu settings` lists them), or `host`: this
    /// machine as `strata emu calibrate` last measured it (measured now, a few seconds, when it
    /// never was; progress unless quiet).
    pub fn preset(name: &str, quiet: bool) -> Result<Machine, Error> {
        match name {
            "host" => Machine::host(&calibrate::saved_or_measured(quiet)?),
            _ => {
                let m = Machine { preset: name.into(), settings: vec![("preset".into(), name.into())] };
                m.resolve()?;
                Ok(m)
            }
        }
    }

    /// The `host` preset of a calibration.
    pub fn host(c: &calibrate::Calibration) -> Result<Machine, Error> {
        let mut m = Machine { preset: "host".into(), settings: vec![("preset".into(), "host".into())] };
        for (k, v) in c.settings() {
            m.set(&k, &v);
        }
        m.resolve()?;
        Ok(m)
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.settings.retain(|(k, _)| k != key);
        self.settings.push((key.into(), value.into()));
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn set_kernel(&mut self, k: Kernel) {
        self.set("kernel", k.setting());
    }

    /// The scan period of the tpp mode, in simulated milliseconds.
    pub fn set_tpp_scan_period_ms(&mut self, ms: f64) {
        self.set("tpp_scan_period_ns", &(ms * 1e6).to_string());
    }

    /// The fast tier's capacity, split evenly between its nodes (node 0's alone on a machine
    /// of one node a tier), keeping the other nodes'.
    pub fn set_fast_bytes(&mut self, bytes: u64) -> Result<(), Error> {
        let r = self.resolve()?;
        let tiers = r.list("tier");
        let fast: Vec<usize> =
            (0..r.list("capacity").len()).filter(|&i| tiers.get(i).is_none_or(|t| *t == 0.0)).collect();
        let share = bytes / fast.len().max(1) as u64;
        let caps: Vec<String> = r
            .list("capacity")
            .iter()
            .enumerate()
            .map(|(i, c)| if fast.contains(&i) { share.to_string() } else { (*c as u64).to_string() })
            .collect();
        self.set("capacity", &caps.join(","));
        Ok(())
    }

    /// $STRATA_EMU for this machine.
    pub fn env(&self) -> String {
        self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// Every setting as the emulator will run it, or why it will not.
    pub fn resolve(&self) -> Result<Resolved, Error> {
        config::resolve(&self.env())
    }
}

/// The emulator options shared by every command that runs on the emulated machine (`emu run`,
/// `bench ycsb --emulate`), parsed once.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MachineArgs {
    /// Any emulator setting, KEY=VALUE (repeatable; `strata emu settings` lists every key with
    /// its unit, e.g. --set llc=8M --set llc_ways=16)
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_setting)]
    pub set: Vec<(String, String)>,
    /// The fast tier as a fraction of the program's footprint, measured by a first run with
    /// everything fast [default: the preset's capacity for `emu run`; 0.59 for `bench ycsb`,
    /// M2T's 64 GB of ~109 GB; 0.125,0.25,0.5 for `bench tiering`, which takes several]
    #[arg(long, value_name = "R", value_parser = parse_ratio, value_delimiter = ',')]
    pub fast_ratio: Vec<f64>,
    /// The tpp mode's scan period in simulated ms [default: 1000, the kernel's, for `emu run`;
    /// 100 for `bench ycsb`, whose runs last well under a simulated second]
    #[arg(long, value_name = "MS", value_parser = parse_positive)]
    pub tpp_scan_period_ms: Option<f64>,
}

impl MachineArgs {
    /// The one fast-tier ratio of a command that takes one.
    pub fn one_fast_ratio(&self) -> Result<Option<f64>, Error> {
        match self.fast_ratio[..] {
            [] => Ok(None),
            [r] => Ok(Some(r)),
            _ => Err(Error::Invalid("--fast-ratio: this command takes one ratio".into())),
        }
    }

    /// The settings given with --set, over the machine, checked.
    pub fn apply(&self, m: &mut Machine) -> Result<(), Error> {
        for (k, v) in &self.set {
            m.set(k, v);
        }
        m.resolve()?;
        Ok(())
    }
}

/// KEY=VALUE, with a key the emulator knows (the value is checked with the whole machine).
pub fn parse_setting(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}': expected KEY=VALUE"))?;
    if k == "preset" {
        return Err("choose the preset with --preset (or --emulate), not --set".into());
    }
    if !config::table().settings.iter().any(|d| d.key == k) {
        return Err(format!("unknown setting '{k}' (`strata emu settings` lists them)"));
    }
    Ok((k.to_string(), v.to_string()))
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if r > 0.0 && r <= 1.0 {
        Ok(r)
    } else {
        Err(format!("{r} is not in (0, 1]"))
    }
}

fn parse_positive(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if r > 0.0 && r.is_finite() {
        Ok(r)
    } else {
        Err(format!("{r} must be positive"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiering_configurations_set_the_fast_tier_and_the_kernel() {
        let m = Machine::preset("m2t", true).unwrap();
        let far = Tiering::FarOnly.apply(&m, 1 << 30).unwrap().resolve().unwrap();
        assert_eq!((far.list("capacity")[0], far.u64("kernel")), (0.0, 0));
        let tpp = Tiering::Tpp.apply(&m, 1 << 30).unwrap().resolve().unwrap();
        assert_eq!(tpp.list("capacity"), vec![(1u64 << 30) as f64, (128u64 << 30) as f64]);
        assert_eq!(tpp.u64("kernel"), 1);
        let all = Tiering::AllFast.apply(&m, 1 << 30).unwrap().resolve().unwrap();
        assert_eq!(all.list("capacity")[0], ALL_FAST_BYTES as f64);
        // a fast tier of two nodes is split between them
        let d = Machine::preset("dram-first", true).unwrap();
        let ft = Tiering::FirstTouch.apply(&d, 64 << 20).unwrap().resolve().unwrap();
        assert_eq!(ft.list("capacity"), vec![(32u64 << 20) as f64, (32u64 << 20) as f64, (64u64 << 30) as f64]);
        assert_eq!(serde_json::to_string(&Tiering::FirstTouch).unwrap(), "\"first-touch\"");
    }

    #[test]
    fn settings_are_checked_when_parsed() {
        assert_eq!(parse_setting("llc=8M"), Ok(("llc".into(), "8M".into())));
        assert!(parse_setting("nonsense=1").unwrap_err().contains("unknown setting 'nonsense'"));
        assert!(parse_setting("llc").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_setting("preset=m2t").is_err());
        assert!(parse_ratio("0").is_err() && parse_ratio("1.5").is_err() && parse_ratio("0.25").is_ok());
        assert!(Machine::preset("nowhere", true).unwrap_err().to_string().contains("unknown preset"));
    }
}
