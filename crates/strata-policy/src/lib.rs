//! Tiering policies, pure: a policy receives what the machine observed since its last round,
//! and the time, and returns actions. It never reads a clock or the machine itself, so the same
//! code runs in the daemon, on the emulated machine and in unit tests on synthetic streams.
//!
//! - [`Observations`]: pages (accessed and dirty since the last scan, tier, node), sampled LLC
//!   misses, hint faults, objects and contexts from the channel, and each tier's capacity and
//!   free bytes.
//! - [`Action`]: move a range of pages to a tier (with a priority), or set a context's directive.
//! - [`Policy`]: the trait; [`create`] makes one by name from the registry ([`POLICIES`]), with
//!   its parameters from a TOML table whose defaults are the paper's values.
//!
//! Policies: `first-touch` (moves nothing: the baseline), `ambix` (seed 001 §3.2), `mat` with
//! its priorities `mat:fifo`, `mat:lru`, `mat:apb` (seed 003), `proactive` (MAT with per-site
//! placement, seed 003 §3.5), `hmalloc` (first placement by context, seed 001 §3.1) and
//! `dram-first` (several fast nodes before the slow tier, seed 002), `hmalloc:ambix` (the two
//! as seed 001 ran them), and `strata`, the default,
//! which combines hmalloc's first placement, MAT's whole-object moves and Ambix's page scoring.
//! The field's policies, the baselines Strata is measured against ([`PEERS`]): `damon` (Linux
//! 6.16's DAMON tiering recipe), `memtierd` (its heat policy) and `hybridtier` (HybridTier's
//! runtime).
pub mod ambix;
pub mod damon;
pub mod dram_first;
pub mod hmalloc;
pub mod hybridtier;
pub mod mat;
pub mod memtierd;
pub mod strata;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A tier: 0 is the fastest.
pub type Tier = u8;

/// A NUMA node (a tier is one node or several).
pub type Node = u8;

/// One page of a managed process, as the last scan saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageObs {
    pub pid: u32,
    /// the page's address (page aligned)
    pub addr: u64,
    pub tier: Tier,
    pub node: u8,
    /// accessed since the previous scan of this page
    pub accessed: bool,
    /// written since the previous scan of this page
    pub dirty: bool,
}

/// A sampled last-level-cache miss (PEBS-like).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub addr: u64,
    pub tier: Tier,
    pub time_ns: u64,
    pub store: bool,
}

/// A hint fault: a protected slow-tier page was accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintFault {
    pub pid: u32,
    pub addr: u64,
    pub tier: Tier,
    pub time_ns: u64,
}

/// A tracked object (or a 64 MiB record of one) from a process's channel, or pages of one of
/// its arenas (a mixed page, a run or a large mapping of a user arena).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectObs {
    pub pid: u32,
    pub addr: u64,
    pub len: u64,
    /// index of its allocation context in the channel (0 for an arena's pages)
    pub context: u32,
    /// the user arena holding these pages, 0 = none: an arena's records are one unit
    pub arena: u32,
    /// the arena's binding, the program's hint (Default: unbound, or not an arena)
    pub hint: Directive,
    /// bytes of it resident in any tier, and in the fastest (tier 0)
    pub resident_bytes: u64,
    pub fast_bytes: u64,
}

/// The index of the object in `objects` (sorted by (pid, addr), not overlapping) that holds
/// address `addr` of process `pid`.
pub fn object_at(objects: &[ObjectObs], pid: u32, addr: u64) -> Option<usize> {
    let i = objects.partition_point(|o| (o.pid, o.addr) <= (pid, addr));
    let o = objects.get(i.checked_sub(1)?)?;
    (o.pid == pid && addr < o.addr + o.len).then(|| i - 1)
}

/// The pages in (pid, address) order: as given when they already are (the engine's walks
/// are), else sorted.
pub fn sorted_pages(pages: &[PageObs]) -> std::borrow::Cow<'_, [PageObs]> {
    if pages.is_sorted_by_key(|p| (p.pid, p.addr)) {
        std::borrow::Cow::Borrowed(pages)
    } else {
        let mut v = pages.to_vec();
        v.sort_by_key(|p| (p.pid, p.addr));
        std::borrow::Cow::Owned(v)
    }
}

