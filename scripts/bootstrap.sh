#!/usr/bin/env bash
# bootstrap.sh: install what building and testing Strata needs, only what is missing.
# Debian packages via apt-get (as root, or with sudo). With --vm, also what the two-tier QEMU
# guest needs (qemu-system-x86, Debian's kernel, busybox-static).
set -euo pipefail

need_pkgs=()
if [ "${1:-}" = "--vm" ]; then
  command -v qemu-system-x86_64 >/dev/null 2>&1 || need_pkgs+=(qemu-system-x86)
  ls /boot/vmlinuz-* >/dev/null 2>&1 || need_pkgs+=(linux-image-amd64)
  [ -x /bin/busybox ] || need_pkgs+=(busybox-static)
fi
have() { command -v "$1" >/dev/null 2>&1; }
have cc || need_pkgs+=(gcc)
have make || need_pkgs+=(make)
have git || need_pkgs+=(git)
have g++ || need_pkgs+=(g++)
# real programs run under LD_PRELOAD by the tests
have sqlite3 || need_pkgs+=(sqlite3)
# the security tests: a user to attack with, its tools (Debian's python3), private mounts
have useradd || need_pkgs+=(passwd)
/usr/bin/python3 -c 'import resource, socket' >/dev/null 2>&1 || need_pkgs+=(python3)
{ have unshare && have setpriv; } || need_pkgs+=(util-linux)
have xz || need_pkgs+=(xz-utils)
have perl || need_pkgs+=(perl)
# peers of strata-kv: redis-cli must work against it; redis-server is a benchmark peer
have redis-cli || need_pkgs+=(redis-tools)
have redis-server || need_pkgs+=(redis-server)
have memcached || need_pkgs+=(memcached)
# the allocators bench alloc compares against, and callgrind for its instruction counts
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || need_pkgs+=(libjemalloc2)
[ -e /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 ] || need_pkgs+=(libmimalloc2.0)
have valgrind || need_pkgs+=(valgrind)
# the emulated machine: clang builds programs with SanitizerCoverage load/store hooks
have clang-14 || need_pkgs+=(clang-14)
# real programs built for it from Debian's sources (strata emu pkg build): apt-get source needs
# dpkg-dev; memcached's build needs libevent's headers; LIBLINEAR links the system's BLAS
have dpkg-source || need_pkgs+=(dpkg-dev)
[ -e /usr/include/event2/event.h ] || need_pkgs+=(libevent-dev)
[ -e /usr/lib/x86_64-linux-gnu/libblas.so.3 ] || need_pkgs+=(libblas3)
# make install's and make deb's tests: pkg-config reads the installed strata.pc
have pkg-config || need_pkgs+=(pkg-config)
# the real YCSB client: Java and Maven (site.ycsb:core comes from Maven Central)
have java || need_pkgs+=(default-jdk-headless)
have mvn || need_pkgs+=(maven)
# the sanitizer runtimes of gcc, for the ASan/TSan test builds
gcc_ver=$( (cc -dumpversion 2>/dev/null || echo 12) | cut -d. -f1)
[ -e "$(cc -print-file-name=libasan.so 2>/dev/null)" ] && [ "$(cc -print-file-name=libasan.so)" != libasan.so ] \
  || need_pkgs+=("libasan8")
[ -e "$(cc -print-file-name=libtsan.so 2>/dev/null)" ] && [ "$(cc -print-file-name=libtsan.so)" != libtsan.so ] \
  || need_pkgs+=("libtsan2")
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "bootstrap: installing ${need_pkgs[*]} (gcc $gcc_ver)"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_pkgs[@]}"
fi

if ! have cargo; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "bootstrap: cargo not found; install Rust (https://rustup.rs) and re-run" >&2
    exit 1
  fi
fi
# make lint: cargo fmt and cargo clippy
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if have rustup; then rustup component add "$c"; else echo "bootstrap: cargo $c is missing (rustup component add $c)" >&2; exit 1; fi
  fi
done
