//! The emulator's settings, read from its own table (emu/config.c, compiled into this crate):
//! the presets, every setting's unit and documentation, and the check of a machine before
//! anything runs on it.
use std::collections::BTreeMap;
use std::ffi::{c_char, CString};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;

extern "C" {
    fn emu_config_json(settings: *const c_char, buf: *mut c_char, n: usize) -> usize;
    fn emu_settings_json(buf: *mut c_char, n: usize) -> usize;
}

fn call(f: impl Fn(*mut c_char, usize) -> usize) -> String {
    let mut buf = vec![0u8; 1 << 16];
    let n = f(buf.as_mut_ptr() as *mut c_char, buf.len());
    buf.truncate(n.min(buf.len() - 1));
    String::from_utf8_lossy(&buf).into_owned()
}

/// One setting of the table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SettingDoc {
    pub key: String,
    pub unit: String,
    /// the default (the m2t preset): a number, or a list per node
    pub default: Value,
    pub doc: String,
}

/// One preset.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PresetDoc {
    pub name: String,
    pub doc: String,
    /// what it sets over the defaults
    pub settings: String,
}

/// The whole table, as `strata emu settings` prints it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    pub settings: Vec<SettingDoc>,
    pub presets: Vec<PresetDoc>,
}

/// The emulator's table of settings and presets.
pub fn table() -> Table {
    let text = call(|b, n| unsafe { emu_settings_json(b, n) });
    serde_json::from_str(&text).expect("emu/config.c writes valid JSON")
}

/// A machine as the emulator will run it: every setting's value (lists per node).
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub preset: String,
    values: BTreeMap<String, Value>,
}

impl Resolved {
    pub fn f64(&self, key: &str) -> f64 {
        self.values[key].as_f64().unwrap_or_else(|| panic!("setting {key} is a number"))
    }
    pub fn u64(&self, key: &str) -> u64 {
        self.values[key].as_u64().unwrap_or_else(|| panic!("setting {key} is an integer"))
    }
    /// A per-node setting (read_ns, capacity, ...), node 0 first.
    pub fn list(&self, key: &str) -> Vec<f64> {
        self.values[key].as_array().map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_f64).collect())
    }
    pub fn nodes(&self) -> usize {
        self.u64("nodes") as usize
    }
}

/// Check "key=value ..." as the emulator would, and resolve it over the defaults.
pub fn resolve(settings: &str) -> Result<Resolved, Error> {
    let c = CString::new(settings).map_err(|_| Error::Invalid("a setting contains a NUL byte".into()))?;
    let text = call(|b, n| unsafe { emu_config_json(c.as_ptr(), b, n) });
    let v: Value = serde_json::from_str(&text).expect("emu/config.c writes valid JSON");
    if let Some(e) = v["error"].as_str() {
        return Err(Error::Invalid(e.to_string()));
    }
    let mut values: BTreeMap<String, Value> =
        serde_json::from_value(v["config"].clone()).expect("emu/config.c writes an object");
    let preset = values.remove("preset").and_then(|p| p.as_str().map(str::to_string)).unwrap_or_default();
    Ok(Resolved { preset, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_documents_every_setting_and_the_m2t_preset() {
        let t = table();
        assert!(t.settings.len() > 30);
        for s in &t.settings {
            assert!(!s.unit.is_empty() && !s.doc.is_empty(), "{} has no unit or doc", s.key);
        }
        assert!(t.presets.iter().any(|p| p.name == "m2t"));
    }

    #[test]
    fn m2t_resolves_to_its_tiers() {
        let r = resolve("preset=m2t").unwrap();
        assert_eq!(r.preset, "m2t");
        assert_eq!(r.nodes(), 2);
        assert_eq!(r.list("read_ns"), vec![84.6, 156.0]);
        assert_eq!(r.list("capacity"), vec![(64u64 << 30) as f64, (128u64 << 30) as f64]);
        assert_eq!(r.u64("llc"), 60 << 20);
    }

    #[test]
    fn bad_settings_are_refused_naming_the_setting() {
        let e = resolve("preset=m2t nonsense=1").unwrap_err().to_string();
        assert!(e.contains("unknown setting 'nonsense=1'"), "{e}");
        let e = resolve("preset=m2t llc=1M llc_ways=15").unwrap_err().to_string();
        assert!(e.contains("whole sets"), "{e}");
        let e = resolve("l1=1M preset=m2t").unwrap_err().to_string();
        assert!(e.contains("preset= must come first"), "{e}");
        let e = resolve("preset=nowhere").unwrap_err().to_string();
        assert!(e.contains("unknown preset 'nowhere'"), "{e}");
        assert!(resolve("preset=m2t l2=0 capacity=1G,1G").is_ok());
    }
}
