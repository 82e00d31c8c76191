//! Compiles libstrata (the C files under libstrata/, not its tests nor the LD_PRELOAD
//! interposer) into a static library,
//! plus abi_check.c, which reports the C layout of the public structs for the layout test.
use std::path::{Path, PathBuf};

fn c_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("libstrata source").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            // tests are programs; preload/ interposes malloc, for libstrata.so only
            if p.file_name().is_some_and(|n| n != "tests" && n != "preload") {
                c_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "c") {
            out.push(p);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("libstrata");
    let mut files = Vec::new();
    c_files(&src, &mut files);
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("abi_check.c"));
    let mut build = cc::Build::new();
    build
        .include(root.join("include"))
        .include(&src)
        .flag("-std=gnu11")
        .define("_GNU_SOURCE", None)
        .flag("-fvisibility=hidden")
        .flag("-pthread")
        .flag_if_supported("-Wno-unused-parameter")
        .opt_level(2);
    if std::env::var_os("CARGO_FEATURE_QUIET_LOAD").is_some() {
        build.define("STRATA_QUIET_LOAD", None);
    }
    for f in &files {
        build.file(f);
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rerun-if-changed={}", root.join("include/strata.h").display());
    println!("cargo:rerun-if-changed={}", src.join("internal.h").display());
    // not "strata": a program built for the emulator links with -L build/ (for
    // libstrata_emu.so), where make's build/libstrata.a, perhaps older, would be found first
    build.compile("strata_sys_c");
    println!("cargo:rustc-link-lib=pthread");
}
