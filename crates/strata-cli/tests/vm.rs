//! End-to-end tests in the two-tier QEMU guest (`strata vm run`). Each boots a guest (about
//! 15 s), so they are ignored by a plain `cargo test`; `make vm-test` builds the guest test
//! programs (tests/vm/*.c) into build/vm and runs these with --ignored. Where QEMU cannot
//! run at all they say so and skip.
use std::path::PathBuf;
use std::process::Command;

fn strata() -> Command {
    Command::new(env!("CARGO_BIN_EXE_strata"))
}

/// None (after printing why) when the guest cannot run on this machine.
fn guest_available() -> Option<()> {
    let out = strata().args(["vm", "check"]).output().expect("run strata vm check");
    if out.status.success() {
        Some(())
    } else {
        eprintln!("SKIPPED: {}", String::from_utf8_lossy(&out.stdout).trim());
        None
    }
}

fn vm_bin(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/vm");
    let p = dir.join(name);
    assert!(p.exists(), "{} is missing: run `make vm-test`, which builds it", p.display());
    std::fs::canonicalize(p).unwrap()
}

fn run_in_guest(args: &[&str]) -> (i32, String) {
    let out = strata().args(["vm", "run", "--timeout", "300"]).args(args).output().expect("run strata vm run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_topology_has_two_tiers_and_hmat() {
    if guest_available().is_none() {
        return;
    }
    let (code, out) = run_in_guest(&["--", "strata", "topo", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("topo JSON from the guest");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!((nodes[0]["tier"].as_u64(), nodes[1]["tier"].as_u64()), (Some(0), Some(1)));
    assert_eq!(nodes[0]["read_latency_ns"], 100.0);
    assert_eq!(nodes[1]["read_latency_ns"], 250.0);
    assert_eq!(nodes[1]["has_cpus"], false);
    assert!(nodes[1]["kernel_tier"].as_u64().unwrap() > nodes[0]["kernel_tier"].as_u64().unwrap());
    assert_eq!(v["tier_source"], "kernel memory_tiering");
}

#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_explicit_placement_lands_on_the_right_node() {
    if guest_available().is_none() {
        return;
    }
    let bin = vm_bin("place");
    let b = bin.to_str().unwrap();
    let (code, out) = run_in_guest(&["--file", b, "--", b]);
    assert!(out.contains("vm-place:") && out.contains(" 0 failed"), "{out}");
    assert_eq!(code, 0);
}

#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_kernel_tiering_promotes_a_hot_set() {
    if guest_available().is_none() {
        return;
    }
    let bin = vm_bin("tiering");
    let b = bin.to_str().unwrap();
    let (code, out) = run_in_guest(&["--kernel-tiering", "--file", b, "--", b, "64", "60"]);
    assert!(out.contains("vm-tiering:") && out.contains(" 0 failed"), "{out}");
    assert_eq!(code, 0);
}

#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_command_exit_status_and_boot_failure_are_reported() {
    if guest_available().is_none() {
        return;
    }
    let (code, out) = run_in_guest(&["--", "sh", "-c", "echo hello from the guest; exit 7"]);
    assert_eq!(code, 7);
    assert!(out.contains("hello from the guest"));
    // a --file under /tmp is there in the guest (regression: a tmpfs on /tmp hid it, which
    // broke every guest test of a clone made under /tmp)
    let script = std::env::temp_dir().join(format!("strata-vm-file-{}.sh", std::process::id()));
    std::fs::write(&script, "#!/bin/sh\necho file under tmp ok\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let sp = script.to_str().unwrap();
    let (code, out) = run_in_guest(&["--file", sp, "--", sp]);
    std::fs::remove_file(&script).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("file under tmp ok"), "{out}");
    // a kernel that cannot boot: the harness says so and shows the console
    let bad = std::env::temp_dir().join(format!("not-a-kernel-{}", std::process::id()));
    std::fs::write(&bad, b"garbage").unwrap();
    let out =
        strata().args(["vm", "run", "--timeout", "60", "--kernel"]).arg(&bad).args(["--", "true"]).output().unwrap();
    std::fs::remove_file(&bad).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("did not boot") || err.contains("timed out") || err.contains("cannot boot"), "{err}");
}

#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_transparent_mode_rules_send_a_context_to_the_slow_node() {
    if guest_available().is_none() {
        return;
    }
    let root = std::fs::canonicalize(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")).unwrap();
    let (lib, rules, bin) = (
        root.join("build/libstrata.so"),
        root.join("tests/preload/two_sites.rules"),
        root.join("build/preload/two_sites"),
    );
    for p in [&lib, &rules, &bin] {
        assert!(p.exists(), "{} is missing: run `make c-test` first", p.display());
    }
    let (l, r, b) = (lib.to_str().unwrap(), rules.to_str().unwrap(), bin.to_str().unwrap());
    let script = format!("LD_PRELOAD={l} STRATA_RULES={r} {b} --with-rules --check-nodes");
    let (code, out) = run_in_guest(&["--file", l, "--file", r, "--file", b, "--", "sh", "-c", &script]);
    assert!(out.contains("two_sites:") && out.contains(" 0 failed"), "{out}");
    assert!(out.contains("100/100 objects on node 1"), "{out}");
    assert_eq!(code, 0);
}

