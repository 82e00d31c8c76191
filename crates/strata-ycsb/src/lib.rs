//! strata-ycsb: the YCSB core workloads (A, B, C, D, F) with YCSB's property names and
//! defaults, an exact Zipfian sampler for theta from 0.25 to 2.0, and drivers that run them
//! against a database from many threads: in process against strata-kv's engine, or over the
//! network against any Redis-protocol server (strata-kv's, Redis) or memcached.
pub mod driver;
pub mod memcached_client;
pub mod pool;
pub mod resp_client;
pub mod workload;
pub mod zipf;

pub use driver::{load, run, Db, Latency, PhaseResult};
pub use memcached_client::MemcachedDb;
pub use resp_client::RespDb;
pub use workload::{key_name, Distribution, KeySequence, Op, OpStream, Workload, WorkloadError};
pub use zipf::{scramble, Rng, Zipf};
