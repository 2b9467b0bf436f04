//! Byte sizes as people write them, for every size flag of the `tsblob` binary (server
//! settings, CLI, bench): `KB`, `MB`, `GB`, `TB` are decimal (10^3, 10^6, ...), `KiB`,
//! `MiB`, `GiB`, `TiB` binary (2^10, 2^20, ...), as they say; a bare `K`, `M`, `G`, `T` is
//! binary. Units are case-insensitive but for that `i`.

/// Parses a byte size: `1048576`, `64KiB`, `256 MiB`, `4GiB`, or decimal `10MB`, `1GB`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("{text:?} is not a size: give bytes, or a number then a unit (64KiB, 4GiB, 10MB)")
    })?;
    let unit = unit.trim();
    let lower = unit.to_ascii_lowercase();
    let (prefix, rest) = lower.split_at(lower.len().min(1));
    let power = match prefix {
        "" | "b" if rest.is_empty() => 0,
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        _ => return Err(unknown(text, unit)),
    };
    let base: u64 = match rest {
        "" if power == 0 => 1,
        "" | "ib" => 1 << 10,
        "b" => 1_000,
        _ => return Err(unknown(text, unit)),
    };
    n.checked_mul(base.pow(power))
        .ok_or_else(|| format!("{text:?} is too large: at most 16 EiB"))
}

fn unknown(text: &str, unit: &str) -> String {
    format!(
        "{text:?}: unknown size unit {unit:?}: use B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"
    )
}

/// Prints a size the way [`parse_size`] reads it back: the largest binary unit that
/// divides it (`100 KiB`), else bytes (`1000 B`).
pub fn format_size(bytes: u64) -> String {
    for (unit, mult) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{} {unit}", bytes / mult);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn decimal_and_binary_units_mean_what_they_say() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("512 B").unwrap(), 512);
        assert_eq!(parse_size("1KB").unwrap(), 1_000);
        assert_eq!(parse_size("1kB").unwrap(), 1_000);
        assert_eq!(parse_size("1KiB").unwrap(), 1 << 10);
        assert_eq!(parse_size("1kib").unwrap(), 1 << 10);
        assert_eq!(parse_size("10 MiB").unwrap(), 10 << 20);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("10GB").unwrap(), 10_000_000_000);
        assert_eq!(parse_size("2TB").unwrap(), 2_000_000_000_000);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
    }

    #[test]
    fn garbage_and_overflow_are_refused_with_the_units_named() {
        for bad in [
            "",
            "12 parsecs",
            "-1",
            "1.5MB",
            "MB",
            "1 KiBB",
            "1 bb",
            "1 iB",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("KiB") || e.contains("unit"), "{bad:?}: {e}");
        }
        assert!(parse_size("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn printed_sizes_read_back() {
        for n in [
            0,
            1,
            1000,
            1024,
            100 << 10,
            1 << 20,
            10 << 20,
            3 << 40,
            1_000_000,
        ] {
            assert_eq!(
                parse_size(&format_size(n)).unwrap(),
                n,
                "{}",
                format_size(n)
            );
        }
        assert_eq!(format_size(100 << 10), "100 KiB");
    }
}
