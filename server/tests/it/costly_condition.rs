//! A costly condition and a client that leaves: the query's work must end soon after it.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use crate::reliability_cost::{call, start, streams_end_within};

/// Bug (hostile probe of 2026-11-29): a condition of 1,300 `$contains` over records with
/// 15 labels of 4,000 bytes (all within the documented bounds) cost ~15 ms a record in a
/// debug build, and the engine judged a whole index page (256 records) before its caller
/// could look whether the client had gone: an abandoned query ran on ~4 s, six of them
/// kept a CPU busy for 21 s. The walk hands back after 50 ms of judging now, so the
/// stream ends within a small part of what the whole query takes.
#[test]
fn a_costly_condition_ran_on_for_seconds_after_its_client_left() {
    let (s, a) = start(&[]);
    assert_eq!(
        call(&a, "POST", "/api/v1/b/b", b"", Duration::from_secs(20)).0,
        201
    );
    const RECORDS: u64 = 512;
    let value = "a".repeat(4000);
    for ts in 1..=RECORDS {
        let mut tcp = std::net::TcpStream::connect(&a).unwrap();
        let mut head = format!(
            "POST /api/v1/b/b/e?ts={ts} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer cost-admin\r\nContent-Length: 1\r\n"
        );
        for j in 0..15 {
            head.push_str(&format!("x-tsblob-label-l{j}: {value}\r\n"));
        }
        head.push_str("\r\nx");
        tcp.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut tcp, &mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    }
    let parts: Vec<String> = (0..1300)
        .map(|i| format!(r#"{{"$contains": ["&l{}", "zz"]}}"#, i % 15))
        .collect();
    let when = format!(r#"{{"when": {{"$or": [{}]}}}}"#, parts.join(","));
    // The whole query (nothing matches): what a page of it costs on this machine.
    let started = Instant::now();
    let (status, answer) = call(
        &a,
        "POST",
        "/api/v1/b/b/e/query",
        when.as_bytes(),
        Duration::from_secs(600),
    );
    assert_eq!(status, 200, "{}", &answer[..answer.len().min(300)]);
    let whole = started.elapsed();
    // The same query, its client gone after 300 ms.
    let mut tcp = std::net::TcpStream::connect(&a).unwrap();
    let head = format!(
        "POST /api/v1/b/b/e/query HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer cost-admin\r\nContent-Length: {}\r\n\r\n",
        when.len()
    );
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(when.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(tcp);
    streams_end_within(&a, whole);
    // The stream is counted out at once; the walk it started is what went on. The CPU the
    // server uses over the next stretch, from 1.5 s after the client left, a fifth of the
    // whole query long: the old walk judged on until the end of its page (up to half the
    // query), the new one stops after 50 ms of judging (checked every 16 records: at most
    // ~32 records, ~0.5 s here, past its client).
    std::thread::sleep(Duration::from_millis(1500));
    let window = whole / 5;
    let before = cpu_seconds(s.pid());
    std::thread::sleep(window);
    let used = cpu_seconds(s.pid()) - before;
    println!("the whole query took {whole:?}; abandoned, the server used {used:.2} s of CPU over {window:?} from 1.5 s after");
    assert!(
        whole > Duration::from_secs(1),
        "the condition is too cheap here: {whole:?}"
    );
    assert!(
        used < window.as_secs_f64() / 4.0,
        "{used:.2} s of CPU over {window:?} after the client left (the whole query takes {whole:?})"
    );
}

/// CPU seconds (user and system) process `pid` used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), in clock ticks (100 a second on Linux).
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}
