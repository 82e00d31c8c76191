//! The network driver's database: any server speaking RESP (strata-kv, Redis). A record is a
//! hash of fields field0..fieldN-1 (HSET to insert and update, HGETALL to read), as YCSB's
//! Redis binding stores it. Connections are pooled (pool.rs).
use std::io::{self, Read, Write};
use std::net::TcpStream;

use strata_kv::resp::{encode_request, parse_reply, Value};

use crate::driver::Db;
use crate::pool::Pool;

/// One connection, with its read buffer.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: Vec::with_capacity(16 << 10), out: Vec::with_capacity(16 << 10) })
    }

    /// Send one request and wait for its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        self.out.clear();
        encode_request(&mut self.out, args);
        self.stream.write_all(&self.out)?;
        let mut chunk = [0u8; 16 << 10];
        loop {
            match parse_reply(&self.buf) {
                Ok(Some((v, used))) => {
                    self.buf.drain(..used);
                    return Ok(v);
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A pool of connections to one server, usable as a driver's database.
pub struct RespDb {
    fieldlength: usize,
    pool: Pool<Conn>,
}

impl RespDb {
    pub fn new(addr: &str, fieldlength: usize) -> io::Result<RespDb> {
        Ok(RespDb { fieldlength, pool: Pool::new(addr, Conn::connect)? })
    }

    /// One request on a pooled connection.
    pub fn call(&self, args: &[&[u8]]) -> io::Result<Value> {
        self.pool.with(|c| c.call(args))
    }
}

fn field_name(i: usize) -> Vec<u8> {
    format!("field{i}").into_bytes()
}

impl Db for RespDb {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        match self.call(&[b"HGETALL", key]) {
            Ok(Value::Array(Some(items))) if !items.is_empty() => {
                out.clear();
                for pair in items.chunks(2) {
                    if let [_, Value::Bulk(Some(v))] = pair {
                        out.extend_from_slice(v);
                    }
                }
                true
            }
            _ => false,
        }
    }

    fn update_field(&self, key: &[u8], offset: usize, data: &[u8]) -> bool {
        let f = field_name(offset / self.fieldlength.max(1));
        matches!(self.call(&[b"HSET", key, &f, data]), Ok(Value::Int(_)))
    }

    fn insert(&self, key: &[u8], record: &[u8]) -> bool {
        let names: Vec<Vec<u8>> = (0..record.len().div_ceil(self.fieldlength.max(1))).map(field_name).collect();
        let mut args: Vec<&[u8]> = vec![b"HSET", key];
        for (i, chunk) in record.chunks(self.fieldlength.max(1)).enumerate() {
            args.push(&names[i]);
            args.push(chunk);
        }
        matches!(self.call(&args), Ok(Value::Int(_)))
    }
}
