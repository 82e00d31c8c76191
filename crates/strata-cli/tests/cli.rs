//! The `strata` binary end to end: JSON shapes scripts rely on, the locality property, and
//! clear errors on bad input.
use std::process::{Command, Stdio};

use serde_json::Value;

fn strata(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("run strata");
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
    let fx = concat!(env!("CARGO_MANIFEST_DIR"), "/../strata-topo/tests/fixtures/two-nodes-hmat");
    let v = json(&["topo", "--sysfs", fx, "--json"]);
    assert_eq!(v["tiers"].as_array().unwrap().len(), 2);
    let v = json(&["topo", "--sysfs", fx, "--tiers", "1;0", "--json"]);
    assert_eq!(v["tiers"][0]["nodes"][0], 1);
    let (code, _, err) = strata(&["topo", "--sysfs", fx, "--tiers", "0;7"]);
    assert_eq!(code, 2, "a usage error");
    assert!(err.contains("not valid"), "{err}");
}

#[test]
fn locality_bench_next_to_touches_far_fewer_pages() {
    let v = json(&["bench", "locality", "--lists", "128", "--nodes", "300", "--rounds", "1", "--json", "-q"]);
    let p = &v["pages_per_traversal"];
    let (malloc, next_to) = (p["malloc"].as_f64().unwrap(), p["next_to"].as_f64().unwrap());
    assert!(next_to * 10.0 <= malloc, "next_to {next_to} pages vs malloc {malloc}");
    assert!(v["traversal_speedup"].as_f64().unwrap() > 0.0);
    assert_eq!(v["machine"], "native");
}

