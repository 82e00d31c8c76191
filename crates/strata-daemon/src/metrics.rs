//! What `strata stats --json` shows, as Prometheus metrics at `http://ADDR/metrics` (the
//! OpenMetrics text format, encoded by prometheus-client and served by axum), gathered afresh
//! at every scrape: served by the daemon itself (`[metrics] listen = "ADDR"` in its
//! configuration, or `strata daemon --metrics ADDR`), or by `strata stats --metrics ADDR`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `strata_tier_capacity_bytes`, `strata_tier_free_bytes` | tier | each tier's memory |
//! | `strata_tier_bytes` | tier, pid, command | a process's resident bytes on a tier (numa_maps) |
//! | `strata_process_tracked_bytes` | pid, command | bytes of its tracked objects |
//! | `strata_process_priority` | pid, command | its priority in force (daemon) |
//! | `strata_process_tracked_pages` | pid, command, tracker | pages its tracker saw in its last pass (daemon) |
//! | `strata_daemon_up` | | 1 when a daemon answers |
//! | `strata_daemon_rounds_total`, `..._pages_scanned_total` | | rounds and pages scanned |
//! | `strata_daemon_promoted_bytes_total`, `..._demoted_bytes_total`, `..._migrated_bytes_total` | | what it moved |
//! | `strata_daemon_refused_pages_total` | reason | moves refused (no_room, gone, budget, ...) |
//! | `strata_daemon_migration_rate_bytes_per_second` | | over the last ten seconds |
//! | `strata_daemon_cpu_seconds_total` | | the engine's CPU time |
//! | `strata_daemon_fast_share_bytes` | group, priority | a group's share of the fast tier, when shared |
//! | `strata_daemon_attempted_pages_total`, `..._pingpong_pages_total` | | moves asked; pages moved back within `mover.pingpong_rounds` |
//! | `strata_process_info` | pid, command, cgroup, exe | 1 per managed process (join the others on pid) |
//! | `strata_process_promoted_bytes_total`, `..._demoted_bytes_total` | pid, command | what the daemon moved of it |
//! | `strata_process_attempted_pages_total`, `..._pingpong_pages_total` | pid, command | moves asked for it; moved back |
//! | `strata_process_refused_pages_total` | pid, command, reason | its moves refused, by reason |
//! | `strata_process_tracker_up` | pid, command, tracker | 0 when its tracker failed in the last round |
//! | `strata_cgroup_promoted_bytes_total`, `..._demoted_bytes_total` | cgroup | the same summed per cgroup |
//! | `strata_process_heat_bytes` | pid, command, class | its bytes hot, warm and cold (crate stratad::heat) |
//! | `strata_process_wss_bytes` | pid, command | its working set |
//! | `strata_context_live_bytes` | pid, command, context | the largest contexts' live bytes (the top of `strata stats`) |
//! | `strata_agent_pages_total` | pid, command, outcome | transactional moves (shadow_demotion: a shadow hit) |
//!
//! Anyone who can reach the address can connect, so what they can take is bounded: at most
//! `MAX_CONNECTIONS` at once (more are closed as they come), each closed after `IDLE` without a
//! byte from its client; an accept that fails (out of descriptors) is retried after a pause,
//! never the end of the exporter.
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use crate::linux::Linux;
use crate::status::{gather, Status};
use anyhow::Context;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    pid: String,
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierProcessLabels {
    tier: String,
    pid: String,
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrackerLabels {
    pid: String,
    command: String,
    tracker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    pid: String,
    command: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessReasonLabels {
    pid: String,
    command: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    pid: String,
    command: String,
    cgroup: String,
    exe: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    pid: String,
    command: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CgroupLabel {
    cgroup: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContextLabels {
    pid: String,
    command: String,
    context: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    /// `priority:N` (the processes of priority N without a limit) or `pid:N` (one with a limit)
    group: String,
    priority: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// A gauge family registered under `name`.
fn family<L, M>(r: &mut Registry, name: &str, help: &str) -> Family<L, M>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    M: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + Default
        + Send
        + Sync
        + std::fmt::Debug
        + 'static,
{
    let f = Family::<L, M>::default();
    r.register(name, help, f.clone());
    f
}

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: f64) {
    let g = FloatGauge::default();
    g.set(v);
    r.register(name, help, g);
}

/// The status as the text of a scrape.
pub fn render(s: &Status) -> String {
    let mut r = Registry::with_prefix("strata");
    let cap = family::<TierLabel, Gauge>(&mut r, "tier_capacity_bytes", "Bytes of memory in the tier");
    let free = family::<TierLabel, Gauge>(&mut r, "tier_free_bytes", "Bytes free in the tier");
    for t in &s.tiers {
        let l = TierLabel { tier: t.tier.to_string() };
        cap.get_or_create(&l).set(t.capacity_bytes as i64);
        free.get_or_create(&l).set(t.free_bytes as i64);
    }
    let tier_bytes =
        family::<TierProcessLabels, Gauge>(&mut r, "tier_bytes", "A process's resident bytes on the tier (numa_maps)");
    let tracked =
        family::<ProcessLabels, Gauge>(&mut r, "process_tracked_bytes", "Bytes of a process's tracked objects");
    let priority = family::<ProcessLabels, Gauge>(&mut r, "process_priority", "A process's priority in force");
    for p in &s.processes {
        let (pid, command) = (p.pid.to_string(), p.command.clone());
        for (tier, b) in &p.tier_bytes {
            let l = TierProcessLabels { tier: tier.to_string(), pid: pid.clone(), command: command.clone() };
            tier_bytes.get_or_create(&l).set(*b as i64);
        }
        let l = ProcessLabels { pid, command };
        tracked.get_or_create(&l).set(p.tracked_bytes as i64);
        if let Some(prio) = p.priority {
            priority.get_or_create(&l).set(prio.into());
        }
    }
    let live = family::<ContextLabels, Gauge>(&mut r, "context_live_bytes", "Live bytes of an allocation context");
    for c in &s.top_contexts {
        let command = s.processes.iter().find(|p| p.pid == c.pid).map_or(String::new(), |p| p.command.clone());
        live.get_or_create(&ContextLabels { pid: c.pid.to_string(), command, context: c.id.clone() })
            .set(c.live_bytes as i64);
    }
    gauge(&mut r, "daemon_up", "1 when a daemon answers on its socket", if s.daemon.is_some() { 1.0 } else { 0.0 });
    if let Some(d) = &s.daemon {
        let st = &d.stats;
        let pages = family::<TrackerLabels, Gauge>(
            &mut r,
            "process_tracked_pages",
            "Pages the process's tracker saw in its last whole pass",
        );
        for p in &d.processes {
            let tracker = serde_json::to_value(p.process.tracker).ok().and_then(|v| v.as_str().map(String::from));
            let l = TrackerLabels {
                pid: p.process.pid.to_string(),
                command: p.process.command.clone(),
                tracker: tracker.unwrap_or_default(),
            };
            pages.get_or_create(&l).set(p.process.tracked_pages.unwrap_or(0) as i64);
        }
        let agent = family::<AgentLabels, Counter>(
            &mut r,
            "agent_pages",
            "A process agent's transactional moves, by outcome (commit, abort, shadow_demotion, fallback)",
        );
        let shadows = family::<ProcessLabels, Gauge>(&mut r, "agent_shadows", "Shadow copies a process's agent holds");
        let samples = family::<AgentLabels, Counter>(
            &mut r,
            "agent_samples",
            "Pages a process's agent sampled for the hint-fault tracker, by outcome (touched, untouched)",
        );
        for p in &d.processes {
            let Some(a) = p.process.agent else { continue };
            let (pid, command) = (p.process.pid.to_string(), p.process.command.clone());
            for (outcome, n) in [
                ("commit", a.commits),
                ("abort", a.aborts),
                ("shadow_demotion", a.shadow_demotions),
                ("fallback", a.fallbacks),
            ] {
                let l = AgentLabels { pid: pid.clone(), command: command.clone(), outcome: outcome.into() };
                agent.get_or_create(&l).inc_by(n);
            }
            for (outcome, n) in
                [("touched", a.samples_touched), ("untouched", a.samples.saturating_sub(a.samples_touched))]
            {
                let l = AgentLabels { pid: pid.clone(), command: command.clone(), outcome: outcome.into() };
                samples.get_or_create(&l).inc_by(n);
            }
            shadows.get_or_create(&ProcessLabels { pid, command }).set(a.shadows as i64);
        }
        process_moves(&mut r, d);
        counter(
            &mut r,
            "daemon_attempted_pages",
            "Page moves policies asked for (moved or refused)",
            st.attempted_pages,
        );
        counter(
            &mut r,
            "daemon_pingpong_pages",
            "Pages moved back the other way within mover.pingpong_rounds rounds",
            st.pingpong_pages,
        );
        counter(&mut r, "daemon_rounds", "Rounds the daemon ran", st.rounds);
        counter(&mut r, "daemon_pages_scanned", "Pages its trackers reported", st.pages_scanned);
        counter(&mut r, "daemon_promoted_bytes", "Bytes moved to a faster tier", st.promoted_bytes);
        counter(&mut r, "daemon_demoted_bytes", "Bytes moved to a slower tier", st.demoted_bytes);
        counter(&mut r, "daemon_migrated_bytes", "Every byte moved", st.migrated_bytes);
        let refused = family::<ReasonLabel, Counter>(&mut r, "daemon_refused_pages", "Page moves refused, by reason");
        for (why, n) in &st.refused_pages {
            refused.get_or_create(&ReasonLabel { reason: why.clone() }).inc_by(*n);
        }
        gauge(
            &mut r,
            "daemon_migration_rate_bytes_per_second",
            "Bytes moved per second over the last ten seconds",
            d.migration_rate_mbps * 1e6,
        );
        let cpu = Counter::<f64, AtomicU64>::default();
        cpu.inc_by(st.engine_cpu_ns as f64 / 1e9);
        r.register("daemon_cpu_seconds", "CPU time of the daemon's rounds", cpu);
        let share = family::<GroupLabels, Gauge>(&mut r, "daemon_fast_share_bytes", "A group's share of the fast tier");
        for g in &st.groups {
            let group = match g.key {
                stratad::share::GroupKey::Priority(p) => format!("priority:{p}"),
                stratad::share::GroupKey::Limited(pid) => format!("pid:{pid}"),
                stratad::share::GroupKey::Cgroup(_) => format!("cgroup:{}", g.cgroup.as_deref().unwrap_or("?")),
            };
            share.get_or_create(&GroupLabels { group, priority: g.priority.to_string() }).set(g.share_bytes as i64);
        }
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).expect("writing to a String");
    out
}

/// What the daemon did for each process, and for each cgroup.
fn process_moves(r: &mut Registry, d: &crate::status::DaemonStatus) {
    let info = family::<InfoLabels, Gauge>(r, "process_info", "1 for each process the daemon manages");
    let up = family::<TrackerLabels, Gauge>(r, "process_tracker_up", "0 when the process's tracker failed last round");
    let promoted = family::<ProcessLabels, Counter>(r, "process_promoted_bytes", "Its bytes moved to a faster tier");
    let demoted = family::<ProcessLabels, Counter>(r, "process_demoted_bytes", "Its bytes moved to a slower tier");
    let attempted =
        family::<ProcessLabels, Counter>(r, "process_attempted_pages", "Its page moves asked for (moved or refused)");
    let pingpong =
        family::<ProcessLabels, Counter>(r, "process_pingpong_pages", "Its pages moved back within the window");
    let refused =
        family::<ProcessReasonLabels, Counter>(r, "process_refused_pages", "Its page moves refused, by reason");
    let cg_promoted =
        family::<CgroupLabel, Counter>(r, "cgroup_promoted_bytes", "Bytes of the cgroup's processes promoted");
    let cg_demoted =
        family::<CgroupLabel, Counter>(r, "cgroup_demoted_bytes", "Bytes of the cgroup's processes demoted");
    let heat = family::<ClassLabels, Gauge>(r, "process_heat_bytes", "Its bytes by heat class (hot, warm, cold)");
    let wss = family::<ProcessLabels, Gauge>(r, "process_wss_bytes", "Its working set");
    for p in &d.processes {
        let m = &p.process;
        let (pid, command) = (m.pid.to_string(), m.command.clone());
        let cgroup = m.ids.cgroup.clone().unwrap_or_default();
        let exe = m.ids.exe.as_ref().map_or(String::new(), |e| e.display().to_string());
        info.get_or_create(&InfoLabels { pid: pid.clone(), command: command.clone(), cgroup: cgroup.clone(), exe })
            .set(1);
        let tracker = serde_json::to_value(m.tracker).ok().and_then(|v| v.as_str().map(String::from));
        let t = TrackerLabels { pid: pid.clone(), command: command.clone(), tracker: tracker.unwrap_or_default() };
        up.get_or_create(&t).set(i64::from(m.tracker_error.is_none()));
        if let Some(h) = &p.heat {
            let c = &h.classes;
            for (class, b) in [("hot", c.hot_bytes), ("warm", c.warm_bytes), ("cold", c.cold_bytes)] {
                let l = ClassLabels { pid: pid.clone(), command: command.clone(), class: class.into() };
                heat.get_or_create(&l).set(b as i64);
            }
            wss.get_or_create(&ProcessLabels { pid: pid.clone(), command: command.clone() }).set(h.wss_bytes as i64);
        }
        let Some(st) = d.stats.processes.get(&m.pid) else { continue };
        let l = ProcessLabels { pid: pid.clone(), command: command.clone() };
        promoted.get_or_create(&l).inc_by(st.promoted_bytes);
        demoted.get_or_create(&l).inc_by(st.demoted_bytes);
        attempted.get_or_create(&l).inc_by(st.attempted_pages);
        pingpong.get_or_create(&l).inc_by(st.pingpong_pages);
        for (why, n) in &st.refused_pages {
            let l = ProcessReasonLabels { pid: pid.clone(), command: command.clone(), reason: why.clone() };
            refused.get_or_create(&l).inc_by(*n);
        }
        if !cgroup.is_empty() {
            cg_promoted.get_or_create(&CgroupLabel { cgroup: cgroup.clone() }).inc_by(st.promoted_bytes);
            cg_demoted.get_or_create(&CgroupLabel { cgroup }).inc_by(st.demoted_bytes);
        }
    }
}

struct Scrape {
    machine: Mutex<Linux>,
    socket: PathBuf,
    top: usize,
}

async fn metrics(State(s): State<Arc<Scrape>>) -> impl IntoResponse {
    let body = tokio::task::spawn_blocking(move || {
        let mut m = s.machine.lock().unwrap_or_else(|e| e.into_inner());
        render(&gather(&mut m, crate::control::daemon_status(&s.socket), s.top))
    })
    .await
    .unwrap_or_else(|e| format!("# gathering failed: {e}\n"));
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
}

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// A connection whose client sends nothing for this long is closed.
pub const IDLE: Duration = Duration::from_secs(10);

/// The listening socket, with its bounds (module doc).
struct Capped {
    listener: tokio::net::TcpListener,
    slots: Arc<tokio::sync::Semaphore>,
}

/// A connection: its slot is given back when it closes.
struct Conn {
    io: tokio::net::TcpStream,
    _slot: tokio::sync::OwnedSemaphorePermit,
    idle: Pin<Box<tokio::time::Sleep>>,
}

impl axum::serve::Listener for Capped {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((io, addr)) => match Arc::clone(&self.slots).try_acquire_owned() {
                    Ok(slot) => {
                        let idle = Box::pin(tokio::time::sleep(IDLE));
                        return (Conn { io, _slot: slot, idle }, addr);
                    }
                    Err(_) => drop(io), // full: closed at once
                },
                // out of descriptors, or a connection gone before it was taken: wait a little
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn local_addr(&self) -> tokio::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                let next = tokio::time::Instant::now() + IDLE;
                self.idle.as_mut().reset(next);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if self.idle.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "idle connection")))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The endpoint's socket, bound now so that a taken address is an error at start.
pub fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr} for metrics"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serve the metrics at http://ADDR/metrics on `listener` until the process is stopped; `who`
/// names the server in its one line on stderr.
pub fn serve(listener: std::net::TcpListener, socket: PathBuf, top: usize, who: &str) -> anyhow::Result<()> {
    let state = Arc::new(Scrape { machine: Mutex::new(Linux::new()), socket, top });
    let app = Router::new().route("/metrics", get(metrics)).with_state(state);
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        eprintln!("{who}: serving Prometheus metrics at http://{}/metrics", listener.local_addr()?);
        let capped = Capped { listener, slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)) };
        axum::serve(capped, app).await.context("serving metrics")
    })
}
