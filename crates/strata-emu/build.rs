//! Compiles emu/config.c, the emulated machine's table of settings and presets, so the host
//! side reads presets and checks settings with the emulator's own code (one definition of each
//! preset). Its JSON writer comes from libstrata, which strata-sys links.
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = root.join("emu/config.c");
    cc::Build::new()
        .file(&config)
        .include(root.join("include"))
        .include(root.join("libstrata"))
        .include(root.join("emu"))
        .flag("-std=gnu11")
        .define("_GNU_SOURCE", None)
        .flag("-fvisibility=hidden")
        .flag_if_supported("-Wno-unused-parameter")
        .opt_level(2)
        .compile("strata_emu_config");
    for f in ["emu/config.c", "emu/emu.h", "include/strata_emu.h", "libstrata/util/json.h"] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
}
