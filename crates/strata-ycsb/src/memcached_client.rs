//! The network driver's database for memcached (text protocol). memcached has no hashes, so
//! a record is stored whole, as YCSB's own memcached binding does: a read is `get`, an insert
//! is `set`, and updating one field reads, changes and writes back the record (`gets` + `cas`,
//! retried when another client changed it in between, so no update is lost).
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;

use crate::driver::Db;
use crate::pool::Pool;

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    pub fn connect(addr: &str) -> io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        Ok(Conn { reader: BufReader::new(s.try_clone()?), writer: s })
    }

    fn line(&mut self) -> io::Result<String> {
        let mut l = String::new();
        if self.reader.read_line(&mut l)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "memcached closed the connection"));
        }
        Ok(l.trim_end().to_string())
    }

    /// `gets key`: the value and its cas token, or None.
    pub fn gets(&mut self, key: &[u8]) -> io::Result<Option<(Vec<u8>, u64)>> {
        self.writer.write_all(b"gets ")?;
        self.writer.write_all(key)?;
        self.writer.write_all(b"\r\n")?;
        let head = self.line()?;
        if head == "END" {
            return Ok(None);
        }
        // VALUE <key> <flags> <bytes> <cas>
        let f: Vec<&str> = head.split(' ').collect();
        if f.len() != 5 || f[0] != "VALUE" {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("memcached said: {head}")));
        }
        let len: usize = f[3].parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad length"))?;
        let cas: u64 = f[4].parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad cas"))?;
        let mut data = vec![0u8; len + 2];
        std::io::Read::read_exact(&mut self.reader, &mut data)?;
        data.truncate(len);
        let end = self.line()?;
        if end != "END" {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("memcached said: {end}")));
        }
        Ok(Some((data, cas)))
    }

    /// `set` (cas None) or `cas`: Ok(true) when stored, Ok(false) when the cas token is stale.
    pub fn store(&mut self, key: &[u8], val: &[u8], cas: Option<u64>) -> io::Result<bool> {
        let cmd = match cas {
            None => format!(" 0 0 {}\r\n", val.len()),
            Some(c) => format!(" 0 0 {} {c}\r\n", val.len()),
        };
        self.writer.write_all(if cas.is_some() { b"cas " } else { b"set " })?;
        self.writer.write_all(key)?;
        self.writer.write_all(cmd.as_bytes())?;
        self.writer.write_all(val)?;
        self.writer.write_all(b"\r\n")?;
        match self.line()?.as_str() {
            "STORED" => Ok(true),
            "EXISTS" | "NOT_FOUND" => Ok(false),
            other => Err(io::Error::new(io::ErrorKind::InvalidData, format!("memcached said: {other}"))),
        }
    }

    pub fn flush_all(&mut self) -> io::Result<()> {
        self.writer.write_all(b"flush_all\r\n")?;
        let l = self.line()?;
        if l == "OK" {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::InvalidData, format!("memcached said: {l}")))
        }
    }
}

/// A pool of memcached connections, usable as a driver's database.
pub struct MemcachedDb {
    pool: Pool<Conn>,
}

impl MemcachedDb {
    pub fn new(addr: &str) -> io::Result<MemcachedDb> {
        Ok(MemcachedDb { pool: Pool::new(addr, Conn::connect)? })
    }

    /// Run `f` on a pooled connection.
    pub fn with<R>(&self, f: impl FnOnce(&mut Conn) -> io::Result<R>) -> io::Result<R> {
        self.pool.with(f)
    }
}

impl Db for MemcachedDb {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        match self.with(|c| c.gets(key)) {
            Ok(Some((v, _))) => {
                *out = v;
                true
            }
            _ => false,
        }
    }

    fn update_field(&self, key: &[u8], offset: usize, data: &[u8]) -> bool {
        self.with(|c| {
            for _ in 0..1000 {
                let Some((mut v, cas)) = c.gets(key)? else { return Ok(false) };
                if offset + data.len() <= v.len() {
                    v[offset..offset + data.len()].copy_from_slice(data);
                }
                if c.store(key, &v, Some(cas))? {
                    return Ok(true);
                }
            }
            Ok(false)
        })
        .unwrap_or(false)
    }

    fn insert(&self, key: &[u8], record: &[u8]) -> bool {
        matches!(self.with(|c| c.store(key, record, None)), Ok(true))
    }
}
