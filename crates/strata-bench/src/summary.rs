//! The headline figures of every saved run (bench/results/CPU/BENCHMARK.json), as one markdown
//! document: a table per file, naming the machine, the date and the command. `strata bench
//! summary --write` regenerates bench/results/SUMMARY.md from the files; nothing in it is typed
//! by hand.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::results::{Measured, Saved};
use strata_util::io;

use crate::{alloc, daemon, failed, locality, migrate, tiering, ycsb, Error};

/// Every results file under dir, sorted.
fn files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(io(format!("reading {}", d.display())))?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Each value once, in the order of its first appearance (a table's rows and columns).
fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

fn parse<T: DeserializeOwned>(path: &Path, v: Value) -> Result<Saved<T>, Error> {
    serde_json::from_value(v).map_err(|e| failed(format!("{}: {e}", path.display())))
}

fn header(s: &mut String, m: &Measured, what: &str, path: &Path, dir: &Path) {
    let rel = path.strip_prefix(dir).unwrap_or(path);
    let _ = writeln!(s, "## {what}\n");
    let _ = writeln!(
        s,
        "{} ({} CPUs), {}; `{}` ([data]({}))\n",
        m.host.cpu_model,
        m.host.cpus,
        m.date,
        m.command,
        rel.display()
    );
}

fn locality_table(s: &mut String, r: &locality::Report) {
    let _ = writeln!(s, "| variant | pages per list traversal | traversal (M nodes/s) |\n|---|---|---|");
    let mut rows: Vec<(&String, &f64)> = r.traversal_nodes_per_sec.iter().collect();
    rows.sort_by_key(|(v, _)| ["malloc", "strata", "next_to"].iter().position(|x| x == v));
    for (v, rate) in rows {
        let pages = r.pages_per_traversal.get(v).map_or("-".into(), |p| format!("{p:.1}"));
        let _ = writeln!(s, "| {v} | {pages} | {:.1} |", rate / 1e6);
    }
    let _ = writeln!(
        s,
        "\nnext_to over malloc: **{:.1}x** traversal speed-up ({} lists x {} nodes, {}).\n",
        r.traversal_speedup, r.lists, r.nodes_per_list, r.machine
    );
}

fn alloc_table(s: &mut String, r: &alloc::Report) {
    let allocators = distinct(r.results.iter().map(|x| x.allocator.as_str()));
    let _ = writeln!(s, "| benchmark | {} |\n|---|{}", allocators.join(" | "), "---|".repeat(allocators.len()));
    for (bench, ratios) in &r.ratios {
        let cells: Vec<String> = allocators
            .iter()
            .map(|a| {
                let v = r
                    .results
                    .iter()
                    .find(|x| &x.benchmark == bench && x.allocator == *a)
                    .map_or(0.0, |x| x.ops_per_sec);
                format!("{:.1} ({:.2}x)", v / 1e6, ratios.get(*a).copied().unwrap_or(f64::NAN))
            })
            .collect();
        let _ = writeln!(s, "| {bench} | {} |", cells.join(" | "));
    }
    let _ = writeln!(s, "\nM malloc+free pairs per second (ratio to glibc), median of rounds.");
    for p in &r.programs {
        let _ = writeln!(
            s,
            "Whole program ({}): Strata with contexts vs glibc {:+.1} %, context tracking {:+.1} % (instructions).",
            p.name,
            p.vs_glibc * 100.0,
            p.context_overhead * 100.0
        );
    }
    s.push('\n');
}

fn ycsb_table(s: &mut String, r: &ycsb::Report) {
    // a column per workload and theta (a theta sweep's columns are its thetas)
    let columns = distinct(r.results.iter().map(|x| (x.workload.as_str(), x.theta)));
    let mut configs = distinct(r.results.iter().map(|x| (x.variant, &x.config)));
    configs.sort_by_key(|(t, c)| (*c, *t)); // the baseline first, the upper bound last
    let mut thetas: Vec<f64> = columns.iter().map(|c| c.1).collect();
    thetas.sort_by(f64::total_cmp);
    thetas.dedup();
    let heads: Vec<String> = columns
        .iter()
        .map(|(w, t)| if thetas.len() > 1 { format!("{} theta {t}", w.to_uppercase()) } else { w.to_uppercase() })
        .collect();
    let emulated = r.results.iter().any(|x| x.emulated.is_some());
    let _ = writeln!(
        s,
        "| {} | {} |\n|---|{}",
        if emulated { "configuration" } else { "variant (config)" },
        heads.join(" | "),
        "---|".repeat(columns.len())
    );
    for (t, c) in &configs {
        if !emulated && *t == ycsb::Target::Std {
            continue;
        }
        let cells: Vec<String> = columns
            .iter()
            .map(|(w, theta)| {
                let get = |tt: ycsb::Target, cc: &ycsb::Config| {
                    r.results
                        .iter()
                        .find(|x| x.workload == *w && x.theta == *theta && x.variant == tt && x.config == *cc)
                        .map(|x| x.ops_per_sec)
                };
                let base =
                    if emulated { get(ycsb::Target::Std, &ycsb::Config::FarOnly) } else { get(ycsb::Target::Std, c) };
                match (get(*t, c), base) {
                    (Some(v), Some(b)) => format!("{:.2}", v / b),
                    _ => "-".into(),
                }
            })
            .collect();
        let _ = writeln!(s, "| {} {} | {} |", t.name(), c.name(), cells.join(" | "));
    }
    let over = if emulated { "std far-only (model output)" } else { "std in the same configuration" };
    let theta = match thetas.as_slice() {
        [t] => format!(", theta {t}"),
        _ => String::new(),
    };
    let _ = writeln!(s, "\nThroughput over {over}{theta}; {}.\n", r.scale);
}

/// Tiering: each policy's share of the all-fast throughput at each fast-tier size, then the
/// policies at 25 % against first-touch and the kernel's tiering (linux; tpp in runs before
/// it).
fn tiering_table(s: &mut String, r: &tiering::Report) {
    if r.suite.is_some() && r.rows.iter().any(|x| x.fast_ratio == Some(0.25)) {
        let _ = writeln!(s, "Throughput over first touch at 1:4 fast:total (model output; the README's table):\n");
        headline_table(s, r);
    }
    let workloads = distinct(r.rows.iter().map(|x| x.workload.as_str()));
    let ranged = || r.rows.iter().filter(|x| x.fast_ratio.is_some());
    let policies = distinct(ranged().map(|x| x.policy.as_str()));
    let mut ratios = distinct(ranged().filter_map(|x| x.fast_ratio));
    ratios.sort_by(f64::total_cmp);
    let pct: Vec<String> = ratios.iter().map(|x| format!("{}", x * 100.0)).collect();
    let _ = writeln!(
        s,
        "| workload | far-only | {} |\n|---|---|{}",
        policies.iter().map(|p| format!("{p} ({} % fast)", pct.join(" / "))).collect::<Vec<_>>().join(" | "),
        "---|".repeat(policies.len())
    );
    let get = |w: &str, p: &str, f: Option<f64>| {
        r.rows.iter().find(|x| x.workload == w && x.policy == p && x.fast_ratio == f)
    };
    for w in &workloads {
        let far = get(w, "far-only", None).map_or("-".into(), |x| format!("{:.2}", x.fraction_of_all_fast));
        let cells: Vec<String> = policies
            .iter()
            .map(|p| {
                ratios
                    .iter()
                    .map(|f| get(w, p, Some(*f)).map_or("-".into(), |x| format!("{:.2}", x.fraction_of_all_fast)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .collect();
        let _ = writeln!(s, "| {w} | {far} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        s,
        "\nThroughput over all-fast (model output, preset {}; footprints of about {} MiB; time scale {}: rounds and scans every {} ms).\n",
        r.preset, r.size_mb, r.time_scale, r.period_ms
    );
    let kernel = if policies.contains(&"linux") { "linux" } else { "tpp" };
    let others: Vec<&str> = policies.iter().copied().filter(|p| *p != "first-touch" && *p != kernel).collect();
    if ratios.contains(&0.25) && !others.is_empty() {
        let _ = writeln!(
            s,
            "| workload (25 % fast) | policy | x first-touch | x {kernel} | migrated MiB ({kernel}'s) | ping-pong MiB |\n|---|---|---|---|---|---|"
        );
        for w in &workloads {
            let k = get(w, kernel, Some(0.25));
            for p in &others {
                if let Some(x) = get(w, p, Some(0.25)) {
                    let o = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
                    let _ = writeln!(
                        s,
                        "| {w} | {p} | {} | {} | {} ({}) | {} |",
                        o(x.speedup_over_first_touch),
                        o(k.map(|k| x.figure / k.figure)),
                        x.migrated_bytes >> 20,
                        k.map_or("-".into(), |k| format!("{}", k.migrated_bytes >> 20)),
                        x.pingpong_bytes.map_or("-".into(), |b| format!("{}", b >> 20))
                    );
                }
            }
        }
        s.push('\n');
    }
    if ratios.len() > 1 {
        savings_table(s, r, &workloads, &policies);
    }
    if r.suite.is_some() {
        targets_table(s, r, &workloads, &ratios);
    }
}

/// The suite's headline, the README's table: every policy's throughput over first touch at 1:4
/// fast:total, per workload, and strata's share of all-fast.
fn headline_table(s: &mut String, r: &tiering::Report) {
    const AT: Option<f64> = Some(0.25);
    let rows = || r.rows.iter().filter(|x| x.fast_ratio == AT);
    let workloads = distinct(rows().map(|x| x.workload.as_str()));
    let policies = distinct(rows().map(|x| x.policy.as_str()).filter(|p| *p != "first-touch"));
    let get = |w: &str, p: &str| r.rows.iter().find(|x| x.workload == w && x.policy == p && x.fast_ratio == AT);
    let _ = writeln!(
        s,
        "| workload | {} | strata of all-fast |\n|---|{}---|",
        policies.join(" | "),
        "---|".repeat(policies.len())
    );
    for w in &workloads {
        let cells: Vec<String> = policies
            .iter()
            .map(|p| get(w, p).and_then(|x| x.speedup_over_first_touch).map_or("-".into(), |v| format!("{v:.2}")))
            .collect();
        let all = get(w, "strata").map_or("-".into(), |x| format!("{:.2}", x.fraction_of_all_fast));
        let _ = writeln!(s, "| {w} | {} | {all} |", cells.join(" | "));
    }
    s.push('\n');
}

/// What users pick instead of Strata: doing nothing (first touch) and the field's tiering.
const BASELINES: &[&str] = &["first-touch", "linux", "nomad", "damon", "memtierd", "hybridtier"];

/// Issue #35's targets for `strata` on a suite, per fast:total ratio every workload ran at: its
/// geometric mean over each baseline, the workloads where it is below the best baseline less
/// 3 %, the median of its bytes moved over the kernel's, and its ping-pong share of its moves.
fn targets_table(s: &mut String, r: &tiering::Report, workloads: &[&str], ratios: &[f64]) {
    let get =
        |w: &str, p: &str, f: f64| r.rows.iter().find(|x| x.workload == w && x.policy == p && x.fast_ratio == Some(f));
    let every: Vec<f64> =
        ratios.iter().copied().filter(|f| workloads.iter().all(|w| get(w, "strata", *f).is_some())).rev().collect();
    if every.is_empty() {
        return;
    }
    let head: Vec<String> = every.iter().map(|f| format!("1:{}", (1.0 / f).round())).collect();
    let _ = writeln!(
        s,
        "`strata` against #35's targets, at fast:total {} (model output):\n\n| figure | {} |\n|---|{}",
        head.join(", "),
        head.join(" | "),
        "---|".repeat(every.len())
    );
    let row = |s: &mut String, what: &str, cells: Vec<String>| {
        let _ = writeln!(s, "| {what} | {} |", cells.join(" | "));
    };
    for b in BASELINES {
        let cells = every
            .iter()
            .map(|f| {
                let logs: Vec<f64> = workloads
                    .iter()
                    .filter_map(|w| Some((get(w, "strata", *f)?.figure / get(w, b, *f)?.figure).ln()))
                    .collect();
                if logs.is_empty() {
                    "-".into()
                } else {
                    format!("{:.2}", (logs.iter().sum::<f64>() / logs.len() as f64).exp())
                }
            })
            .collect();
        row(s, &format!("geometric mean over {b}"), cells);
    }
    let misses = every
        .iter()
        .map(|f| {
            let below: Vec<String> = workloads
                .iter()
                .filter_map(|w| {
                    let x = get(w, "strata", *f)?;
                    let best =
                        BASELINES.iter().filter_map(|b| get(w, b, *f)).max_by(|a, b| a.figure.total_cmp(&b.figure))?;
                    let of = x.figure / best.figure;
                    (of < 0.97).then(|| format!("{w} ({of:.2} of {})", best.policy))
                })
                .collect();
            if below.is_empty() {
                "none".into()
            } else {
                below.join(", ")
            }
        })
        .collect();
    row(s, "below the best baseline less 3 %", misses);
    let moved = every
        .iter()
        .map(|f| {
            let v: Vec<f64> = workloads
                .iter()
                .filter_map(|w| {
                    let k = get(w, "linux", *f)?.migrated_bytes;
                    (k > 0).then(|| get(w, "strata", *f).map(|x| x.migrated_bytes as f64 / k as f64))?
                })
                .collect();
            if v.is_empty() {
                "-".into()
            } else {
                format!("{:.2}", strata_util::median(v))
            }
        })
        .collect();
    row(s, "bytes moved over the kernel's (median)", moved);
    let pingpong = every
        .iter()
        .map(|f| {
            let rows: Vec<&tiering::Row> = workloads.iter().filter_map(|w| get(w, "strata", *f)).collect();
            let moved: u64 = rows.iter().map(|x| x.migrated_bytes).sum();
            let pp: u64 = rows.iter().filter_map(|x| x.pingpong_bytes).sum();
            if moved == 0 {
                "-".into()
            } else {
                format!("{:.1} %", pp as f64 * 100.0 / moved as f64)
            }
        })
        .collect();
    row(s, "ping-pong share of its bytes moved", pingpong);
    s.push('\n');
}

/// A sweep: each swept policy's figure over its best point's, per workload and ratio, and the
/// point that was best where one beat it.
fn sweep_table(s: &mut String, r: &tiering::Report) {
    let mut ratios: Vec<f64> = r.sweep.iter().filter_map(|w| w.fast_ratio).collect();
    ratios.sort_by(|a, b| b.total_cmp(a));
    ratios.dedup();
    let keys = distinct(r.sweep.iter().map(|w| (w.workload.as_str(), w.policy.as_str())));
    let head: Vec<String> = ratios.iter().map(|x| format!("{} % fast", x * 100.0)).collect();
    let _ = writeln!(s, "| workload | policy | {} |\n|---|---|{}", head.join(" | "), "---|".repeat(ratios.len()));
    for (w, p) in &keys {
        let cells: Vec<String> = ratios
            .iter()
            .map(|f| {
                r.sweep.iter().find(|x| x.workload == *w && x.policy == *p && x.fast_ratio == Some(*f)).map_or(
                    "-".into(),
                    |x| if x.best == x.policy { "1.00".into() } else { format!("{:.3} ({})", x.of_best, x.best) },
                )
            })
            .collect();
        let _ = writeln!(s, "| {w} | {p} | {} |", cells.join(" | "));
    }
    let within = r.sweep.iter().filter(|x| x.of_best >= 0.97).count();
    let worst = r.sweep.iter().map(|x| x.of_best).fold(f64::INFINITY, f64::min);
    let points: Vec<&str> = r
        .rows
        .iter()
        .map(|x| x.policy.as_str())
        .filter(|p| p.contains('@'))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let _ = writeln!(
        s,
        "\nThe policy's throughput over the best of its points (model output; footprints of about {} MiB; time scale {}): within 3 % in {within} of {} cases, the worst {worst:.3}. Points: {}.\n",
        r.size_mb,
        r.time_scale,
        r.sweep.len(),
        points.join(", ")
    );
}

/// Issue #35's service-level savings: per workload and policy, the most of the footprint left in
/// the slow tier (among the measured ratios) at 2 % and at 5 % slowdown from all-fast.
fn savings_table(s: &mut String, r: &tiering::Report, workloads: &[&str], policies: &[&str]) {
    let _ = writeln!(
        s,
        "Slow-tier share of the footprint at 2 % / 5 % slowdown from all-fast (the largest among the measured ratios; - : none):\n"
    );
    let _ = writeln!(s, "| workload | {} |\n|---|{}", policies.join(" | "), "---|".repeat(policies.len()));
    let cell = |w: &str, p: &str, within: f64| {
        tiering::slow_share(&r.rows, w, p, within).map_or("-".into(), |x| format!("{:.0} %", x * 100.0))
    };
    for w in workloads {
        let cells: Vec<String> =
            policies.iter().map(|p| format!("{} / {}", cell(w, p, 0.98), cell(w, p, 0.95))).collect();
        let _ = writeln!(s, "| {w} | {} |", cells.join(" | "));
    }
    let forty: Vec<String> = policies
        .iter()
        .map(|p| {
            let n =
                workloads.iter().filter(|w| tiering::slow_share(&r.rows, w, p, 0.98).is_some_and(|x| x >= 0.4)).count();
            format!("{n}")
        })
        .collect();
    let _ = writeln!(s, "| workloads with 40 % or more slow at 2 % | {} |\n", forty.join(" | "));
}

fn daemon_table(s: &mut String, r: &daemon::Report) {
    let _ = writeln!(
        s,
        "| managed | tracker | CPU (% of a core) | ms per round | pages per round |\n|---|---|---|---|---|"
    );
    for c in &r.cpu {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} | {:.0} |",
            strata_util::size::format(c.managed_bytes),
            c.tracker,
            c.cpu_percent,
            c.ms_per_round,
            c.pages_per_round
        );
    }
    let _ = writeln!(
        s,
        "\n{}, a round every {} ms; the program writes {:.0} % of its pages a second.",
        r.policy,
        r.period_ms,
        r.write_fraction * 100.0
    );
    if let Some(k) = &r.scaling {
        let _ = writeln!(s, "A round costs {:.2} ms + {:.2} ms per GiB managed.", k.intercept_ms, k.ms_per_gib);
    }
    if let Some(p) = &r.promotion {
        let t = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.1} s"));
        let _ = writeln!(
            s,
            "Guest (emulated time): a {} hot set on the slow node was half on the fast node after {}, 90 % after {}, {:.0} % at the end.",
            strata_util::size::format(p.hot_bytes),
            t(p.half_s),
            t(p.ninety_percent_s),
            p.fraction_end * 100.0
        );
    }
    s.push('\n');
}

fn migrate_table(s: &mut String, r: &migrate::Report) {
    let _ = writeln!(
        s,
        "| program | mechanism | pages moved | moves/s | aborts | copy-free demotions | stall per page (µs) | throughput while moving | TLB shootdowns per page | lost writes |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for x in &r.rows {
        let (aborts, nocopy) = x
            .agent
            .map_or(("-".to_string(), "-".to_string()), |a| (a.aborts.to_string(), a.shadow_demotions.to_string()));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {} | {} | {:.2} | {:.0} % | {} | {} |",
            x.program,
            x.mechanism,
            x.pages_moved,
            x.moves_per_s,
            aborts,
            nocopy,
            x.stall_us_per_page,
            x.throughput_ratio * 100.0,
            x.tlb_shootdowns_per_page.map_or("-".into(), |t| format!("{t:.2}")),
            x.lost_writes
        );
    }
    let buffer = r.rows.first().map_or(0, |x| x.buffer_bytes);
    let _ = writeln!(
        s,
        "\nEvery page of a {} buffer moved back and forth while the program runs; {}, {} thread(s).",
        strata_util::size::format(buffer),
        r.machine,
        r.threads
    );
    for (program, ratio) in &r.stall_ratio {
        let _ = writeln!(s, "{program}: transactional's stall per page is {ratio:.2}x move_pages'.");
    }
    s.push('\n');
}

/// The document, from every results file under dir.
pub fn summarize(dir: &Path) -> Result<String, Error> {
    let mut s = String::from(
        "# Measured runs\n\nGenerated by `strata bench summary --write` from the JSON files beside this one; each\ntable names the machine, the date and the command that produced its file.\n\n",
    );
    let files = files(dir)?;
    if files.is_empty() {
        let _ = writeln!(s, "(no results under {})", dir.display());
    }
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| failed(format!("{}: {e}", path.display())))?;
        let Ok(m) = serde_json::from_value::<Measured>(v["measured"].clone()) else {
            continue; // not a saved report
        };
        match m.benchmark.as_str() {
            "locality" => {
                let r: Saved<locality::Report> = parse(&path, v)?;
                header(&mut s, &r.measured, "NextTo locality (native)", &path, dir);
                locality_table(&mut s, &r.report);
            }
            "alloc" => {
                let r: Saved<alloc::Report> = parse(&path, v)?;
                header(&mut s, &r.measured, "Allocation throughput (native)", &path, dir);
                alloc_table(&mut s, &r.report);
            }
            b if b.starts_with("ycsb-") => {
                let r: Saved<ycsb::Report> = parse(&path, v)?;
                let x = &r.report;
                let mut what = x
                    .emulated()
                    .map_or("YCSB on strata-kv (native".into(), |p| format!("YCSB on strata-kv (emulated, preset {p}"));
                if x.scale_name == "m2t" {
                    what += ", M2T's scale";
                }
                if b.contains("-theta") {
                    what += ", theta sweep";
                }
                if x.colour {
                    what += ", STRATA_COLOUR=1";
                }
                what += ")";
                header(&mut s, &r.measured, &what, &path, dir);
                ycsb_table(&mut s, &r.report);
            }
            b if b.starts_with("tiering-") && b.ends_with("-sweep") => {
                let r: Saved<tiering::Report> = parse(&path, v)?;
                let what = format!("A sweep of the default's settings (emulated, preset {})", r.report.preset);
                header(&mut s, &r.measured, &what, &path, dir);
                sweep_table(&mut s, &r.report);
            }
            b if b.starts_with("tiering-") || b.starts_with("suite-") => {
                let r: Saved<tiering::Report> = parse(&path, v)?;
                let what = match (r.report.suite.as_deref(), b.ends_with("-real"), b.ends_with("-field")) {
                    (Some(set), ..) => {
                        format!("The suite ({set}): every workload under the baselines and Strata's policies")
                    }
                    (_, true, _) => "Tiering policies, real programs".into(),
                    (_, _, true) => "Tiering policies, the field's workloads".into(),
                    _ => "Tiering policies".into(),
                };
                header(&mut s, &r.measured, &format!("{what} (emulated, preset {})", r.report.preset), &path, dir);
                tiering_table(&mut s, &r.report);
            }
            b if b.starts_with("nomad-micro-") => {
                let r: Saved<tiering::nomad::Report> = parse(&path, v)?;
                let what = format!("Nomad's micro-benchmark (emulated, preset {})", r.report.preset);
                header(&mut s, &r.measured, &what, &path, dir);
                s += &r.report.markdown();
            }
            "daemon" => {
                let r: Saved<daemon::Report> = parse(&path, v)?;
                header(&mut s, &r.measured, "The live daemon (native CPU; promotion in the guest)", &path, dir);
                daemon_table(&mut s, &r.report);
            }
            b if b.starts_with("migrate") => {
                let r: Saved<migrate::Report> = parse(&path, v)?;
                let what =
                    format!("Moving a running program's pages (move_pages, transactional; CPUs {})", r.report.cpus);
                header(&mut s, &r.measured, &what, &path, dir);
                migrate_table(&mut s, &r.report);
            }
            "emu-validate" => {
                let r: Saved<strata_emu::validate::Report> = parse(&path, v)?;
                header(&mut s, &r.measured, "Emulator validation", &path, dir);
                let x = &r.report;
                let _ = writeln!(s, "| check | figure | bound |\n|---|---|---|");
                for c in &x.checks {
                    let verdict = if c.ok { "" } else { " (not met)" };
                    let _ = writeln!(s, "| {} | {:.4}{verdict} | {}-{} |", c.what, c.value, c.low, c.high);
                }
                let _ = writeln!(
                    s,
                    "| layout speed-up, emulated (host preset) and native | {:.2}x and {:.2}x | |",
                    x.layout_speedup_emulated, x.layout_speedup_native
                );
                let _ = writeln!(
                    s,
                    "| emulator speed, simulated accesses/s | {:.1} M (native {:.1} M, slowdown {:.2}x) | |\n",
                    x.accesses_per_sec / 1e6,
                    x.native_accesses_per_sec / 1e6,
                    x.slowdown
                );
            }
            other => {
                header(&mut s, &m, other, &path, dir);
                let _ = writeln!(s, "(no summary for this benchmark; see the file)\n");
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's suite table is the headline of the file it names, as generated: a figure
    /// typed or left stale there fails this.
    #[test]
    fn the_readmes_suite_table_is_generated_from_its_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let at = readme.find("**The suite, emulated").expect("the README's suite paragraph");
        let para = &readme[at..];
        let name = para
            .split('`')
            .find(|w| w.contains("/suite-") && w.ends_with(".json"))
            .expect("the paragraph names its file in backticks");
        let text = std::fs::read_to_string(root.join("bench/results").join(name)).unwrap();
        let r: Saved<tiering::Report> = serde_json::from_str(&text).unwrap();
        let mut table = String::new();
        headline_table(&mut table, &r.report);
        assert!(table.lines().count() > 3, "{table}");
        assert!(para.contains(table.trim_end()), "README's table is not {name}'s:\n{table}");
    }
}
