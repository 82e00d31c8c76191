//! `strata vm`: a real two-tier Linux machine in QEMU, for end-to-end placement tests.
//!
//! The guest boots Debian's kernel under software emulation (TCG) with node 0 (the CPUs and
//! `--fast-mem` of RAM) and node 1 (`--slow-mem`, no CPUs). Node 1's RAM is marked
//! soft-reserved on the kernel command line and hot-added through dax/kmem, which puts it in
//! a lower kernel memory tier (memory_tier22 under memory_tier4). HMAT gives both nodes a
//! latency and bandwidth. The initramfs holds busybox, this `strata` binary, the files given
//! with `--file` (at the same absolute paths, with the shared libraries they need) and the
//! dax modules. The command runs as root in the guest; its output streams to stdout and its
//! exit status becomes ours. Timing inside the guest means nothing (everything is emulated);
//! behaviour does.
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::output::parse_size;

#[derive(clap::Subcommand)]
pub enum VmCommand {
    /// Boot the two-tier guest and run CMD in it; exits with CMD's status
    Run(RunArgs),
    /// Say whether this machine can run the guest, and what is missing
    Check,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// RAM of node 0 (CPUs, fast tier); a multiple of 128M
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    fast_mem: u64,
    /// RAM of node 1 (CPU-less, slow tier); a multiple of 128M; fast + slow <= 3G
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    slow_mem: u64,
    /// Virtual CPUs (all on node 0)
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// HMAT read/write latency of node 0 and node 1, in ns
    #[arg(long, default_value = "100,250", value_delimiter = ',', num_args = 2)]
    latency_ns: Vec<u32>,
    /// HMAT bandwidth of node 0 and node 1, in MB/s
    #[arg(
        long,
        default_value = "20480,8192",
        value_delimiter = ',',
        num_args = 2
    )]
    bandwidth_mbps: Vec<u32>,
    /// Switch on the kernel's own tiering in the guest: demotion and numa_balancing=2
    /// (TPP-style promotion), with 100 ms scan periods so it acts within seconds
    #[arg(long)]
    kernel_tiering: bool,
    /// Copy a host file into the guest at the same absolute path (repeatable)
    #[arg(long = "file", value_name = "PATH")]
    files: Vec<PathBuf>,
    /// Seconds before the guest is killed and the run reported as timed out
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The guest kernel (default: the newest /boot/vmlinuz-*)
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// Print the guest's boot console too (it is always printed when the boot fails)
    #[arg(long, short)]
    verbose: bool,
    /// The command to run in the guest, and its arguments
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub fn run(c: VmCommand) -> anyhow::Result<i32> {
    match c {
        VmCommand::Check => {
            let missing = missing_tools(None);
            if missing.is_empty() {
                crate::output::emit("the two-tier guest can run here\n")?;
                Ok(0)
            } else {
                crate::output::emit(&format!(
                    "the guest cannot run here: {}\n",
                    missing.join("; ")
                ))?;
                Ok(1)
            }
        }
        VmCommand::Run(a) => run_guest(a),
    }
}

const MIB: u64 = 1 << 20;
const DAX_MODULES: [&str; 3] = ["device_dax", "dax_hmem", "kmem"];

fn newest_kernel() -> Option<PathBuf> {
    let mut ks: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    ks.sort();
    ks.pop()
}

fn kernel_version(k: &Path) -> String {
    k.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .trim_start_matches("vmlinuz-")
        .to_string()
}

fn module_path(version: &str, name: &str) -> Option<PathBuf> {
    let base = PathBuf::from(format!("/lib/modules/{version}/kernel/drivers/dax"));
    [
        base.join(format!("{name}.ko")),
        base.join("hmem").join(format!("{name}.ko")),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// What is missing to boot the guest, as sentences ("" when nothing).
pub fn missing_tools(kernel: Option<&Path>) -> Vec<String> {
    let mut m = Vec::new();
    let have = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
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
                    m.push(format!(
                        "module {md}.ko for kernel {v} not found under /lib/modules/{v}"
                    ));
                }
            }
        }
    }
    m
}

