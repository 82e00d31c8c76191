//! The strata-kv server: the engine behind a multi-threaded TCP server speaking the part of
//! RESP2 that clients need (redis-cli, YCSB's binding, go-redis, ...): PING, ECHO, GET, SET,
//! DEL, EXISTS, MGET, HSET, HMSET, HGET, HMGET, HGETALL, DBSIZE, FLUSHDB, INFO, QUIT, COMMAND,
//! SELECT 0 (ECHO because `redis-cli --pipe` ends its input with one).
//! Anything else answers "-ERR unknown command" (so clients that try HELLO fall back to
//! RESP2). One thread per connection; requests may be pipelined. A client that breaks the
//! protocol (or sends a bulk string over the limit) gets an error and is disconnected; a
//! wrong command gets an error and the connection goes on. Nothing a client sends can change
//! data it did not name.
//!
//! Strings and hashes share the engine: a value's first byte says which ('s' or 'h'); a
//! hash is a list of (u32 length, field, u32 length, value).
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::resp::{parse, reply, Limits, Parsed};
use crate::Store;

const STRING: u8 = b's';
const HASH: u8 = b'h';

/// Server settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub limits: Limits,
    /// Connections served at once; more are refused with an error
    pub max_clients: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { limits: Limits::default(), max_clients: 1024 }
    }
}