/// An allocation context from a process's channel (its counters are cumulative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextObs {
    pub pid: u32,
    pub index: u32,
    pub id: u64,
    /// libstrata's size class of its allocations (0: above 64 KiB)
    pub size_class: u32,
    pub allocs: u64,
    pub frees: u64,
    pub live_bytes: u64,
    pub bytes_allocated: u64,
    pub directive: Directive,
}

/// Where a context's new objects go (the channel's directive). In JSON: "default", "fast",
/// "slow", {"tier": N}.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Directive {
    #[default]
    Default,
    Fast,
    Slow,
    Tier(Tier),
}

/// One tier's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierObs {
    pub tier: Tier,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
}

impl Directive {
    /// Its name in rules files and STRATA_DIRECTIVE: default, fast, slow, tier:N.
    pub fn name(self) -> String {
        match self {
            Directive::Default => "default".into(),
            Directive::Fast => "fast".into(),
            Directive::Slow => "slow".into(),
            Directive::Tier(t) => format!("tier:{t}"),
        }
    }
}

/// One node's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeObs {
    pub node: Node,
    pub tier: Tier,
    /// from the CPUs (SLIT: 10 is local)
    pub distance: u8,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
}

/// The tiers of these nodes: each tier's capacity and free bytes, fastest first.
pub fn tiers_of(nodes: &[NodeObs]) -> Vec<TierObs> {
    let mut tiers: Vec<TierObs> = Vec::new();
    for n in nodes {
        match tiers.iter_mut().find(|t| t.tier == n.tier) {
            Some(t) => {
                t.capacity_bytes += n.capacity_bytes;
                t.free_bytes += n.free_bytes;
            }
            None => tiers.push(TierObs { tier: n.tier, capacity_bytes: n.capacity_bytes, free_bytes: n.free_bytes }),
        }
    }
    tiers.sort_by_key(|t| t.tier);
    tiers
}

/// What the machine observed since the policy's last round.
#[derive(Clone, Debug, Default)]
pub struct Observations {
    /// the time of this round (simulated on the emulated machine), ns
    pub now_ns: u64,
    pub page_bytes: u64,
    pub tiers: Vec<TierObs>,
    /// the nodes, nearest the CPUs first (the order first touch fills them)
    pub nodes: Vec<NodeObs>,
    /// the pages scanned this round, in address order
    pub pages: Vec<PageObs>,
    /// true when this round's scan reached the end of the address space: every page has been
    /// seen since the last round that said so
    pub scan_complete: bool,
    pub samples: Vec<Sample>,
    pub hint_faults: Vec<HintFault>,
    /// tracked objects alive now, in (pid, address) order
    pub objects: Vec<ObjectObs>,
    pub contexts: Vec<ContextObs>,
    /// the machine's memory accesses and LLC misses so far (None where it has no such counters,
    /// e.g. without a PMU)
    pub counters: Option<Counters>,
}

/// Cumulative counters of the managed programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub accesses: u64,
    pub llc_misses: u64,
}

/// Add a move of one page to `out`: it extends the last move when that one is of the same
/// process to the same tier and ends where this page starts (its priority the higher of the
/// two), else it is a move of its own. Pages given in address order come out as ranges.
pub fn push_page_move(out: &mut Vec<Action>, pid: u32, addr: u64, page: u64, to: Tier, priority: i64) {
    if let Some(Action::Move { pid: p, addr: a, len, to: t, priority: pr }) = out.last_mut() {
        if *p == pid && *t == to && *a + *len == addr {
            *len += page;
            *pr = (*pr).max(priority);
            return;
        }
    }
    out.push(Action::Move { pid, addr, len: page, to, priority });
}

/// What a policy may ask for, and nothing else.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Move [addr, addr + len) of process pid to a tier; higher priorities go first when the
    /// mover cannot do everything.
    Move { pid: u32, addr: u64, len: u64, to: Tier, priority: i64 },
    /// Move [addr, addr + len) to one node (between the nodes of a tier, say).
    MoveToNode { pid: u32, addr: u64, len: u64, node: Node, priority: i64 },
    /// Set where a context's new objects go; context 0 is the process's default (for contexts
    /// with the default directive, and allocations without a context).
    SetDirective { pid: u32, context: u32, directive: Directive },
}

