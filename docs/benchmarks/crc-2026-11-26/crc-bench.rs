use std::time::Instant;
fn append_fast(crc: u32, d: &[u8]) -> u32 {
    let mut g = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, (crc ^ 0xFFFF_FFFF) as u64);
    g.update(d);
    g.finalize() as u32
}
fn main() {
    let data: Vec<u8> = (0..(16usize << 20)).map(|i| (i * 7 + i / 13) as u8).collect();
    // correctness
    for &(a, b) in &[(0usize, 0usize), (0, 5), (3, 1000), (100, 70000), (0, 1 << 20)] {
        let c0 = crc32c::crc32c(&data[..a]);
        assert_eq!(crc32c::crc32c_append(c0, &data[a..a + b]), append_fast(c0, &data[a..a + b]), "{a} {b}");
        assert_eq!(crc32c::crc32c(&data[..b]), crc_fast::crc32_iscsi(&data[..b]));
    }
    for &sz in &[1024usize, 10 << 10, 100 << 10, 1 << 20, 10 << 20] {
        let n = (256usize << 20) / sz;
        for round in 0..3 {
            let t = Instant::now();
            let mut x = 0u32;
            for i in 0..n { let off = (i * 4096) % (data.len() - sz); x ^= crc32c::crc32c(&data[off..off + sz]); }
            let a = t.elapsed();
            let t = Instant::now();
            let mut y = 0u32;
            for i in 0..n { let off = (i * 4096) % (data.len() - sz); y ^= crc_fast::crc32_iscsi(&data[off..off + sz]); }
            let b = t.elapsed();
            assert_eq!(x, y);
            println!("{sz:>9} B round {round}: crc32c {:.2} GB/s  crc-fast {:.2} GB/s", (n * sz) as f64 / a.as_secs_f64() / 1e9, (n * sz) as f64 / b.as_secs_f64() / 1e9);
        }
    }
}
