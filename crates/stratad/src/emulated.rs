//! The emulated machine as the engine's [`Machine`], from inside an emulated program, through
//! `include/strata_emu.h`. The functions are looked up when the engine starts (they exist only
//! in a program linked with libstrata_emu.so), so this crate links into native programs too.
//!
//! [`start_engine`] is what the entry point of `libstratad_emu.so` (the stratad-emu crate) does:
//! when `$STRATA_ENGINE_LIB` names that library, the emulator loads it and calls it, and then calls the engine's
//! tick every scanner period of simulated time. The engine runs as if on a core of its own: its
//! instructions and memory accesses are not the program's; the emulator charges what the
//! engine costs the program explicitly (the walk's time, moves as background moves).
//! `$STRATA_ENGINE_POLICY` names the policy, `$STRATA_ENGINE_CONFIG` a configuration file,
//! and `$STRATA_ENGINE_TRACE` (optional) a file the engine appends a JSON line to every round:
//! its moves so far and the fast tier's room ([`TraceLine`]).
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Mutex;

use strata_policy::{ContextObs, Counters, Directive, HintFault, Node, NodeObs, ObjectObs, PageObs, Sample, Tier};

use crate::channel::Channel;
use crate::machine::{move_statuses, Machine, MoveStatus, Refusal};
use crate::{Config, Engine, Error};

/// strata_emu_page_t
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EmuPage {
    addr: u64,
    node: u8,
    flags: u8,
    _pad: [u8; 6],
}

/// strata_emu_sample_t
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EmuSample {
    addr: u64,
    time_ns: u64,
    node: i32,
    thread: i32,
    store: i32,
    _pad: i32,
}

/// strata_emu_fault_t
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EmuFault {
    addr: u64,
    time_ns: u64,
    node: i32,
    promoted: i32,
}

/// strata_emu_node_t
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EmuNode {
    capacity_bytes: u64,
    resident_pages: u64,
    tier: c_int,
    distance: c_int,
}

const PRESENT: u8 = 1;
const ACCESSED: u8 = 2;
const DIRTY: u8 = 4;

type WalkFn = unsafe extern "C" fn(*mut u64, *mut EmuPage, usize, c_int) -> usize;
type NodesFn = unsafe extern "C" fn(*mut EmuNode, c_int) -> c_int;
type MoveFn = unsafe extern "C" fn(*const *mut c_void, usize, *const c_int, *mut c_int, c_int) -> c_int;
type NodeOfFn = unsafe extern "C" fn(*const c_void) -> c_int;
type NowFn = unsafe extern "C" fn() -> u64;
type SamplesFn = unsafe extern "C" fn(*mut EmuSample, usize) -> usize;
type FaultsFn = unsafe extern "C" fn(*mut EmuFault, usize) -> usize;
type SamplePeriodFn = unsafe extern "C" fn(u64);
type CounterFn = unsafe extern "C" fn(*const c_char) -> i64;

