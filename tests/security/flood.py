"""flood.py: a local user's attempts to take the daemon's socket or the metrics exporter from
everyone else (docs/security.md; crates/strata-cli/tests/security.rs runs it as such a user).

  flood.py hold SOCK N SECS         N connections that ask for the status and never read
  flood.py hello SOCK SECS          hellos as fast as connections are taken, for SECS
  flood.py http HOST PORT N SECS    N connections to the exporter that never finish a request
  flood.py fds SOCK N SECS          hellos each passing N descriptors (SCM_RIGHTS), for SECS

Each prints one line saying what it did, then exits 0. Every loop is bounded in time."""
import os
import resource
import socket
import sys
import time


def hold(path, n, secs):
    held = []
    for _ in range(n):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.setblocking(False)
            try:
                s.send(b'{"op":"status"}\n' * 64)
            except OSError:
                pass
            held.append(s)
        except OSError:
            break
    print(f"holding {len(held)} connections", flush=True)
    time.sleep(secs)


def hellos(path, secs, copies=1000, passed=()):
    """Connections for `secs`, each sending `copies` hellos in one write (with the descriptors
    `passed` attached, SCM_RIGHTS); how many went and how many connections were refused."""
    line = ('{"op":"hello","pid":%d}\n' % os.getpid()).encode() * copies
    end, sent, refused = time.time() + secs, 0, 0
    while time.time() < end:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(path)
            socket.send_fds(s, [line], list(passed)) if passed else s.sendall(line)
            sent += copies
            s.close()
        except OSError:
            refused += 1
    return sent, refused


def hello(path, secs):
    sent, refused = hellos(path, secs)
    print(f"sent {sent} hellos, {refused} connections refused", flush=True)


def fds(path, n, secs):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mine = [os.open("/dev/null", os.O_RDONLY) for _ in range(n)]
    sent, refused = hellos(path, secs, copies=1, passed=mine)
    print(f"sent {sent} hellos of {n} descriptors, {refused} connections refused", flush=True)


def http(host, port, n, secs):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            held.append(s)
        except OSError:
            pass
    print(f"holding {len(held)} connections", flush=True)
    time.sleep(secs)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "hold":
        hold(args[0], int(args[1]), float(args[2]))
    elif mode == "hello":
        hello(args[0], float(args[1]))
    elif mode == "fds":
        fds(args[0], int(args[1]), float(args[2]))
    elif mode == "http":
        http(args[0], int(args[1]), int(args[2]), float(args[3]))
    else:
        sys.exit(f"flood.py: unknown mode {mode}")