/// The emulator built for AVX-512 (`make emu` on a machine with it) refuses, when it loads, a
/// CPU without it (the guest's emulated CPU) with a message saying how to rebuild, instead of
/// dying on an illegal instruction; a plain build (EMU_SIMD=0) runs there.
#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_emulator_built_for_avx512_refuses_a_cpu_without_it() {
    if guest_available().is_none() {
        return;
    }
    let build = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build");
    let (lib, prog) = (build.join("libstrata_emu.so"), build.join("emu/access-emu"));
    assert!(prog.exists(), "{} is missing: run `make emu`", prog.display());
    let (lib, prog) = (std::fs::canonicalize(lib).unwrap(), std::fs::canonicalize(prog).unwrap());
    let dis = Command::new("objdump").arg("-d").arg(&lib).output().expect("run objdump");
    let avx512 = String::from_utf8_lossy(&dis.stdout).contains("zmm");
    let (l, p) = (lib.to_str().unwrap(), prog.to_str().unwrap());
    let script = format!("grep -qw avx512f /proc/cpuinfo && echo guest-has-avx512; {p} seq 1 1 2>&1; echo exit=$?");
    let (code, out) = run_in_guest(&["--file", l, "--file", p, "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{out}");
    if avx512 && !out.contains("guest-has-avx512") {
        assert!(out.contains("built for AVX-512, which this CPU lacks") && out.contains("exit=2"), "{out}");
    } else {
        assert!(out.contains("seq ") && out.contains("exit=0"), "{out}");
    }
}

/// The live daemon on the two-tier guest (whose 6.1 kernel has soft-dirty bits): a program
/// under Strata writes a 16 MiB buffer that its directive put on the slow node; `strata daemon
/// --policy ambix` finds the process by its channel, sees the writes, and moves the buffer to
/// the fast node, as the kernel's own page table says at the end (move_pages, not the daemon's
/// counters). The program's output is checked too: moving its pages lost nothing.
#[test]
#[ignore = "boots a QEMU guest; run by make vm-test"]
fn guest_daemon_promotes_a_written_hot_set_from_the_slow_node() {
    if guest_available().is_none() {
        return;
    }
    let root = std::fs::canonicalize(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")).unwrap();
    let (lib, bin, strata_bin) = (
        root.join("build/libstrata.so"),
        root.join("build/preload/hot_writer"),
        PathBuf::from(env!("CARGO_BIN_EXE_strata")),
    );
    for p in [&lib, &bin] {
        assert!(p.exists(), "{} is missing: run `make c-test` first", p.display());
    }
    let (l, b, s) = (lib.to_str().unwrap(), bin.to_str().unwrap(), strata_bin.to_str().unwrap());
    let script = format!(
        "LD_PRELOAD={l} STRATA_DIRECTIVE=slow {b} 16 25 & sleep 3; \
         {s} daemon --policy ambix --period-ms 200 --rounds 60 -q --json > /tmp/daemon.json; echo daemon=$?; \
         {s} stats --json > /tmp/stats.json; echo stats=$?; \
         wait $!; echo writer=$?; echo DAEMON; cat /tmp/daemon.json; echo STATS; cat /tmp/stats.json"
    );
    let (code, out) = run_in_guest(&["--file", l, "--file", b, "--file", s, "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("daemon=0") && out.contains("stats=0") && out.contains("writer=0"), "{out}");
    let count = |when: &str| -> (u64, u64) {
        let line = out.lines().find(|l| l.starts_with(&format!("{when}: "))).unwrap_or_else(|| panic!("{out}"));
        let n = |k: &str| line.split(k).nth(1).unwrap().split_whitespace().next().unwrap().parse::<u64>().unwrap();
        (n("N0="), n("N1="))
    };
    let (start0, start1) = count("start");
    let (end0, end1) = count("end");
    assert!(start1 >= 4000 && start0 < 100, "the directive put the buffer on the slow node: {out}");
    assert!(end0 >= 4096 * 9 / 10 && end1 <= 4096 / 10, "the daemon moved the written buffer to node 0: {out}");
    let (daemon, status) = out.split_once("\nDAEMON\n").unwrap().1.split_once("\nSTATS\n").unwrap();
    let stats: serde_json::Value = serde_json::from_str(daemon).unwrap();
    assert!(stats["promoted_pages"].as_u64().unwrap() >= end0 - start0, "{stats}");
    // strata stats, taken while the writer still ran, counts its buffer on tier 0 (numa_maps)
    let status: serde_json::Value = serde_json::from_str(status).unwrap();
    let writer = status["processes"].as_array().unwrap().iter().find(|p| p["command"] == "hot_writer");
    let writer = writer.unwrap_or_else(|| panic!("{status}"));
    assert!(writer["tier_bytes"]["0"].as_u64().unwrap() >= 16 << 20, "{writer}");
    assert!(writer["tracked_bytes"].as_u64().unwrap() >= 16 << 20, "{writer}");
}
