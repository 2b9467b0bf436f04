//! CRC32C (CRC-32/ISCSI), the one checksum of every frame, block head and side file: one
//! implementation for the whole repository.
//!
//! [`crc32c`] and [`crc32c_append`] take it with the `crc-fast` crate (carry-less multiply
//! folding, VPCLMULQDQ where the CPU has it): on the project's machine 11–14 GB/s at 1 KiB
//! and 51–57 GB/s at 100 KiB–1 MiB, against 5–6 and 26–28 GB/s for the `crc32c` crate's
//! one `crc32` instruction per 8 bytes (docs/benchmarks/crc-2026-11-26.md). Every record is
//! checked on every read and sealed on every write, so this is paid per byte moved.
//!
//! [`combine`]: the CRC of two byte strings joined, from their own CRCs. `crc32c`'s
//! `crc32c_combine` is zlib's old matrix method: it squares a 32×32 bit matrix once
//! per bit of the second string's length, 12–18 µs for 100 KiB–10 MiB on the project's
//! machine, which is more than the CRC of a 100 KiB payload itself (~3.6 µs). This is
//! zlib's newer method (`crc32_combine_gen` / `multmodp`, zlib 1.2.12): the CRC of the
//! first string is multiplied by x^(8·len) modulo the polynomial, with x^(2^k) taken from a
//! table made at compile time: ~0.1 µs whatever the length
//! (docs/benchmarks/write-large-2026-11-26.md).

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// CRC32C of the bytes whose CRC32C is `crc` followed by `data` (as `crc32c::crc32c_append`).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The digest's state is the running register before the final inversion.
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    // A 32-bit CRC: the digest's value has no bits above them.
    d.finalize() as u32
}

/// The CRC32C polynomial, reflected.
const POLY: u32 = 0x82F6_3B78;

/// `a · b` modulo the polynomial (both reflected, x^0 in the top bit).
const fn mult_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// `X2N[k]` is x^(2^k) modulo the polynomial, for every `k` a byte length of 64 bits
/// needs (`3 + 63`). Not 32 entries as zlib's: CRC32C's polynomial is not one whose powers
/// x^(2^k) repeat with period 32.
const X2N: [u32; 67] = {
    let mut t = [0u32; 67];
    let mut p: u32 = 1 << 30; // x^1
    t[0] = p;
    let mut k = 1;
    while k < 67 {
        p = mult_mod_p(p, p);
        t[k] = p;
        k += 1;
    }
    t
};

/// x^(n · 2^k) modulo the polynomial (`k` ≤ 3).
fn x2n_mod_p(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = mult_mod_p(X2N[k], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC32C of `a` then `b`, from `crc_a`, `crc_b` and `b`'s length (as
/// `crc32c::crc32c_combine`).
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    // Multiplying by x^(8·len): n = len, k = 3.
    mult_mod_p(x2n_mod_p(len_b, 3), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_and_append_agree_with_the_reference_crate_at_every_split() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
            .collect();
        for len in [
            0usize, 1, 3, 8, 15, 16, 63, 64, 255, 256, 1024, 4097, 65_536, 70_000,
        ] {
            assert_eq!(crc32c(&data[..len]), crc32c::crc32c(&data[..len]), "{len}");
        }
        for split in [0usize, 1, 5, 64, 1000, 4096, 40_001, 70_000] {
            let (a, b) = data.split_at(split);
            let ca = crc32c::crc32c(a);
            assert_eq!(
                crc32c_append(ca, b),
                crc32c::crc32c_append(ca, b),
                "{split}"
            );
            assert_eq!(crc32c_append(ca, b), crc32c::crc32c(&data), "{split}");
        }
        assert_eq!(crc32c_append(0x1234_5678, b""), 0x1234_5678);
    }

    #[test]
    fn combine_is_the_crc_of_the_joined_bytes_and_agrees_with_the_crate() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for split in [0usize, 1, 7, 4096, 65_537, 150_000, 299_999, 300_000] {
            for end in [split, split + 1, 300_000] {
                let end = end.min(data.len());
                let (a, b) = data[..end].split_at(split.min(end));
                let (ca, cb) = (crc32c::crc32c(a), crc32c::crc32c(b));
                let joined = crc32c::crc32c(&data[..end]);
                assert_eq!(combine(ca, cb, b.len() as u64), joined, "{split} {end}");
                assert_eq!(crc32c::crc32c_combine(ca, cb, b.len()), joined);
            }
        }
        // Lengths whose high bits zlib's 32-entry table would wrap (from 512 MiB on).
        for len in [(1u64 << 29) + 3, 1 << 33, (1 << 40) + 12_345, u64::MAX >> 1] {
            assert_eq!(
                combine(0x1234_5678, 0x9abc_def0, len),
                crc32c::crc32c_combine(0x1234_5678, 0x9abc_def0, len as usize),
                "{len}"
            );
        }
    }
}