/// A cpio "newc" archive, the format the kernel unpacks as its initramfs.
struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    fn new() -> Cpio {
        Cpio {
            out: Vec::new(),
            ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let hdr =
            format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino, mode, 0, 0, 1, 0, data.len(), 0, 0, rdev.0, rdev.1, name.len() + 1, 0
        );
        self.ino += 1;
        self.out.extend_from_slice(hdr.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn dir(&mut self, path: &str) {
        let mut cur = String::new();
        for part in path.trim_matches('/').split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(part);
            if self.dirs.insert(cur.clone()) {
                let c = cur.clone();
                self.entry(&c, 0o040755, (0, 0), &[]);
            }
        }
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | mode, (0, 0), data);
    }

    fn symlink(&mut self, path: &str, target: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o120777, (0, 0), target.as_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
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

/// Add a host file at its own path, following a symlink to what it names.
fn add_host_file(
    cpio: &mut Cpio,
    path: &Path,
    added: &mut BTreeSet<PathBuf>,
) -> anyhow::Result<()> {
    if !added.insert(path.to_path_buf()) {
        return Ok(());
    }
    let data =
        std::fs::read(path).with_context(|| format!("reading {} for the guest", path.display()))?;
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)?.permissions().mode() & 0o7777
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

const READY: &str = "STRATA-VM-READY";
const EXIT: &str = "STRATA-VM-EXIT";

fn init_script(kernel_tiering: bool) -> String {
    let mut s = String::from(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin
# no tmpfs on /tmp: the initramfs is already writable, and a mount there would hide --file
# paths under /tmp (a clone in /tmp/...)
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
fail() { echo "STRATA-VM-SETUP-FAILED: $*"; poweroff -f; }
for m in device_dax dax_hmem kmem; do insmod /lib/modules/strata/$m.ko || fail "insmod $m"; done
[ -e /sys/bus/dax/devices/dax0.0 ] || fail "no dax0.0: the soft-reserved range was not found (memmap)"
echo dax0.0 > /sys/bus/dax/drivers/device_dax/unbind || fail "unbind dax0.0"
echo dax0.0 > /sys/bus/dax/drivers/kmem/new_id || fail "kmem new_id"
for b in /sys/devices/system/memory/memory*; do
  [ "$(cat $b/state)" = offline ] && { echo online_movable > $b/state || fail "online $b"; }
done
[ "$(cat /sys/devices/system/node/has_memory)" = "0-1" ] || fail "node 1 has no memory"
"#,
    );
    if kernel_tiering {
        s += r#"echo true > /sys/kernel/mm/numa/demotion_enabled || fail "demotion_enabled"
echo 2 > /proc/sys/kernel/numa_balancing || fail "numa_balancing=2"
mount -t debugfs debugfs /sys/kernel/debug
for k in scan_delay_ms scan_period_min_ms; do echo 100 > /sys/kernel/debug/sched/numa_balancing/$k; done
"#;
    }
    s += &format!("echo {READY}\ncd /tmp\n/bin/sh /strata-cmd\necho \"{EXIT} $?\"\npoweroff -f\n");
    s
}

fn run_guest(a: RunArgs) -> anyhow::Result<i32> {
    let kernel = a
        .kernel
        .clone()
        .or_else(newest_kernel)
        .context("no kernel in /boot (apt-get install linux-image-amd64)")?;
    let missing = missing_tools(Some(&kernel));
    if !missing.is_empty() {
        bail!("cannot boot the guest: {}", missing.join("; "));
    }
    let (fast, slow) = (a.fast_mem, a.slow_mem);
    if fast % (128 * MIB) != 0 || slow % (128 * MIB) != 0 || fast < 256 * MIB || slow < 256 * MIB {
        bail!("--fast-mem and --slow-mem must be multiples of 128M, at least 256M");
    }
    if fast + slow > 3 << 30 {
        bail!(
            "--fast-mem + --slow-mem must be at most 3G (guest RAM must stay below the PCI hole)"
        );
    }
    let version = kernel_version(&kernel);

    let mut cpio = Cpio::new();
    for d in ["/proc", "/sys", "/dev", "/tmp", "/sbin", "/usr/bin"] {
        cpio.dir(d);
    }
    cpio.entry("/dev/console", 0o020600, (5, 1), &[]);
    cpio.file("/init", 0o755, init_script(a.kernel_tiering).as_bytes());
    let mut added = BTreeSet::new();
    add_host_file(&mut cpio, Path::new("/bin/busybox"), &mut added)?;
    let me = std::env::current_exe().context("finding the strata binary")?;
    let me_data = std::fs::read(&me)?;
    cpio.file("/bin/strata", 0o755, &me_data);
    for lib in libraries(&me) {
        add_host_file(&mut cpio, &lib, &mut added)?;
    }
    for md in DAX_MODULES {
        let p = module_path(&version, md).expect("checked above");
        cpio.file(
            &format!("/lib/modules/strata/{md}.ko"),
            0o644,
            &std::fs::read(&p)?,
        );
    }
    for f in &a.files {
        let abs = std::fs::canonicalize(f).with_context(|| format!("--file {}", f.display()))?;
        add_host_file(&mut cpio, &abs, &mut added)?;
    }
    let cmd: Vec<String> = a.command.iter().map(|s| shell_quote(s)).collect();
    cpio.file(
        "/strata-cmd",
        0o755,
        format!("{}\n", cmd.join(" ")).as_bytes(),
    );

    let dir = std::env::temp_dir().join(format!("strata-vm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let initrd = dir.join("initramfs.cpio");
    std::fs::write(&initrd, cpio.finish())?;

    // node 1's RAM (except its last 2 MiB, which the firmware partly uses) becomes
    // soft-reserved (type 0xefffffff) so dax_hmem claims it; 2 MiB aligned
    let append = format!(
        "console=ttyS0 panic=-1 quiet loglevel=3 memmap={:#x}%{:#x}-1+0xefffffff memmap=0x1e0000%{:#x}-1+2",
        slow - 2 * MIB,
        fast,
        fast + slow - 2 * MIB
    );
    let (l0, l1) = (a.latency_ns[0], a.latency_ns[1]);
    let (b0, b1) = (a.bandwidth_mbps[0], a.bandwidth_mbps[1]);
    let mut q = Command::new("qemu-system-x86_64");
    q.args([
        "-accel",
        "tcg,thread=multi",
        "-machine",
        "pc,hmat=on",
        "-nographic",
        "-no-reboot",
    ])
    .args([
        "-m",
        &format!("{}M", (fast + slow) / MIB),
        "-smp",
        &a.cpus.to_string(),
    ])
    .args([
        "-object",
        &format!("memory-backend-ram,size={}M,id=m0", fast / MIB),
    ])
    .args([
        "-object",
        &format!("memory-backend-ram,size={}M,id=m1", slow / MIB),
    ])
    .args([
        "-numa",
        &format!("node,nodeid=0,cpus=0-{},memdev=m0,initiator=0", a.cpus - 1),
    ])
    .args([
        "-numa",
        "node,nodeid=1,memdev=m1,initiator=0",
        "-numa",
        "dist,src=0,dst=1,val=20",
    ]);
    for (node, lat, bw) in [(0, l0, b0), (1, l1, b1)] {
        q.args(["-numa", &format!("hmat-lb,initiator=0,target={node},hierarchy=memory,data-type=access-latency,latency={lat}")]);
        q.args(["-numa", &format!("hmat-lb,initiator=0,target={node},hierarchy=memory,data-type=access-bandwidth,bandwidth={bw}M")]);
    }
    q.arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", &append]);
    q.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());

    let started = Instant::now();
    let mut child = q.spawn().context("starting qemu-system-x86_64")?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            let _ = tx.send(
                String::from_utf8_lossy(&line)
                    .trim_end_matches('\r')
                    .to_string(),
            );
        }
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("qemu: {line}"));
        }
    });

    let deadline = started + Duration::from_secs(a.timeout);
    let mut console = Vec::new();
    let mut booted = None;
    let mut status = None;
    let mut out = std::io::stdout().lock();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix(EXIT) {
                    status = rest.trim().parse::<i32>().ok();
                } else if line.contains(READY) && booted.is_none() {
                    booted = Some(started.elapsed());
                    if a.verbose {
                        eprintln!("[vm] booted in {:.1} s", started.elapsed().as_secs_f64());
                    }
                } else if booted.is_some() && status.is_none() {
                    writeln!(out, "{line}")?;
                } else {
                    if a.verbose {
                        eprintln!("[vm console] {line}");
                    }
                    console.push(line);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = std::fs::remove_dir_all(&dir);
                    bail!(
                        "the guest timed out after {} s ({}); console:\n{}",
                        a.timeout,
                        if booted.is_some() {
                            "the command did not finish"
                        } else {
                            "it did not finish booting"
                        },
                        tail(&console)
                    );
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    out.flush()?;
    match (booted, status) {
        (Some(t), Some(rc)) => {
            eprintln!(
                "[vm] guest booted in {:.1} s, ran for {:.1} s in all, command exited {rc}",
                t.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
            Ok(rc)
        }
        (None, _) => bail!("the guest did not boot; console:\n{}", tail(&console)),
        (Some(_), None) => bail!(
            "the guest stopped before the command finished; console:\n{}",
            tail(&console)
        ),
    }
}

fn tail(lines: &[String]) -> String {
    let n = lines.len().saturating_sub(40);
    lines[n..].join("\n")
}
