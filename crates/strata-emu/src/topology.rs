//! An emulated machine as a topology (`strata topo --emulate PRESET`): the same nodes and tiers
//! libstrata sees inside an emulated program (emu/machine.c), built from the emulator's table.
use strata_topo::{Node, Tier, Topology};

use crate::{config, Error};

/// How to size an emulated topology.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Size {
    /// Multiply every tier's size (e.g. 0.001 for a laptop-sized run).
    pub scale: Option<f64>,
    /// Set the fast tier's size in bytes (applied after `scale`).
    pub fast_bytes: Option<u64>,
}

/// The topology of a preset of the emulator's table.
pub fn topology(preset: &str, size: Size) -> Result<Topology, Error> {
    let r = config::resolve(&format!("preset={preset}"))?;
    let doc = config::table().presets.into_iter().find(|p| p.name == preset).map(|p| p.doc).unwrap_or_default();
    let scale = size.scale.unwrap_or(1.0);
    if !(scale > 0.0 && scale.is_finite()) {
        return Err(Error::Invalid(format!("scale must be a positive number, not {scale}")));
    }
    if size.fast_bytes == Some(0) {
        return Err(Error::Invalid("the fast tier cannot be 0 bytes".into()));
    }
    let n = r.nodes();
    let (rd, wr, rbw, wbw, cap) =
        (r.list("read_ns"), r.list("write_ns"), r.list("read_mbps"), r.list("write_mbps"), r.list("capacity"));
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let mut bytes = (cap[i] * scale) as u64;
            if i == 0 {
                bytes = size.fast_bytes.unwrap_or(bytes);
            }
            Node {
                id: i as u32,
                tier: i as u32,
                cpus: if i == 0 { "0".into() } else { String::new() },
                has_cpus: i == 0,
                total_bytes: bytes,
                free_bytes: bytes,
                kernel_tier: None,
                read_latency_ns: Some(rd[i]),
                write_latency_ns: Some(wr[i]),
                read_bandwidth_mbps: Some(rbw[i]),
                write_bandwidth_mbps: Some(wbw[i]),
                distances: (0..n as u32).map(|j| (j, if j == i as u32 { 10 } else { 20 })).collect(),
            }
        })
        .collect();
    let tiers =
        nodes.iter().map(|nd| Tier { tier: nd.tier, nodes: vec![nd.id], total_bytes: nd.total_bytes }).collect();
    Ok(Topology {
        nodes,
        tiers,
        tier_source: format!("preset {preset} (latency order)"),
        nodes_source: format!("emulated: {doc}"),
        emulated: Some(preset.to_string()),
        notes: vec!["emulated topology: figures measured on it are model outputs of this preset".into()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m2t_as_a_topology() {
        let t = topology("m2t", Size::default()).unwrap();
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[0].read_latency_ns, Some(84.6));
        assert_eq!(t.nodes[1].read_bandwidth_mbps, Some(55_000.0));
        assert_eq!(t.nodes[0].total_bytes, 64 << 30);
        assert_eq!(t.emulated.as_deref(), Some("m2t"));
        let small = topology("m2t", Size { scale: Some(0.001), fast_bytes: None }).unwrap();
        assert_eq!(small.nodes[1].total_bytes, ((128u64 << 30) as f64 * 0.001) as u64);
        let fixed = topology("m2t", Size { scale: None, fast_bytes: Some(1 << 30) }).unwrap();
        assert_eq!(fixed.tiers[0].total_bytes, 1 << 30);
        assert!(topology("nope", Size::default()).unwrap_err().to_string().contains("unknown preset"));
        assert!(topology("m2t", Size { scale: Some(0.0), fast_bytes: None }).is_err());
    }
}
