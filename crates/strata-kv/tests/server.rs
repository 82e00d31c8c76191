//! The server over real sockets on loopback, and the RESP parser against malformed input.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use strata_kv::resp::{parse, parse_reply, Limits, Parsed, Value};
use strata_kv::server::{Config, Server};
use strata_kv::{Store, Variant};

fn start(variant: Variant, cfg: Config) -> (String, Arc<Store>) {
    let store = Arc::new(Store::new(variant, 256));
    let server = Server::bind("127.0.0.1:0", store.clone(), cfg).unwrap();
    let addr = server.local_addr().unwrap().to_string();
    std::thread::spawn(move || server.serve());
    (addr, store)
}

/// Send raw bytes, read until `replies` complete replies arrived (or the server closed).
fn exchange(addr: &str, raw: &[u8], replies: usize) -> (Vec<Value>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut closed = false;
    while out.len() < replies {
        while let Ok(Some((v, used))) = parse_reply(&buf) {
            buf.drain(..used);
            out.push(v);
        }
        if out.len() >= replies {
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => {
                closed = true;
                break;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    while let Ok(Some((v, used))) = parse_reply(&buf) {
        buf.drain(..used);
        out.push(v);
    }
    (out, closed)
}

fn bulk(s: &str) -> Value {
    Value::Bulk(Some(s.as_bytes().to_vec()))
}

#[test]
fn commands_and_pipelining() {
    for v in Variant::ALL {
        let (addr, store) = start(v, Config::default());
        let raw = b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n\
*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$2\r\nf1\r\n$2\r\nv1\r\n*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$2\r\nf2\r\n$2\r\nv2\r\n\
*3\r\n$4\r\nHGET\r\n$1\r\nh\r\n$2\r\nf2\r\n*2\r\n$7\r\nHGETALL\r\n$1\r\nh\r\n*4\r\n$5\r\nHMGET\r\n$1\r\nh\r\n$2\r\nf1\r\n$2\r\nzz\r\n\
*3\r\n$4\r\nMGET\r\n$1\r\nk\r\n$1\r\nh\r\n*3\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n$1\r\nx\r\n*1\r\n$6\r\nDBSIZE\r\n*2\r\n$3\r\nGET\r\n$1\r\nh\r\n\
*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$5\r\nHELLO\r\nPING inline\r\n*1\r\n$4\r\nQUIT\r\n";
        let (r, closed) = exchange(&addr, raw, 18);
        assert!(closed || r.len() == 18);
        assert_eq!(r[0], Value::Simple("PONG".into()));
        assert_eq!(r[1], Value::Simple("OK".into()));
        assert_eq!(r[2], bulk("hello"));
        assert_eq!((r[3].clone(), r[4].clone()), (Value::Int(1), Value::Int(1)));
        assert_eq!(r[5], bulk("v2"));
        assert_eq!(r[6], Value::Array(Some(vec![bulk("f1"), bulk("v1"), bulk("f2"), bulk("v2")])));
        assert_eq!(r[7], Value::Array(Some(vec![bulk("v1"), Value::Bulk(None)])));
        assert_eq!(r[8], Value::Array(Some(vec![bulk("hello"), Value::Bulk(None)])));
        assert_eq!(r[9], Value::Int(1));
        assert_eq!(r[10], Value::Int(2));
        assert!(matches!(&r[11], Value::Error(e) if e.starts_with("WRONGTYPE")));
        assert_eq!((r[12].clone(), r[13].clone()), (Value::Int(1), Value::Bulk(None)));
        assert!(matches!(&r[14], Value::Error(e) if e.starts_with("ERR unknown command 'HELLO'")));
        assert_eq!(r[15], bulk("inline"));
        assert_eq!(r[16], Value::Simple("OK".into()));
        assert_eq!(store.len(), 1);
    }
}

#[test]
fn bad_input_is_refused_and_data_survives() {
    let (addr, store) =
        start(Variant::NextTo, Config { limits: Limits { max_bulk: 1024, ..Limits::default() }, max_clients: 64 });
    let (r, _) = exchange(&addr, b"*3\r\n$3\r\nSET\r\n$4\r\nkeep\r\n$4\r\nsafe\r\n", 1);
    assert_eq!(r[0], Value::Simple("OK".into()));
    let cases: [&[u8]; 6] = [
        b"*2\r\n$3\r\nGET\r\n$99999\r\nabc\r\n", // bulk over the limit
        b"*2\r\n:3\r\nGET\r\n",                  // not a bulk string
        b"*x\r\n",                               // bad count
        b"*1\r\n$-5\r\n",                        // negative length
        b"*2\r\n$3\r\nGETX\r\n$1\r\nk\r\n",      // bulk without its CRLF
        b"*99999999999\r\n",                     // absurd count
    ];
    for raw in cases {
        let (r, closed) = exchange(&addr, raw, 1);
        assert!(
            matches!(r.first(), Some(Value::Error(e)) if e.contains("Protocol error")),
            "{:?} -> {r:?}",
            String::from_utf8_lossy(raw)
        );
        assert!(closed || r.len() == 1);
    }
    // wrong arity and unknown commands: an error, and the connection goes on
    let (r, _) = exchange(
        &addr,
        b"*1\r\n$3\r\nGET\r\n*4\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n$2\r\nEX\r\n*2\r\n$3\r\nGET\r\n$4\r\nkeep\r\n",
        3,
    );
    assert!(matches!(&r[0], Value::Error(e) if e.contains("wrong number of arguments")));
    assert!(matches!(&r[1], Value::Error(_)));
    assert_eq!(r[2], bulk("safe"));
    assert_eq!(store.len(), 1);
}

#[test]
fn parser_survives_any_mutation_of_valid_requests() {
    // property: for random byte mutations, truncations and splices of valid pipelines, the
    // parser never panics, never reads past what it was given, and what it accepts re-parses
    // to the same arguments
    let lim = Limits { max_bulk: 4096, max_args: 64, max_inline: 4096 };
    let valid: &[&[u8]] = &[
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
        b"*2\r\n$4\r\nHGET\r\n$0\r\n\r\n",
        b"PING hello world\r\n",
        b"*1\r\n$7\r\nHGETALL\r\n",
    ];
    let mut x = strata_util::XorShift::new(0x1234_5678_9abc_def0);
    let mut rnd = || x.next_u64();
    for _ in 0..200_000 {
        let mut buf: Vec<u8> = Vec::new();
        for _ in 0..(rnd() % 4 + 1) {
            buf.extend_from_slice(valid[(rnd() % valid.len() as u64) as usize]);
        }
        for _ in 0..(rnd() % 4) {
            if buf.is_empty() {
                break;
            }
            let i = (rnd() % buf.len() as u64) as usize;
            match rnd() % 4 {
                0 => buf[i] = rnd() as u8,
                1 => buf[i] = b"*$\r\n-0123456789"[(rnd() % 15) as usize],
                2 => buf.truncate(i),
                _ => buf.insert(i, rnd() as u8),
            }
        }
        let mut pos = 0;
        while pos < buf.len() {
            match parse(&buf[pos..], &lim) {
                Parsed::Request(args, used) => {
                    assert!(used > 0 && pos + used <= buf.len());
                    assert!(args.len() <= lim.max_args && args.iter().all(|a| a.len() <= lim.max_bulk));
                    if buf[pos] == b'*' && !args.is_empty() {
                        let mut again = Vec::new();
                        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                        strata_kv::resp::encode_request(&mut again, &refs);
                        assert_eq!(parse(&again, &lim), Parsed::Request(args.clone(), again.len()));
                    }
                    pos += used;
                }
                Parsed::Incomplete | Parsed::Invalid(_) => break,
            }
        }
    }
}

#[test]
fn many_connections_at_once() {
    let (addr, store) = start(Variant::NextTo, Config::default());
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut raw = Vec::new();
                for i in 0..200 {
                    let k = format!("t{t}k{i}");
                    let v = format!("{t}:{i}");
                    strata_kv::resp::encode_request(&mut raw, &[b"SET", k.as_bytes(), v.as_bytes()]);
                    strata_kv::resp::encode_request(&mut raw, &[b"GET", k.as_bytes()]);
                }
                let (r, _) = exchange(&addr, &raw, 400);
                for i in 0..200 {
                    assert_eq!(r[2 * i + 1], bulk(&format!("{t}:{i}")));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(store.len(), 16 * 200);
}
