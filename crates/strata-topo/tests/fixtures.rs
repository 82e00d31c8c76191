//! Topology discovery against fixture sysfs trees (tests/fixtures), so every rule of the tier
//! order is checked without such hardware.
use std::path::PathBuf;

use strata_topo::{discover_at, TopoError, Topology};

fn fixture(name: &str, over: Option<&str>) -> Result<Topology, TopoError> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    discover_at(&root, over)
}

fn tier_nodes(t: &Topology) -> Vec<Vec<u32>> {
    t.tiers.iter().map(|t| t.nodes.clone()).collect()
}

#[test]
fn one_node() {
    let t = fixture("one-node", None).unwrap();
    assert_eq!(t.nodes.len(), 1);
    let n = &t.nodes[0];
    assert_eq!((n.id, n.tier, n.cpus.as_str(), n.has_cpus), (0, 0, "0-1", true));
    assert_eq!(n.total_bytes, 24606104 * 1024);
    assert_eq!(n.free_bytes, 23000000 * 1024);
    assert_eq!(n.kernel_tier, Some(4));
    assert_eq!(n.read_latency_ns, None);
    assert_eq!(n.distances, vec![(0, 10)]);
    assert_eq!(tier_nodes(&t), vec![vec![0]]);
    assert!(t.tier_source.contains("one node"), "{}", t.tier_source);
    assert!(t.notes.iter().any(|s| s.contains("lands on node 0")));
}

#[test]
fn two_nodes_with_hmat_in_one_kernel_tier() {
    // kernel 6.1 in QEMU: both nodes in memory_tier4; HMAT says node 1 is slower
    let t = fixture("two-nodes-hmat", None).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![0], vec![1]]);
    assert_eq!(t.tier_source, "HMAT read_latency");
    let n1 = &t.nodes[1];
    assert!(!n1.has_cpus && n1.cpus.is_empty());
    assert_eq!(n1.read_latency_ns, Some(250.0));
    assert_eq!(n1.write_bandwidth_mbps, Some(8192.0));
    assert_eq!(n1.kernel_tier, Some(4));
    assert_eq!(t.nodes[0].distances, vec![(0, 10), (1, 20)]);
    assert_eq!(t.tiers[1].total_bytes, 1046528 * 1024);
}

#[test]
fn kernel_memory_tiers_win() {
    let t = fixture("two-tiers", None).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![0], vec![1]]);
    assert_eq!(t.tier_source, "kernel memory_tiering");
    assert_eq!(t.nodes[1].kernel_tier, Some(22));
}

#[test]
fn cpuless_nodes_are_slower_without_better_information() {
    let t = fixture("cpuless-no-hmat", None).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![0, 1], vec![2]]);
    assert_eq!(t.tier_source, "CPU-less nodes are slower");
    assert_eq!(t.nodes[2].kernel_tier, None);
    assert_eq!(t.nodes[2].distances, vec![(0, 30), (1, 30), (2, 10)]);
}

#[test]
fn override_names_the_tiers() {
    let t = fixture("two-tiers", Some("1;0")).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![1], vec![0]]);
    assert!(t.tier_source.starts_with("override"));
    // unlisted nodes join a slowest tier of their own
    let t = fixture("cpuless-no-hmat", Some("2")).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![2], vec![0, 1]]);
    let t = fixture("cpuless-no-hmat", Some("0,1;2")).unwrap();
    assert_eq!(tier_nodes(&t), vec![vec![0, 1], vec![2]]);
}

#[test]
fn bad_overrides_are_refused() {
    for bad in ["0;5", "x", "0;;1", ";", "1-0", "0,"] {
        assert!(
            matches!(fixture("two-tiers", Some(bad)), Err(TopoError::BadOverride(_))),
            "override '{bad}' was accepted"
        );
    }
}

#[test]
fn missing_sysfs_means_one_node() {
    let t = fixture("does-not-exist", None).unwrap();
    assert_eq!(t.nodes.len(), 1);
    assert!(t.nodes_source.contains("no NUMA"));
}
