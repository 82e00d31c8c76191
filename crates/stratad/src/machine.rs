//! The machine seam: what the engine needs of a machine, whichever it is.
use serde::{Deserialize, Serialize};
use strata_policy::{ContextObs, Counters, Directive, HintFault, Node, NodeObs, ObjectObs, PageObs, Sample, TierObs};

/// Why a page did not move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// the destination tier is full
    NoRoom,
    /// the page is not there (unmapped, or never touched)
    Gone,
    /// no such tier
    BadTier,
    /// the mover's rate limit or per-round cap
    Budget,
    /// the machine cannot do this action (e.g. directives without a channel)
    Unsupported,
    /// a transactional move gave up: the page was written while copied on every attempt
    Aborted,
    /// any other errno
    Other(i32),
}

impl Refusal {
    /// The reason's name in statistics.
    pub fn name(self) -> String {
        match self {
            Refusal::NoRoom => "no_room".into(),
            Refusal::Gone => "gone".into(),
            Refusal::BadTier => "bad_tier".into(),
            Refusal::Budget => "budget".into(),
            Refusal::Unsupported => "unsupported".into(),
            Refusal::Aborted => "aborted".into(),
            Refusal::Other(e) => format!("errno_{e}"),
        }
    }
}

impl Refusal {
    /// A page's status from move_pages(2) (negative: an errno), as the machines report it.
    pub fn from_errno(e: i32) -> Refusal {
        match e {
            libc::ENOMEM => Refusal::NoRoom,
            libc::ENOENT | libc::EFAULT | libc::ESRCH => Refusal::Gone,
            libc::ENODEV => Refusal::BadTier,
            libc::EAGAIN => Refusal::Aborted,
            e => Refusal::Other(e),
        }
    }
}

/// What happened to one page of a move: Ok, it is on the node asked for now.
pub type MoveStatus = Result<(), Refusal>;

/// The statuses of a move_pages(2) call to node `to` (each page's node, or minus an errno).
/// A page that landed on another node than asked was refused there: the node was full.
pub fn move_statuses(status: &[libc::c_int], to: Node) -> Vec<MoveStatus> {
    status
        .iter()
        .map(|&s| match s {
            s if s == to as libc::c_int => Ok(()),
            s if s >= 0 => Err(Refusal::NoRoom),
            e => Err(Refusal::from_errno(-e)),
        })
        .collect()
}

/// A process the engine manages, as the machine knows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessObs {
    pub pid: u32,
    /// its command name (/proc/PID/comm), which configuration rules match
    pub command: String,
    /// what configuration rules also match, which its user cannot choose
    pub ids: ProcessIds,
    /// the priority it claims for itself (STRATA_PRIORITY, through its channel)
    pub claimed_priority: i32,
    /// a priority given to it from outside (`strata attach --priority`), over any other
    pub given_priority: Option<i32>,
}

/// What identifies a process beyond the command name its user chose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIds {
    /// its executable (/proc/PID/exe)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<std::path::PathBuf>,
    /// its uid, when its real, effective, saved and filesystem uids are all this one
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// its cgroup (v2, from /proc/PID/cgroup)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

impl ProcessIds {
    /// Process pid's, from /proc.
    pub fn of(pid: u32) -> ProcessIds {
        let uids = crate::channel::process_uids(pid);
        ProcessIds {
            exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
            uid: uids.filter(|u| u.iter().all(|&x| x == u[0])).map(|u| u[0]),
            cgroup: std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string))),
        }
    }
}

/// A machine the engine observes and moves pages on.
pub trait Machine {
    /// Bytes of a page.
    fn page_bytes(&self) -> u64;
    /// The machine's time (simulated on the emulated machine), ns.
    fn now_ns(&self) -> u64;
    /// Each node's tier, distance, capacity and free bytes, nearest the CPUs first.
    fn nodes(&mut self) -> Vec<NodeObs>;
    /// Each tier's capacity and free bytes.
    fn tiers(&mut self) -> Vec<TierObs> {
        strata_policy::tiers_of(&self.nodes())
    }
    /// Whether [`Machine::scan`] can see anything here (a kernel without a tracker cannot).
    fn can_scan(&self) -> bool {
        true
    }
    /// Continue the accessed/dirty-bit walk: up to `max` present pages from where the last call
    /// stopped, in address order, their bits cleared once read. True when the walk passed the
    /// last page (a full scan ended).
    fn scan(&mut self, max: u64, out: &mut Vec<PageObs>) -> bool;
    /// Sampled LLC misses since the last call.
    fn samples(&mut self, _out: &mut Vec<Sample>) {}
    /// Hint faults since the last call.
    fn hint_faults(&mut self, _out: &mut Vec<HintFault>) {}
    /// The node of each page of process `pid` (None: not resident).
    fn locate(&mut self, pid: u32, pages: &[u64]) -> Vec<Option<Node>>;
    /// Move pages of process `pid` to node `to`; one status a page. The caller knows where the
    /// pages were (it located them to choose them), so the machine only says whether they went.
    fn move_pages(&mut self, pid: u32, pages: &[u64], to: Node) -> Vec<MoveStatus>;
    /// Set where a context's new objects go, through the process's channel.
    fn set_directive(&mut self, _pid: u32, _context: u32, _d: Directive) -> Result<(), Refusal> {
        Err(Refusal::Unsupported)
    }
    /// The tracked objects alive now, in (pid, address) order (from the processes' channels),
    /// with their residency.
    fn objects(&mut self, _out: &mut Vec<ObjectObs>) {}
    /// The allocation contexts (from the processes' channels).
    fn contexts(&mut self, _out: &mut Vec<ContextObs>) {}
    /// Cumulative accesses and LLC misses, where the machine counts them.
    fn counters(&mut self) -> Option<Counters> {
        None
    }
    /// Sample one LLC miss in `period`; false where the machine cannot.
    fn enable_samples(&mut self, _period: u64) -> bool {
        false
    }
    /// The processes the engine manages, where there may be several (none: the machine's
    /// pages are all one program's).
    fn processes(&mut self) -> Vec<ProcessObs> {
        Vec::new()
    }
    /// Bytes of process `pid` resident in each tier (index: the tier).
    fn resident(&mut self, _pid: u32) -> Vec<u64> {
        Vec::new()
    }
    /// What cgroup `path` (as /proc/PID/cgroup shows it) says, where the machine has cgroups.
    fn cgroup(&mut self, _path: &str) -> Option<crate::cgroup::Cgroup> {
        None
    }
}
