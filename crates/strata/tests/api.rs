//! The safe API with real collections, next_to chains, arenas and residency.
use allocator_api2::{boxed::Box, vec::Vec};
use hashbrown::HashMap;
use strata::{page_of, where_is, Arena, Placement, StrataAlloc};

#[test]
fn vec_and_box_in_every_shared_arena() {
    for place in [Placement::Default, Placement::Hot, Placement::Cold, Placement::Tier(1)] {
        let a = StrataAlloc::new(place);
        let mut v: Vec<u64, _> = Vec::new_in(a);
        for i in 0..100_000u64 {
            v.push(i * 3);
        }
        assert!(v.iter().enumerate().all(|(i, x)| *x == i as u64 * 3));
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v.iter().sum::<u64>(), 135);
        let b = Box::new_in([7u8; 5000], a);
        assert!(b.iter().all(|x| *x == 7));
    }
}

#[test]
fn over_aligned_types() {
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    #[repr(align(64))]
    struct Line(u64);
    let arena = Arena::new(Placement::Default).unwrap();
    for a in [StrataAlloc::new(Placement::Hot), arena.alloc()] {
        let p = Box::new_in(Page([1; 4096]), a);
        assert_eq!(&*p as *const Page as usize % 4096, 0);
        assert_eq!(p.0[4095], 1);
        let lines: Vec<Box<Line, _>, _> = (0..100).map(|i| Box::new_in(Line(i), a)).collect_in(a);
        assert!(lines.iter().all(|l| (&**l as *const Line as usize).is_multiple_of(64)));
        assert_eq!(lines.iter().map(|l| l.0).sum::<u64>(), 4950);
    }
}

trait CollectIn<T> {
    fn collect_in<A: allocator_api2::alloc::Allocator>(self, a: A) -> Vec<T, A>;
}
impl<T, I: Iterator<Item = T>> CollectIn<T> for I {
    fn collect_in<A: allocator_api2::alloc::Allocator>(self, a: A) -> Vec<T, A> {
        let mut v = Vec::new_in(a);
        v.extend(self);
        v
    }
}

#[test]
fn hashbrown_map_in_an_arena() {
    let arena = Arena::new(Placement::Cold).unwrap();
    let mut m: HashMap<u64, String, _, _> = HashMap::new_in(arena.alloc());
    for i in 0..50_000u64 {
        m.insert(i, format!("v{i}"));
    }
    for i in (0..50_000u64).step_by(2) {
        m.remove(&i);
    }
    assert_eq!(m.len(), 25_000);
    assert_eq!(m.get(&4001).map(String::as_str), Some("v4001"));
    let (k, _) = m.iter().next().unwrap();
    assert!(arena.contains(k as *const u64), "the table lives in the arena");
}

#[test]
fn next_to_chains_share_pages() {
    // 64 chains of 200 nodes built interleaved: each chain's nodes on few pages
    let arenas: std::vec::Vec<Arena> = (0..64).map(|_| Arena::new(Placement::Default).unwrap()).collect();
    let mut tails: std::vec::Vec<*const u64> = std::vec::Vec::new();
    let mut boxes: std::vec::Vec<std::vec::Vec<Box<[u64; 4], StrataAlloc<'_>>>> =
        (0..64).map(|_| std::vec::Vec::new()).collect();
    for (i, a) in arenas.iter().enumerate() {
        let b = Box::new_in([i as u64; 4], a.alloc());
        tails.push(&b[0]);
        boxes[i].push(b);
    }
    for _ in 0..200 {
        for (i, a) in arenas.iter().enumerate() {
            let b = Box::new_in([i as u64; 4], a.next_to(tails[i]));
            tails[i] = &b[0];
            boxes[i].push(b);
        }
    }
    for (i, chain) in boxes.iter().enumerate() {
        let mut pages: std::vec::Vec<usize> = chain.iter().map(|b| page_of(&**b)).collect();
        pages.sort();
        pages.dedup();
        assert!(pages.len() <= 2, "chain {i}: {} pages for 201 x 32 bytes", pages.len());
        assert!(chain.iter().all(|b| b[0] == i as u64));
    }
    // next_to a pointer from another arena stays in the arena asked
    let other = Arena::new(Placement::Default).unwrap();
    let x = Box::new_in(1u64, other.next_to(tails[0]));
    assert!(other.contains(&*x));
    drop(x);
    drop(boxes);
}

#[test]
fn linked_list_with_next_to() {
    // the shape strata-kv's buckets use: a list whose nodes are allocated next to the head
    let arena = Arena::new(Placement::Default).unwrap();
    let mut head: Option<Box<Node2<'_>, StrataAlloc<'_>>> = None;
    let mut addrs = std::vec::Vec::new();
    for v in 0..100 {
        let a = match &head {
            Some(h) => arena.next_to(&**h),
            None => arena.alloc(),
        };
        let n = Box::new_in(Node2 { next: head.take(), value: v }, a);
        addrs.push(page_of(&*n));
        head = Some(n);
    }
    let mut sum = 0;
    let mut cur = head.as_deref();
    while let Some(n) = cur {
        sum += n.value;
        cur = n.next.as_deref();
    }
    assert_eq!(sum, 4950);
    addrs.sort();
    addrs.dedup();
    assert!(addrs.len() <= 1, "{} pages", addrs.len());
}
struct Node2<'a> {
    next: Option<Box<Node2<'a>, StrataAlloc<'a>>>,
    value: u64,
}

#[test]
fn residency_of_hot_memory() {
    let n = 1 << 20;
    let mut v: Vec<u8, _> = Vec::with_capacity_in(n, StrataAlloc::new(Placement::Hot));
    v.resize(n, 1);
    let r = where_is(v.as_ptr(), n).unwrap();
    assert_eq!(r.pages, (n / 4096) as u64);
    let resident: u64 = r.node_bytes.iter().map(|(_, b)| b).sum();
    assert_eq!(resident, n as u64);
    assert_eq!(r.tier_bytes, vec![(0, n as u64)]);
}

#[test]
fn stats_and_options_print() {
    let _keep = Box::new_in(1u8, StrataAlloc::new(Placement::Default));
    assert!(strata::stats_json().contains("\"segments\""));
    assert!(strata::stats_text().contains("segments"));
    assert!(strata::options_text().contains("STRATA_TIERS"));
    // the value libstrata runs with: the default here, unless the environment sets one
    if std::env::var_os("STRATA_COLOUR").is_none() {
        assert_eq!(strata::option("colour"), Some("0".into()));
    }
    assert_eq!(strata::option("tcache_bytes"), Some("65536".into()));
    assert_eq!(strata::option("nonsense"), None);
    assert!(strata::stat("segments").unwrap() > 0);
    assert_eq!(strata::stat("nonsense"), None);
}