#[test]
fn alloc_bench_reports_every_allocator_and_benchmark() {
    let v = json(&[
        "bench",
        "alloc",
        "--ops",
        "20000",
        "--rounds",
        "1",
        "--allocators",
        "strata,strata-preload",
        "--json",
        "-q",
    ]);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 12, "4 benchmarks x glibc, strata, strata-preload");
    for r in rows {
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(["glibc", "strata", "strata-preload"].contains(&r["allocator"].as_str().unwrap()));
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    // usage errors found after the arguments are parsed exit 2, as clap's own
    let (code, _, err) = strata(&["topo", "--emulate", "nosuch"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown preset 'nosuch'") && err.contains("strata emu settings"), "{err}");
    let (code, _, _) = strata(&["topo", "--scale", "2"]); // needs --emulate
    assert_eq!(code, 2);
    let (code, _, err) = strata(&["bench", "locality", "--node-bytes", "8"]);
    assert_eq!(code, 2);
    assert!(err.contains("at least 16"), "{err}");
    let (code, _, err) = strata(&["bench", "alloc", "--only", "nonsense"]);
    assert_eq!(code, 2);
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
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn repo(p: &str) -> String {
    format!("{}/../../{p}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn run_returns_the_exit_status_and_preloads_strata() {
    let (code, _, _) = strata(&["run", "--lib", &repo("build/libstrata.so"), "--", "sh", "-c", "exit 42"]);
    assert_eq!(code, 42);
    // STRATA_VERBOSE makes the preloaded library print its options: proof it was loaded
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["run", "--lib", &repo("build/libstrata.so"), "--", "true"])
        .env("STRATA_VERBOSE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // once: the program's; the CLI's own allocator says nothing (strata-sys's quiet-load)
    assert_eq!(err.lines().filter(|l| l.starts_with("STRATA_CONTEXTS ")).count(), 1, "{err}");
}

#[test]
fn run_with_rules_and_report() {
    let bin = repo("build/preload/two_sites");
    assert!(std::path::Path::new(&bin).exists(), "run `make c-test` first (builds {bin})");
    let (lib, rules) = (repo("build/libstrata.so"), repo("tests/preload/two_sites.rules"));
    let dir = std::env::temp_dir().join(format!("strata-run-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("report.json").to_str().unwrap().to_string();
    let report = |to: &str, json: &[&str]| {
        let args = [&["run", "--lib", &lib, "--rules", &rules, to], json, &["--", &bin, "--with-rules"]];
        strata(&args.concat())
    };
    let (code, out, err) = report(&format!("--report={file}"), &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("report written to {file}")), "{err}");
    let first = out.lines().next().unwrap_or("");
    assert!(first.starts_with("two_sites: ") && first.ends_with(" passed, 0 failed"), "{out}"); // its own output
    assert!(!out.contains('{'), "the report is not in the program's output: {out}");
    let out = std::fs::read_to_string(&file).unwrap();
    let v: Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1);
    let ctxs = procs[0]["contexts"].as_array().unwrap();
    let named = |c: &Value, f: &str| {
        c["stack"].as_array().unwrap().iter().any(|s| s["symbol"].as_str().is_some_and(|x| x.starts_with(f)))
    };
    let slow: Vec<&Value> =
        ctxs.iter().filter(|c| named(c, "alloc_slow_site") && c["class_bytes"].as_u64() > Some(4096)).collect();
    let fast: Vec<&Value> =
        ctxs.iter().filter(|c| named(c, "alloc_fast_site") && c["class_bytes"].as_u64() > Some(4096)).collect();
    assert!(!slow.is_empty() && !fast.is_empty(), "both call sites appear as contexts");
    for c in &slow {
        assert_eq!(c["directive"], "slow");
        assert_eq!(c["rule"], 1);
    }
    for c in &fast {
        assert_eq!(c["directive"], "default");
    }
    let allocs: u64 = slow.iter().map(|c| c["allocs"].as_u64().unwrap()).sum();
    let frees: u64 = slow.iter().map(|c| c["frees"].as_u64().unwrap()).sum();
    assert_eq!((allocs, frees), (100, 100), "every allocation and free counted");
    // all 100 were live at once (20,000 to 20,099 bytes each, five whole pages as tracked
    // objects), and one grew in place by a few pages later
    let peak: u64 = slow.iter().map(|c| c["peak_live_bytes"].as_u64().unwrap()).sum();
    assert!((100 * 5 * 4096..=(100 * 5 + 16) * 4096).contains(&peak), "the slow site's peak of live bytes: {peak}");
    // the human report names the call sites
    let text = dir.join("report.txt").to_str().unwrap().to_string();
    let (code, _, _) = report(&format!("--report={text}"), &[]);
    assert_eq!(code, 0);
    let out = std::fs::read_to_string(&text).unwrap();
    assert!(out.contains("alloc_slow_site") && out.contains("contexts by bytes allocated"), "{out}");
    for part in ["allocated in", "by peak live bytes", "peak live", "legend:", "no rules suggested"] {
        assert!(out.contains(part), "{part}: {out}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A context's id is its stack as (module, offset) pairs, so it is the same in the next run of
/// the same binaries (ASLR moves every module) and an `id=` rule copied from a report matches.
#[test]
fn context_ids_are_the_same_in_the_next_run_and_an_id_rule_matches() {
    let bin = repo("build/preload/two_sites");
    assert!(std::path::Path::new(&bin).exists(), "run `make c-test` first (builds {bin})");
    let lib = repo("build/libstrata.so");
    let dir = std::env::temp_dir().join(format!("strata-run-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let contexts = |rules: Option<&str>, n: usize| -> Vec<Value> {
        // with rules, the program checks that its slow site's objects are in the slowest tier
        let file = dir.join(format!("report{n}.json")).to_str().unwrap().to_string();
        let mut args = vec!["run", "--lib", &lib, "--json"];
        let report = format!("--report={file}");
        args.push(&report);
        if let Some(r) = rules {
            args.extend(["--rules", r]);
        }
        args.extend(["--", &bin]);
        if rules.is_some() {
            args.push("--with-rules");
        }
        let (code, _, err) = strata(&args);
        assert_eq!(code, 0, "{err}");
        let out = std::fs::read_to_string(&file).unwrap();
        let v: Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
        v["processes"][0]["contexts"].as_array().unwrap().clone()
    };
    let site = |cs: &[Value], f: &str| -> Vec<String> {
        let mut ids: Vec<String> = cs
            .iter()
            .filter(|c| {
                c["stack"].as_array().unwrap().iter().any(|s| s["symbol"].as_str().is_some_and(|x| x.starts_with(f)))
            })
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let (a, b) = (contexts(None, 1), contexts(None, 2));
    let fast = site(&a, "alloc_fast_site");
    assert!(!fast.is_empty(), "the fast site's contexts are reported");
    assert_eq!(fast, site(&b, "alloc_fast_site"), "the same ids in the next run");
    assert_eq!(site(&a, "alloc_slow_site"), site(&b, "alloc_slow_site"));
    // the slow site's ids from the first run, as rules: the third run places by them
    let slow = site(&a, "alloc_slow_site");
    let rules = dir.join("ids.rules");
    std::fs::write(&rules, slow.iter().map(|id| format!("slow id=0x{id}\n")).collect::<String>()).unwrap();
    let c = contexts(Some(rules.to_str().unwrap()), 3);
    for id in &slow {
        let hit: Vec<&Value> = c.iter().filter(|x| x["id"].as_str() == Some(id)).collect();
        assert_eq!(hit.len(), 1, "{id} in {c:?}");
        assert_eq!(hit[0]["directive"].as_str(), Some("slow"), "{id}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The first-use review's item 1: `strata run --report -- gzip -c big > big.gz` appended the
/// report to the archive. The program's output is its own; the report goes to a file (a default
/// name with the command and pid, said on stderr) or to a descriptor the user names.
#[test]
fn the_report_never_touches_the_programs_output() {
    let dir = std::env::temp_dir().join(format!("strata-run-own-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = repo("build/libstrata.so");
    let script = "x=$(seq 1 3000); echo out; echo err >&2; echo $$ > pid";
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["run", "--lib", &lib, "--report", "--", "sh", "-c", script])
        .current_dir(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "out\n", "the program's stdout, untouched");
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap().trim().to_string();
    let name = format!("strata-report.sh.{pid}.txt");
    assert!(stderr.starts_with("err\n") && stderr.contains(&format!("report written to {name}")), "{stderr}");
    assert!(std::fs::read_to_string(dir.join(&name)).unwrap().contains("== Strata report: pid"));
    // to a descriptor: fd 3, opened by the shell
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "{} run --lib {lib} --report-fd 3 --json -- sh -c 'x=$(seq 1 3000); echo out' 3>r.json",
                env!("CARGO_BIN_EXE_strata")
            ),
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    assert!(v["processes"].as_array().is_some_and(|p| !p.is_empty()), "{v}");
    let (code, _, err) = strata(&["run", "--lib", &lib, "--report-fd", "77", "--", "true"]);
    assert_eq!(code, 2, "a usage error");
    assert!(err.contains("not an open descriptor"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The first-use review's item 2: SIGTERM to `strata run` (how systemd, Docker and Kubernetes
/// stop a service) left the program running, adopted by init. It is passed on, and `strata
/// run` exits as the program did.
#[test]
fn stopping_strata_run_stops_the_program() {
    use std::io::BufRead;
    let mut wrapper = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["run", "--lib", &repo("build/libstrata.so"), "--", "sh", "-c", "echo $$; exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(wrapper.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let program: u32 = line.trim().parse().unwrap();
    unsafe { libc::kill(wrapper.id() as i32, libc::SIGTERM) };
    let status = wrapper.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "strata run exits as its program did");
    assert!(!std::path::Path::new(&format!("/proc/{program}")).exists(), "the program {program} is still running");
}

#[test]
fn run_refuses_bad_rules_and_a_missing_library() {
    let dir = std::env::temp_dir().join(format!("strata-run-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.rules");
    std::fs::write(&bad, "slow func=a\nfaster func=b\n").unwrap();
    let (code, _, err) =
        strata(&["run", "--lib", &repo("build/libstrata.so"), "--rules", bad.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 1);
    assert!(err.contains("line 2") && err.contains("faster"), "{err}");
    let (code, _, err) = strata(&["run", "--lib", "/nonexistent/libstrata.so", "--", "true"]);
    assert_eq!(code, 1);
    assert!(err.contains("libstrata.so not found"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_running_process_shares_its_contexts_in_the_channel() {
    use std::io::{Read, Seek, SeekFrom};
    use strata_sys::{strata_channel_header_t, strata_context_t, STRATA_CHANNEL_MAGIC, STRATA_CHANNEL_VERSION};
    // a preloaded shell that allocates, then waits for us to look
    let mut child = Command::new("sh")
        .args(["-c", "x=$(seq 1 2000); sleep 3"])
        .env("LD_PRELOAD", repo("build/libstrata.so"))
        .spawn()
        .unwrap();
    // as a daemon would: the fd whose link names the region, a memfd
    let want = format!("/memfd:{} (deleted)", strata_sys::STRATA_CHANNEL_NAME);
    let mut f = None;
    for _ in 0..100 {
        for e in std::fs::read_dir(format!("/proc/{}/fd", child.id())).into_iter().flatten().flatten() {
            if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want) {
                f = std::fs::File::open(e.path()).ok();
            }
        }
        if f.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut f = f.unwrap_or_else(|| panic!("no fd of the child links to {want}"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut raw = vec![0u8; std::mem::size_of::<strata_channel_header_t>()];
    f.read_exact(&mut raw).unwrap();
    let h: strata_channel_header_t = unsafe { std::ptr::read_unaligned(raw.as_ptr() as *const _) };
    assert_eq!(h.magic, STRATA_CHANNEL_MAGIC);
    assert_eq!(h.version, STRATA_CHANNEL_VERSION);
    assert_eq!(h.pid, child.id() as i64);
    assert_eq!(h.context_bytes as usize, std::mem::size_of::<strata_context_t>());
    assert!(h.contexts_used > 0, "the shell's allocations made contexts");
    // find the used contexts: ids non-zero, counters sane
    f.seek(SeekFrom::Start(h.contexts_offset)).unwrap();
    let mut table = vec![0u8; (h.context_capacity * h.context_bytes) as usize];
    f.read_exact(&mut table).unwrap();
    let (at, ctxs): (Vec<u64>, Vec<strata_context_t>) = table
        .chunks_exact(h.context_bytes as usize)
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const strata_context_t) })
        .enumerate()
        .filter(|(_, c)| c.id != 0)
        .map(|(i, c)| (i as u64, c))
        .unzip();
    assert_eq!(ctxs.len() as u64, h.contexts_used);
    // made in order: entries 1..=contexts_used, so a process keeps few pages of the table
    assert_eq!(at, (1..=h.contexts_used).collect::<Vec<_>>());
    assert!(ctxs.iter().all(|c| c.nframes >= 1 && c.frames[0] != 0));
    // sealed: no one, the process included, can change its size under a reader
    use std::os::fd::AsRawFd;
    let seals = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GET_SEALS) };
    let want_seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    assert_eq!(seals & want_seals, want_seals, "seals {seals:#x}");
    child.wait().unwrap();
}

#[test]
fn ycsb_bench_json_shape_and_plots() {
    let dir = std::env::temp_dir().join(format!("strata-ycsb-test-{}", std::process::id()));
    let v = json(&[
        "bench",
        "ycsb",
        "--workloads",
        "c",
        "--theta",
        "0.5,0.99",
        "--records",
        "2000",
        "--ops",
        "20000",
        "--json",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "2 thetas x std, nextto, nextto-split");
    for r in rows {
        assert_eq!(r["workload"], "c");
        assert!(["std", "nextto", "nextto-split"].contains(&r["variant"].as_str().unwrap()));
        assert_eq!(r["machine"], "native");
        assert!(r["config"].is_string());
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
        assert_eq!(r["errors"], 0);
    }
    // nextto keeps each bucket's chain, keys and values on fewer pages
    let pages = |var: &str| rows.iter().find(|r| r["variant"] == var).unwrap()["pages_per_bucket"].as_f64().unwrap();
    assert!(pages("nextto") < pages("std"), "nextto {} vs std {}", pages("nextto"), pages("std"));
    // a theta sweep keeps a file of its own, beside the headline's ycsb-native.json
    for f in ["ycsb-native-theta.json", "ycsb-native-theta-fig2-workloads.svg", "ycsb-native-theta-fig3-theta.svg"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(text.len() > 100, "{f}");
    }
    // the saved file names what it was measured on, and reads back as the same report
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ycsb-native-theta.json")).unwrap()).unwrap();
    assert_eq!(saved["measured"]["benchmark"], "ycsb-native-theta");
    assert!(saved["measured"]["host"]["cpu_model"].as_str().unwrap().len() > 2);
    assert!(saved["measured"]["command"].as_str().unwrap().starts_with("strata bench ycsb"));
    assert_eq!(saved["results"], v["results"]);
    let summary = strata(&["bench", "summary", "--dir", dir.to_str().unwrap()]);
    assert_eq!(summary.0, 0, "{}", summary.2);
    assert!(
        summary.1.contains("YCSB on strata-kv (native, theta sweep)") && summary.1.contains("| nextto in-process |"),
        "{}",
        summary.1
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let (code, _, err) = strata(&["bench", "ycsb", "--theta", "3", "-q"]);
    assert_eq!(code, 2);
    assert!(err.contains("0.25 and 2.0"), "{err}");
}

/// A free loopback port (bind to 0, read the port, let it go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn redis_cli_works_against_strata_kv() {
    if Command::new("redis-cli").arg("--version").output().is_err() {
        eprintln!("SKIPPED: redis-cli not installed (scripts/bootstrap.sh installs redis-tools)");
        return;
    }
    let port = free_port().to_string();
    // killed on drop, so a failed assertion cannot leave a server running
    let _server = strata_util::Owned(
        Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["kv", "serve", "--addr", &format!("127.0.0.1:{port}"), "--buckets", "4096"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli").args(["-p", &port]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let mut up = false;
    for _ in 0..100 {
        if cli(&["ping"]) == "PONG" {
            up = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(up, "server did not answer PING");
    assert_eq!(cli(&["set", "greeting", "hello world"]), "OK");
    assert_eq!(cli(&["get", "greeting"]), "hello world");
    assert_eq!(cli(&["hset", "user:1", "name", "ada", "lang", "c"]), "2");
    assert_eq!(cli(&["hgetall", "user:1"]), "name\nada\nlang\nc");
    assert_eq!(cli(&["hmget", "user:1", "lang", "nope"]), "c"); // then an empty line for nil
    assert_eq!(cli(&["exists", "greeting", "user:1", "nope"]), "2");
    assert!(cli(&["info"]).contains("strata_kv_variant:nextto"));
    assert!(cli(&["hello", "3"]).starts_with("ERR unknown command"));
    // redis-cli's pipe mode: raw protocol in, a summary out
    let mut pipe = Command::new("redis-cli")
        .args(["-p", &port, "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = Vec::new();
    for i in 0..1000 {
        strata_kv::resp::encode_request(&mut input, &[b"SET", format!("k{i}").as_bytes(), format!("v{i}").as_bytes()]);
    }
    use std::io::Write;
    pipe.stdin.take().unwrap().write_all(&input).unwrap();
    let out = pipe.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("errors: 0, replies: 1000"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(cli(&["dbsize"]), "1002");
    assert_eq!(cli(&["get", "k999"]), "v999");
}

#[test]
fn ycsb_bench_over_the_network_against_strata_kv_redis_and_memcached() {
    let v =
        json(&["bench", "ycsb", "--network", "--workloads", "a", "--records", "1000", "--ops", "4000", "--json", "-q"]);
    let rows = v["results"].as_array().unwrap();
    let net: Vec<&Value> = rows.iter().filter(|r| r["config"] == "network").collect();
    assert!(net.iter().any(|r| r["variant"] == "std") && net.iter().any(|r| r["variant"] == "nextto"));
    let have_redis = Command::new("redis-server").arg("--version").output().is_ok();
    assert_eq!(net.iter().any(|r| r["variant"] == "redis"), have_redis);
    let have_memcached = Command::new("memcached").arg("-h").output().is_ok();
    assert_eq!(net.iter().any(|r| r["variant"] == "memcached"), have_memcached);
    for r in rows {
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bench_migrate_refuses_bad_options_and_a_machine_with_one_tier_says_so() {
    let (code, _, err) = strata(&["bench", "migrate", "--mechanisms", "mremap"]);
    assert_ne!(code, 0);
    assert!(err.contains("--mechanisms: mremap?"), "{err}");
    let (code, _, err) = strata(&["bench", "migrate", "--bytes", "lots"]);
    assert!(code != 0 && err.contains("--bytes"), "{err}");
    let tiers = strata_topo::discover_at(std::path::Path::new("/sys"), None).map_or(1, |t| t.tiers.len());
    if tiers < 2 {
        let (code, _, err) = strata(&["bench", "migrate", "--secs", "1"]);
        assert!(code != 0 && err.contains("one tier") && err.contains("--vm"), "{err}");
    }
}
