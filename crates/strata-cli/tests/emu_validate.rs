//! `strata emu validate --quick` end to end (`make emu` first). A test binary of its own: it
//! times native runs against the model, so nothing may run beside it. Cargo runs test binaries
//! one at a time, while the tests of one binary run in parallel; beside emu.rs's emulator
//! tests, on two CPUs, the native 48 KiB stride chase read at 0.39-0.46 of the model's speed
//! (twice in clean-clone CI runs, each time on an AMD EPYC host), against 0.8-1.2 alone.
use std::process::Command;

use serde_json::Value;

fn json_of(c: &mut Command) -> Value {
    let o = c.output().expect("run strata");
    // the report, printed before the verdict, says which pass and which side moved
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{c:?} failed: {err}\nits report: {out}");
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// The validation, small and with loose bounds (the real figures are in the README).
#[test]
fn validate_quick_is_close_to_cachegrind_and_to_native() {
    let v = json_of(
        Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["emu", "validate", "--quick", "--repeat", "2", "--json", "--quiet"]),
    );
    let err = v["max_miss_rel_err"].as_f64().unwrap();
    assert!(err < 0.05, "miss counts {err} away from cachegrind");
    let (n, e) = (v["layout_speedup_native"].as_f64().unwrap(), v["layout_speedup_emulated"].as_f64().unwrap());
    // (natively 2.2-2.4x on an AMD EPYC host, whose prefetcher follows the malloc lists' stride;
    // emulated 2.9-3.1x)
    assert!(n > 1.3 && e > 1.3, "next_to lists must be faster both ways: native {n}, emulated {e}");
    assert!(v["accesses_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(v["workloads"].as_array().unwrap().len(), 3);
    // two runs each side; the emulator's speed comes from the fastest of each
    let l = &v["layout"];
    let runs = |k: &str| l[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
    let (nat, emu) = (runs("native_runs_s"), runs("emulated_runs_s"));
    assert_eq!((nat.len(), emu.len()), (2, 2));
    assert_eq!(l["emulated_s"].as_f64().unwrap(), emu[0].min(emu[1]));
    assert_eq!(l["native_s"].as_f64().unwrap(), nat[0].min(nat[1]));
    // the native speed is the ceiling the emulator's is measured against
    let (acc, aps) = (l["accesses"].as_f64().unwrap(), l["native_accesses_per_sec"].as_f64().unwrap());
    assert_eq!(aps, acc / nat[0].min(nat[1]));
    let (top, top_native) = (v["accesses_per_sec"].as_f64().unwrap(), v["native_accesses_per_sec"].as_f64().unwrap());
    let slowdown = v["slowdown"].as_f64().unwrap();
    assert!((top * slowdown / top_native - 1.0).abs() < 1e-9, "{top} x {slowdown} vs {top_native}");
    // each pass pairs a calibration with the native runs after it; the ratio is the median pass's
    let (nsp, esp, ratios) = (runs("native_speedups"), runs("emulated_speedups"), runs("ratios"));
    assert_eq!((nsp.len(), esp.len(), ratios.len()), (2, 2, 2));
    for i in 0..2 {
        assert_eq!(ratios[i], esp[i] / nsp[i]);
    }
    assert_eq!(n, (nsp[0] + nsp[1]) / 2.0, "the median of the passes' native speed-ups");
    assert_eq!(v["layout_ratio"].as_f64().unwrap(), (ratios[0] + ratios[1]) / 2.0);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2, "a calibration a pass");
    for c in v["chases"].as_array().unwrap() {
        let r: Vec<f64> = c["ratios"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(c["ratio"].as_f64().unwrap(), (r[0] + r[1]) / 2.0, "{}", c["name"]);
    }
}
