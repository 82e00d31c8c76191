//! `strata kv`: the strata-kv server (M2T's key-value store) on a TCP port.
use std::sync::Arc;

use anyhow::Context;
use strata_kv::resp::Limits;
use strata_kv::server::{Config, Server};
use strata_kv::{Store, Variant};

use strata_util::size::parse as parse_size;

#[derive(clap::Subcommand)]
pub enum KvCommand {
    /// Serve the Redis protocol (RESP2 subset) until killed
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default)
    #[arg(long, default_value = "127.0.0.1:6380")]
    addr: String,
    /// Engine variant: std (glibc malloc), nextto (an arena per bucket, NextTo) or
    /// nextto-split (as nextto, with the values in a second arena per bucket)
    #[arg(long, default_value = "nextto")]
    variant: String,
    /// Hash buckets (a fixed array, as in M2T; rounded up to a power of two)
    #[arg(long, default_value_t = 1 << 20)]
    buckets: usize,
    /// Longest bulk string a client may send
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    max_bulk: u64,
    /// Connections served at once
    #[arg(long, default_value_t = 1024)]
    max_clients: usize,
}

pub fn run(c: KvCommand) -> anyhow::Result<i32> {
    let KvCommand::Serve(a) = c;
    let variant = Variant::parse(&a.variant)
        .with_context(|| format!("unknown variant '{}' (std, nextto, nextto-split)", a.variant))?;
    let store = Arc::new(Store::new(variant, a.buckets));
    let cfg =
        Config { limits: Limits { max_bulk: a.max_bulk as usize, ..Limits::default() }, max_clients: a.max_clients };
    let server = Server::bind(&a.addr, store.clone(), cfg).with_context(|| format!("listening on {}", a.addr))?;
    eprintln!("[kv] strata-kv ({}) listening on {}, {} buckets", variant.name(), server.local_addr()?, store.buckets());
    server.serve()?;
    Ok(0)
}
