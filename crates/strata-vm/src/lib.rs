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
pub mod qemu;
pub mod supervise;

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
    /// (TPP-style promotion), with 100 ms scan periods so it acts within seconds
    #[arg(long)]
    pub kernel_tiering: bool,
    /// Copy a host file into the guest at the same absolute path (repeatable)
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// Seconds before the guest is killed and the run reported as timed out
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// The guest kernel (default: the newest /boot/vmlinuz-*)
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Print the guest's boot console too (it is always printed when the boot fails)
    #[arg(long, short)]
    pub verbose: bool,
    /// The command to run in the guest, and its arguments
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

const MIB: u64 = 1 << 20;
/// The modules that turn node 1's soft-reserved RAM into a memory node.
pub const DAX_MODULES: [&str; 3] = ["device_dax", "dax_hmem", "kmem"];

/// The newest /boot/vmlinuz-*.
pub fn newest_kernel() -> Option<PathBuf> {
    let mut ks: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    ks.sort();
    ks.pop()
}

/// "6.1.0-27-amd64" of /boot/vmlinuz-6.1.0-27-amd64.
pub fn kernel_version(k: &Path) -> String {
    k.file_name().unwrap_or_default().to_string_lossy().trim_start_matches("vmlinuz-").to_string()
}

/// A dax module of a kernel version.
pub fn module_path(version: &str, name: &str) -> Option<PathBuf> {
    let base = PathBuf::from(format!("/lib/modules/{version}/kernel/drivers/dax"));
    [base.join(format!("{name}.ko")), base.join("hmem").join(format!("{name}.ko"))].into_iter().find(|p| p.exists())
}

/// What is missing to boot the guest, as sentences (empty when nothing).
pub fn missing_tools(kernel: Option<&Path>) -> Vec<String> {
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
    match kernel.map(Path::to_path_buf).or_else(newest_kernel) {
        None => m.push("no kernel in /boot (apt-get install linux-image-amd64)".into()),
        Some(k) => {
            if std::fs::File::open(&k).is_err() {
                m.push(format!("{} is not readable", k.display()));
            }
            let v = kernel_version(&k);
            for md in DAX_MODULES {
                if module_path(&v, md).is_none() {
                    m.push(format!("module {md}.ko for kernel {v} not found under /lib/modules/{v}"));
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
    let kernel = a
        .kernel
        .clone()
        .or_else(newest_kernel)
        .ok_or_else(|| Error::Missing("no kernel in /boot (apt-get install linux-image-amd64)".into()))?;
    let missing = missing_tools(Some(&kernel));
    if !missing.is_empty() {
        return Err(Error::Missing(missing.join("; ")));
    }
    check_memory(a)?;
    let dir = std::env::temp_dir().join(format!("strata-vm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let result = (|| {
        let initrd = initramfs::write(a, &kernel_version(&kernel), &dir)?;
        let child = qemu::command(a, &kernel, &initrd).spawn().map_err(io("starting qemu-system-x86_64"))?;
        supervise::follow(child, a.timeout, a.verbose)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
