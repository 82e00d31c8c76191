//! YCSB's core workloads, with YCSB's property names and defaults (workloads/workload[a-f]
//! of the YCSB distribution), and the operation stream they describe.
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use strata_util::XorShift;

use crate::zipf::{scramble, Rng, Zipf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Update,
    Insert,
    ReadModifyWrite,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Read, Op::Update, Op::Insert, Op::ReadModifyWrite];
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::Insert => "insert",
            Op::ReadModifyWrite => "readmodifywrite",
        }
    }
}

/// A workload's properties. Field names are YCSB's property names.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Workload {
    pub name: String,
    pub recordcount: u64,
    pub operationcount: u64,
    pub fieldcount: usize,
    pub fieldlength: usize,
    pub readproportion: f64,
    pub updateproportion: f64,
    pub insertproportion: f64,
    pub readmodifywriteproportion: f64,
    pub requestdistribution: Distribution,
    /// the Zipfian exponent theta (YCSB: zipfianconstant, fixed at 0.99 there)
    pub zipfianconstant: f64,
    /// hashed (YCSB's default: keys scattered by FNV-1a) or ordered
    pub insertorder_hashed: bool,
}

/// Errors in workload definitions.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkloadError {
    UnknownWorkload(String),
    UnknownProperty(String),
    BadValue { property: String, value: String, why: &'static str },
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadError::UnknownWorkload(w) => {
                write!(f, "no core workload '{w}' (a, b, c, d, f; e needs scans, which a hash table has not)")
            }
            WorkloadError::UnknownProperty(p) => write!(f, "unknown workload property '{p}'"),
            WorkloadError::BadValue { property, value, why } => write!(f, "{property}={value}: {why}"),
        }
    }
}

impl std::error::Error for WorkloadError {}

impl Workload {
    /// YCSB's core workload A, B, C, D or F with YCSB's defaults.
    pub fn core(letter: &str) -> Result<Workload, WorkloadError> {
        let mut w = Workload {
            name: letter.to_ascii_lowercase(),
            recordcount: 1000,
            operationcount: 1000,
            fieldcount: 10,
            fieldlength: 100,
            readproportion: 0.0,
            updateproportion: 0.0,
            insertproportion: 0.0,
            readmodifywriteproportion: 0.0,
            requestdistribution: Distribution::Zipfian,
            zipfianconstant: 0.99,
            insertorder_hashed: true,
        };
        match w.name.as_str() {
            "a" => (w.readproportion, w.updateproportion) = (0.5, 0.5),
            "b" => (w.readproportion, w.updateproportion) = (0.95, 0.05),
            "c" => w.readproportion = 1.0,
            "d" => {
                (w.readproportion, w.insertproportion) = (0.95, 0.05);
                w.requestdistribution = Distribution::Latest;
            }
            "f" => (w.readproportion, w.readmodifywriteproportion) = (0.5, 0.5),
            _ => return Err(WorkloadError::UnknownWorkload(letter.into())),
        }
        Ok(w)
    }

    /// Set a property by its YCSB name.
    pub fn set(&mut self, property: &str, value: &str) -> Result<(), WorkloadError> {
        let bad = |why| WorkloadError::BadValue { property: property.into(), value: value.into(), why };
        let num = || value.parse::<f64>().map_err(|_| bad("not a number"));
        let count = || value.parse::<u64>().map_err(|_| bad("not a whole number"));
        let prop = || {
            num().and_then(
                |v| if (0.0..=1.0).contains(&v) { Ok(v) } else { Err(bad("a proportion is between 0 and 1")) },
            )
        };
        match property {
            "recordcount" => self.recordcount = count()?.max(1),
            "operationcount" => self.operationcount = count()?,
            "fieldcount" => self.fieldcount = count()?.max(1) as usize,
            "fieldlength" => self.fieldlength = count()?.max(1) as usize,
            "readproportion" => self.readproportion = prop()?,
            "updateproportion" => self.updateproportion = prop()?,
            "insertproportion" => self.insertproportion = prop()?,
            "readmodifywriteproportion" => self.readmodifywriteproportion = prop()?,
            "requestdistribution" => {
                self.requestdistribution = match value {
                    "uniform" => Distribution::Uniform,
                    "zipfian" => Distribution::Zipfian,
                    "latest" => Distribution::Latest,
                    _ => return Err(bad("uniform, zipfian or latest")),
                }
            }
            "zipfianconstant" => {
                let t = num()?;
                if !(0.25..=2.0).contains(&t) {
                    return Err(bad("theta must be between 0.25 and 2.0"));
                }
                self.zipfianconstant = t;
            }
            "insertorder" => {
                self.insertorder_hashed = match value {
                    "hashed" => true,
                    "ordered" => false,
                    _ => return Err(bad("hashed or ordered")),
                }
            }
            "scanproportion" if num()? == 0.0 => {}
            _ => return Err(WorkloadError::UnknownProperty(property.into())),
        }
        Ok(())
    }

