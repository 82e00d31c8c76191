//! `strata daemon`, `strata attach` and `strata stats` on this machine (one node: nothing
//! moves between tiers here; the QEMU guest suite, tests/vm.rs, checks the moves). Each test
//! runs its own daemon on a socket of its own.
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;
use common::*;

#[test]
fn daemon_probe_gives_every_tracker_a_verdict_and_the_daemon_runs_or_says_what_it_lacks() {
    let dir = Dir::new("daemon-probe");
    let sock = dir.path("sock");
    let v = json(&["daemon", "--probe", "--json"]);
    let trackers = v["trackers"].as_array().unwrap();
    let names: Vec<&str> = trackers.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["perf-mem", "damon-vaddr", "idle-page", "pagemap-scan", "soft-dirty", "hint-fault"]);
    for t in trackers {
        assert!(t["available"].is_boolean() && t["used"].is_boolean(), "{t}");
        assert!(!t["reason"].as_str().unwrap().is_empty(), "{t}");
    }
    let movers: Vec<&str> = v["movers"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(movers, ["move_pages", "transactional"]);
    assert_eq!(v["movers"][0]["available"], true, "move_pages is always there: {v}");
    // a policy that needs no tracker runs its rounds and reports them
    let stats = json(&[
        "daemon",
        "--policy",
        "first-touch",
        "--rounds",
        "2",
        "--period-ms",
        "10",
        "--json",
        "-q",
        "--socket",
        &sock,
    ]);
    assert_eq!(stats["rounds"], 2, "{stats}");
    // ambix scans pages: it runs where the kernel has a write tracker, else is refused saying so
    let scans = trackers.iter().any(|t| t["used"] == true && t["available"] == true);
    let (code, _, err) =
        strata(&["daemon", "--policy", "ambix", "--rounds", "1", "--period-ms", "10", "-q", "--socket", &sock]);
    if scans {
        assert_eq!(code, 0, "{err}");
        // at start, one paragraph of what it can do here: tiers, trackers, mover
        let said =
            err.lines().find(|l| l.starts_with("strata daemon: policy ambix")).unwrap_or_else(|| panic!("{err}"));
        assert!(said.contains("Tiers: tier 0") && said.contains("Trackers, the first a process allows:"), "{said}");
        assert!(said.contains("Mover: move_pages"), "{said}");
        let nodes = std::fs::read_dir("/sys/devices/system/node")
            .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("node")).count())
            .unwrap_or(1);
        let one_tier = said.contains("With one tier there is nowhere to move pages");
        assert!(nodes > 1 || one_tier, "one node, so one tier: {said}");
        // no policy named: strata, the default everywhere; the live daemon takes no LLC-miss
        // samples (perf sampling is not built), so the page scan stands in, and it says so
        let (code, out, err) = strata(&["daemon", "--rounds", "2", "--period-ms", "10", "--json", "--socket", &sock]);
        assert_eq!(code, 0, "{err}");
        let said =
            err.lines().find(|l| l.starts_with("strata daemon: policy strata")).unwrap_or_else(|| panic!("{err}"));
        let stats: Value = serde_json::from_str(&out).unwrap();
        assert!(said.contains("accessed pages stand in for the samples"), "{said}");
        assert_eq!(stats["samples_from_pages"], true, "{stats}");
        assert_eq!((stats["policy"].as_str(), stats["rounds"].as_u64()), (Some("strata"), Some(2)), "{stats}");
    } else {
        assert_eq!(code, 1);
        assert!(err.contains("needs page scans") && err.contains("--probe"), "{err}");
    }
    let (code, _, err) = strata(&["daemon", "--policy", "no-such-policy", "--rounds", "1", "--socket", &sock]);
    assert_eq!(code, 2, "a usage error");
    assert!(err.contains("no-such-policy"), "{err}");
}

