//! The QEMU command line: two NUMA nodes with HMAT latencies and bandwidths. On kernels that
//! need it (before 6.7), node 1's RAM is soft-reserved so dax/kmem hot-adds it as a CPU-less
//! node in a lower memory tier; newer kernels place node 1 by its HMAT attributes themselves.
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{Kernel, Options, MIB};

/// The kernel command line. With `soft_reserve`, node 1's RAM (except its last 2 MiB, which
/// the firmware partly uses) becomes soft-reserved (type 0xefffffff) so dax_hmem claims it;
/// 2 MiB aligned.
pub fn kernel_cmdline(fast: u64, slow: u64, soft_reserve: bool) -> String {
    let mut c = String::from("console=ttyS0 panic=-1 quiet loglevel=3");
    if soft_reserve {
        c += &format!(
            " memmap={:#x}%{:#x}-1+0xefffffff memmap=0x1e0000%{:#x}-1+2",
            slow - 2 * MIB,
            fast,
            fast + slow - 2 * MIB
        );
    }
    c
}

/// qemu-system-x86_64 for the guest, its console on stdout, stdin closed; killed when the thread
/// that starts it (the one that follows it) ends.
pub fn command(a: &Options, kernel: &Kernel, initrd: &Path) -> Command {
    let (fast, slow) = (a.fast_mem, a.slow_mem);
    let mut q = Command::new("qemu-system-x86_64");
    strata_util::dies_with_parent(&mut q);
    q.args(["-accel", "tcg,thread=multi", "-machine", "pc,hmat=on", "-nographic", "-no-reboot"])
        .args(["-m", &format!("{}M", (fast + slow) / MIB), "-smp", &a.cpus.to_string()])
        .args(["-object", &format!("memory-backend-ram,size={}M,id=m0", fast / MIB)])
        .args(["-object", &format!("memory-backend-ram,size={}M,id=m1", slow / MIB)])
        .args(["-numa", &format!("node,nodeid=0,cpus=0-{},memdev=m0,initiator=0", a.cpus - 1)])
        .args(["-numa", "node,nodeid=1,memdev=m1,initiator=0", "-numa", "dist,src=0,dst=1,val=20"]);
    for node in 0..2 {
        let (lat, bw) = (a.latency_ns[node], a.bandwidth_mbps[node]);
        q.args([
            "-numa",
            &format!("hmat-lb,initiator=0,target={node},hierarchy=memory,data-type=access-latency,latency={lat}"),
        ]);
        q.args([
            "-numa",
            &format!("hmat-lb,initiator=0,target={node},hierarchy=memory,data-type=access-bandwidth,bandwidth={bw}M"),
        ]);
    }
    q.arg("-kernel").arg(&kernel.vmlinuz).arg("-initrd").arg(initrd);
    q.args(["-append", &kernel_cmdline(fast, slow, kernel.needs_dax())]);
    q.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_one_is_soft_reserved_after_node_zero() {
        let c = kernel_cmdline(1 << 30, 1 << 30, true);
        assert!(c.contains("memmap=0x3fe00000%0x40000000-1+0xefffffff"), "{c}");
        assert!(!kernel_cmdline(1 << 30, 1 << 30, false).contains("memmap"));
    }
}
