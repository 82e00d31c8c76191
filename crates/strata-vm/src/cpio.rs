//! A cpio "newc" archive, the format the kernel unpacks as its initramfs.
use std::collections::BTreeSet;

pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    pub fn new() -> Cpio {
        Cpio { out: Vec::new(), ino: 1, dirs: BTreeSet::new() }
    }

    /// One entry: a name, a mode (type and permissions), a device number, the data.
    pub fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let hdr = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
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
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory and its parents, each once.
    pub fn dir(&mut self, path: &str) {
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

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | mode, (0, 0), data);
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o120777, (0, 0), target.as_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_the_archive_ends_with_the_trailer() {
        let mut c = Cpio::new();
        c.file("/a/b", 0o644, b"hello");
        let out = c.finish();
        assert_eq!(out.len() % 4, 0);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("070701"));
        assert!(text.contains("a/b\0") && text.contains("hello") && text.contains("TRAILER!!!"));
        // the parent directory came first, once
        assert_eq!(text.matches("a\0").count(), 1);
    }
}
