//! `strata stats --metrics ADDR`: what `strata stats --json` shows, as Prometheus metrics at
//! `http://ADDR/metrics` (the OpenMetrics text format, encoded by prometheus-client and served
//! by axum), gathered afresh at every scrape.
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
use stratad::linux::Linux;
use stratad::status::{gather, Status};

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
            };
            share.get_or_create(&GroupLabels { group, priority: g.priority.to_string() }).set(g.share_bytes as i64);
        }
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).expect("writing to a String");
    out
}

struct Scrape {
    machine: Mutex<Linux>,
    socket: PathBuf,
    top: usize,
}

async fn metrics(State(s): State<Arc<Scrape>>) -> impl IntoResponse {
    let body = tokio::task::spawn_blocking(move || {
        let mut m = s.machine.lock().unwrap_or_else(|e| e.into_inner());
        render(&gather(&mut m, &s.socket, s.top))
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

/// Serve the metrics at http://addr/metrics until the process is stopped.
pub fn serve(addr: SocketAddr, socket: PathBuf, top: usize) -> anyhow::Result<()> {
    let state = Arc::new(Scrape { machine: Mutex::new(Linux::new()), socket, top });
    let app = Router::new().route("/metrics", get(metrics)).with_state(state);
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))?;
        eprintln!("strata stats: serving Prometheus metrics at http://{}/metrics", listener.local_addr()?);
        let capped = Capped { listener, slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)) };
        axum::serve(capped, app).await.context("serving metrics")
    })
}
