//! RESP2, the Redis protocol: requests are arrays of bulk strings (or, from a terminal,
//! "inline" lines of words); replies are simple strings, errors, integers, bulk strings and
//! arrays. The parser is incremental (it reports how much of a buffer made one request, so a
//! connection can hold many pipelined requests) and never trusts a length it has not checked
//! against the limits.

/// Limits on what a client may send.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest bulk string accepted (Redis: proto-max-bulk-len, 512 MB)
    pub max_bulk: usize,
    /// Most elements in one request
    pub max_args: usize,
    /// Longest inline request line
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bulk: 64 << 20, max_args: 1 << 20, max_inline: 64 << 10 }
    }
}

/// What parsing a buffer gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A request (its arguments) made of the first `usize` bytes.
    Request(Vec<Vec<u8>>, usize),
    /// Not enough bytes yet.
    Incomplete,
    /// The client broke the protocol: reply with this error and close the connection.
    Invalid(String),
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| p + from)
}

/// A decimal number from a header line; None unless the whole line is one.
fn parse_len(line: &[u8]) -> Option<i64> {
    if line.is_empty() || line.len() > 19 {
        return None;
    }
    let (neg, digits) = match line[0] {
        b'-' => (true, &line[1..]),
        _ => (false, line),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Parse one request from the start of `buf`.
pub fn parse(buf: &[u8], lim: &Limits) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if buf[0] != b'*' {
        return parse_inline(buf, lim);
    }
    let Some(end) = find_crlf(buf, 1) else {
        return if buf.len() > 32 {
            Parsed::Invalid("Protocol error: invalid multibulk length".into())
        } else {
            Parsed::Incomplete
        };
    };
    let n = match parse_len(&buf[1..end]) {
        Some(n) if n <= 0 => return Parsed::Request(Vec::new(), end + 2), // *0 / *-1: nothing
        Some(n) if (n as usize) <= lim.max_args => n as usize,
        _ => return Parsed::Invalid("Protocol error: invalid multibulk length".into()),
    };
    let mut pos = end + 2;
    let mut args = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        if pos >= buf.len() {
            return Parsed::Incomplete;
        }
        if buf[pos] != b'$' {
            return Parsed::Invalid(format!(
                "Protocol error: expected '$', got '{}'",
                (buf[pos] as char).escape_default()
            ));
        }
        let Some(e) = find_crlf(buf, pos + 1) else {
            return if buf.len() - pos > 32 {
                Parsed::Invalid("Protocol error: invalid bulk length".into())
            } else {
                Parsed::Incomplete
            };
        };
        let len = match parse_len(&buf[pos + 1..e]) {
            Some(l) if l >= 0 && (l as usize) <= lim.max_bulk => l as usize,
            Some(l) if l > 0 => {
                return Parsed::Invalid(format!(
                    "Protocol error: bulk string of {l} bytes is over the limit of {}",
                    lim.max_bulk
                ))
            }
            _ => return Parsed::Invalid("Protocol error: invalid bulk length".into()),
        };
        let start = e + 2;
        if buf.len() < start + len + 2 {
            return Parsed::Incomplete;
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return Parsed::Invalid("Protocol error: bulk string not followed by CRLF".into());
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2;
    }
    Parsed::Request(args, pos)
}

fn parse_inline(buf: &[u8], lim: &Limits) -> Parsed {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > lim.max_inline {
            Parsed::Invalid("Protocol error: too big inline request".into())
        } else {
            Parsed::Incomplete
        };
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let args: Vec<Vec<u8>> =
        line.split(|b| *b == b' ' || *b == b'\t').filter(|w| !w.is_empty()).map(<[u8]>::to_vec).collect();
    if args.len() > lim.max_args {
        return Parsed::Invalid("Protocol error: too many arguments".into());
    }
    Parsed::Request(args, nl + 1)
}

/// Reply builders: append to an output buffer.
pub mod reply {
    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.push(b'+');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    pub fn error(out: &mut Vec<u8>, s: &str) {
        out.push(b'-');
        // an error line cannot hold CR or LF
        out.extend(s.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
        out.extend_from_slice(b"\r\n");
    }
    pub fn int(out: &mut Vec<u8>, v: i64) {
        out.extend_from_slice(format!(":{v}\r\n").as_bytes());
    }
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    pub fn nil(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }
    pub fn array(out: &mut Vec<u8>, n: usize) {
        out.extend_from_slice(format!("*{n}\r\n").as_bytes());
    }
}

/// Encode a request as an array of bulk strings (what clients send).
pub fn encode_request(out: &mut Vec<u8>, args: &[&[u8]]) {
    reply::array(out, args.len());
    for a in args {
        reply::bulk(out, a);
    }
}

/// A reply as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

/// Parse one reply from the start of `buf`: Some((value, bytes used)), None if incomplete,
/// Err on a malformed reply.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Value, usize)>, String> {
    let Some(end) = find_crlf(buf, 0) else { return Ok(None) };
    if end == 0 {
        return Err("empty reply line".into());
    }
    let line = &buf[1..end];
    let text = || String::from_utf8_lossy(line).into_owned();
    let next = end + 2;
    match buf[0] {
        b'+' => Ok(Some((Value::Simple(text()), next))),
        b'-' => Ok(Some((Value::Error(text()), next))),
        b':' => parse_len(line).map(|v| Some((Value::Int(v), next))).ok_or_else(|| "bad integer".to_string()),
        b'$' => {
            let len = parse_len(line).ok_or("bad bulk length")?;
            if len < 0 {
                return Ok(Some((Value::Bulk(None), next)));
            }
            let len = len as usize;
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            Ok(Some((Value::Bulk(Some(buf[next..next + len].to_vec())), next + len + 2)))
        }
        b'*' => {
            let n = parse_len(line).ok_or("bad array length")?;
            if n < 0 {
                return Ok(Some((Value::Array(None), next)));
            }
            let mut pos = next;
            let mut items = Vec::new();
            for _ in 0..n {
                match parse_reply(&buf[pos..])? {
                    Some((v, used)) => {
                        items.push(v);
                        pos += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Value::Array(Some(items)), pos)))
        }
        c => Err(format!("unknown reply type '{}'", (c as char).escape_default())),
    }
}
