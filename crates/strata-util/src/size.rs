//! Sizes as people write them.

/// "64G", "512M", "4096", "1.5GiB" into bytes.
pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a size (e.g. 4096, 512M, 64G)"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use K, M, G or T)")),
    };
    let b = v * mult as f64;
    if !(b.is_finite() && (0.0..1.8e19).contains(&b)) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(b as u64)
}

/// 1536 into "1.5 KiB".
pub fn format(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_format() {
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("64G"), Ok(64 << 30));
        assert_eq!(parse("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse(" 512m "), Ok(512 << 20));
        assert!(parse("12X").is_err());
        assert!(parse("G").is_err());
        assert!(parse("").is_err());
        assert_eq!(format(1536), "1.5 KiB");
        assert_eq!(format(12), "12 B");
    }
}
