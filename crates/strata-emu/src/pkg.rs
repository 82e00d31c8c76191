//! Real programs for the emulated machine: Debian's source packages, built unmodified with
//! the emulator's instrumentation (`strata emu cc`).
//!
//! `build` fetches the source package of the running Debian release through an apt
//! configuration of its own (build/emu-pkg/.apt: a `deb-src` entry, its own lists and cache;
//! the system's apt configuration is not touched), unpacks the upstream (`.orig`) tarball,
//! builds it with a [`Recipe`] and keeps the binaries and a record of the exact versions in
//! build/emu-pkg/NAME/. A package built once is reused.
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::Error;

/// How one program is built from its upstream sources.
pub struct Recipe {
    /// the name users give (and the Debian source package's)
    pub name: &'static str,
    pub about: &'static str,
    /// the binaries kept, relative to the unpacked source tree
    pub binaries: &'static [&'static str],
    /// the build's commands, run in the source tree
    steps: fn(&Tools) -> Vec<Vec<String>>,
}

/// What a recipe builds with.
pub struct Tools {
    /// the emulator's compilers as commands: `strata emu cc` and `strata emu c++`
    pub cc: Vec<String>,
    pub cxx: Vec<String>,
    /// parallel jobs for make
    pub jobs: usize,
}

impl Tools {
    /// The compiler as one word list for make's CC=... and configure's.
    fn cc_var(&self) -> String {
        format!("CC={}", self.cc.join(" "))
    }

    /// `strata emu c++ ARGS`
    fn cxx(&self, args: &[&str]) -> Vec<String> {
        self.cxx.iter().cloned().chain(words(args)).collect()
    }
}

fn words(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

/// The programs `strata emu pkg build` knows.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "redis",
        about: "Redis server (Nomad's YCSB experiment), libc malloc so that libstrata can be preloaded",
        binaries: &["src/redis-server"],
        steps: |t| {
            let mut make = words(&["make", &format!("-j{}", t.jobs), "MALLOC=libc", "USE_SYSTEMD=no", "BUILD_TLS=no"]);
            make.extend([t.cc_var(), "redis-server".into()]);
            vec![make]
        },
    },
    Recipe {
        name: "memcached",
        about: "memcached (dram-first's key-value store); needs libevent's headers (libevent-dev)",
        binaries: &["memcached"],
        steps: |t| {
            vec![
                words(&["./configure", &t.cc_var(), "--disable-docs", "--disable-coverage"]),
                words(&["make", &format!("-j{}", t.jobs), "memcached"]),
            ]
        },
    },
    Recipe {
        name: "liblinear",
        about: "LIBLINEAR's train and predict (Nomad's machine-learning workload); Debian's upstream \
                tarball leaves out the bundled BLAS, so its Makefile's rules are run by hand against \
                the system's libblas.so.3 (libblas3), whose accesses are not counted",
        binaries: &["train", "predict"],
        steps: |t| {
            let flags = ["-O3", "-Wall", "-fPIC"];
            let compile = |out: &str, src: &str| t.cxx(&[&flags[..], &["-c", "-o", out, src]].concat());
            let link = |out: &str, src: &str| {
                t.cxx(&[&flags[..], &["-o", out, src, "tron.o", "linear.o", "-l:libblas.so.3"]].concat())
            };
            vec![
                compile("tron.o", "tron.cpp"),
                compile("linear.o", "linear.cpp"),
                link("train", "train.c"),
                link("predict", "predict.c"),
            ]
        },
    },
];

/// The recipe called `name`, or an error that lists the known ones.
pub fn recipe(name: &str) -> Result<&'static Recipe, Error> {
    RECIPES.iter().find(|r| r.name == name).ok_or_else(|| {
        let known: Vec<&str> = RECIPES.iter().map(|r| r.name).collect();
        Error::Invalid(format!("no recipe for a package called {name:?}: strata emu pkg builds {}", known.join(", ")))
    })
}

/// What a build left in build/emu-pkg/NAME/package.json.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Built {
    pub name: String,
    /// the Debian source package's version (epoch:upstream-revision)
    pub debian_version: String,
    /// the upstream release the binaries were built from
    pub upstream_version: String,
    /// the Debian release whose sources were fetched
    pub release: String,
    pub date: String,
    /// absolute paths of the instrumented binaries
    pub binaries: Vec<PathBuf>,
}

impl Built {
    /// "redis 7.0.15 (Debian 5:7.0.15-1~deb12u7)": how reports name the program.
    pub fn program(&self) -> String {
        format!("{} {} (Debian {})", self.name, self.upstream_version, self.debian_version)
    }

    /// The binary whose file name is `file`.
    pub fn binary(&self, file: &str) -> Result<&Path, Error> {
        self.binaries
            .iter()
            .find(|b| b.file_name().is_some_and(|f| f == file))
            .map(PathBuf::as_path)
            .ok_or_else(|| Error::Failed(format!("{} has no binary {file}", self.name)))
    }
}

/// Where packages are built: $STRATA_EMU_PKG_DIR, or build/emu-pkg in the repository.
pub fn root() -> PathBuf {
    std::env::var_os("STRATA_EMU_PKG_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let repo = strata_util::repo_root();
        repo.canonicalize().unwrap_or(repo).join("build/emu-pkg")
    })
}