/// A bound server.
pub struct Server {
    listener: TcpListener,
    store: Arc<Store>,
    cfg: Config,
    clients: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    pub fn bind(addr: &str, store: Arc<Store>, cfg: Config) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        Ok(Server {
            listener,
            store,
            cfg,
            clients: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A flag that, once set, makes `serve` return after the next connection attempt.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Accept connections until stopped, each on its own thread.
    pub fn serve(self) -> io::Result<()> {
        for conn in self.listener.incoming() {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(mut stream) = conn else { continue };
            if self.clients.load(Ordering::Relaxed) >= self.cfg.max_clients {
                let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
                continue;
            }
            self.clients.fetch_add(1, Ordering::Relaxed);
            let (store, cfg, clients) = (self.store.clone(), self.cfg, self.clients.clone());
            std::thread::spawn(move || {
                let _ = handle(stream, &store, &cfg, &clients);
                clients.fetch_sub(1, Ordering::Relaxed);
            });
        }
        Ok(())
    }
}

fn handle(mut stream: TcpStream, store: &Store, cfg: &Config, clients: &AtomicUsize) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        let mut close = false;
        loop {
            match parse(&buf[used..], &cfg.limits) {
                Parsed::Incomplete => break,
                Parsed::Invalid(msg) => {
                    reply::error(&mut out, &format!("ERR {msg}"));
                    close = true;
                    break;
                }
                Parsed::Request(args, len) => {
                    used += len;
                    if args.is_empty() {
                        continue;
                    }
                    if execute(&args, store, clients, &mut out) == Flow::Quit {
                        close = true;
                        break;
                    }
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            stream.write_all(&out)?;
            out.clear();
        }
        if close {
            return Ok(());
        }
    }
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

fn arity(out: &mut Vec<u8>, name: &str) {
    reply::error(out, &format!("ERR wrong number of arguments for '{name}' command"));
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Fields of a hash value (after the type byte).
fn hash_fields(v: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut out = Vec::new();
    let mut p = 0;
    let take = |p: &mut usize| -> Option<&[u8]> {
        let len = u32::from_le_bytes(v.get(*p..*p + 4)?.try_into().ok()?) as usize;
        let s = v.get(*p + 4..*p + 4 + len)?;
        *p += 4 + len;
        Some(s)
    };
    while p < v.len() {
        let (Some(f), Some(x)) = (take(&mut p), take(&mut p)) else { break };
        out.push((f, x));
    }
    out
}

fn encode_hash(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut v = vec![HASH];
    for (f, x) in fields {
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
        v.extend_from_slice(&(x.len() as u32).to_le_bytes());
        v.extend_from_slice(x);
    }
    v
}

fn execute(args: &[Vec<u8>], store: &Store, clients: &AtomicUsize, out: &mut Vec<u8>) -> Flow {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let a = &args[1..];
    match name.as_str() {
        "ping" => match a.len() {
            0 => reply::simple(out, "PONG"),
            1 => reply::bulk(out, &a[0]),
            _ => arity(out, "ping"),
        },
        "echo" => {
            if a.len() == 1 {
                reply::bulk(out, &a[0]);
            } else {
                arity(out, "echo");
            }
        }
        "quit" => {
            reply::simple(out, "OK");
            return Flow::Quit;
        }
        "get" => {
            if a.len() != 1 {
                arity(out, "get");
            } else {
                get_string(store, &a[0], out);
            }
        }
        "mget" => {
            if a.is_empty() {
                arity(out, "mget");
            } else {
                reply::array(out, a.len());
                for k in a {
                    // MGET answers nil for keys of another type, as Redis does
                    match store.get(k, |v| (v.first() == Some(&STRING)).then(|| v[1..].to_vec())) {
                        Some(Some(v)) => reply::bulk(out, &v),
                        _ => reply::nil(out),
                    }
                }
            }
        }
        "set" => {
            if a.len() != 2 {
                if a.len() > 2 {
                    reply::error(out, "ERR syntax error (strata-kv's SET takes a key and a value only)");
                } else {
                    arity(out, "set");
                }
            } else {
                let mut v = Vec::with_capacity(a[1].len() + 1);
                v.push(STRING);
                v.extend_from_slice(&a[1]);
                match store.set(&a[0], &v) {
                    Ok(_) => reply::simple(out, "OK"),
                    Err(e) => reply::error(out, &format!("ERR {e}")),
                }
            }
        }
        "del" | "exists" => {
            if a.is_empty() {
                arity(out, &name);
            } else {
                let n = a.iter().filter(|k| if name == "del" { store.delete(k) } else { store.contains(k) }).count();
                reply::int(out, n as i64);
            }
        }
        "hset" | "hmset" => {
            if a.len() < 3 || a.len().is_multiple_of(2) {
                arity(out, &name);
            } else {
                let pairs: Vec<(&[u8], &[u8])> = a[1..].chunks(2).map(|c| (c[0].as_slice(), c[1].as_slice())).collect();
                let mut added = 0i64;
                let mut wrong = false;
                let stored = store.update(&a[0], |old| {
                    let mut fields: Vec<(&[u8], &[u8])> = match old {
                        Some(v) if v.first() == Some(&HASH) => hash_fields(&v[1..]),
                        Some(_) => {
                            wrong = true;
                            return None;
                        }
                        None => Vec::new(),
                    };
                    for (f, x) in &pairs {
                        match fields.iter_mut().find(|(g, _)| g == f) {
                            Some(slot) => slot.1 = x,
                            None => {
                                fields.push((f, x));
                                added += 1;
                            }
                        }
                    }
                    Some(encode_hash(&fields))
                });
                if wrong {
                    reply::error(out, WRONGTYPE);
                } else if let Err(e) = stored {
                    reply::error(out, &format!("ERR {e}"));
                } else if name == "hmset" {
                    reply::simple(out, "OK");
                } else {
                    reply::int(out, added);
                }
            }
        }
        "hget" | "hmget" => {
            if (name == "hget" && a.len() != 2) || a.len() < 2 {
                arity(out, &name);
            } else {
                let got = store.get(&a[0], |v| {
                    if v.first() != Some(&HASH) {
                        return Err(());
                    }
                    let fields = hash_fields(&v[1..]);
                    Ok(a[1..]
                        .iter()
                        .map(|f| fields.iter().find(|(g, _)| g == f).map(|(_, x)| x.to_vec()))
                        .collect::<Vec<_>>())
                });
                match got {
                    Some(Err(())) => reply::error(out, WRONGTYPE),
                    found => {
                        let vals = found.and_then(Result::ok).unwrap_or_else(|| vec![None; a.len() - 1]);
                        if name == "hmget" {
                            reply::array(out, vals.len());
                        }
                        for v in vals {
                            match v {
                                Some(x) => reply::bulk(out, &x),
                                None => reply::nil(out),
                            }
                        }
                    }
                }
            }
        }
        "hgetall" => {
            if a.len() != 1 {
                arity(out, "hgetall");
            } else {
                match store.get(&a[0], |v| {
                    (v.first() == Some(&HASH)).then(|| {
                        hash_fields(&v[1..]).into_iter().map(|(f, x)| (f.to_vec(), x.to_vec())).collect::<Vec<_>>()
                    })
                }) {
                    Some(None) => reply::error(out, WRONGTYPE),
                    found => {
                        let fields = found.flatten().unwrap_or_default();
                        reply::array(out, fields.len() * 2);
                        for (f, x) in fields {
                            reply::bulk(out, &f);
                            reply::bulk(out, &x);
                        }
                    }
                }
            }
        }
        "dbsize" => reply::int(out, store.len() as i64),
        "flushdb" | "flushall" => {
            store.clear();
            reply::simple(out, "OK");
        }
        "select" => {
            if a.len() == 1 && a[0] == b"0" {
                reply::simple(out, "OK");
            } else {
                reply::error(out, "ERR strata-kv has one database (0)");
            }
        }
        "info" => {
            let text = format!(
                "# Server\r\nredis_version:7.0.0-strata-kv\r\nstrata_kv_version:{}\r\nstrata_kv_variant:{}\r\n# Clients\r\nconnected_clients:{}\r\n# Keyspace\r\ndb0:keys={},expires=0\r\n",
                env!("CARGO_PKG_VERSION"),
                store.variant().name(),
                clients.load(Ordering::Relaxed),
                store.len()
            );
            reply::bulk(out, text.as_bytes());
        }
        "command" => reply::array(out, 0), // no command table: clients cope
        _ => {
            let first: Vec<String> = a.iter().take(3).map(|x| format!("'{}'", String::from_utf8_lossy(x))).collect();
            reply::error(
                out,
                &format!(
                    "ERR unknown command '{}', with args beginning with: {}",
                    String::from_utf8_lossy(&args[0]),
                    first.join(" ")
                ),
            );
        }
    }
    Flow::Continue
}

fn get_string(store: &Store, key: &[u8], out: &mut Vec<u8>) {
    match store.get(key, |v| if v.first() == Some(&STRING) { Ok(v[1..].to_vec()) } else { Err(()) }) {
        Some(Ok(v)) => reply::bulk(out, &v),
        Some(Err(())) => reply::error(out, WRONGTYPE),
        None => reply::nil(out),
    }
}