fn lookup<T>(name: &str) -> Result<T, Error> {
    let c = CString::new(name).expect("a symbol name");
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    if p.is_null() {
        return Err(Error::Machine(format!("{name} not found: not running on the emulated machine")));
    }
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Read one of the emulator's rings (samples, hint faults) until it is empty.
fn drain<T: Copy + Default, U>(
    read: unsafe extern "C" fn(*mut T, usize) -> usize,
    out: &mut Vec<U>,
    f: impl Fn(&T) -> U,
) {
    let mut buf = vec![T::default(); 1024];
    loop {
        let n = unsafe { read(buf.as_mut_ptr(), buf.len()) };
        out.extend(buf[..n].iter().map(&f));
        if n < buf.len() {
            break;
        }
    }
}

/// The emulated machine, seen from inside the emulated program (one process: this one).
pub struct EmulatedMachine {
    walk: WalkFn,
    nodes: NodesFn,
    mv: MoveFn,
    node_of: NodeOfFn,
    now: NowFn,
    samples: SamplesFn,
    faults: FaultsFn,
    sample_period: SamplePeriodFn,
    counter: CounterFn,
    cursor: u64,
    pid: u32,
    /// each node's tier (from the last nodes())
    tier_of: [Tier; 8],
    /// this program's channel, once libstrata (transparent mode) has made it
    channel: Option<Channel>,
    /// moves as libstrata's agent makes them (`mover.mechanism = "transactional"`), else as
    /// move_pages(2) in a background thread
    transactional: bool,
}

impl EmulatedMachine {
    /// The machine this program runs on, if it is the emulated one.
    pub fn connect() -> Result<EmulatedMachine, Error> {
        Ok(EmulatedMachine {
            walk: lookup("strata_emu_walk")?,
            nodes: lookup("strata_emu_nodes")?,
            mv: lookup("strata_emu_move")?,
            node_of: lookup("strata_emu_node_of")?,
            now: lookup("strata_emu_now_ns")?,
            samples: lookup("strata_emu_samples")?,
            faults: lookup("strata_emu_hint_faults")?,
            sample_period: lookup("strata_emu_set_sample_period")?,
            counter: lookup("strata_emu_counter")?,
            cursor: 0,
            pid: std::process::id(),
            tier_of: [Tier::MAX; 8],
            channel: None,
            transactional: false,
        })
    }

    fn channel(&mut self) -> Option<&mut Channel> {
        if self.channel.is_none() {
            self.channel = Channel::open(self.pid).ok();
        }
        self.channel.as_mut()
    }
}

impl Machine for EmulatedMachine {
    fn page_bytes(&self) -> u64 {
        4096
    }

    fn now_ns(&self) -> u64 {
        unsafe { (self.now)() }
    }

    fn nodes(&mut self) -> Vec<NodeObs> {
        let mut raw = [EmuNode::default(); 8];
        let n = unsafe { (self.nodes)(raw.as_mut_ptr(), 8) }.clamp(0, 8) as usize;
        let mut nodes: Vec<NodeObs> = raw[..n]
            .iter()
            .enumerate()
            .map(|(i, x)| NodeObs {
                node: i as Node,
                tier: x.tier as Tier,
                distance: x.distance.clamp(0, 255) as u8,
                capacity_bytes: x.capacity_bytes,
                free_bytes: x.capacity_bytes.saturating_sub(x.resident_pages * self.page_bytes()),
            })
            .collect();
        nodes.sort_by_key(|n| (n.distance, n.node)); // the emulator's first-touch order
        self.tier_of = [Tier::MAX; 8];
        for n in &nodes {
            self.tier_of[n.node as usize] = n.tier;
        }
        nodes
    }

    fn scan(&mut self, max: u64, out: &mut Vec<PageObs>) -> bool {
        let mut buf = vec![EmuPage::default(); 4096];
        let mut left = max;
        while left > 0 {
            let want = (left as usize).min(buf.len());
            let got = unsafe { (self.walk)(&mut self.cursor, buf.as_mut_ptr(), want, 1) };
            for p in &buf[..got] {
                if p.flags & PRESENT == 0 {
                    continue;
                }
                out.push(PageObs {
                    pid: self.pid,
                    addr: p.addr,
                    tier: self.tier_of[p.node as usize & 7],
                    node: p.node,
                    accessed: p.flags & ACCESSED != 0,
                    dirty: p.flags & DIRTY != 0,
                });
            }
            left -= got as u64;
            if self.cursor == 0 {
                return true; // past the last page: a full scan
            }
            if got < want {
                break;
            }
        }
        false
    }

    /// The emulator's LLC-miss samples (taken when its `sample_period` is set).
    fn samples(&mut self, out: &mut Vec<Sample>) {
        let (pid, tier_of) = (self.pid, self.tier_of);
        drain(self.samples, out, |x: &EmuSample| Sample {
            pid,
            addr: x.addr,
            tier: tier_of[x.node.clamp(0, 7) as usize],
            time_ns: x.time_ns,
            store: x.store != 0,
        });
    }

    /// The tpp mode's hint faults.
    fn hint_faults(&mut self, out: &mut Vec<HintFault>) {
        let (pid, tier_of) = (self.pid, self.tier_of);
        drain(self.faults, out, |x: &EmuFault| HintFault {
            pid,
            addr: x.addr,
            tier: tier_of[x.node.clamp(0, 7) as usize],
            time_ns: x.time_ns,
        });
    }

    /// The channel's objects, each page of them located (the walk a daemon would do with
    /// move_pages; not charged to the program's time).
    fn objects(&mut self, out: &mut Vec<ObjectObs>) {
        let start = out.len();
        if let Some(c) = self.channel() {
            c.objects(out);
        }
        for o in &mut out[start..] {
            for a in (o.addr..o.addr + o.len).step_by(4096) {
                let node = unsafe { (self.node_of)(a as *const c_void) };
                if node >= 0 {
                    o.resident_bytes += 4096;
                    o.fast_bytes += if self.tier_of[node as usize & 7] == 0 { 4096 } else { 0 };
                }
            }
        }
    }

    fn locate(&mut self, _pid: u32, pages: &[u64]) -> Vec<Option<Node>> {
        pages
            .iter()
            .map(|&a| {
                let node = unsafe { (self.node_of)(a as *const c_void) };
                (node >= 0).then_some(node as Node)
            })
            .collect()
    }

    fn contexts(&mut self, out: &mut Vec<ContextObs>) {
        if let Some(c) = self.channel() {
            c.contexts(out);
        }
    }

    fn set_directive(&mut self, _pid: u32, context: u32, d: Directive) -> Result<(), Refusal> {
        match self.channel() {
            Some(c) if c.set_directive(context, d) => Ok(()),
            _ => Err(Refusal::Unsupported),
        }
    }

    /// The calling thread's counters: the engine runs on the thread whose clock passed the
    /// period, the program's only one in the benchmark's workloads.
    fn counters(&mut self) -> Option<Counters> {
        let get = |name: &str| {
            let c = CString::new(name).expect("a counter name");
            unsafe { (self.counter)(c.as_ptr()) }.max(0) as u64
        };
        Some(Counters { accesses: get("accesses"), llc_misses: get("llc_misses") })
    }

    fn enable_samples(&mut self, period: u64) -> bool {
        unsafe { (self.sample_period)(period) };
        true
    }

    fn move_pages(&mut self, _pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus> {
        let ptrs: Vec<*mut c_void> = pages.iter().map(|&a| a as *mut c_void).collect();
        let nodes = vec![to as c_int; pages.len()];
        let mut status = vec![0 as c_int; pages.len()];
        // STRATA_EMU_MOVE_TRANSACTIONAL (2), or in the background (1)
        let mode = if self.transactional { 2 } else { 1 };
        let rc = unsafe { (self.mv)(ptrs.as_ptr(), ptrs.len(), nodes.as_ptr(), status.as_mut_ptr(), mode) };
        if rc != 0 {
            return vec![Err(Refusal::Other(-rc)); pages.len()];
        }
        move_statuses(&status, to)
    }
}

/// How to run an engine inside a program on the emulated machine: the environment the emulator
/// reads (what `strata emu run --policy` and `strata bench tiering` set).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSpec {
    /// libstratad_emu.so
    pub lib: std::path::PathBuf,
    pub policy: String,
    /// the engine's configuration file, checked
    pub config: Option<std::path::PathBuf>,
    /// the directive the policy wants the program to start with
    pub directive: Option<strata_policy::Directive>,
    /// the engine's round, simulated ms
    period_ms: f64,
}

impl EngineSpec {
    /// The engine of `policy` with `config` (checked now, so a bad key is refused before
    /// anything runs), from the libstratad_emu.so beside this binary (or `$STRATA_ENGINE_LIB`).
    pub fn new(policy: &str, config: Option<&std::path::Path>) -> Result<EngineSpec, Error> {
        let cfg = match config {
            Some(p) => Config::load(p, policy)?,
            None => Config::default().check(policy).map(|()| Config::default())?,
        };
        let directive = cfg.make_policy(policy)?.process_directive();
        let lib = strata_util::find_built(
            "libstratad_emu.so",
            Some("STRATA_ENGINE_LIB"),
            "cargo build --release -p stratad-emu",
        )
        .map_err(|e| Error::Machine(e.to_string()))?;
        let period_ms = cfg.scanner.period_ms;
        let config = config.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
        Ok(EngineSpec { lib, policy: policy.into(), config, directive, period_ms })
    }

    /// The engine's round, simulated ms (its configuration's scanner period).
    pub fn period_ms(&self) -> f64 {
        self.period_ms
    }

    /// The variables to give the emulated program.
    pub fn env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut v = vec![
            ("STRATA_ENGINE_LIB", self.lib.clone().into_os_string()),
            ("STRATA_ENGINE_POLICY", self.policy.clone().into()),
        ];
        if let Some(c) = &self.config {
            v.push(("STRATA_ENGINE_CONFIG", c.clone().into_os_string()));
        }
        if let Some(d) = self.directive {
            v.push(("STRATA_DIRECTIVE", d.name().into()));
        }
        v
    }
}

