use std::time::Instant;
const P: u32 = 0x82F63B78;
fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 { break; }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ P } else { b >> 1 };
    }
    p
}
const fn x2n_table() -> [u32; 32] {
    let mut t = [0u32; 32];
    let mut p: u32 = 1 << 30; // x^1
    t[0] = p;
    let mut n = 1;
    while n < 32 {
        // p = p*p mod P
        let a = p; let mut b = p; let mut m: u32 = 1 << 31; let mut r: u32 = 0;
        loop {
            if a & m != 0 { r ^= b; if a & (m - 1) == 0 { break; } }
            m >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ P } else { b >> 1 };
        }
        p = r;
        t[n] = p;
        n += 1;
    }
    t
}
static X2N: [u32; 32] = x2n_table();
fn x2nmodp(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31;
    while n != 0 {
        if n & 1 != 0 { p = multmodp(X2N[k & 31], p); }
        n >>= 1; k += 1;
    }
    p
}
fn combine(c1: u32, c2: u32, len2: u64) -> u32 { multmodp(x2nmodp(len2, 3), c1) ^ c2 }
fn main() {
    let data: Vec<u8> = (0..10_485_760u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    for &n in &[102_400usize, 1_048_576, 10_485_760] {
        let (a, b) = data[..n].split_at(n / 3);
        let ca = crc32c::crc32c(a); let cb = crc32c::crc32c(b);
        assert_eq!(combine(ca, cb, b.len() as u64), crc32c::crc32c(&data[..n]));
        assert_eq!(crc32c::crc32c_combine(ca, cb, b.len()), crc32c::crc32c(&data[..n]));
        let it = 200;
        let t = Instant::now(); let mut x = 0; for _ in 0..it { x ^= crc32c::crc32c(std::hint::black_box(&data[..n])); }
        let crc = t.elapsed().as_secs_f64() * 1e6 / it as f64;
        let t = Instant::now(); for i in 0..it { x ^= crc32c::crc32c_combine(x, i, std::hint::black_box(n)); }
        let comb = t.elapsed().as_secs_f64() * 1e6 / it as f64;
        let t = Instant::now(); for i in 0..it { x ^= combine(x, i, std::hint::black_box(n as u64)); }
        let comb2 = t.elapsed().as_secs_f64() * 1e6 / it as f64;
        println!("n={n} crc {crc:.2}us crate-combine {comb:.3}us zlib-new-combine {comb2:.3}us {x}");
    }
}