fn record_path(name: &str) -> PathBuf {
    root().join(name).join("package.json")
}

/// The packages built so far, by name.
pub fn list() -> Result<Vec<Built>, Error> {
    let mut out = Vec::new();
    for r in RECIPES {
        if let Some(b) = built(r.name)? {
            out.push(b);
        }
    }
    Ok(out)
}

/// The build of `name` when it is there with all its binaries.
pub fn built(name: &str) -> Result<Option<Built>, Error> {
    let path = record_path(name);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let b: Built = serde_json::from_str(&text)
        .map_err(|e| Error::Failed(format!("{}: {e} (remove it to rebuild)", path.display())))?;
    Ok(b.binaries.iter().all(|p| p.is_file()).then_some(b))
}

/// The build of `name`, or an error that says how to make it.
pub fn require(name: &str) -> Result<Built, Error> {
    recipe(name)?;
    built(name)?.ok_or_else(|| {
        Error::Failed(format!("{name} is not built for the emulated machine: run `strata emu pkg build {name}`"))
    })
}

/// The codename of the running Debian release (VERSION_CODENAME in /etc/os-release), or
/// $STRATA_DEBIAN_RELEASE.
pub fn release() -> Result<String, Error> {
    if let Ok(r) = std::env::var("STRATA_DEBIAN_RELEASE") {
        return Ok(r);
    }
    let text = std::fs::read_to_string("/etc/os-release").map_err(strata_util::io("reading /etc/os-release"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::Failed("/etc/os-release names no VERSION_CODENAME: set STRATA_DEBIAN_RELEASE".into()))
}

/// The upstream part of a Debian version: no epoch, no Debian revision.
pub fn upstream_version(debian: &str) -> &str {
    let v = debian.split_once(':').map_or(debian, |(_, v)| v);
    v.rsplit_once('-').map_or(v, |(u, _)| u)
}

/// The last lines of a log, for an error message.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `cmd`, appending its output to `log`; an error with the log's tail when it fails.
fn logged(mut cmd: Command, what: &str, log: &Path) -> Result<(), Error> {
    use std::io::Write;
    let out = cmd.output().map_err(strata_util::io(format!("running {what}")))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(strata_util::io(format!("writing {}", log.display())))?;
    let _ = writeln!(f, "$ {what}");
    let _ = f.write_all(&out.stdout);
    let _ = f.write_all(&out.stderr);
    if out.status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    Err(Error::Failed(format!(
        "{what} failed ({}); the log's end:\n{}\n(whole log: {})",
        out.status,
        tail(&text, 25),
        log.display()
    )))
}

/// apt-get with the build's own configuration: a deb-src entry for `release`, lists and cache
/// under `apt`.
/// Where sources come from: $STRATA_DEBIAN_MIRROR, or Debian's own mirror.
fn mirror() -> String {
    std::env::var("STRATA_DEBIAN_MIRROR").unwrap_or_else(|_| "http://deb.debian.org/debian".into())
}

fn apt_get(apt: &Path, release: &str) -> Result<Command, Error> {
    let mirror = mirror();
    std::fs::create_dir_all(apt.join("lists/partial"))
        .map_err(strata_util::io(format!("creating {}", apt.display())))?;
    std::fs::create_dir_all(apt.join("cache/archives/partial")).map_err(strata_util::io("creating apt's cache"))?;
    let sources = apt.join("sources.list");
    std::fs::write(&sources, format!("deb-src {mirror} {release} main\n"))
        .map_err(strata_util::io(format!("writing {}", sources.display())))?;
    let mut c = Command::new("apt-get");
    c.arg("-q")
        .arg(format!("-oDir::Etc::SourceList={}", sources.display()))
        .arg("-oDir::Etc::SourceParts=/dev/null")
        .arg(format!("-oDir::State::Lists={}", apt.join("lists").display()))
        .arg(format!("-oDir::Cache={}", apt.join("cache").display()))
        .arg("-oAPT::Sandbox::User=root");
    Ok(c)
}

/// Fetches and builds `name` (or returns the build already there, unless `rebuild`),
/// printing progress on stderr unless `quiet`.
pub fn build(name: &str, rebuild: bool, quiet: bool) -> Result<Built, Error> {
    let r = recipe(name)?;
    if !rebuild {
        if let Some(b) = built(name)? {
            return Ok(b);
        }
    }
    // one build at a time (apt's lists and cache are shared); another may just have built it
    std::fs::create_dir_all(root()).map_err(strata_util::io(format!("creating {}", root().display())))?;
    let _lock = BuildLock::take(&root().join(".lock"))?;
    if !rebuild {
        if let Some(b) = built(name)? {
            return Ok(b);
        }
    }
    let say = |m: String| {
        if !quiet {
            eprintln!("[emu pkg] {m}");
        }
    };
    let release = release()?;
    let dir = root().join(name);
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(strata_util::io(format!("creating {}", src.display())))?;
    let log = dir.join("build.log");
    let _ = std::fs::remove_file(&log);
    let apt = root().join(".apt");

    say(format!("fetching the source package {name} of Debian {release}"));
    let mut update = apt_get(&apt, &release)?;
    update.arg("update");
    logged(update, "apt-get update (deb-src)", &log)
        .map_err(|e| Error::Failed(format!("cannot reach Debian's source index: {e}")))?;
    // apt-get update succeeds when nothing could be fetched: the index must be there
    let lists = files_ending(&apt.join("lists"), "")?;
    if !lists.iter().any(|p| p.to_string_lossy().contains("_Sources")) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(Error::Failed(format!(
            "cannot reach Debian's source index for {release} ({}):\n{}\n(whole log: {})",
            mirror(),
            tail(&text, 6),
            log.display()
        )));
    }
    let mut fetch = apt_get(&apt, &release)?;
    fetch.current_dir(&src).args(["source", "--download-only", name]);
    // the .dsc and the upstream tarball are what the build needs (apt checks both against
    // the signed index); a missing Debian packaging tarball is noted in the log, not fatal
    let fetched = logged(fetch, &format!("apt-get source {name}"), &log);

    let dsc = files_ending(&src, ".dsc")?.into_iter().next();
    let orig = files_ending(&src, "")?
        .into_iter()
        .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy().contains(".orig.tar.")));
    let (Some(dsc), Some(orig)) = (dsc, orig) else {
        fetched?;
        return Err(Error::Failed(format!("apt-get source {name} left no .dsc or .orig tarball in {}", src.display())));
    };
    if fetched.is_err() {
        say(format!(
            "the Debian packaging of {name} could not be fetched (see {}); the upstream tarball is all the build uses",
            log.display()
        ));
    }
    let dsc_text = std::fs::read_to_string(&dsc).map_err(strata_util::io(format!("reading {}", dsc.display())))?;
    let debian_version = dsc_text
        .lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| Error::Failed(format!("{} has no Version", dsc.display())))?;
    let upstream = upstream_version(&debian_version).to_string();
    say(format!("unpacking {}", orig.display()));
    let tree = src.join("tree");
    std::fs::create_dir_all(&tree).map_err(strata_util::io("creating the source tree"))?;
    let mut untar = Command::new("tar");
    untar.arg("-xf").arg(&orig).arg("-C").arg(&tree).arg("--strip-components=1");
    logged(untar, &format!("tar -xf {}", orig.display()), &log)?;

    let exe = std::env::current_exe().map_err(strata_util::io("finding the strata binary"))?;
    let exe = exe.display().to_string();
    let tools = Tools {
        cc: vec![exe.clone(), "emu".into(), "cc".into()],
        cxx: vec![exe, "emu".into(), "c++".into()],
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    for step in (r.steps)(&tools) {
        say(format!("building {name} {upstream}: {}", step.join(" ")));
        let mut c = Command::new(&step[0]);
        c.args(&step[1..]).current_dir(&tree);
        logged(c, &step.join(" "), &log)?;
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(strata_util::io("creating bin/"))?;
    let mut binaries = Vec::new();
    for b in r.binaries {
        let from = tree.join(b);
        let to = bin.join(from.file_name().unwrap_or_default());
        // beside it, then renamed: a copy of the binary may be running (a server)
        let tmp = to.with_extension("new");
        std::fs::copy(&from, &tmp)
            .map_err(|e| Error::Failed(format!("the build made no {} ({e}); see {}", from.display(), log.display())))?;
        std::fs::rename(&tmp, &to).map_err(strata_util::io(format!("installing {}", to.display())))?;
        binaries.push(to);
    }
    let built = Built {
        name: name.into(),
        debian_version,
        upstream_version: upstream,
        release,
        date: strata_util::today(),
        binaries,
    };
    let text = serde_json::to_string_pretty(&built).map_err(|e| Error::Failed(e.to_string()))?;
    std::fs::write(record_path(name), text + "\n").map_err(strata_util::io("writing package.json"))?;
    say(format!("built {}: {}", built.program(), bin.display()));
    Ok(built)
}

/// An exclusive lock on a file (flock), held while the file is open: until dropped.
struct BuildLock {
    _file: std::fs::File,
}

impl BuildLock {
    fn take(path: &Path) -> Result<BuildLock, Error> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(strata_util::io(format!("opening {}", path.display())))?;
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::Io(strata_util::io(format!("locking {}", path.display()))(
                std::io::Error::last_os_error(),
            )));
        }
        Ok(BuildLock { _file: f })
    }
}

fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>, Error> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(strata_util::io(format!("listing {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_versions_lose_epoch_and_revision() {
        assert_eq!(upstream_version("5:7.0.15-1~deb12u7"), "7.0.15");
        assert_eq!(upstream_version("1.6.18-1"), "1.6.18");
        assert_eq!(upstream_version("2.3.0+dfsg-5"), "2.3.0+dfsg");
        assert_eq!(upstream_version("1.0"), "1.0");
    }

    #[test]
    fn unknown_names_list_the_recipes() {
        let e = recipe("no-such-program").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("redis, memcached, liblinear"), "{e}");
    }

    #[test]
    fn tails_keep_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
