//! The guest's kernel: the host's own (the newest `/boot/vmlinuz-*`, Debian 12's 6.1), a file,
//! or a Debian kernel fetched by version, such as bookworm-backports' 6.12, for what 6.1 lacks
//! (DAMON for virtual addresses, asynchronous write-protect and `PAGEMAP_SCAN`, `UFFDIO_MOVE`).
//!
//! A fetched kernel comes from the Debian archive through an apt configuration of Strata's own
//! under `build/vm/apt` (the system's sources are not touched): the newest
//! `linux-image-VERSION*-amd64-unsigned` of bookworm-backports, unpacked into
//! `build/vm/kernels/`, once. Its modules are xz-compressed; the dax modules node 1 needs are
//! unpacked with `xz` when the initramfs is written.
use std::path::{Path, PathBuf};
use std::process::Command;

use strata_util::io;

use crate::Error;

/// The modules that turn node 1's soft-reserved RAM into a memory node.
pub const DAX_MODULES: [&str; 3] = ["device_dax", "dax_hmem", "kmem"];

/// The suite fetched kernels come from.
const SUITE: &str = "bookworm-backports";

/// A kernel the guest can boot.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub vmlinuz: PathBuf,
    /// "6.1.0-27-amd64"
    pub version: String,
    /// its lib/modules/VERSION
    pub modules: PathBuf,
}

impl Kernel {
    /// The kernel of a vmlinuz file, its modules in /lib/modules or, for an unpacked package,
    /// beside it (PKG/boot/vmlinuz-V and PKG/lib/modules/V).
    fn of(vmlinuz: &Path) -> Kernel {
        let version =
            vmlinuz.file_name().unwrap_or_default().to_string_lossy().trim_start_matches("vmlinuz-").to_string();
        let system = PathBuf::from("/lib/modules").join(&version);
        let beside = vmlinuz.parent().and_then(|b| b.parent()).map(|pkg| pkg.join("lib/modules").join(&version));
        let modules = match beside {
            Some(b) if b.exists() && !system.exists() => b,
            _ => system,
        };
        Kernel { vmlinuz: vmlinuz.to_path_buf(), version, modules }
    }

    /// Whether node 1 must be soft-reserved and hot-added through dax/kmem to land in a lower
    /// memory tier: kernels before 6.7 put every node with memory in one tier; from 6.7 the
    /// kernel places a CPU-less node by its HMAT attributes (seen: 6.12 puts node 1 in
    /// memory_tier28, node 0 in memory_tier4), and node 1 can be plain RAM.
    pub fn needs_dax(&self) -> bool {
        let mut v = self.version.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse::<u32>().ok());
        (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (6, 7)
    }

    /// A dax module's file (`.ko`, or `.ko.xz` as newer Debian kernels ship them).
    pub fn module(&self, name: &str) -> Option<PathBuf> {
        let base = self.modules.join("kernel/drivers/dax");
        [base.clone(), base.join("hmem")]
            .into_iter()
            .flat_map(|d| [d.join(format!("{name}.ko")), d.join(format!("{name}.ko.xz"))])
            .find(|p| p.exists())
    }