/// strata_emu_engine_t (include/strata_emu.h)
#[repr(C)]
pub struct EngineHooks {
    period_ns: u64,
    tick: Option<unsafe extern "C" fn(*mut c_void)>,
    report: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
    arg: *mut c_void,
}

struct Running {
    engine: Engine,
    machine: EmulatedMachine,
    report: CString,
    /// `$STRATA_ENGINE_TRACE`, open for appending
    trace: Option<std::fs::File>,
}

/// The variable naming the round-by-round trace (`strata emu run --trace`, `strata bench
/// tiering --trace`); the benchmark's workloads append their measured phase to the same file.
pub const TRACE_ENV: &str = "STRATA_ENGINE_TRACE";

/// One line of the trace, after a round: simulated time and the engine's totals so far.
#[derive(Debug, serde::Serialize)]
pub struct TraceLine {
    /// simulated time, ms
    pub ms: f64,
    pub round: u64,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    pub pingpong_pages: u64,
    pub fast_capacity_bytes: u64,
    pub fast_free_bytes: u64,
}

/// The trace's other line: a benchmark workload's measured phase, simulated ms.
#[derive(Debug, serde::Serialize)]
struct TracePhase {
    phase: &'static str,
    from_ms: f64,
    to_ms: f64,
}

/// Append the measured phase (from and to, simulated ns) to `$STRATA_ENGINE_TRACE`, if the run
/// is traced; the workload calls it after its phase, so the phase itself is untouched.
pub fn trace_phase(from_ns: u64, to_ns: u64) {
    let Some(path) = std::env::var_os(TRACE_ENV) else { return };
    let line = TracePhase { phase: "measured", from_ms: from_ns as f64 / 1e6, to_ms: to_ns as f64 / 1e6 };
    let text = serde_json::to_string(&line).expect("a trace line serializes") + "\n";
    let written = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    if let Err(e) = written {
        eprintln!("the trace's measured phase was not written to {}: {e}", path.to_string_lossy());
    }
}

