//! `make install` and `make deb` end to end (after `make` and `make emu`): the installed CLI,
//! staged under a temporary DESTDIR, finds its libraries and headers under its own prefix, not
//! in the checkout; pkg-config's line builds the README's C program with the installed header
//! and library;
//! the unit and the configuration are where systemd and the unit look; the package unpacks and
//! installs into an empty root with dpkg.
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ok(c: &mut Command) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("strata-install-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The README's C snippet, as a user would paste it.
fn readme_program() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme.find("```c\n").expect("the README has a C snippet") + 5;
    let len = readme[start..].find("```").unwrap();
    readme[start..start + len].to_string()
}

#[test]
fn make_install_puts_a_working_tool_under_its_prefix() {
    let dest = tmp("dest");
    let prefix = "/opt/strata-test";
    ok(Command::new("make")
        .current_dir(root())
        .arg("install")
        .arg(format!("DESTDIR={}", dest.display()))
        .arg(format!("PREFIX={prefix}")));
    let p = dest.join(prefix.trim_start_matches('/'));
    for f in [
        "bin/strata",
        "lib/libstrata.so",
        "lib/libstrata.a",
        "lib/libstratad_emu.so",
        "lib/libstrata_emu.so",
        "include/strata.h",
        "lib/pkgconfig/strata.pc",
        "share/man/man1/strata.1",
        "share/man/man1/strata-run.1",
        "share/bash-completion/completions/strata",
        "share/zsh/vendor-completions/_strata",
        "share/fish/vendor_completions.d/strata.fish",
        "share/strata/examples/strata.toml",
        "share/strata/examples/systemd/strata-fast.slice",
        "share/strata/examples/systemd/redis-server.service.d/strata.conf",
        "share/strata/examples/container/Dockerfile",
        "share/doc/strata/LICENSE-MIT",
        "share/doc/strata/LICENSE-APACHE",
    ] {
        assert!(p.join(f).exists(), "{f} not installed under {}", p.display());
    }
    assert!(dest.join("etc/strata/strata.toml").exists(), "the daemon's configuration");
    let unit = std::fs::read_to_string(p.join("lib/systemd/system/strata-daemon.service")).unwrap();
    assert!(unit.contains(&format!("ExecStart={prefix}/bin/strata --config /etc/strata/strata.toml daemon")), "{unit}");

    // the installed CLI preloads the installed library, and builds against the installed header
    let strata = p.join("bin/strata");
    let maps = ok(Command::new(&strata).args(["run", "--", "cat", "/proc/self/maps"]));
    let lib = std::fs::canonicalize(p.join("lib/libstrata.so")).unwrap();
    assert!(maps.contains(&lib.display().to_string()), "strata run preloaded another libstrata.so:\n{maps}");
    let help = ok(Command::new(&strata).args(["completions", "bash"]));
    assert!(help.contains("_strata"), "{help}");

    // pkg-config's line, with the staged prefix, links a C program that runs without paths
    let pc = ok(Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", p.join("lib/pkgconfig"))
        .arg(format!("--define-variable=prefix={}", p.display()))
        .args(["--cflags", "--libs", "strata"]));
    let work = tmp("cc");
    std::fs::write(work.join("x.c"), readme_program()).unwrap();
    ok(Command::new("cc").current_dir(&work).args(["-Wall", "-Werror", "x.c", "-o", "x"]).args(pc.split_whitespace()));
    assert_eq!(ok(&mut Command::new(work.join("x"))).trim(), "1 2", "the README's program");

    // what linking does to the program's own malloc: the shared library (pkg-config's line) is
    // the program's malloc too, with a channel for the daemon; the static one is the API only
    std::fs::write(
        work.join("own.c"),
        "#include <stdio.h>\n#include <stdlib.h>\n#include <strata.h>\nint main(void) { void *p = malloc(100); \
         printf(\"%d\\n\", strata_owns(p)); free(p); return 0; }\n",
    )
    .unwrap();
    ok(Command::new("cc").current_dir(&work).args(["own.c", "-o", "own-shared"]).args(pc.split_whitespace()));
    assert_eq!(ok(&mut Command::new(work.join("own-shared"))).trim(), "1", "shared: malloc is Strata's");
    ok(Command::new("cc")
        .current_dir(&work)
        .args(["own.c", "-o", "own-static"])
        .arg(format!("-I{}", p.join("include").display()))
        .arg(p.join("lib/libstrata.a"))
        .arg("-pthread"));
    assert_eq!(ok(&mut Command::new(work.join("own-static"))).trim(), "0", "static: malloc stays glibc's");

    // the emulated machine from the installed tool: a program built by its emu cc, run under
    // an engine policy (the engine's library found under the prefix)
    ok(Command::new(&strata).current_dir(&work).args(["emu", "cc", "-O1", "x.c", "-lstrata", "-o", "x-emu"]));
    let ldd = ok(Command::new("ldd").arg(work.join("x-emu")));
    let emu = std::fs::canonicalize(p.join("lib/libstrata_emu.so")).unwrap();
    assert!(ldd.contains(&emu.display().to_string()), "{ldd}");
    let out = ok(Command::new(&strata)
        .current_dir(&work)
        .args(["emu", "run", "--fast-ratio", "0.5", "--policy", "ambix", "--"])
        .arg(work.join("x-emu")));
    assert!(out.contains("1 2") && out.contains("engine: policy ambix"), "{out}");
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn make_deb_builds_a_package_dpkg_installs() {
    ok(Command::new("make").current_dir(root()).arg("deb"));
    let version = env!("CARGO_PKG_VERSION");
    let arch = ok(Command::new("dpkg").arg("--print-architecture")).trim().to_string();
    let deb = root().join(format!("build/strata_{version}_{arch}.deb"));
    let info = ok(Command::new("dpkg-deb").arg("-I").arg(&deb));
    assert!(info.contains("Package: strata") && info.contains(&format!("Version: {version}")), "{info}");
    // an empty root with a dpkg database: the package's files, its conffile, its state
    let r = tmp("root");
    std::fs::create_dir_all(r.join("var/lib/dpkg/info")).unwrap();
    std::fs::create_dir_all(r.join("var/lib/dpkg/updates")).unwrap();
    std::fs::write(r.join("var/lib/dpkg/status"), "").unwrap();
    ok(Command::new("dpkg")
        .arg(format!("--root={}", r.display()))
        .args(["--force-depends", "--force-not-root", "-i"])
        .arg(&deb));
    let status = ok(Command::new("dpkg").arg(format!("--root={}", r.display())).args(["-s", "strata"]));
    assert!(status.contains("Status: install ok installed"), "{status}");
    assert!(
        r.join("etc/strata/strata.toml").exists() && r.join("usr/lib/systemd/system/strata-daemon.service").exists()
    );
    let v = ok(Command::new(r.join("usr/bin/strata")).arg("--version"));
    assert_eq!(v.trim(), format!("strata {version}"));
    let _ = std::fs::remove_dir_all(&r);
}
