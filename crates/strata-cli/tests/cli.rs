//! The `strata` binary end to end: JSON shapes scripts rely on, the locality property, and
//! clear errors on bad input.
use std::process::{Command, Stdio};

use serde_json::Value;

fn strata(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = strata(args);
    assert_eq!(code, 0, "strata {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("strata {args:?}: not JSON ({e}): {out}"))
}

#[test]
fn topo_json_of_this_machine() {
    let v = json(&["topo", "--json"]);
    let nodes = v["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    for n in nodes {
        assert!(n["id"].is_u64() && n["tier"].is_u64(), "{n}");
    }
    assert!(v["tier_source"].is_string());
}

#[test]
fn topo_json_of_the_m2t_preset() {
    let v = json(&["topo", "--emulate", "m2t", "--json"]);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["tier"], 0);
    assert_eq!(nodes[1]["tier"], 1);
    assert_eq!(nodes[0]["read_latency_ns"], 84.6);
    assert_eq!(nodes[1]["read_latency_ns"], 156.0);
    assert_eq!(nodes[0]["total_bytes"], 64u64 << 30);
    let v = json(&["topo", "--emulate", "m2t", "--fast-bytes", "2G", "--json"]);
    assert_eq!(v["nodes"][0]["total_bytes"], 2u64 << 30);
}

#[test]
fn topo_from_a_fixture_and_an_override() {
    let fx = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../strata-topo/tests/fixtures/two-nodes-hmat"
    );
    let v = json(&["topo", "--sysfs", fx, "--json"]);
    assert_eq!(v["tiers"].as_array().unwrap().len(), 2);
    let v = json(&["topo", "--sysfs", fx, "--tiers", "1;0", "--json"]);
    assert_eq!(v["tiers"][0]["nodes"][0], 1);
    let (code, _, err) = strata(&["topo", "--sysfs", fx, "--tiers", "0;7"]);
    assert_eq!(code, 1);
    assert!(err.contains("not valid"), "{err}");
}

#[test]
fn locality_bench_next_to_touches_far_fewer_pages() {
    let v = json(&[
        "bench", "locality", "--lists", "128", "--nodes", "300", "--rounds", "1", "--json", "-q",
    ]);
    let p = &v["pages_per_traversal"];
    let (malloc, next_to) = (
        p["malloc"].as_f64().unwrap(),
        p["next_to"].as_f64().unwrap(),
    );
    assert!(
        next_to * 10.0 <= malloc,
        "next_to {next_to} pages vs malloc {malloc}"
    );
    assert!(v["traversal_speedup"].as_f64().unwrap() > 0.0);
    assert_eq!(v["machine"], "native");
}

#[test]
fn alloc_bench_reports_every_allocator_and_benchmark() {
    let v = json(&[
        "bench", "alloc", "--ops", "20000", "--rounds", "1", "--json", "-q",
    ]);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(["glibc", "strata"].contains(&r["allocator"].as_str().unwrap()));
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let (code, _, err) = strata(&["topo", "--emulate", "nosuch"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no emulated preset 'nosuch'") && err.contains("m2t"),
        "{err}"
    );
    let (code, _, _) = strata(&["topo", "--scale", "2"]); // needs --emulate
    assert_eq!(code, 2);
    let (code, _, err) = strata(&["bench", "locality", "--node-bytes", "8"]);
    assert_eq!(code, 1);
    assert!(err.contains("at least 16"), "{err}");
    let (code, _, err) = strata(&["bench", "alloc", "--only", "nonsense"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown benchmark"), "{err}");
    let (code, _, err) = strata(&["topo", "--emulate", "m2t", "--fast-bytes", "12Q"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown unit"), "{err}");
}

#[test]
fn config_file_unknown_fields_are_errors() {
    let dir = std::env::temp_dir().join(format!("strata-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[topology]\ntierz = \"0\"\n").unwrap();
    let (code, _, err) = strata(&["--config", bad.to_str().unwrap(), "topo"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown field"), "{err}");
    let good = dir.join("good.toml");
    std::fs::write(&good, "[topology]\ntiers = \"0\"\n").unwrap();
    let v = json(&["--config", good.to_str().unwrap(), "topo", "--json"]);
    assert!(v["tier_source"].as_str().unwrap().starts_with("override"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn closed_pipe_exits_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["topo", "--emulate", "m2t", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // nobody reads
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