    /// A dax module, uncompressed (busybox's insmod takes plain ELF only).
    pub fn module_bytes(&self, name: &str) -> Result<Vec<u8>, Error> {
        let p =
            self.module(name).ok_or_else(|| Error::Missing(format!("module {name}.ko for kernel {}", self.version)))?;
        if p.extension().is_some_and(|e| e == "xz") {
            let out =
                Command::new("xz").arg("-dc").arg(&p).output().map_err(io("running xz (apt-get install xz-utils)"))?;
            if !out.status.success() {
                return Err(Error::Invalid(format!(
                    "xz -dc {}: {}",
                    p.display(),
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            return Ok(out.stdout);
        }
        Ok(std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?)
    }
}

/// The newest /boot/vmlinuz-*.
pub fn newest_installed() -> Option<Kernel> {
    let mut ks: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    ks.sort();
    ks.pop().map(|k| Kernel::of(&k))
}

/// Where fetched kernels are unpacked, and Strata's own apt state.
fn vm_dir() -> PathBuf {
    let root = strata_util::repo_root();
    std::fs::canonicalize(&root).unwrap_or(root).join("build/vm")
}

/// A kernel already fetched whose version starts with `prefix` (the newest).
fn fetched(prefix: &str) -> Option<Kernel> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(vm_dir().join("kernels"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("boot"))
        .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("vmlinuz-{prefix}"))))
        .collect();
    found.sort();
    found.pop().map(|k| Kernel::of(&k))
}

/// `apt-get` or `apt-cache` with Strata's own sources and state (bookworm-backports only).
fn apt(tool: &str, dir: &Path) -> Command {
    let mut c = Command::new(tool);
    for (k, v) in [
        ("Dir::Etc::SourceList", dir.join("sources.list")),
        ("Dir::Etc::SourceParts", PathBuf::from("/dev/null")),
        ("Dir::State::Lists", dir.join("lists")),
        ("Dir::Cache", dir.join("cache")),
    ] {
        c.arg("-o").arg(format!("{k}={}", v.display()));
    }
    c.args(["-o", "Debug::NoLocking=1", "-q"]);
    c
}

fn run(mut c: Command, what: &str) -> Result<String, Error> {
    let out = c.output().map_err(io(format!("running {what}")))?;
    if !out.status.success() {
        return Err(Error::Missing(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fetch the newest `linux-image-PREFIX*-amd64-unsigned` of bookworm-backports and unpack it.
pub fn fetch(prefix: &str, progress: &dyn Fn(&str)) -> Result<Kernel, Error> {
    let dir = vm_dir().join("apt");
    for d in ["lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(d)).map_err(io(format!("creating {}", dir.join(d).display())))?;
    }
    std::fs::write(dir.join("sources.list"), format!("deb http://deb.debian.org/debian {SUITE} main\n"))
        .map_err(io("writing build/vm/apt/sources.list"))?;
    progress(&format!("fetching the package list of {SUITE}"));
    let mut update = apt("apt-get", &dir);
    update.arg("update");
    run(update, "apt-get update (Strata's own sources: build/vm/apt)")?;
    let mut search = apt("apt-cache", &dir);
    search.args(["search", "--names-only", &format!("^linux-image-{}.*-amd64-unsigned$", regex_escape(prefix))]);
    // the generic flavour: not -rt- (PREEMPT_RT) nor -cloud-
    let mut names: Vec<String> = run(search, "apt-cache search")?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|n| !n.contains("-rt-") && !n.contains("-cloud-"))
        .collect();
    names.sort_by_key(|n| version_key(n));
    let name =
        names.pop().ok_or_else(|| Error::Missing(format!("no linux-image-{prefix}*-amd64-unsigned in {SUITE}")))?;
    progress(&format!("downloading {name}"));
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).map_err(io(format!("creating {}", debs.display())))?;
    let mut download = apt("apt-get", &dir);
    download.current_dir(&debs).args(["download", &name]);
    run(download, &format!("apt-get download {name}"))?;
    let deb = std::fs::read_dir(&debs)
        .map_err(io(format!("reading {}", debs.display())))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}_"))))
        .ok_or_else(|| Error::Missing(format!("apt-get download left no {name}_*.deb in {}", debs.display())))?;
    let version = name.trim_start_matches("linux-image-").trim_end_matches("-unsigned").to_string();
    let into = vm_dir().join("kernels").join(&version);
    std::fs::create_dir_all(&into).map_err(io(format!("creating {}", into.display())))?;
    let mut unpack = Command::new("dpkg-deb");
    unpack.arg("-x").arg(&deb).arg(&into);
    run(unpack, &format!("dpkg-deb -x {}", deb.display()))?;
    let _ = std::fs::remove_file(&deb);
    fetched(&version).ok_or_else(|| Error::Missing(format!("{} holds no boot/vmlinuz-{version}", into.display())))
}

/// "linux-image-6.12.95+deb12-amd64-unsigned" -> [6, 12, 95, 12]: versions compare as numbers.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse().ok()).collect()
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_string() } else { format!("\\{c}") }).collect()
}

/// The kernel `spec` names: none, the newest installed; a file; or a version prefix ("6.12"),
/// fetched from Debian the first time.
pub fn find(spec: Option<&str>, progress: &dyn Fn(&str)) -> Result<Kernel, Error> {
    match spec {
        None => newest_installed()
            .ok_or_else(|| Error::Missing("no kernel in /boot (apt-get install linux-image-amd64)".into())),
        Some(s) if Path::new(s).is_file() => Ok(Kernel::of(Path::new(s))),
        Some(s) if s.contains('/') => Err(Error::Invalid(format!("--kernel {s}: no such file"))),
        Some(s) => match fetched(s) {
            Some(k) => Ok(k),
            None => fetch(s, progress),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_versions_compare_as_numbers() {
        let mut v = ["linux-image-6.12.9+deb12-amd64-unsigned", "linux-image-6.12.95+deb12-amd64-unsigned"];
        v.sort_by_key(|n| version_key(n));
        assert_eq!(v[1], "linux-image-6.12.95+deb12-amd64-unsigned");
        assert_eq!(regex_escape("6.12"), "6\\.12");
    }

    #[test]
    fn an_unpacked_package_has_its_modules_beside_its_kernel() {
        let dir = std::env::temp_dir().join(format!("strata-kernel-{}", std::process::id()));
        let v = "9.9.9-test-amd64";
        std::fs::create_dir_all(dir.join("boot")).unwrap();
        std::fs::create_dir_all(dir.join(format!("lib/modules/{v}/kernel/drivers/dax/hmem"))).unwrap();
        std::fs::write(dir.join(format!("boot/vmlinuz-{v}")), b"").unwrap();
        std::fs::write(dir.join(format!("lib/modules/{v}/kernel/drivers/dax/hmem/dax_hmem.ko.xz")), b"").unwrap();
        let k = Kernel::of(&dir.join(format!("boot/vmlinuz-{v}")));
        assert_eq!(k.version, v);
        assert!(!k.needs_dax());
        assert!(Kernel { version: "6.1.0-27-amd64".into(), ..k.clone() }.needs_dax());
        assert!(!Kernel { version: "6.12.95+deb12-amd64".into(), ..k.clone() }.needs_dax());
        assert!(k.module("dax_hmem").unwrap().ends_with("hmem/dax_hmem.ko.xz"));
        assert!(k.module("kmem").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
