//! The tiering engine on the emulated machine, end to end (`make emu` first): an engine policy
//! runs inside an emulated program on its simulated time, deterministically; bad policies and
//! configurations are refused by name; `strata bench tiering` gives rows of the documented shape,
//! bounded by all-fast.
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn strata() -> Command {
    Command::new(env!("CARGO_BIN_EXE_strata"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// target/emu's strata, built by `make emu`.
fn emu_strata() -> PathBuf {
    let out = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .unwrap();
    let p = root().join("target/emu").join(host).join("release/strata");
    assert!(p.exists(), "run `make emu` first ({} is missing)", p.display());
    p
}

fn config(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("strata-tiering-test-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// gups-hot (8 MiB) on m2t-4m with a quarter of the footprint fast, under ambix.
fn ambix_run(cfg: &Path) -> Value {
    let o = strata()
        .args([
            "emu",
            "run",
            "--json",
            "-q",
            "--preset",
            "m2t-4m",
            "--fast-ratio",
            "0.25",
            "--policy",
            "ambix",
            "--policy-config",
        ])
        .arg(cfg)
        .arg("--")
        .arg(emu_strata())
        .args(["bench", "tiering-workload", "--workload", "gups-hot", "--size-mb", "8"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn an_engine_policy_runs_in_the_program_and_two_runs_give_the_same_counts() {
    let cfg = config("det", "[scanner]\nperiod_ms = 1.0\n[policy.ambix]\nmin_scans = 3\n");
    let (a, b) = (ambix_run(&cfg), ambix_run(&cfg));
    let e = &a["engine"];
    assert_eq!(e["policy"], "ambix");
    assert!(e["rounds"].as_u64().unwrap() > 10 && e["full_scans"].as_u64().unwrap() > 0, "{e}");
    assert!(e["promoted_pages"].as_u64().unwrap() > 0, "the hot tenth lies beyond the fast tier: {e}");
    assert!(a["background"]["scanned_pages"].as_u64().unwrap() > 0);
    // the engine's moves are the emulator's background moves
    assert_eq!(a["background"]["promoted_pages"], e["promoted_pages"]);
    // identical counts: the program's, the tiers', the engine's (but its host CPU time)
    for k in ["totals", "sim_ns", "nodes", "background"] {
        assert_eq!(a[k], b[k], "{k} differs between two runs");
    }
    // (but its host CPU time, and the pid its per-process figures are keyed by)
    let strip = |v: &Value| {
        let mut v = v.clone();
        let o = v.as_object_mut().unwrap();
        for k in ["policy_cpu_ns", "engine_cpu_ns"] {
            o.remove(k);
        }
        let procs: Vec<Value> = o["processes"].as_object().unwrap().values().cloned().collect();
        o.insert("processes".into(), Value::Array(procs));
        v
    };
    assert_eq!(strip(&a["engine"]), strip(&b["engine"]), "the engine's statistics differ");
    let _ = std::fs::remove_file(cfg);
}

/// Under --policy an unmodified program's malloc is libstrata's (transparent mode), so an
/// object policy sees its objects and moves them; with --allocator glibc it sees none. An
/// engine whose period outlasts the program says so.
#[test]
fn emu_run_gives_object_policies_the_programs_objects_and_says_when_no_round_ran() {
    let cfg = config("objects", "[scanner]\nperiod_ms = 1.0\n");
    // --trace empties its file first: what was there is gone
    let trace = config("objects-trace", "not a trace line\n");
    let run = |allocator: &str| {
        let o = strata()
            .args(["emu", "run", "--json", "-q", "--preset", "m2t-4m", "--fast-ratio", "0.25"])
            .args(["--policy", "mat:apb", "--allocator", allocator, "--trace"])
            .arg(&trace)
            .arg("--policy-config")
            .arg(&cfg)
            .arg("--")
            .arg(emu_strata())
            .args(["bench", "tiering-workload", "--workload", "cold-first", "--size-mb", "8"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["engine"].clone()
    };
    let strata_malloc = run("strata");
    // the trace of that run: a line a round, the last with the report's totals, and the phase
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = lines.iter().rfind(|l| l.get("round").is_some()).unwrap();
    assert_eq!(last["round"], strata_malloc["rounds"], "{text}");
    assert_eq!(last["promoted_bytes"], strata_malloc["promoted_bytes"], "{text}");
    assert_eq!(lines.iter().filter(|l| l["phase"] == "measured").count(), 1, "{text}");
    let glibc = run("glibc");
    assert!(strata_malloc["objects"].as_u64() > Some(0), "{strata_malloc}");
    assert!(strata_malloc["migrated_bytes"].as_u64() > Some(0), "MAT moved records: {strata_malloc}");
    assert_eq!(glibc["objects"], 0, "{glibc}");
    let _ = std::fs::remove_file(cfg);
    let _ = std::fs::remove_file(trace);
    // the default period, a simulated second, is longer than this program
    let o = strata()
        .args(["emu", "run", "--preset", "m2t-4m", "--policy", "ambix", "--"])
        .arg(emu_strata())
        .args(["bench", "tiering-workload", "--workload", "cold-first", "--size-mb", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("the engine ran no round"), "{err}");
}

#[test]
fn bad_policies_and_configurations_are_refused_by_name() {
    let prog = emu_strata();
    let run = |args: &[&str]| {
        let o = strata()
            .args(["emu", "run", "-q"])
            .args(args)
            .arg("--")
            .arg(&prog)
            .args(["bench", "tiering-workload", "--workload", "gups-hot", "--size-mb", "1"])
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = run(&["--policy", "nosuch"]);
    assert_eq!(code, Some(2), "a usage error");
    assert!(err.contains("no policy 'nosuch'") && err.contains("ambix"), "{err}");
    let bad = config("bad", "[policy.ambix]\nmin_scan = 3\n");
    let (code, err) = run(&["--policy", "ambix", "--policy-config", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("min_scan") && err.contains("ambix"), "{err}");
    let bad = config("range", "[policy.ambix]\nfast_free_fraction = 2.0\n");
    let (_, err) = run(&["--policy", "ambix", "--policy-config", bad.to_str().unwrap()]);
    assert!(err.contains("fast_free_fraction"), "{err}");
    let bad = config("key", "[scanner]\nperiod = 5\n");
    let (_, err) = run(&["--policy", "ambix", "--policy-config", bad.to_str().unwrap()]);
    assert!(err.contains("unknown field `period`") && err.contains("line 2"), "{err}");
    let o = strata().args(["bench", "tiering", "-q", "--policies", "first-touch,nosuch"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown policy 'nosuch'"));
    let o = strata().args(["bench", "tiering", "-q", "--workloads", "nosuch"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown workload 'nosuch'"));
}

#[test]
fn a_small_tiering_matrix_has_the_documented_rows() {
    let traces = std::env::temp_dir().join(format!("strata-tiering-test-{}-traces", std::process::id()));
    let o = strata()
        .args([
            "bench",
            "tiering",
            "--json",
            "-q",
            "--workloads",
            "cold-first",
            // large enough that the index exceeds the 4 MiB LLC, and rounds short enough that
            // Ambix's ten-scan delay fits in the run
            "--size-mb",
            "32",
            "--period-ms",
            "1",
            "--fast-ratio",
            "0.25",
            "--trace",
        ])
        .arg(&traces)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["preset"], "m2t-4m");
    let rows = v["rows"].as_array().unwrap();
    let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["all-fast", "far-only", "first-touch", "tpp", "ambix", "mat:apb", "hmalloc", "strata"]);
    let fig = |p: &str| rows.iter().find(|r| r["policy"] == p).unwrap()["figure"].as_f64().unwrap();
    for r in rows {
        for k in [
            "workload",
            "policy",
            "fast_ratio",
            "preset",
            "figure",
            "unit",
            "speedup_over_first_touch",
            "speedup_over_tpp",
            "fraction_of_all_fast",
            "promoted_bytes",
            "demoted_bytes",
            "migrated_bytes",
            "policy_cpu_ms",
            "hint_faults",
        ] {
            assert!(r.get(k).is_some(), "a row lacks {k}: {r}");
        }
        assert_eq!(r["unit"], "ops/s");
        let f = r["figure"].as_f64().unwrap();
        // the bounds: nothing beats everything fast; first touch and Ambix never lose to
        // everything slow (a thrashing tpp can: its moves cost more than the fast tier returns);
        // a policy that cannot act here still pays for its samples (hmalloc: cold-first's
        // table and index are allocated before its first epoch ends, and first touch is within
        // 0.5 % of far-only; hmalloc ran at 0.998 of it), so the others get 1 %
        assert!(f <= fig("all-fast") * 1.001, "{} beats all-fast: {f} > {}", r["policy"], fig("all-fast"));
        match r["policy"].as_str().unwrap() {
            "tpp" => {}
            "first-touch" | "ambix" => assert!(f >= fig("far-only") * 0.999, "{} falls below far-only", r["policy"]),
            p => assert!(f >= fig("far-only") * 0.99, "{p} falls 1 % below far-only"),
        }
    }
    let ambix = rows.iter().find(|r| r["policy"] == "ambix").unwrap();
    assert_eq!(ambix["fast_ratio"], 0.25);
    assert!(ambix["migrated_bytes"].as_u64().unwrap() > 0 && ambix["policy_cpu_ms"].as_f64().unwrap() > 0.0);
    let ft = rows.iter().find(|r| r["policy"] == "first-touch").unwrap();
    assert_eq!(ft["migrated_bytes"], 0);
    assert_eq!(ft["speedup_over_first_touch"], 1.0);

    // --trace: a file for each engine policy's run (none for the kernel's modes), a line a
    // round with the engine's totals so far, and the workload's measured phase
    let mut files: Vec<String> =
        std::fs::read_dir(&traces).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    let fast_mib = ambix["fast_bytes"].as_u64().unwrap() >> 20;
    let expect: Vec<String> = ["ambix", "hmalloc", "mat:apb", "strata"]
        .iter()
        .map(|p| format!("cold-first-{p}-{fast_mib}MiB.jsonl"))
        .collect();
    assert_eq!(files, expect);
    let text = std::fs::read_to_string(traces.join(&expect[0])).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let rounds: Vec<&Value> = lines.iter().filter(|l| l.get("round").is_some()).collect();
    assert!(rounds.len() > 10, "{text}");
    for w in rounds.windows(2) {
        assert!(w[1]["ms"].as_f64() > w[0]["ms"].as_f64() && w[1]["round"].as_u64() > w[0]["round"].as_u64());
        assert!(w[1]["promoted_bytes"].as_u64() >= w[0]["promoted_bytes"].as_u64());
    }
    let last = rounds.last().unwrap();
    assert_eq!(last["promoted_bytes"], ambix["promoted_bytes"], "{last}");
    assert_eq!(last["demoted_bytes"], ambix["demoted_bytes"], "{last}");
    assert!(last["fast_free_bytes"].as_u64() <= last["fast_capacity_bytes"].as_u64());
    let phase: Vec<&Value> = lines.iter().filter(|l| l["phase"] == "measured").collect();
    assert_eq!(phase.len(), 1, "{text}");
    let (from, to) = (phase[0]["from_ms"].as_f64().unwrap(), phase[0]["to_ms"].as_f64().unwrap());
    assert!(0.0 < from && from < to && to <= last["ms"].as_f64().unwrap() + 1.0, "{}", phase[0]);
    let _ = std::fs::remove_dir_all(&traces);
}

/// The moves Nomad makes (the nomad kernel mode) and libstrata's agent makes (an engine policy
/// with /transactional) are transactional: their rows count commits; a read-only hot set keeps
/// its shadows clean, so some demotions are remaps.
#[test]
fn nomad_and_transactional_rows_count_commits_and_copy_free_demotions() {
    let o = strata()
        .args(["bench", "tiering", "--json", "-q", "--workloads", "gups-hot-ro", "--size-mb", "32"])
        .args(["--period-ms", "1", "--fast-ratio", "0.25", "--policies", "tpp,nomad,ambix/transactional"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let row = |p: &str| rows.iter().find(|r| r["policy"] == p).unwrap_or_else(|| panic!("no {p} row: {v}"));
    assert_eq!(row("tpp")["transactional"]["commits"], 0);
    for p in ["nomad", "ambix/transactional"] {
        let x = &row(p)["transactional"];
        assert!(x["commits"].as_u64() > Some(0), "{p}: {x}");
        assert!(x["shadow_demotions"].as_u64() > Some(0), "{p}: {x}");
    }
}

/// The kernel's own tiering (the linux mode) and the field's policies run in the matrix: the
/// linux rows carry the kernel's counters (scans, candidates, promotions within them, kswapd
/// and spills) and the threads' time in the kernel; each field policy runs at its own tracker's
/// period times the time scale (DAMON's 100 ms aggregation: 0.5 ms at 0.005), and moves pages.
#[test]
fn the_kernels_tiering_and_the_fields_policies_run_beside_the_others() {
    let o = strata()
        .args(["bench", "tiering", "--json", "-q", "--workloads", "gups-hot", "--size-mb", "32"])
        .args(["--fast-ratio", "0.25", "--policies", "linux,damon,memtierd,hybridtier"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["time_scale"], 0.005);
    let rows = v["rows"].as_array().unwrap();
    let row = |p: &str| rows.iter().find(|r| r["policy"] == p).unwrap_or_else(|| panic!("no {p} row: {v}"));
    let linux = &row("linux")["linux"];
    assert_eq!(linux["time_scale"], 0.005, "{linux}");
    let n = |k: &str| linux[k].as_u64().unwrap_or_else(|| panic!("no {k}: {linux}"));
    assert!(n("scans") > 0 && n("marked_pages") > 0 && n("promoted_pages") > 0, "{linux}");
    assert!(n("promoted_pages") <= n("candidates"), "only candidates under the threshold: {linux}");
    assert!(n("spilled_allocations") > 0, "a quarter fast: allocations spill at the low watermark: {linux}");
    assert!(row("linux")["thread_kernel_ms"].as_f64() > Some(0.0), "hint faults and scans cost the threads");
    for p in ["damon", "memtierd", "hybridtier"] {
        let r = row(p);
        let e = &r["engine"];
        let rounds = e["rounds"].as_f64().unwrap_or_else(|| panic!("{p}: {r}"));
        let per_round_ms = r["sim_ms"].as_f64().unwrap() / rounds;
        let own = match p {
            "damon" => 0.5,     // 100 ms x 0.005
            "memtierd" => 25.0, // its tracker's 5 s scans
            _ => 5.0,           // the engine's 1 s
        };
        assert!((per_round_ms / own - 1.0).abs() < 0.5, "{p}: a round every {per_round_ms} ms, not {own}: {e}");
    }
}

/// multi-site (64 MiB: its hot sites exceed the 4 MiB LLC) in transparent mode with a quarter of it fast, under hmalloc: the
/// context report libstrata writes at exit shows the directives hmalloc left in the channel.
#[test]
fn hmalloc_learns_to_send_a_cold_sites_allocations_to_the_slow_tier() {
    let cfg = config("hmalloc", "[scanner]\nperiod_ms = 1.0\n[sampler]\nperiod_misses = 64\n");
    let report = std::env::temp_dir().join(format!("strata-tiering-test-{}-contexts.json", std::process::id()));
    let o = strata()
        .args(["emu", "run", "--json", "-q", "--preset", "m2t-4m", "--fast-bytes", "16M", "--policy", "hmalloc"])
        .arg("--policy-config")
        .arg(&cfg)
        .arg("--")
        .arg("env")
        .arg(format!("LD_PRELOAD={}", root().join("build/libstrata.so").display()))
        .arg(format!("STRATA_REPORT={}", report.display()))
        .arg(emu_strata())
        .args(["bench", "tiering-workload", "--workload", "multi-site", "--size-mb", "64"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &run["engine"];
    assert_eq!(e["policy"], "hmalloc");
    assert!(e["samples"].as_u64().unwrap() > 1000 && e["directives_set"].as_u64().unwrap() > 0, "{e}");
    assert_eq!(e["migrated_bytes"], 0, "hmalloc moves nothing: {e}");

    // the workload's output names its sites' code, coldest first; each context's innermost
    // return address lies in one of them
    let text = std::fs::read_to_string(&report).unwrap();
    let _ = std::fs::remove_file(&report);
    let contexts: Value = serde_json::from_str(&text).unwrap();
    // (with --json the program's output goes to stderr)
    let program = String::from_utf8_lossy(&o.stderr);
    let at = program.find("\"sites\":").expect("the workload names its sites") + "\"sites\":".len();
    let end = at + program[at..].find(']').unwrap() + 1;
    let sites: Vec<u64> = serde_json::from_str(&program[at..end]).unwrap();
    // the site whose code starts last at or before the address (sites are a few hundred bytes)
    let site_of = |addr: u64| {
        let (k, start) = sites.iter().enumerate().filter(|(_, &s)| s <= addr).max_by_key(|(_, &s)| s)?;
        (addr - start < 4096).then_some(k)
    };
    let mut directive = vec![None; sites.len()];
    for c in contexts["contexts"].as_array().unwrap() {
        let ret = u64::from_str_radix(c["stack"][0]["addr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        if let Some(k) = site_of(ret) {
            directive[k] = Some(c["directive"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(directive[0].as_deref(), Some("slow"), "the coldest site: {directive:?}");
    assert_eq!(directive[7].as_deref(), Some("fast"), "the hottest site: {directive:?}");

    // where the memory landed: the workload's share of each site's pages on the fast node at
    // each generation's end. The first generation is first touch (the coldest sites, allocated
    // first, take the fast tier); from the third on, the two hottest sites (16 MiB, the fast
    // tier less what the rest of the program holds) have it and the coldest has none. (An
    // epoch that ended between generations, when the program had just freed its arrays, once
    // sized the knapsack to what was left and sent the hot sites to the slow tier.)
    let at = program.find("\"placement\":").expect("the workload reports placement") + "\"placement\":".len();
    let mut de = serde_json::Deserializer::from_str(&program[at..]);
    let placement: Vec<Vec<f64>> = serde::Deserialize::deserialize(&mut de).unwrap();
    assert_eq!(placement.len(), 8, "{placement:?}");
    assert!(placement[0][0] > 0.9, "first touch fills the fast tier with the coldest site: {placement:?}");
    for g in &placement[2..] {
        assert!(g[6] > 0.9 && g[7] > 0.6, "the hot sites are fast: {placement:?}");
        assert!(g[0] < 0.1, "the coldest site is slow: {placement:?}");
    }
    let _ = std::fs::remove_file(cfg);
}

/// Nomad's micro-benchmark at 16 MiB for the paper's 16 GB: the directions TPP's and Nomad's
/// papers report. With the working set inside the fast tier, TPP ends at all-fast and Nomad's
/// asynchronous promotion is ahead while migration is in progress; with a working set far
/// beyond it, TPP thrashes below no migration and Nomad stays ahead of TPP. Simulated figures
/// (a single-threaded run repeats exactly), not the host's speed.
#[test]
fn nomads_micro_benchmark_goes_the_papers_way() {
    let o = strata()
        .args(["bench", "nomad", "--json", "-q", "--fast-mb", "16", "--scenarios", "small,large"])
        .args(["--access", "read", "--rounds", "5", "--policies", "first-touch,tpp,nomad"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let at = |scenario: &str, policy: &str| {
        rows.iter().find(|r| r["scenario"] == scenario && r["policy"] == policy).unwrap_or_else(|| panic!("{v}"))
    };
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap();
    for r in rows {
        assert_eq!(r["rounds_mb_s"].as_array().unwrap().len(), 5, "{r}");
    }
    for p in ["tpp", "nomad"] {
        assert!(f(at("small", p), "stable_of_all_fast") > 0.95, "{p} ends near all-fast: {v}");
    }
    assert!(f(at("small", "first-touch"), "stable_of_all_fast") < 0.95, "placement matters here: {v}");
    assert!(
        f(at("small", "nomad"), "in_progress_of_all_fast") > f(at("small", "tpp"), "in_progress_of_all_fast"),
        "Nomad ahead while migrating: {v}"
    );
    let stable = |p: &str| f(at("large", p), "stable_of_all_fast");
    assert!(stable("tpp") < stable("first-touch"), "TPP thrashes on a large working set: {v}");
    assert!(stable("nomad") > stable("tpp"), "Nomad ahead of TPP when thrashing: {v}");
}

/// One emulated run of a workload (32 MiB, a quarter fast, `m2t-4m`) under `policy` with this
/// configuration and environment: the engine's report and the program's (with --json the
/// program's output goes to stderr).
fn emulated_workload(
    workload: &str,
    policy: &str,
    name: &str,
    config_text: &str,
    env: &[(&str, &str)],
) -> (Value, Value) {
    let cfg = config(name, config_text);
    let o = strata()
        .envs(env.iter().copied())
        .args(["emu", "run", "--json", "-q", "--preset", "m2t-4m", "--fast-ratio", "0.25", "--policy", policy])
        .arg("--policy-config")
        .arg(&cfg)
        .arg("--")
        .arg(emu_strata())
        .args(["bench", "tiering-workload", "--workload", workload, "--size-mb", "32"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(cfg);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (serde_json::from_slice(&o.stdout).unwrap(), serde_json::from_slice(&o.stderr).unwrap())
}

/// `hinted` (32 MiB, a quarter fast) under strata: the arena the program bound cold and that is
/// hot in the second half moves up whole with the hint as a prior, and stays where the program
/// put it with `hints = "pin"`. Where its pages are is asked of the emulated machine.
#[test]
fn an_arena_bound_cold_that_heats_moves_up_whole_unless_its_hint_is_pinned() {
    let run = |hints: &str| -> Vec<Vec<f64>> {
        let text = format!(
            "[scanner]\nperiod_ms = 5.0\n[sampler]\nperiod_misses = 64\n[policy.strata]\nhints = \"{hints}\"\n"
        );
        let (run, program) = emulated_workload("hinted", "strata", &format!("hinted-{hints}"), &text, &[]);
        assert!(run["engine"]["objects"].as_u64().unwrap() >= 8 * 1024, "every arena's pages are records: {run}");
        serde_json::from_value(program["placement"].clone()).unwrap()
    };
    // arena 0 is bound hot, the others cold; arena 5 is hot in the second half. The fast tier
    // holds two arenas: in the first half the hot-bound one and, in the spare place, whichever
    // of the equally cold arenas the samples rank first (arena 2 on one host, arena 5 in one
    // CI run: the program's environment moves its stack, and with it the samples)
    let prior = run("prior");
    assert_eq!(prior.len(), 2, "{prior:?}");
    let fast = |half: &[f64]| (0..half.len()).filter(|&k| half[k] > 0.9).collect::<Vec<_>>();
    let first = fast(&prior[0]);
    assert!(first.contains(&0) && first.len() <= 2, "the first half: {prior:?}");
    assert!(prior[0].iter().all(|s| !(0.1..=0.9).contains(s)), "arenas move whole: {prior:?}");
    assert_eq!(fast(&prior[1]), [0, 5], "the cold-bound arena that heated is fast: {prior:?}");
    let pin = run("pin");
    assert!(pin[1][0] > 0.9 && pin[1].iter().skip(1).all(|&s| s < 0.1), "pinned, where the program put it: {pin:?}");
}

/// `small-sites` (32 MiB, a quarter fast) under MAT, which moves only what the channel records,
/// and hmalloc, which directs contexts by what it measures in their records:
/// with libstrata's blocks each site's 192-byte nodes are in spans of their own, each a record,
/// and the two hot sites' blocks are moved up while the cold sites' stay; with
/// `STRATA_SMALL_BLOCKS=0` the nodes share spans, there is no record of them, and each site's
/// nodes stay where first touch put them (the same share for every site). The last
/// generation's placement is checked.
/// Where the nodes' pages are is asked of the emulated machine.
#[test]
fn a_contexts_small_objects_are_blocks_that_a_policy_of_records_moves() {
    let run = |policy: &str, blocks: &str| -> (Value, Vec<f64>) {
        let text = "[scanner]\nperiod_ms = 5.0\n[sampler]\nperiod_misses = 64\n";
        let env = [("STRATA_SMALL_BLOCKS", blocks)];
        let (run, program) = emulated_workload("small-sites", policy, &format!("small-sites-{blocks}"), text, &env);
        let placement: Vec<Vec<f64>> = serde_json::from_value(program["placement"].clone()).unwrap();
        (run["engine"].clone(), placement.into_iter().last().unwrap())
    };
    // sites 6 and 7 take 90 % of the lookups
    let (engine, sites) = run("mat:apb", "1");
    assert!(engine["objects"].as_u64().unwrap() >= 256, "every block is a record: {engine}");
    assert!((sites[6] + sites[7]) / 2.0 > 0.6, "the hot sites' blocks are fast: {sites:?}");
    assert!(sites[..6].iter().all(|&s| s < 0.1), "the cold sites' blocks are not: {sites:?}");
    let (_, sites) = run("mat:apb", "0");
    assert!((sites[7] - sites[0]).abs() < 0.05, "no record of the nodes: every site as first touch left it: {sites:?}");
    // hmalloc, which never moves a page, learns the contexts' heat from their blocks and has
    // the hot sites' next nodes born fast, the cold sites' slow
    let (engine, sites) = run("hmalloc", "1");
    assert!(engine["directives_set"].as_u64().unwrap() > 0, "{engine}");
    let cold = sites[..6].iter().sum::<f64>() / 6.0;
    assert!((sites[6] + sites[7]) / 2.0 > cold + 0.25, "born where their heat says: {sites:?}");
}

/// The engine stands for a daemon on a core of its own: its allocations are not the program's.
/// Two setups that differ only in their configuration file's text (`strata` and
/// `strata@hysteresis=3`, its default) give the same run, and the engine's objects are
/// cold-first's own two (the table and the index). Through the program's malloc its buffers
/// were objects and contexts of the program (seven objects, and a figure that moved with the
/// file's text).
#[test]
fn the_engines_own_allocations_are_not_the_programs_objects() {
    let o = strata()
        .args(["bench", "tiering", "--json", "-q", "--workloads", "cold-first", "--size-mb", "8", "--period-ms", "1"])
        .args(["--fast-ratio", "0.25", "--policies", "strata,strata@hysteresis=3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = |p: &str| v["rows"].as_array().unwrap().iter().find(|r| r["policy"] == p).unwrap().clone();
    let (a, b) = (row("strata"), row("strata@hysteresis=3"));
    assert_eq!(a["engine"]["objects"], 2, "{}", a["engine"]);
    for k in ["figure", "promoted_bytes", "demoted_bytes", "llc_misses", "fast_accesses"] {
        assert_eq!(a[k], b[k], "{k}");
    }
    for k in ["rounds", "objects", "contexts", "samples", "directives_set"] {
        assert_eq!(a["engine"][k], b["engine"][k], "engine.{k}");
    }
}