impl Running {
    /// The round's line of the trace; a failed write ends the trace, with one message.
    fn trace(&mut self) {
        let Some(f) = &mut self.trace else { return };
        let s = self.engine.stats();
        let fast = s.tiers.iter().find(|t| t.tier == 0);
        let line = TraceLine {
            ms: self.machine.now_ns() as f64 / 1e6,
            round: s.rounds,
            promoted_bytes: s.promoted_bytes,
            demoted_bytes: s.demoted_bytes,
            pingpong_pages: s.pingpong_pages,
            fast_capacity_bytes: fast.map_or(0, |t| t.capacity_bytes),
            fast_free_bytes: fast.map_or(0, |t| t.free_bytes),
        };
        let text = serde_json::to_string(&line).expect("a trace line serializes") + "\n";
        if let Err(e) = std::io::Write::write_all(f, text.as_bytes()) {
            eprintln!("stratad: the trace stops: {e}");
            self.trace = None;
        }
    }
}

/// The engine of `$STRATA_ENGINE_POLICY` with `$STRATA_ENGINE_CONFIG`, on this machine.
fn start() -> Result<Running, Error> {
    let policy = std::env::var("STRATA_ENGINE_POLICY")
        .map_err(|_| Error::Config("STRATA_ENGINE_POLICY names no policy".into()))?;
    let cfg = match std::env::var_os("STRATA_ENGINE_CONFIG") {
        Some(p) => Config::load(std::path::Path::new(&p), &policy)?,
        None => Config::default(),
    };
    let trace = match std::env::var_os(TRACE_ENV) {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&p)
                .map_err(|e| Error::Config(format!("{TRACE_ENV}={}: {e}", p.to_string_lossy())))?,
        ),
        None => None,
    };
    let mut machine = EmulatedMachine::connect()?;
    machine.transactional = cfg.mover.mechanism == crate::config::Mechanism::Transactional;
    Ok(Running { engine: Engine::new(&policy, cfg, &mut machine)?, machine, report: CString::default(), trace })
}

/// What the engine library's entry point does (`strata_engine_start` of the stratad-emu crate,
/// which gives the engine its own heap): start the engine, fill in its hooks; 0, or -1 with
/// the reason in err.
///
/// # Safety
/// `hooks` points to a strata_emu_engine_t and `err` to `errlen` bytes (the emulator's).
pub unsafe fn start_engine(hooks: *mut EngineHooks, err: *mut c_char, errlen: usize) -> c_int {
    match std::panic::catch_unwind(start) {
        Ok(Ok(r)) => {
            let period_ns = r.engine.period_ns();
            let arg = Box::into_raw(Box::new(Mutex::new(r))) as *mut c_void;
            *hooks = EngineHooks { period_ns, tick: Some(tick), report: Some(report), arg };
            0
        }
        Ok(Err(e)) => {
            let msg = e.to_string();
            let n = msg.len().min(errlen.saturating_sub(1));
            std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, err, n);
            *err.add(n) = 0;
            -1
        }
        Err(_) => -1,
    }
}

/// A panic in the engine is a bug; it must not unwind into the emulator.
fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        eprintln!("stratad: the engine panicked inside the emulated program");
        std::process::abort();
    }
}

unsafe extern "C" fn tick(arg: *mut c_void) {
    let r = &*(arg as *const Mutex<Running>);
    guarded(|| {
        if let Ok(mut g) = r.try_lock() {
            let Running { engine, machine, .. } = &mut *g;
            engine.tick(machine);
            g.trace();
        }
    });
}

unsafe extern "C" fn report(arg: *mut c_void) -> *const c_char {
    let r = &*(arg as *const Mutex<Running>);
    let mut out = std::ptr::null();
    guarded(|| {
        if let Ok(mut g) = r.lock() {
            let json = serde_json::to_string(g.engine.stats()).expect("statistics serialize");
            g.report = CString::new(json).expect("JSON has no NUL");
            out = g.report.as_ptr();
        }
    });
    out
}
