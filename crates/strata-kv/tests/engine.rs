//! The engine in every variant: every operation against a model (a HashMap), any key and
//! value sizes, many threads at once, and the locality property of nextto.
use std::collections::HashMap;
use std::sync::Arc;

use strata_kv::{Store, Variant};
use strata_util::XorShift;

#[test]
fn matches_a_model_under_random_operations() {
    for v in Variant::ALL {
        let store = Store::new(v, 64); // few buckets: long chains
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut s = XorShift::new(42);
        for i in 0..60_000 {
            let k = format!("key{}", s.next_u64() % 3000).into_bytes();
            match s.next_u64() % 5 {
                0 | 1 => {
                    let len = (s.next_u64() % 5000) as usize; // 0..5 KB values, any size
                    let val: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
                    assert_eq!(store.set(&k, &val).unwrap(), !model.contains_key(&k));
                    model.insert(k, val);
                }
                2 => assert_eq!(store.delete(&k), model.remove(&k).is_some()),
                3 => {
                    let (_, updated) = store.update(&k, |old| old.map(|o| o.iter().rev().copied().collect())).unwrap();
                    if let Some(m) = model.get_mut(&k) {
                        m.reverse();
                        assert!(updated);
                    }
                }
                _ => assert_eq!(store.get(&k, |x| x.to_vec()), model.get(&k).cloned()),
            }
        }
        assert_eq!(store.len(), model.len());
        for (k, val) in &model {
            assert_eq!(store.get(k, |x| x.to_vec()).as_ref(), Some(val), "{}", v.name());
        }
        let mut keys = store.keys();
        keys.sort();
        let mut mk: Vec<_> = model.keys().cloned().collect();
        mk.sort();
        assert_eq!(keys, mk);
        store.clear();
        assert_eq!(store.len(), 0);
        assert!(store.keys().is_empty());
    }
}

#[test]
fn empty_and_huge_keys_and_values() {
    for v in Variant::ALL {
        let store = Store::new(v, 16);
        assert!(store.set(b"", b"").unwrap());
        assert_eq!(store.get(b"", |x| x.len()), Some(0));
        let big = vec![7u8; 3 << 20]; // larger than a segment's large threshold
        let bigkey = vec![b'k'; 100_000];
        assert!(store.set(&bigkey, &big).unwrap());
        assert_eq!(store.get(&bigkey, |x| x == &big[..]), Some(true));
        assert!(!store.set(&bigkey, b"small").unwrap());
        assert_eq!(store.get(&bigkey, |x| x.to_vec()), Some(b"small".to_vec()));
        assert!(store.delete(&bigkey) && !store.delete(&bigkey));
        assert_eq!(store.len(), 1);
    }
}

#[test]
fn many_threads_at_once() {
    for v in Variant::ALL {
        let store = Arc::new(Store::new(v, 1024));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let st = store.clone();
                std::thread::spawn(move || {
                    let mut s = XorShift::new(t + 1);
                    for i in 0..20_000u64 {
                        // each thread owns keys t, t+4, ...; all threads share the buckets
                        let k = format!("k{}", (s.next_u64() % 500) * 4 + t);
                        let val = format!("{t}:{i}").repeat((i % 20) as usize + 1);
                        st.set(k.as_bytes(), val.as_bytes()).unwrap();
                        let got = st.get(k.as_bytes(), |x| x.to_vec()).unwrap();
                        assert!(got.starts_with(format!("{t}:").as_bytes()), "another thread's value");
                        if i % 7 == 0 {
                            st.delete(k.as_bytes());
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(store.len(), store.keys().len());
    }
}

#[test]
fn nextto_keeps_a_bucket_on_few_pages() {
    // 4 records of ~1 KB per bucket, inserted round-robin across buckets as YCSB's load does
    let mut pages = Vec::new();
    for v in Variant::ALL {
        let store = Store::new(v, 4096);
        let val = vec![1u8; 1000];
        for i in 0..16_384 {
            store.set(format!("user{i}").as_bytes(), &val).unwrap();
        }
        pages.push(store.pages_per_bucket());
    }
    let (std, nextto) = (pages[0], pages[1]);
    assert!(nextto * 2.0 < std, "nextto {nextto} pages per bucket vs std {std}");
}