/// A tiering policy.
pub trait Policy: Send {
    /// Its name in the registry.
    fn name(&self) -> &'static str;
    /// One round: observations in, actions out.
    fn decide(&mut self, obs: &Observations) -> Vec<Action>;
    /// What the machine has to observe for it (the rest is not collected).
    fn needs(&self) -> Needs;
    /// The default directive processes should start with, where the engine starts them (their
    /// environment's STRATA_DIRECTIVE); a running process gets it through its channel.
    fn process_directive(&self) -> Option<Directive> {
        None
    }
    /// The period its own tracker runs at, simulated ms (its paper's, times its time scale):
    /// the engine's round where the caller lets the policy choose (`strata bench tiering` does
    /// for the field's policies). None: the engine's configured period.
    fn round_ms(&self) -> Option<f64> {
        None
    }
}

/// The observations a policy uses: each costs the machine something, so only these are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// the accessed/dirty-bit walk of pages
    pub scan: bool,
    /// LLC-miss samples (their period is the sampler's, in the engine's configuration); on a
    /// machine without a sampler the engine gives the scan's accessed pages instead, one sample
    /// a page accessed that round
    pub samples: bool,
    /// tracked objects and their residency, from the channels
    pub objects: bool,
    /// allocation contexts, from the channels
    pub contexts: bool,
    /// the accesses and LLC-miss counters: the policy cannot run without them
    pub counters: bool,
}

/// Errors making a policy.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    #[error("no policy '{name}' (known: {})", POLICIES.join(", "))]
    Unknown { name: String },
    #[error("policy {policy}: {message}")]
    BadConfig { policy: String, message: String },
}

/// The registry's names. A name may carry a variant after a colon (`mat:lru`); its
/// parameters are the table of the name without it.
pub const POLICIES: &[&str] =
    &["first-touch", "ambix", "mat", "proactive", "hmalloc", "dram-first", "strata", "damon", "memtierd", "hybridtier"];

/// The field's policies, which Strata is measured against (the others are the seeds' and
/// Strata's own).
pub const PEERS: &[&str] = &["damon", "memtierd", "hybridtier"];

/// The policy used when none is named: by emulated runs, benchmarks and the live daemon alike
/// (`daemon.policy`).
pub const DEFAULT_POLICY: &str = "strata";

/// The variants the registry knows, by policy.
pub const VARIANTS: &[(&str, &[&str])] =
    &[("mat", &["fifo", "lru", "apb"]), ("proactive", &["fifo", "lru", "apb"]), ("hmalloc", &["ambix"])];

/// The policy of a name with its variant (`mat:lru` -> `mat`).
pub fn base_name(name: &str) -> &str {
    name.split_once(':').map_or(name, |(b, _)| b)
}

/// Make a policy by name, with its parameters from `config` (its TOML table; `None` for the
/// defaults). An unknown key or a value out of range is an error naming it.
pub fn create(name: &str, config: Option<&toml::Table>) -> Result<Box<dyn Policy>, PolicyError> {
    let (base, variant) = name.split_once(':').map_or((name, None), |(b, v)| (b, Some(v)));
    let known = VARIANTS.iter().find(|v| v.0 == base).map_or(&[][..], |v| v.1);
    if let Some(v) = variant {
        if !known.contains(&v) {
            return Err(PolicyError::BadConfig {
                policy: base.into(),
                message: if known.is_empty() {
                    format!("has no variants (asked for '{v}')")
                } else {
                    format!("no variant '{v}' (known: {})", known.join(", "))
                },
            });
        }
    }
    let bad = |message: String| PolicyError::BadConfig { policy: base.into(), message };
    match base {
        "first-touch" => {
            let _: FirstTouchConfig = parse_config(base, config)?;
            Ok(Box::new(FirstTouch))
        }
        "ambix" => {
            let c: ambix::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(ambix::Ambix::new(c)))
        }
        "mat" | "proactive" => {
            let mut c: mat::Config = parse_config(base, config)?;
            if let Some(v) = variant {
                c.priority = mat::Priority::parse(v).expect("a known variant");
            }
            c.proactive |= base == "proactive";
            c.check().map_err(bad)?;
            let name = match (base, c.priority) {
                ("mat", mat::Priority::Fifo) => "mat:fifo",
                ("mat", mat::Priority::Lru) => "mat:lru",
                ("mat", mat::Priority::Apb) => "mat:apb",
                (_, mat::Priority::Fifo) => "proactive:fifo",
                (_, mat::Priority::Lru) => "proactive:lru",
                (_, mat::Priority::Apb) => "proactive:apb",
            };
            Ok(Box::new(mat::Mat::new(c, name)))
        }
        "hmalloc" => {
            let c: hmalloc::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            match variant {
                Some(_) => Ok(Box::new(hmalloc::WithAmbix::new(c))),
                None => Ok(Box::new(hmalloc::Hmalloc::new(c))),
            }
        }
        "strata" => {
            let c: strata::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(strata::Strata::new(c)))
        }
        "dram-first" => {
            let c: dram_first::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(dram_first::DramFirst::new(c)))
        }
        "damon" => {
            let c: damon::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(damon::Damon::new(c)))
        }
        "memtierd" => {
            let c: memtierd::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(memtierd::Memtierd::new(c)))
        }
        "hybridtier" => {
            let c: hybridtier::Config = parse_config(base, config)?;
            c.check().map_err(bad)?;
            Ok(Box::new(hybridtier::HybridTier::new(c)))
        }
        _ => Err(PolicyError::Unknown { name: base.into() }),
    }
}

