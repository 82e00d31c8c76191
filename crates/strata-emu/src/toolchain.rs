//! Building programs for the emulated machine: clang (C, C++) or cargo (Rust) with the
//! SanitizerCoverage load/store hooks, linked with libstrata_emu.so.
use std::path::PathBuf;
use std::process::Command;

use strata_util::find_built;

use crate::Error;

/// The coverage flags clang needs: a coverage type must be given for the hooks to be emitted.
pub const CLANG_FLAGS: &[&str] = &["-fsanitize-coverage=inline-8bit-counters,trace-loads,trace-stores"];
/// The same pass through rustc's LLVM.
pub const RUSTC_FLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=3",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-trace-loads",
    "-Cllvm-args=-sanitizer-coverage-trace-stores",
];

/// libstrata_emu.so ($STRATA_EMU_LIB, beside this binary, or the repository's build/).
pub fn emu_lib() -> Result<PathBuf, Error> {
    Ok(find_built("libstrata_emu.so", Some("STRATA_EMU_LIB"), "make emu")?)
}

fn lib_dir() -> Result<PathBuf, Error> {
    let lib = emu_lib()?;
    Ok(lib.parent().map(PathBuf::from).unwrap_or_default())
}

/// clang-14 as Debian ships it, or $STRATA_EMU_CC.
pub fn clang() -> String {
    if let Ok(c) = std::env::var("STRATA_EMU_CC") {
        return c;
    }
    for c in ["clang-14", "clang"] {
        if Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return c.into();
        }
    }
    "clang-14".into()
}

/// The clang command line of `strata emu cc ARGS`: clang++ when `cxx` (C++ sources and
/// libstdc++ at link time). The emulator's library is linked only when clang links (no
/// -c, -S, -E or -M), so that compiles stay free of warnings a -Werror build would refuse.
pub fn cc_command(args: &[String], cxx: bool) -> Result<Command, Error> {
    let dir = lib_dir()?;
    let mut compiler = clang();
    if cxx {
        compiler = compiler.replacen("clang", "clang++", 1);
    }
    let mut c = Command::new(compiler);
    c.args(CLANG_FLAGS).arg(format!("-I{}", strata_util::paths_include().display())).args(args);
    let links = !args.iter().any(|a| matches!(a.as_str(), "-c" | "-S" | "-E" | "-M" | "-MM"));
    if links {
        c.arg(format!("-L{}", dir.display())).arg("-lstrata_emu").arg(format!("-Wl,-rpath,{}", dir.display()));
    }
    Ok(c)
}

/// The host target triple, from rustc.
pub fn host_triple() -> Result<String, Error> {
    let out = Command::new("rustc").arg("-vV").output().map_err(strata_util::io("running rustc -vV"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| Error::Failed("rustc -vV printed no host".into()))
}

/// Where `strata emu cargo` puts its output: target/emu/<host>/<profile>.
pub fn cargo_target_dir() -> PathBuf {
    strata_util::repo_root().join("target/emu")
}

/// `cargo ARGS` with the pass on for the program (an explicit --target keeps build scripts and
/// proc macros, which cargo builds for the host, uninstrumented).
pub fn cargo_command(args: &[String]) -> Result<Command, Error> {
    let dir = lib_dir()?;
    let mut flags: Vec<String> = RUSTC_FLAGS.iter().map(|s| s.to_string()).collect();
    // `-l` (not a link-arg) puts the library before std's -lc on the link line, so its
    // memcpy, memmove and memset come first in symbol lookup and bulk copies are counted
    flags.push(format!("-L{}", dir.display()));
    flags.push("-ldylib=strata_emu".into());
    flags.push(format!("-Clink-arg=-Wl,-rpath,{}", dir.display()));
    let (sub, rest) =
        args.split_first().ok_or_else(|| Error::Invalid("strata emu cargo: which cargo command?".into()))?;
    let mut c = Command::new("cargo");
    c.arg(sub)
        .arg("--target")
        .arg(host_triple()?)
        .args(rest)
        .env("CARGO_TARGET_DIR", cargo_target_dir())
        .env("RUSTFLAGS", flags.join(" "));
    Ok(c)
}

/// The `strata` binary built for the emulated machine by `make emu`.
pub fn emu_strata() -> Result<PathBuf, Error> {
    let p = cargo_target_dir().join(host_triple()?).join("release/strata");
    if !p.is_file() {
        return Err(Error::Failed(format!("{} not found: build it with `make emu`", p.display())));
    }
    Ok(p)
}
