//! An insert that finds no memory is an error the caller sees, and the store stays as it was.
//! The address space is capped with RLIMIT_AS, which is why this test has a binary of its own
//! (a limit is process-wide; no other test may run beside it).
use strata_kv::{OutOfMemory, Store, Variant};

fn mapped_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn set_address_limit(bytes: u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) };
    r.rlim_cur = bytes.min(r.rlim_max);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) }, 0);
}

#[test]
fn an_insert_without_memory_is_an_error_and_changes_nothing() {
    for v in Variant::ALL {
        let store = Store::new(v, 16);
        let val = vec![7u8; 1 << 20];
        let keys: Vec<Vec<u8>> = (0..4096).map(|i| format!("key{i}").into_bytes()).collect();
        set_address_limit(mapped_bytes() + (192 << 20));
        let mut stored = 0;
        let mut failure = None;
        for k in &keys {
            match store.set(k, &val) {
                Ok(_) => stored += 1,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        set_address_limit(u64::MAX);
        assert_eq!(failure, Some(OutOfMemory), "{}: 4 GiB of values fit in 192 MiB?", v.name());
        assert!(stored > 0, "{}: nothing fitted", v.name());
        assert_eq!(store.len(), stored, "{}", v.name());
        for k in &keys[..stored] {
            assert_eq!(store.get(k, |x| x == &val[..]), Some(true), "{}", v.name());
        }
        assert!(!store.contains(&keys[stored]), "{}: the failed insert left its key", v.name());
        // and with memory again, the same insert works
        assert!(store.set(&keys[stored], &val).unwrap());
    }
}