    /// Bytes of one record's value.
    pub fn record_bytes(&self) -> usize {
        self.fieldcount * self.fieldlength
    }
}

/// YCSB's FNV-1a 64 hash of a key number (Utils.fnvhash64), non-negative like Java's.
pub fn fnvhash64(v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut v = v;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    (h as i64).unsigned_abs()
}

/// YCSB's key name for a key number: "user" + number (hashed when insertorder=hashed).
pub fn key_name(keynum: u64, hashed: bool) -> String {
    format!("user{}", if hashed { fnvhash64(keynum) } else { keynum })
}

/// Deterministic field bytes for a key and a version (checkable after a read).
pub fn fill_field(buf: &mut [u8], keynum: u64, field: usize, version: u64) {
    let mut x = XorShift::new(keynum.wrapping_mul(31).wrapping_add(field as u64).wrapping_add(version << 20) | 1);
    // eight letters per xorshift step, stored a word at a time (one store per 8 bytes keeps
    // the emulated machine's count of the client's own stores small)
    for chunk in buf.chunks_mut(8) {
        let s = x.next_u64();
        let mut w = 0u64;
        for i in 0..8 {
            w |= u64::from(b'a' + ((s >> (8 * i)) as u8 % 26)) << (8 * i);
        }
        chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
    }
}

/// Key numbers of inserts, shared by all client threads: `next` hands them out, `acked` is
/// the point below which every insert has finished (YCSB's AcknowledgedCounterGenerator), so
/// reads never ask for a record still being inserted.
#[derive(Debug)]
pub struct KeySequence {
    next: AtomicU64,
    acked: AtomicU64,
    pending: Mutex<BTreeSet<u64>>,
}

impl KeySequence {
    /// After a load of `records` records.
    pub fn new(records: u64) -> Arc<KeySequence> {
        Arc::new(KeySequence {
            next: AtomicU64::new(records),
            acked: AtomicU64::new(records),
            pending: Mutex::new(BTreeSet::new()),
        })
    }
    fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
    /// Insert of key k finished.
    pub fn ack(&self, k: u64) {
        let mut p = self.pending.lock().unwrap();
        p.insert(k);
        let mut limit = self.acked.load(Ordering::Relaxed);
        while p.remove(&limit) {
            limit += 1;
        }
        self.acked.store(limit, Ordering::Release);
    }
    /// Records readable now.
    pub fn readable(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }
}

/// The stream of operations of one client thread.
pub struct OpStream {
    wl: Workload,
    rng: Rng,
    zipf: Option<Zipf>,
    keys: Arc<KeySequence>,
    cumulative: [f64; 4],
}

impl OpStream {
    pub fn new(wl: &Workload, seed: u64, keys: Arc<KeySequence>) -> OpStream {
        let total = wl.readproportion + wl.updateproportion + wl.insertproportion + wl.readmodifywriteproportion;
        let t = if total > 0.0 { total } else { 1.0 };
        let p = [wl.readproportion, wl.updateproportion, wl.insertproportion, wl.readmodifywriteproportion];
        let mut cumulative = [0.0; 4];
        let mut acc = 0.0;
        for i in 0..4 {
            acc += p[i] / t;
            cumulative[i] = acc;
        }
        let zipf =
            (wl.requestdistribution == Distribution::Zipfian).then(|| Zipf::new(wl.recordcount, wl.zipfianconstant));
        OpStream { wl: wl.clone(), rng: Rng::new(seed), zipf, keys, cumulative }
    }

    fn choose_key(&mut self) -> u64 {
        match self.wl.requestdistribution {
            Distribution::Uniform => self.rng.below(self.wl.recordcount),
            Distribution::Zipfian => {
                let z = self.zipf.as_ref().expect("zipf");
                scramble(z.sample(&mut self.rng) - 1, z.n())
            }
            Distribution::Latest => {
                // most recently inserted first: rank 1 is the newest record
                let n = self.keys.readable().max(1);
                if self.zipf.as_ref().map(|z| z.n()) != Some(n) {
                    self.zipf = Some(Zipf::new(n, self.wl.zipfianconstant));
                }
                n - self.zipf.as_ref().unwrap().sample(&mut self.rng)
            }
        }
    }

    /// The next operation and its key number.
    pub fn next_op(&mut self) -> (Op, u64) {
        let u = self.rng.next_f64();
        let op = Op::ALL[self.cumulative.iter().position(|c| u < *c).unwrap_or(0)];
        match op {
            Op::Insert => (op, self.keys.take()),
            _ => (op, self.choose_key()),
        }
    }

    /// A field index for an update (writeallfields=false: one field).
    pub fn field(&mut self) -> usize {
        self.rng.below(self.wl.fieldcount as u64) as usize
    }
}
