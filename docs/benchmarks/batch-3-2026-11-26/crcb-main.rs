use std::time::Instant;
fn main() {
    for &n in &[1024usize, 10240, 102400] {
        let data: Vec<u8> = (0..n as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let head = vec![7u8; 60];
        let iters = 20_000_000 / n.max(1) * 50;
        let t = Instant::now(); let mut x = 0u32;
        for i in 0..iters { let c = crc32c::crc32c(&head[..(50 + i % 8)]); x ^= crc32c::crc32c_append(c, &data); }
        let a = t.elapsed().as_nanos() as f64 / iters as f64;
        let t = Instant::now(); let mut y = 0u32;
        for i in 0..iters { let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi); d.update(&head[..(50 + i % 8)]); d.update(&data); y ^= d.finalize() as u32; }
        let b = t.elapsed().as_nanos() as f64 / iters as f64;
        let t = Instant::now(); let mut z = 0u32;
        for _ in 0..iters { z ^= crc_fast::crc32_iscsi(&data); }
        let c = t.elapsed().as_nanos() as f64 / iters as f64;
        let t = Instant::now(); let mut w = 0u32;
        for _ in 0..iters { w ^= crc32c::crc32c(&data); }
        let d = t.elapsed().as_nanos() as f64 / iters as f64;
        println!("{n}: crc32c head+data {a:.1} ns, crc-fast digest {b:.1} ns | data only: crc-fast {c:.1} ns, crc32c {d:.1} ns  ({x} {y} {z} {w})");
    }
}
