//! Running whole histories: in this process, or in a child process killed with SIGKILL at a
//! random moment (the child prints each acknowledged operation; the parent replays what was
//! acknowledged, reopens the store, checks it and continues the history).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tsblob_storage::{Labels, Store, StoreOptions, SyncPolicy};

use super::check::Checker;
use super::exec::{run_lanes, ErrKind, Outcome, Results};
use super::generate::{generate, History};
use super::state::{Obs, Span};

#[derive(Debug, Default)]
pub struct Report {
    pub ops: u64,
    /// The races the history set up (whether or not it got to run them all).
    pub races: Vec<super::generate::Race>,
    pub violations: Vec<String>,
}

pub fn bound() -> Duration {
    let secs = std::env::var("TSBLOB_MODEL_OP_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

pub fn open(dir: &std::path::Path, sync: SyncPolicy) -> tsblob_storage::Result<Store> {
    Store::open(
        dir,
        StoreOptions {
            sync,
            free_space_reserve: 0,
            map_size: 1 << 30,
            ..StoreOptions::default()
        },
    )
}

fn create_buckets(s: &Store, h: &History) -> Result<(), String> {
    for (b, settings) in &h.buckets {
        s.create_bucket(b, settings.clone())
            .map_err(|e| format!("creating bucket {b}: {e}"))?;
    }
    Ok(())
}

/// Runs segments `from..` of a history on `s`, checking each against the model.
fn run_segments(
    s: &Store,
    h: &History,
    from: usize,
    ck: &mut Checker,
    seq: &Arc<AtomicU64>,
    rep: &mut Report,
) {
    for seg in &h.segments[from..] {
        let ran = run_lanes(
            s,
            std::slice::from_ref(&seg.setup),
            seq,
            bound(),
            &mut |_, _, _, _| {},
        )
        .and_then(|setup| {
            Ok((
                setup,
                run_lanes(s, &seg.lanes, seq, bound(), &mut |_, _, _, _| {})?,
            ))
        });
        let (setup, lanes) = match ran {
            Ok(r) => r,
            Err(hang) => {
                rep.violations.push(format!(
                    "HANG: lane {} op {} did not finish in {:?}: {}",
                    hang.lane, hang.idx, hang.waited, hang.op
                ));
                return;
            }
        };
        rep.ops += (seg.setup.len() + seg.lanes.iter().map(Vec::len).sum::<usize>()) as u64;
        ck.segment(seg, &setup[0], &lanes);
        ck.quiescent(s);
        if !ck.violations.is_empty() {
            return;
        }
    }
}

pub fn run_history(seed: u64, kill: bool) -> Report {
    let h = generate(seed);
    let races = h.segments.iter().filter_map(|s| s.race).collect();
    let mut rep = Report {
        races,
        ..Report::default()
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            rep.violations.push(format!("tempdir: {e}"));
            return rep;
        }
    };
    let mut ck = Checker::new(&h.buckets);
    let seq = Arc::new(AtomicU64::new(1));
    let result = if kill {
        killed(&h, dir.path(), &mut ck, &seq, &mut rep)
    } else {
        in_process(&h, dir.path(), &mut ck, &seq, &mut rep)
    };
    if let Err(e) = result {
        rep.violations.push(e);
    }
    rep.violations.append(&mut ck.violations);
    if rep.violations.iter().any(|v| v.starts_with("HANG")) {
        // Threads are still stuck inside the store: leave its folder to them.
        let _ = dir.keep();
    }
    rep
}

fn in_process(
    h: &History,
    dir: &std::path::Path,
    ck: &mut Checker,
    seq: &Arc<AtomicU64>,
    rep: &mut Report,
) -> Result<(), String> {
    let s = open(dir, h.sync).map_err(|e| format!("open: {e}"))?;
    create_buckets(&s, h)?;
    run_segments(&s, h, 0, ck, seq, rep);
    Ok(())
}

// ---- the child process -------------------------------------------------------------------

/// The child's body: runs the whole history on the store the parent prepared, printing
/// `seg <k>` before each segment and `ack <k> <s|l> <lane> <idx> <start> <end> <outcome>`
/// for each acknowledged operation (flushed at once).
pub fn child(seed: u64, dir: &str) {
    let h = generate(seed);
    let s = open(std::path::Path::new(dir), h.sync)
        .expect("child: opening the store the parent prepared");
    let seq = Arc::new(AtomicU64::new(1));
    let out = std::io::stdout();
    // libtest has printed "test model_child ... " without a newline: end that line, or
    // the first "seg" line would not parse (and the parent would replay segment 0).
    let _ = writeln!(out.lock());
    for (k, seg) in h.segments.iter().enumerate() {
        for (part, lanes) in [
            ("s", std::slice::from_ref(&seg.setup)),
            ("l", seg.lanes.as_slice()),
        ] {
            let mut o = out.lock();
            let _ = writeln!(o, "seg {k} {part}");
            let _ = o.flush();
            drop(o);
            let ran = run_lanes(&s, lanes, &seq, bound(), &mut |l, i, outcome, span| {
                let mut o = out.lock();
                let _ = writeln!(
                    o,
                    "ack {k} {part} {l} {i} {} {} {}",
                    span.start,
                    span.end,
                    encode(outcome)
                );
                let _ = o.flush();
            });
            if ran.is_err() {
                let _ = writeln!(out.lock(), "hang");
                std::process::abort();
            }
        }
    }
    let _ = writeln!(out.lock(), "done");
    std::thread::sleep(Duration::from_secs(60)); // the parent kills us
}

fn killed(
    h: &History,
    dir: &std::path::Path,
    ck: &mut Checker,
    seq: &Arc<AtomicU64>,
    rep: &mut Report,
) -> Result<(), String> {
    {
        let s = open(dir, h.sync).map_err(|e| format!("open: {e}"))?;
        create_buckets(&s, h)?;
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .args([
            "model::model_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TSBLOB_MODEL_CHILD_SEED", h.seed.to_string())
        .env("TSBLOB_MODEL_CHILD_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    let stdout = child.stdout.take().ok_or("child without stdout")?;
    let total: usize = h
        .segments
        .iter()
        .map(|s| s.setup.len() + s.lanes.iter().map(Vec::len).sum::<usize>())
        .sum();
    let mut rng = StdRng::seed_from_u64(h.seed ^ 0x6b69_6c6c);
    let kill_after = rng.random_range(1..=total.max(1));
    let extra = Duration::from_micros(rng.random_range(0..3000));
    let mut lines = Vec::new();
    let mut reader = BufReader::new(stdout);
    let mut acks = 0;
    let mut line = String::new();
    let deadline = std::time::Instant::now() + bound() * 3;
    while acks < kill_after && std::time::Instant::now() < deadline {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        acks += usize::from(line.starts_with("ack"));
        let done = line.starts_with("done") || line.starts_with("hang");
        lines.push(line.trim_end().to_string());
        if done {
            break;
        }
    }
    std::thread::sleep(extra);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    if std::env::var("TSBLOB_MODEL_DEBUG").is_ok() {
        // The folder as the kill left it, for a look with `tsblob serve --data`.
        let keep = std::env::temp_dir().join(format!("tsblob-model-kill-{}", h.seed));
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(dir)
            .arg(&keep)
            .status();
        eprintln!("the killed store is copied to {keep:?}");
    }
    let rest: Vec<String> = reader.lines().map_while(Result::ok).collect();
    lines.extend(rest);
    if std::env::var("TSBLOB_MODEL_DEBUG").is_ok() {
        for (k, seg) in h.segments.iter().enumerate() {
            eprintln!("seg {k} setup {:?}", seg.setup);
            for (l, lane) in seg.lanes.iter().enumerate() {
                for (i, op) in lane.iter().enumerate() {
                    eprintln!("op {k} {l} {i} {op:?}");
                }
            }
        }
        for l in &lines {
            eprintln!("child: {l}");
        }
    }
    if lines.iter().any(|l| l == "hang") {
        return Err("HANG in the child process (an operation exceeded the bound)".into());
    }
    // Replay what the child acknowledged.
    let mut setups: Vec<Vec<Option<(Outcome, Span)>>> = h
        .segments
        .iter()
        .map(|s| vec![None; s.setup.len()])
        .collect();
    let mut lanes: Vec<Results> = h
        .segments
        .iter()
        .map(|s| s.lanes.iter().map(|l| vec![None; l.len()]).collect())
        .collect();
    let mut started = 0;
    let mut last_end = 0;
    for l in &lines {
        let f: Vec<&str> = l.splitn(8, ' ').collect();
        match f.as_slice() {
            ["seg", k, _] => {
                started = started.max(k.parse::<usize>().map_err(|e| format!("{l}: {e}"))? + 1)
            }
            ["ack", k, part, lane, idx, start, end, outcome] => {
                let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{l}: {e}"));
                let (k, lane, idx) = (num(k)? as usize, num(lane)? as usize, num(idx)? as usize);
                let span = Span {
                    start: num(start)?,
                    end: num(end)?,
                };
                last_end = last_end.max(span.end);
                let o = decode(outcome)
                    .ok_or_else(|| format!("cannot parse the child's line {l:?}"))?;
                let slot = if *part == "s" {
                    setups[k].get_mut(idx)
                } else {
                    lanes[k].get_mut(lane).and_then(|v| v.get_mut(idx))
                };
                *slot.ok_or_else(|| format!("no such operation: {l}"))? = Some((o, span));
                rep.ops += 1;
            }
            _ => {}
        }
    }
    for k in 0..started {
        ck.segment(&h.segments[k], &setups[k], &lanes[k]);
    }
    seq.store(last_end + 1_000_000, std::sync::atomic::Ordering::SeqCst);
    let s = open(dir, h.sync).map_err(|e| format!("reopening after SIGKILL: {e}"))?;
    for (b, settings) in ck.settings.iter_mut() {
        if let Ok(info) = s.bucket(b) {
            *settings = info.settings;
        }
    }
    ck.quiescent(&s);
    if ck.violations.is_empty() {
        run_segments(&s, h, started, ck, seq, rep);
    }
    Ok(())
}

// ---- outcomes as text, for the child's acknowledgements --------------------------------

fn err_name(k: ErrKind) -> &'static str {
    match k {
        ErrKind::NotFound => "notfound",
        ErrKind::Conflict => "conflict",
        ErrKind::Quota => "quota",
        ErrKind::Length => "length",
        ErrKind::Exists => "exists",
        ErrKind::Other => "other",
    }
}

fn err_kind(s: &str) -> Option<ErrKind> {
    [
        ErrKind::NotFound,
        ErrKind::Conflict,
        ErrKind::Quota,
        ErrKind::Length,
        ErrKind::Exists,
        ErrKind::Other,
    ]
    .into_iter()
    .find(|k| err_name(*k) == s)
}

fn enc_obs(o: &Obs) -> String {
    let labels: Vec<String> = o.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let fp = o.fp.map_or("-".to_string(), |f| format!("{f:x}"));
    format!("{fp},{},{},{}", o.len, o.ct, labels.join(";"))
}

fn dec_obs(s: &str) -> Option<Obs> {
    let mut p = s.splitn(4, ',');
    let fp = match p.next()? {
        "-" => None,
        f => Some(u64::from_str_radix(f, 16).ok()?),
    };
    let len = p.next()?.parse().ok()?;
    let ct = p.next()?.to_string();
    let labels: Labels = p
        .next()?
        .split(';')
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect::<Option<_>>()?;
    Some(Obs {
        fp,
        len,
        ct,
        labels,
    })
}

pub fn encode(o: &Outcome) -> String {
    match o {
        Outcome::Done => "done".into(),
        Outcome::Err(k, _) => format!("err {}", err_name(*k)),
        Outcome::Batch(v) => {
            let r: Vec<&str> = v
                .iter()
                .map(|r| r.as_ref().map_or_else(|k| err_name(*k), |_| "ok"))
                .collect();
            format!("batch {}", r.join(","))
        }
        Outcome::Found(obs) => format!("found {}", enc_obs(obs)),
        Outcome::List(items) => {
            let r: Vec<String> = items
                .iter()
                .map(|(ts, o)| format!("{ts}:{}", o.as_ref().map_or("gone".into(), enc_obs)))
                .collect();
            format!("list {}", r.join("|"))
        }
        Outcome::Count(n) => format!("count {n}"),
        Outcome::Info { size, records } => format!("info {size} {records}"),
        Outcome::Attached(list) => {
            let r: Vec<String> = list.iter().map(|(n, v)| format!("{n}:{v}")).collect();
            format!("attached {}", r.join(","))
        }
    }
}

pub fn decode(s: &str) -> Option<Outcome> {
    let (tag, rest) = s.split_once(' ').unwrap_or((s, ""));
    Some(match tag {
        "done" => Outcome::Done,
        "err" => Outcome::Err(err_kind(rest)?, String::new()),
        "batch" => Outcome::Batch(
            rest.split(',')
                .map(|r| {
                    if r == "ok" {
                        Some(Ok(()))
                    } else {
                        err_kind(r).map(Err)
                    }
                })
                .collect::<Option<_>>()?,
        ),
        "found" => Outcome::Found(dec_obs(rest)?),
        "list" => Outcome::List(
            rest.split('|')
                .filter(|i| !i.is_empty())
                .map(|i| {
                    let (ts, o) = i.split_once(':')?;
                    Some((
                        ts.parse().ok()?,
                        if o == "gone" { None } else { Some(dec_obs(o)?) },
                    ))
                })
                .collect::<Option<_>>()?,
        ),
        "count" => Outcome::Count(rest.parse().ok()?),
        "info" => {
            let (a, b) = rest.split_once(' ')?;
            Outcome::Info {
                size: a.parse().ok()?,
                records: b.parse().ok()?,
            }
        }
        "attached" => Outcome::Attached(
            rest.split(',')
                .filter(|i| !i.is_empty())
                .map(|i| {
                    let (n, v) = i.split_once(':')?;
                    Some((n.to_string(), v.parse().ok()?))
                })
                .collect::<Option<_>>()?,
        ),
        _ => return None,
    })
}
