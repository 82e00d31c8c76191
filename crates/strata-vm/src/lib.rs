//! `strata vm`: a real two-tier Linux machine in QEMU, for end-to-end placement tests.
//!
//! The guest boots Debian's kernel under software emulation (TCG) with node 0 (the CPUs and
//! `--fast-mem` of RAM) and node 1 (`--slow-mem`, no CPUs). Node 1's RAM is marked
//! soft-reserved on the kernel command line and hot-added through dax/kmem, which puts it in
//! a lower kernel memory tier. HMAT gives both nodes a latency and bandwidth. Timing inside the
//! guest means nothing (everything is emulated); behaviour does.
//!
//! A run, step by step ([`run`]): find the kernel and its dax modules ([`missing_tools`]),
//! write the initramfs ([`initramfs`]: busybox, this `strata` binary, `--file` paths, an init
//! script that onlines node 1 and runs the command), start QEMU ([`qemu`]), and follow the
//! console until the command's exit status comes back ([`supervise`]).
mod cpio;
pub mod initramfs;
pub mod kernel;
pub mod qemu;
pub mod supervise;

pub use kernel::{Kernel, DAX_MODULES};

use std::path::{Path, PathBuf};
use std::process::Command;

use strata_util::{io, size};

/// What can go wrong with the guest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Arguments the guest cannot be built from.
    #[error("{0}")]
    Invalid(String),
    /// This machine lacks something the guest needs (the message says what to install).
    #[error("cannot boot the guest: {0}")]
    Missing(String),
    /// A file could not be read or written, or QEMU not started.
    #[error(transparent)]
    Io(#[from] strata_util::IoError),
    /// The guest did not boot, or stopped or timed out before the command finished; with the
    /// console's last lines.
    #[error("{0}")]
    Guest(String),
    /// The guest's kernel panicked before the command started (with the console's last lines):
    /// nothing of the command ran, so booting again is safe.
    #[error("the guest's kernel panicked while booting; console:\n{0}")]
    Panicked(String),
}

/// The guest's shape and the command to run in it.
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// RAM of node 0 (CPUs, fast tier); a multiple of 128M
    #[arg(long, default_value = "1G", value_parser = size::parse)]
    pub fast_mem: u64,
    /// RAM of node 1 (CPU-less, slow tier); a multiple of 128M; fast + slow <= 3G
    #[arg(long, default_value = "1G", value_parser = size::parse)]
    pub slow_mem: u64,
    /// Virtual CPUs (all on node 0)
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// HMAT read/write latency of node 0 and node 1, in ns
    #[arg(long, default_value = "100,250", value_delimiter = ',', num_args = 2)]
    pub latency_ns: Vec<u32>,
    /// HMAT bandwidth of node 0 and node 1, in MB/s
    #[arg(long, default_value = "20480,8192", value_delimiter = ',', num_args = 2)]
    pub bandwidth_mbps: Vec<u32>,
    /// Switch on the kernel's own tiering in the guest: demotion and numa_balancing=2
    /// (TPP-style promotion), with 100 ms scan periods so it acts within seconds (without it,
    /// numa_balancing=0: the kernel moves no page between the nodes)
    #[arg(long)]
    pub kernel_tiering: bool,
    /// Copy a host file into the guest at the same absolute path (repeatable)
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// Seconds before the guest is killed and the run reported as timed out
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// The guest kernel: a vmlinuz file, or a Debian version to fetch once from
    /// bookworm-backports into build/vm/kernels (e.g. 6.12) [default: the newest
    /// /boot/vmlinuz-*]
    #[arg(long, value_name = "FILE|VERSION")]
    pub kernel: Option<String>,
    /// Print the guest's boot console too (it is always printed when the boot fails)
    #[arg(long, short)]
    pub verbose: bool,
    /// The command to run in the guest, and its arguments
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

const MIB: u64 = 1 << 20;

/// What is missing to boot the guest with `kernel` (the newest installed when None), as
/// sentences (empty when nothing).
pub fn missing_tools(kernel: Option<&Kernel>) -> Vec<String> {
    let mut m = Vec::new();
    let have = |c: &str| {
        Command::new("sh").args(["-c", &format!("command -v {c}")]).output().is_ok_and(|o| o.status.success())
    };
    if !have("qemu-system-x86_64") {
        m.push("qemu-system-x86_64 not found (apt-get install qemu-system-x86)".into());
    }
    if !Path::new("/bin/busybox").exists() {
        m.push("/bin/busybox not found (apt-get install busybox-static)".into());
    }
    match kernel.cloned().or_else(kernel::newest_installed) {
        None => m.push("no kernel in /boot (apt-get install linux-image-amd64)".into()),
        Some(k) => {
            if std::fs::File::open(&k.vmlinuz).is_err() {
                m.push(format!("{} is not readable", k.vmlinuz.display()));
            }
            for md in DAX_MODULES.iter().filter(|_| k.needs_dax()) {
                if k.module(md).is_none() {
                    m.push(format!("module {md}.ko for kernel {} not found under {}", k.version, k.modules.display()));
                }
            }
        }
    }
    m
}

fn check_memory(a: &Options) -> Result<(), Error> {
    let (fast, slow) = (a.fast_mem, a.slow_mem);
    if fast % (128 * MIB) != 0 || slow % (128 * MIB) != 0 || fast < 256 * MIB || slow < 256 * MIB {
        return Err(Error::Invalid("--fast-mem and --slow-mem must be multiples of 128M, at least 256M".into()));
    }
    if fast + slow > 3 << 30 {
        return Err(Error::Invalid(
            "--fast-mem + --slow-mem must be at most 3G (guest RAM must stay below the PCI hole)".into(),
        ));
    }
    Ok(())
}

/// Boot the guest, run the command in it, and return the command's exit status.
pub fn run(a: &Options) -> Result<i32, Error> {
    let kernel = kernel::find(a.kernel.as_deref(), &|m| eprintln!("[vm] {m}"))?;
    let missing = missing_tools(Some(&kernel));
    if !missing.is_empty() {
        return Err(Error::Missing(missing.join("; ")));
    }
    check_memory(a)?;
    let dir = std::env::temp_dir().join(format!("strata-vm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let result = (|| {
        let initrd = initramfs::write(a, &kernel, &dir)?;
        let boot = || {
            let child = qemu::command(a, &kernel, &initrd).spawn().map_err(io("starting qemu-system-x86_64"))?;
            supervise::follow(child, a.timeout, a.verbose)
        };
        match boot() {
            // under TCG a guest kernel now and then oopses while it boots (an int3 of its own
            // code patching, seen once in a full guest suite): once, it boots again
            Err(Error::Panicked(console)) => {
                eprintln!("[vm] the guest's kernel panicked while booting, before the command ran; booting it again");
                if a.verbose {
                    eprintln!("{console}");
                }
                boot()
            }
            r => r,
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
