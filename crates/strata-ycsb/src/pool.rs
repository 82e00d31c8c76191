//! A pool of connections to one server, shared by the driver's client threads: each operation
//! takes a connection (opening one when none is free) and gives it back unless it failed, so
//! threads never wait on each other's round trips and a broken connection is dropped.
use std::io;
use std::sync::Mutex;

pub struct Pool<C> {
    addr: String,
    connect: fn(&str) -> io::Result<C>,
    idle: Mutex<Vec<C>>,
}

impl<C> Pool<C> {
    /// Opens one connection now, so a wrong address fails here and not mid-benchmark.
    pub fn new(addr: &str, connect: fn(&str) -> io::Result<C>) -> io::Result<Pool<C>> {
        let first = connect(addr)?;
        Ok(Pool { addr: addr.into(), connect, idle: Mutex::new(vec![first]) })
    }

    /// Run `f` on a pooled connection.
    pub fn with<R>(&self, f: impl FnOnce(&mut C) -> io::Result<R>) -> io::Result<R> {
        let idle = self.idle.lock().unwrap().pop();
        let mut c = match idle {
            Some(c) => c,
            None => (self.connect)(&self.addr)?,
        };
        let r = f(&mut c);
        if r.is_ok() {
            self.idle.lock().unwrap().push(c);
        }
        r
    }
}
