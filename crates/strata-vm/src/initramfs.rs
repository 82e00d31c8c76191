//! The guest's initramfs: busybox, this `strata` binary, the dax modules, the `--file` paths
//! (at the same absolute paths, with the shared libraries they need), an init script and the
//! command.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cpio::Cpio;
use strata_util::io;

use crate::{Error, Kernel, Options, DAX_MODULES};

/// The line the init script prints once node 1 is online, before the command starts.
pub const READY: &str = "STRATA-VM-READY";
/// The line it prints after the command, with its exit status.
pub const EXIT: &str = "STRATA-VM-EXIT";

/// The init script: mount, hot-add node 1 through dax/kmem, optionally switch the kernel's
/// tiering on, run /strata-cmd, report its status, power off.
pub fn init_script(kernel_tiering: bool) -> String {
    let mut s = String::from(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin
# no tmpfs on /tmp: the initramfs is already writable, and a mount there would hide --file
# paths under /tmp (a clone in /tmp/...)
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# /dev/shm as every distribution has it: processes under Strata share their channel there
mkdir -p /dev/shm; mount -t tmpfs shm /dev/shm
# loopback, for servers the command starts (strata stats --metrics, strata kv serve)
ip link set lo up
fail() { echo "STRATA-VM-SETUP-FAILED: $*"; poweroff -f; }
# node 1 soft-reserved (kernels before 6.7): hot-add it through dax/kmem into a lower tier;
# newer kernels have already placed it by its HMAT attributes
if [ "$(cat /sys/devices/system/node/has_memory)" != "0-1" ]; then
  for m in device_dax dax_hmem kmem; do insmod /lib/modules/strata/$m.ko || fail "insmod $m"; done
  [ -e /sys/bus/dax/devices/dax0.0 ] || fail "no dax0.0: the soft-reserved range was not found (memmap)"
  echo dax0.0 > /sys/bus/dax/drivers/device_dax/unbind || fail "unbind dax0.0"
  echo dax0.0 > /sys/bus/dax/drivers/kmem/new_id || fail "kmem new_id"
  for b in /sys/devices/system/memory/memory*; do
    [ "$(cat $b/state)" = offline ] && { echo online_movable > $b/state || fail "online $b"; }
  done
fi
[ "$(cat /sys/devices/system/node/has_memory)" = "0-1" ] || fail "node 1 has no memory"
"#,
    );
    if kernel_tiering {
        s += r#"echo true > /sys/kernel/mm/numa/demotion_enabled || fail "demotion_enabled"
echo 2 > /proc/sys/kernel/numa_balancing || fail "numa_balancing=2"
mount -t debugfs debugfs /sys/kernel/debug
for k in scan_delay_ms scan_period_min_ms; do echo 100 > /sys/kernel/debug/sched/numa_balancing/$k; done
"#;
    } else {
        // Without it the kernel is not a mover: a 6.12 guest, whose node 1 is there at boot,
        // starts with numa_balancing=1, which moved a hot set from node 1 to node 0 before the
        // daemon did (a guest test found no agent commits, the pages promoted all the same)
        s += r#"if [ -e /proc/sys/kernel/numa_balancing ]; then echo 0 > /proc/sys/kernel/numa_balancing || fail "numa_balancing=0"; fi
"#;
    }
    s += &format!("echo {READY}\ncd /tmp\n/bin/sh /strata-cmd\necho \"{EXIT} $?\"\npoweroff -f\n");
    s
}

/// The shared libraries an ELF file needs (none for static ones), from ldd.
fn libraries(path: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(path).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = match l.split_once("=>") {
                Some((_, rest)) => rest.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

/// Add a host file at its own path, and the libraries it needs (symlinks followed).
fn add_host_file(cpio: &mut Cpio, path: &Path, added: &mut BTreeSet<PathBuf>) -> Result<(), Error> {
    if !added.insert(path.to_path_buf()) {
        return Ok(());
    }
    let data = std::fs::read(path).map_err(io(format!("reading {} for the guest", path.display())))?;
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).map_err(io(format!("{}", path.display())))?.permissions().mode() & 0o7777
    };
    cpio.file(&path.to_string_lossy(), mode, &data);
    for lib in libraries(path) {
        let real = std::fs::canonicalize(&lib).unwrap_or(lib.clone());
        if real != lib && added.insert(lib.clone()) {
            add_host_file(cpio, &real, added)?;
            cpio.symlink(&lib.to_string_lossy(), &real.to_string_lossy());
        } else {
            add_host_file(cpio, &lib, added)?;
        }
    }
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Write the initramfs for `kernel` into `dir`; its path.
pub fn write(a: &Options, kernel: &Kernel, dir: &Path) -> Result<PathBuf, Error> {
    let mut cpio = Cpio::new();
    for d in ["/proc", "/sys", "/dev", "/tmp", "/sbin", "/usr/bin"] {
        cpio.dir(d);
    }
    cpio.entry("/dev/console", 0o020600, (5, 1), &[]);
    cpio.file("/init", 0o755, init_script(a.kernel_tiering).as_bytes());
    let mut added = BTreeSet::new();
    add_host_file(&mut cpio, Path::new("/bin/busybox"), &mut added)?;
    let me = std::env::current_exe().map_err(io("finding the strata binary"))?;
    cpio.file("/bin/strata", 0o755, &std::fs::read(&me).map_err(io(format!("reading {}", me.display())))?);
    for lib in libraries(&me) {
        add_host_file(&mut cpio, &lib, &mut added)?;
    }
    for md in DAX_MODULES.iter().filter(|_| kernel.needs_dax()) {
        cpio.file(&format!("/lib/modules/strata/{md}.ko"), 0o644, &kernel.module_bytes(md)?);
    }
    for f in &a.files {
        let abs = std::fs::canonicalize(f).map_err(io(format!("--file {}", f.display())))?;
        add_host_file(&mut cpio, &abs, &mut added)?;
    }
    let cmd: Vec<String> = a.command.iter().map(|s| shell_quote(s)).collect();
    cpio.file("/strata-cmd", 0o755, format!("{}\n", cmd.join(" ")).as_bytes());
    let initrd = dir.join("initramfs.cpio");
    std::fs::write(&initrd, cpio.finish()).map_err(io(format!("writing {}", initrd.display())))?;
    Ok(initrd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_script_reports_ready_and_the_exit_status() {
        let s = init_script(false);
        assert!(s.contains(READY) && s.contains(EXIT) && s.contains("echo 0 > /proc/sys/kernel/numa_balancing"));
        assert!(init_script(true).contains("echo 2 > /proc/sys/kernel/numa_balancing"));
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