#[test]
fn stats_shows_a_process_under_strata_and_the_running_daemons_status() {
    let dir = Dir::new("daemon-stats");
    let sock = dir.path("sock");
    let mut child = under_strata("sh", &sock)
        .args(["-c", "x=$(head -c 200000 /dev/zero | tr '\\0' a); sleep 20"])
        .env("STRATA_PRIORITY", "low")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as u64;
    let daemon = Daemon::start(&["daemon", "--policy", "first-touch", "--period-ms", "20", "-q", "--socket", &sock]);
    // the shell grows its string by reallocations: wait until it holds all of it
    let v = stats_until(&sock, |v| {
        let seen = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid && p["tracked_bytes"].as_u64() >= Some(200_000));
        seen && v["daemon"]["processes"].as_array().is_some_and(|d| d.iter().any(|p| p["pid"] == pid))
    });
    let _ = child.kill();
    let _ = child.wait();
    drop(daemon);
    let p = v["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(p["command"], "sh");
    let resident: u64 = p["tier_bytes"].as_object().unwrap().values().map(|b| b.as_u64().unwrap()).sum();
    assert!(resident > 0 && p["tracked_bytes"].as_u64() >= Some(200_000), "{p}");
    assert_eq!(p["priority"], -10, "the priority it claimed: {p}");
    assert!(v["tiers"].as_array().unwrap().iter().all(|t| t["capacity_bytes"].as_u64() > Some(0)), "{v}");
    let d = &v["daemon"];
    assert_eq!(d["stats"]["policy"], "first-touch", "{v}");
    assert!(d["stats"]["rounds"].as_u64() > Some(0), "{v}");
    let managed = d["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).unwrap();
    assert_eq!(
        (managed["strata"].as_bool(), managed["claimed_priority"].as_i64()),
        (Some(true), Some(-10)),
        "{managed}"
    );
    assert!(managed["tracker"].is_string() && d["trackers"].as_array().unwrap().len() == 6, "{d}");
}

#[test]
fn a_process_started_under_strata_announces_itself_to_a_running_daemon() {
    let dir = Dir::new("daemon-hello");
    let sock = dir.path("sock");
    // discovery by looking only every 100 s: the process is found because it says hello
    let cfg = dir.path("strata.toml");
    std::fs::write(&cfg, "[daemon]\npolicy = \"first-touch\"\ndiscovery_ms = 100000\n").unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "--period-ms", "20", "-q", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    let mut child = under_strata("sh", &sock)
        .args(["-c", "x=$(head -c 100000 /dev/zero | tr '\\0' a); sleep 20"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as u64;
    let v =
        stats_until(&sock, |v| v["daemon"]["processes"].as_array().is_some_and(|d| d.iter().any(|p| p["pid"] == pid)));
    let _ = child.kill();
    let _ = child.wait();
    drop(daemon);
    let managed = v["daemon"]["processes"].as_array().unwrap();
    assert!(managed.iter().any(|p| p["pid"] == pid), "the process did not announce itself: {v}");
}

/// The agent counter `key` of process `pid` in a status (0 when it has none).
fn agent_counter(v: &Value, pid: u64, key: &str) -> u64 {
    v["daemon"]["processes"]
        .as_array()
        .and_then(|d| d.iter().find(|p| p["pid"] == pid))
        .map_or(0, |p| p["agent"][key].as_u64().unwrap_or(0))
}

/// With `hint-fault` among the trackers the daemon keeps a program's agent (the mover stays
/// move_pages) and samples its pages each round: the program, which only reads its hot buffer,
/// is tracked by hint-fault, its samples are touched, and its check of every byte passes.
#[test]
fn the_hint_fault_tracker_samples_a_program_that_only_reads() {
    let dir = Dir::new("daemon-hint");
    let Some((daemon, sock)) = hint_fault_daemon(&dir, "100") else { return };
    let child = under_strata(&repo("build/preload/hot_writer"), &sock)
        .args(["16", "6", "16", "read"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as u64;
    let touched = |v: &Value| agent_counter(v, pid, "samples_touched");
    let v = stats_until(&sock, |v| touched(v) >= 20);
    let out = child.wait_with_output().unwrap();
    let err = daemon.stop();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("verified"), "{text}");
    let p = v["daemon"]["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).cloned();
    let p = p.unwrap_or_else(|| panic!("not managed: {v}\n{err}"));
    assert_eq!(p["tracker"], "hint-fault", "{p}");
    assert!(touched(&v) >= 20, "{p}\n{err}");
    assert_eq!(p["agent"]["commits"], 0, "the mover stays move_pages: {p}");
}

/// A real program under hint-fault samples every 20 ms: python3 allocating, freeing (large
/// blocks are unmapped), growing and forking as it goes prints what it prints without Strata.
#[test]
fn python_under_hint_fault_samples_prints_what_it_prints_alone() {
    let script = "import hashlib, random, subprocess\n\
                  random.seed(7); h = hashlib.sha256(); d = {}\n\
                  for r in range(20):\n\
                  \x20   for i in range(10000): d[random.randrange(100000)] = bytes(random.getrandbits(8) for _ in range(random.randrange(1, 64)))\n\
                  \x20   big = [bytearray(random.randrange(1, 1 << 20)) for _ in range(8)]\n\
                  \x20   for b in big: b[0] = r; h.update(b[:16])\n\
                  \x20   del big\n\
                  \x20   for k in sorted(d)[:2500]: h.update(d.pop(k))\n\
                  \x20   if r % 5 == 0: h.update(subprocess.run(['echo', str(r)], capture_output=True).stdout)\n\
                  print(h.hexdigest(), len(d))\n";
    let alone = Command::new("python3").args(["-c", script]).output().unwrap();
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let dir = Dir::new("daemon-hint-python");
    let Some((daemon, sock)) = hint_fault_daemon(&dir, "20") else { return };
    let child = under_strata("python3", &sock)
        .args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as u64;
    let samples = |v: &Value| agent_counter(v, pid, "samples");
    let v = stats_until(&sock, |v| samples(v) > 0);
    let sampled = child.wait_with_output().unwrap();
    let err = daemon.stop();
    assert!(sampled.status.success(), "{}", String::from_utf8_lossy(&sampled.stderr));
    assert!(samples(&v) > 0, "python was not sampled: {v}");
    assert_eq!(String::from_utf8_lossy(&sampled.stdout), String::from_utf8_lossy(&alone.stdout), "{err}");
    assert!(!err.contains("stopped answering"), "{err}");
}

#[test]
fn any_process_can_be_attached_with_a_priority_and_detached_and_bad_requests_say_why() {
    let dir = Dir::new("daemon-attach");
    let sock = dir.path("sock");
    let (code, _, err) = strata(&["attach", "1", "--socket", &sock]);
    assert_eq!(code, 1);
    assert!(err.contains("no daemon answers") && err.contains("strata daemon"), "{err}");
    let daemon = Daemon::start(&["daemon", "--policy", "first-touch", "--period-ms", "20", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid_n = sleeper.id();
    let pid = pid_n.to_string();
    let (code, out, err) = strata(&["attach", &pid, "--priority", "low", "--socket", &sock]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("attached, priority -10"), "{out}");
    let v = json(&["stats", "--json", "--socket", &sock]);
    let p = v["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid_n);
    assert_eq!(p.unwrap_or_else(|| panic!("{v}"))["priority"], -10, "{v}");
    // a restarted daemon takes the attachment back
    let err = daemon.stop();
    assert!(err.contains("programs keep their pages"), "{err}");
    let daemon = Daemon::start(&["daemon", "--policy", "first-touch", "--period-ms", "20", "-q", "--socket", &sock]);
    let v = stats_until(&sock, |v| v["daemon"]["processes"].as_array().is_some_and(|d| !d.is_empty()));
    let p = v["daemon"]["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid_n);
    let p = p.unwrap_or_else(|| panic!("the restarted daemon forgot the attachment: {v}"));
    assert_eq!((p["attached"].as_bool(), p["given_priority"].as_i64()), (Some(true), Some(-10)), "{p}");
    let (code, out, _) = strata(&["attach", &pid, "--detach", "--socket", &sock]);
    assert!(code == 0 && out.contains("detached"), "{out}");
    let (code, _, err) = strata(&["attach", &pid, "--detach", "--socket", &sock]);
    assert!(code == 1 && err.contains("not managed"), "{err}");
    let (code, _, err) = strata(&["attach", "4000000", "--socket", &sock]);
    assert!(code == 1 && err.contains("no process 4000000"), "{err}");
    let (code, _, err) = strata(&["attach", &pid, "--priority", "urgent", "--socket", &sock]);
    assert!(code == 2 && err.contains("urgent"), "a usage error: {err}");
    // a second daemon on the same socket is refused
    let (code, _, err) = strata(&["daemon", "--policy", "first-touch", "--rounds", "1", "--socket", &sock]);
    assert!(code == 1 && err.contains("another daemon"), "{err}");
    drop(daemon);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// A process no tracker of the configuration can see is attached, and `attach` says so and why:
/// pagemap-scan alone needs the process's own userfaultfd, which a process not under Strata
/// does not offer.
#[test]
fn attach_says_when_no_tracker_can_see_the_process() {
    let dir = Dir::new("daemon-unseen");
    let sock = dir.path("sock");
    let cfg = dir.path("strata.toml");
    std::fs::write(&cfg, "[daemon]\npolicy = \"first-touch\"\ntrackers = [\"pagemap-scan\"]\n").unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "--period-ms", "20", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (code, out, err) = strata(&["attach", &pid, "--socket", &sock]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("attached"), "{out}");
    assert!(err.contains(&format!("no tracker can see process {pid}")) && err.contains("pagemap-scan: "), "{err}");
    drop(daemon);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn a_bad_configuration_is_refused_with_its_key_and_line_at_start_and_on_reload() {
    let dir = Dir::new("daemon-config");
    let sock = dir.path("sock");
    let cfg = dir.path("strata.toml");
    std::fs::write(&cfg, "[daemon]\npolicy = \"first-touch\"\n\n[mover]\nrate_mbps = -5\n").unwrap();
    let (code, _, err) = strata(&["--config", &cfg, "daemon", "--rounds", "1", "--socket", &sock]);
    assert_eq!(code, 1);
    assert!(err.contains("line 5") && err.contains("mover.rate_mbps"), "{err}");
    std::fs::write(
        &cfg,
        "[daemon]\npolicy = \"first-touch\"\n[scanner]\nperiod_ms = 20\n[[process]]\ncommand = \"sh\"\npriority = 3\n",
    )
    .unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "-q", "--socket", &sock]);
    stats_until(&sock, |v| !v["daemon"].is_null());
    // SIGHUP with a broken file: refused, the configuration in force stays, the daemon runs on
    std::fs::write(&cfg, "[daemon]\npolicy = \"first-touch\"\n\n[[process]]\ncommand = \"sh\"\npriorty = 3\n").unwrap();
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
    let v = stats_until(&sock, |v| v["daemon"]["last_reload"].is_string());
    let said = v["daemon"]["last_reload"].as_str().unwrap_or_default();
    assert!(said.contains("refused") && said.contains("line 6") && said.contains("priorty"), "{v}");
    // a good one is taken, and a policy can change on reload
    std::fs::write(&cfg, "[daemon]\npolicy = \"ambix\"\n[scanner]\nperiod_ms = 30\n").unwrap();
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGHUP) };
    let v = stats_until(&sock, |v| v["daemon"]["last_reload"].as_str().is_some_and(|s| s.contains("reloaded")));
    let scans = json(&["daemon", "--probe", "--json"])["trackers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["used"] == true && t["available"] == true);
    if scans {
        assert_eq!(
            (v["daemon"]["policy"].as_str(), v["daemon"]["period_ms"].as_f64()),
            (Some("ambix"), Some(30.0)),
            "{v}"
        );
    }
    let err = daemon.stop();
    assert!(err.contains("configuration refused") && err.contains("line 6"), "{err}");
}

#[test]
fn the_metrics_endpoint_serves_what_stats_json_shows() {
    let dir = Dir::new("daemon-metrics");
    let sock = dir.path("sock");
    let daemon = Daemon::start(&["daemon", "--policy", "first-touch", "--period-ms", "20", "-q", "--socket", &sock]);
    let mut child = under_strata("sh", &sock)
        .args(["-c", "x=$(head -c 300000 /dev/zero | tr '\\0' a); echo ready; sleep 20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // the shell has built its string and waits: its resident bytes no longer change
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    let v =
        stats_until(&sock, |v| v["daemon"]["processes"].as_array().is_some_and(|d| d.iter().any(|p| p["pid"] == pid)));
    let (mut server, port) = exporter(&mut Command::new(env!("CARGO_BIN_EXE_strata")), &sock);
    let body = scrape(port);
    let _ = server.kill();
    let _ = server.wait();
    let _ = child.kill();
    let _ = child.wait();
    drop(daemon);
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("application/openmetrics-text"), "{body}");
    let value = |name: &str, labels: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|x| x.parse().ok())
    };
    let cap = v["tiers"][0]["capacity_bytes"].as_f64().unwrap();
    assert_eq!(value("strata_tier_capacity_bytes{", "tier=\"0\""), Some(cap), "{body}");
    assert_eq!(value("strata_daemon_up ", ""), Some(1.0), "{body}");
    assert!(value("strata_daemon_rounds_total", "").is_some_and(|r| r > 0.0), "{body}");
    let resident = value("strata_tier_bytes{", &format!("pid=\"{pid}\"")).unwrap_or_else(|| panic!("{body}"));
    let json_resident = v["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid).unwrap()["tier_bytes"]["0"]
        .as_f64()
        .unwrap();
    // the two were read a moment apart from a sleeping shell: the same within a few pages
    assert!((resident - json_resident).abs() <= 64.0 * 4096.0, "{resident} vs {json_resident}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}

/// `[metrics] listen` serves the endpoint from the daemon itself, with no second process: each
/// managed process with its cgroup and its tracker's health, and the daemon's counters.
#[test]
fn the_daemon_serves_its_own_metrics_when_configured() {
    let dir = Dir::new("daemon-own-metrics");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text = format!("[daemon]\npolicy = \"first-touch\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n");
    let (daemon, sock) = daemon_with(&dir, &text, "20");
    let mut child = under_strata("sh", &sock).args(["-c", "x=$(seq 1 20000); sleep 20"]).spawn().unwrap();
    let pid = child.id();
    stats_until(&sock, |v| managed(v, pid).is_some_and(|p| !p["heat"].is_null()));
    let body = scrape(port);
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let cgroup = cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap().to_string();
    let _ = child.kill();
    let _ = child.wait();
    drop(daemon);
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let line =
        |name: &str, labels: &str| body.lines().find(|l| l.starts_with(name) && l.contains(labels)).map(str::to_string);
    let up = line("strata_daemon_up ", "").and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(up, Some(1.0), "{body}");
    let info = line("strata_process_info{", &format!("pid=\"{pid}\"")).unwrap_or_else(|| panic!("{body}"));
    assert!(info.contains(&format!("cgroup=\"{cgroup}\"")), "{info}");
    assert!(line("strata_process_tracker_up{", &format!("pid=\"{pid}\"")).is_some(), "{body}");
    assert!(line("strata_daemon_pingpong_pages_total", "").is_some(), "{body}");
    assert!(line("strata_process_wss_bytes{", &format!("pid=\"{pid}\"")).is_some(), "{body}");
    assert!(line("strata_process_heat_bytes{", "class=\"cold\"").is_some(), "{body}");
    assert!(line("strata_daemon_attempted_pages_total", "").is_some(), "{body}");
}

/// How much of a program is hot and cold, on a program whose sets are known: 8 MiB written
/// every round, 32 MiB written once and never again. The tracker here sees writes.
#[test]
fn stats_say_how_much_is_hot_and_cold_and_the_working_set_of_a_known_program() {
    let dir = Dir::new("daemon-heat");
    let (daemon, sock) = daemon_with(&dir, "[daemon]\npolicy = \"ambix\"\n[heat]\ncold_rounds = 10\n", "50");
    let hold = dir.path("hold");
    let mut child = under_strata(&repo("build/preload/hot_writer"), &sock)
        .args(["8", "1", "32"])
        .env("HOT_WRITER_HOLD", &hold)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // rounds go by whatever the host's load: wait for 15 of them (the cold set is cold after 10)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let heat = loop {
        let v = json(&["stats", "--json", "--socket", &sock]);
        let p = v["processes"].as_array().and_then(|a| a.iter().find(|p| p["pid"] == pid).cloned());
        let heat = p.map(|p| p["heat"].clone()).unwrap_or(Value::Null);
        if heat["rounds"].as_u64() >= Some(15) || std::time::Instant::now() > deadline {
            break heat;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (code, text, err) = strata(&["stats", "--socket", &sock]);
    assert_eq!(code, 0, "{err}");
    // the same over time: recorded, then drawn
    let rec = dir.path("rec.jsonl");
    let (code, _, err) =
        strata(&["record", &pid.to_string(), "--seconds", "1", "--out", &rec, "--socket", &sock, "-q"]);
    assert_eq!(code, 0, "{err}");
    let (code, drawn, err) = strata(&["report", &rec, "--out", &dir.path("plots")]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(&hold, "").unwrap();
    let _ = child.wait();
    drop(daemon);
    let mib = |k: &str| heat[k].as_f64().unwrap_or_else(|| panic!("{k}: {heat}")) / 1048576.0;
    let near = |got: f64, want: f64| (got - want).abs() <= want * 0.10;
    assert!(near(mib("wss_bytes"), 8.0), "working set {} MiB, not 8: {heat}", mib("wss_bytes"));
    assert!(near(mib("hot_bytes") + mib("warm_bytes"), 8.0), "{heat}");
    assert!(near(mib("cold_bytes"), 32.0), "cold {} MiB, not 32: {heat}", mib("cold_bytes"));
    // by allocation context: the hot buffer's and the cold buffer's
    let ctx: Vec<(f64, f64)> = heat["contexts"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| {
            (c["hot_bytes"].as_f64().unwrap() + c["warm_bytes"].as_f64().unwrap(), c["cold_bytes"].as_f64().unwrap())
        })
        .collect();
    assert!(ctx.iter().any(|&(h, c)| h == 8.0 * 1048576.0 && c == 0.0), "{heat}");
    assert!(ctx.iter().any(|&(h, c)| h == 0.0 && c == 32.0 * 1048576.0), "{heat}");
    assert!(text.contains("working set 8.0 MiB") && text.contains("writes only"), "{text}");
    let rounds: Vec<Value> =
        std::fs::read_to_string(&rec).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = rounds.last().unwrap_or_else(|| panic!("no round recorded"));
    assert!(near(last["wss_bytes"].as_f64().unwrap() / 1048576.0, 8.0), "{last}");
    // the hot buffer is a fifth of the watched pages: a fifth of the map's bins, accessed in
    // the rounds the writer ran in (on a busy host a 50 ms round may pass without it)
    let hot = |r: &Value| r["access_map"].as_array().unwrap().iter().filter(|v| v.as_f64() > Some(0.5)).count();
    let hot_bins = rounds.iter().map(hot).max().unwrap();
    assert!((10..=16).contains(&hot_bins), "{hot_bins} of 64 bins hot: {rounds:?}");
    for plot in ["rec-wss.svg", "rec-heatmap.svg"] {
        let svg = std::fs::read_to_string(dir.path(&format!("plots/{plot}"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<rect"), "{plot}");
    }
    assert!(drawn.contains("working set 8.0 MiB"), "{drawn}");
}

/// The security review's L9: `strata --config FILE stats` and `attach` talk to the daemon that
/// FILE configures, not to the default socket.
#[test]
fn stats_and_attach_use_the_configured_socket() {
    let dir = Dir::new("daemon-config-socket");
    let (sock, cfg) = (dir.path("sock"), dir.path("strata.toml"));
    std::fs::write(&cfg, format!("[daemon]\npolicy = \"first-touch\"\nsocket = \"{sock}\"\n")).unwrap();
    let daemon = Daemon::start(&["--config", &cfg, "daemon", "--period-ms", "50", "-q"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while json(&["--config", &cfg, "stats", "--json"])["daemon"].is_null() {
        assert!(std::time::Instant::now() < deadline, "stats did not reach the configured daemon");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let (code, out, err) = strata(&["--config", &cfg, "attach", &child.id().to_string(), "--priority", "low"]);
    let _ = child.kill();
    let _ = child.wait();
    drop(daemon);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("attached, priority -10"), "{out}");
}