/// A policy's parameters from its table: unknown keys refused, missing ones defaulted.
pub fn parse_config<T: DeserializeOwned + Default>(
    policy: &str,
    config: Option<&toml::Table>,
) -> Result<T, PolicyError> {
    match config {
        None => Ok(T::default()),
        Some(t) => T::deserialize(toml::Value::Table(t.clone()))
            .map_err(|e| PolicyError::BadConfig { policy: policy.into(), message: e.to_string().trim().to_string() }),
    }
}

/// `first-touch` takes no parameters.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FirstTouchConfig {}

/// Moves nothing: pages stay where first touch put them (the baseline).
pub struct FirstTouch;

impl Policy for FirstTouch {
    fn name(&self) -> &'static str {
        "first-touch"
    }
    fn decide(&mut self, _: &Observations) -> Vec<Action> {
        Vec::new()
    }
    fn needs(&self) -> Needs {
        Needs::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_makes_policies_by_name_and_refuses_bad_names_and_keys() {
        assert_eq!(create("ambix", None).unwrap().name(), "ambix");
        assert_eq!(create("first-touch", None).unwrap().name(), "first-touch");
        let e = create("nosuch", None).err().unwrap().to_string();
        assert!(e.contains("no policy 'nosuch'") && e.contains("ambix"), "{e}");
        let t: toml::Table = toml::from_str("min_scans = 3\nnonsense = 1\n").unwrap();
        let e = create("ambix", Some(&t)).err().unwrap().to_string();
        assert!(e.contains("ambix") && e.contains("nonsense"), "{e}");
        let t: toml::Table = toml::from_str("fast_free_fraction = 1.5\n").unwrap();
        let e = create("ambix", Some(&t)).err().unwrap().to_string();
        assert!(e.contains("fast_free_fraction"), "{e}");
        let t: toml::Table = toml::from_str("anything = 1\n").unwrap();
        assert!(create("first-touch", Some(&t)).is_err());
        for (name, made) in
            [("mat", "mat:apb"), ("mat:fifo", "mat:fifo"), ("mat:lru", "mat:lru"), ("proactive", "proactive:apb")]
        {
            assert_eq!(create(name, None).unwrap().name(), made);
        }
        let e = create("mat:mru", None).err().unwrap().to_string();
        assert!(e.contains("no variant 'mru'") && e.contains("fifo, lru, apb"), "{e}");
        assert!(create("ambix:x", None).err().unwrap().to_string().contains("has no variants"));
        let t: toml::Table = toml::from_str("alpha = 2.0\n").unwrap();
        assert!(create("mat", Some(&t)).err().unwrap().to_string().contains("alpha"));
        let t: toml::Table = toml::from_str("trigger = \"sometimes\"\n").unwrap();
        assert!(create("mat", Some(&t)).err().unwrap().to_string().contains("sometimes"));
        let t: toml::Table = toml::from_str("epoch_first = 0\n").unwrap();
        assert!(create("hmalloc", Some(&t)).err().unwrap().to_string().contains("epoch_first"));
    }

    #[test]
    fn first_touch_moves_nothing() {
        let mut p = create("first-touch", None).unwrap();
        let obs = Observations {
            pages: vec![PageObs { pid: 1, addr: 0, tier: 1, node: 1, accessed: true, dirty: true }],
            ..Default::default()
        };
        assert!(p.decide(&obs).is_empty());
    }
}
