//! The documented table of options (docs/allocator.md) is the library's own table
//! (libstrata/options.c), checked: every option the library has is documented with the
//! library's default, and the document names no option the library lacks.
use std::collections::BTreeMap;

/// name -> default, from `strata_options_print` ("STRATA_X  value  default D  [unit] doc").
fn library() -> BTreeMap<String, String> {
    strata::options_text()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.to_string();
            let default = l.split(" default ").nth(1)?.split_whitespace().next()?.to_string();
            Some((name, default))
        })
        .collect()
}

/// name -> default, from the document's rows "| `STRATA_X` | default | ... |".
fn documented() -> BTreeMap<String, String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/allocator.md");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`STRATA_")?.strip_suffix('`')?;
            Some((format!("STRATA_{name}"), cells.get(2)?.trim_matches('`').to_string()))
        })
        .collect()
}

/// "64K" -> "65536", "unset" -> "(unset)": the document writes defaults as a user would.
fn normal(v: &str) -> String {
    if v == "unset" {
        return "(unset)".into();
    }
    match v.strip_suffix('K') {
        Some(n) => n.parse::<u64>().map_or(v.to_string(), |n| (n << 10).to_string()),
        None => v.to_string(),
    }
}

#[test]
fn the_documented_options_table_is_the_librarys() {
    let (lib, doc) = (library(), documented());
    assert!(lib.len() >= 10, "the library printed {} options", lib.len());
    for (name, default) in &lib {
        let d = doc.get(name).unwrap_or_else(|| panic!("docs/allocator.md's options table lacks {name}"));
        assert_eq!(&normal(d), default, "{name}: docs/allocator.md says {d}, the library {default}");
    }
    for name in doc.keys() {
        assert!(lib.contains_key(name), "docs/allocator.md names {name}, which libstrata does not have");
    }
}
