use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn labels(kv: &[(&str, &str)]) -> Labels {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn l(name: &str) -> Operand {
    Operand::Label(name.into())
}
fn int(i: i64) -> Operand {
    Operand::Const(Value::Int(i))
}
fn text(s: &str) -> Operand {
    Operand::Const(Value::Str(s.into()))
}
fn cmp(op: CmpOp, a: Operand, b: Operand) -> Condition {
    Condition::Compare(op, a, b)
}

fn run(c: &Condition, strict: bool, ts: u64, kv: &[(&str, &str)]) -> Result<bool, Stop> {
    Matcher::new(c, strict, false).matches(ts, &labels(kv))
}

fn yes(c: &Condition, kv: &[(&str, &str)]) -> bool {
    run(c, false, 0, kv).unwrap()
}

#[test]
fn comparisons_are_numeric_when_both_sides_are_numbers() {
    let score = |op, v| cmp(op, l("score"), v);
    // as text "10" < "9"; as numbers 10 > 9
    assert!(yes(&score(CmpOp::Gt, int(9)), &[("score", "10")]));
    assert!(yes(&score(CmpOp::Gt, text("9")), &[("score", "10")]));
    assert!(yes(&score(CmpOp::Gte, int(10)), &[("score", "10")]));
    assert!(!yes(&score(CmpOp::Gt, int(10)), &[("score", "10")]));
    assert!(yes(
        &score(CmpOp::Lt, Operand::Const(Value::Float(10.5))),
        &[("score", "10")]
    ));
    assert!(yes(&score(CmpOp::Lte, int(10)), &[("score", "10.0")]));
    assert!(yes(&score(CmpOp::Eq, int(10)), &[("score", "10.0")]));
    assert!(yes(&score(CmpOp::Ne, int(11)), &[("score", "10")]));
    assert!(yes(&score(CmpOp::Eq, int(-3)), &[("score", "-3")]));
    // booleans are 1 and 0
    assert!(yes(
        &score(CmpOp::Eq, Operand::Const(Value::Bool(true))),
        &[("score", "true")]
    ));
    assert!(yes(&score(CmpOp::Eq, int(0)), &[("score", "false")]));
}

#[test]
fn comparisons_are_textual_otherwise_and_mixed_never_equal() {
    let cam = |op, v| cmp(op, l("cam"), v);
    assert!(yes(&cam(CmpOp::Eq, text("front")), &[("cam", "front")]));
    assert!(!yes(&cam(CmpOp::Eq, text("Front")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Gt, text("back")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Lt, text("rear")), &[("cam", "front")]));
    assert!(yes(&cam(CmpOp::Ne, text("rear")), &[("cam", "front")]));
    // a number and a text: not equal, not ordered
    for op in [CmpOp::Eq, CmpOp::Gt, CmpOp::Gte, CmpOp::Lt, CmpOp::Lte] {
        assert!(!yes(&cam(op, int(1)), &[("cam", "front")]), "{op:?}");
    }
    assert!(yes(&cam(CmpOp::Ne, int(1)), &[("cam", "front")]));
    // NaN is a number equal to nothing
    assert!(!yes(&cam(CmpOp::Eq, text("NaN")), &[("cam", "NaN")]));
}

#[test]
fn a_missing_label_makes_its_comparison_false_or_a_strict_error() {
    let c = cmp(CmpOp::Ne, l("gone"), int(1));
    assert!(!yes(&c, &[("cam", "a")]));
    assert_eq!(
        run(&c, true, 7, &[("cam", "a")]),
        Err(Stop::Missing("gone".into()))
    );
    // only its own comparison: $not of it is true, $or goes on to the next
    assert!(yes(&Condition::Not(vec![c.clone()]), &[]));
    assert!(yes(
        &Condition::Or(vec![c.clone(), cmp(CmpOp::Eq, l("cam"), text("a"))]),
        &[("cam", "a")]
    ));
    assert!(!yes(&Condition::In(l("gone"), vec![int(1)]), &[]));
    assert!(!yes(&Condition::NotIn(l("gone"), vec![int(1)]), &[]));
    assert!(!yes(&Condition::Truthy(l("gone")), &[]));
    assert_eq!(
        run(&Condition::Truthy(l("gone")), true, 0, &[]),
        Err(Stop::Missing("gone".into()))
    );
    // a strict condition never reaching the label does not fail
    let and = Condition::And(vec![cmp(CmpOp::Eq, int(1), int(2)), c]);
    assert_eq!(run(&and, true, 0, &[]), Ok(false));
}

#[test]
fn logical_operators() {
    let t = cmp(CmpOp::Eq, int(1), int(1));
    let f = cmp(CmpOp::Eq, int(1), int(2));
    let and = |v: Vec<Condition>| yes(&Condition::And(v), &[]);
    let or = |v: Vec<Condition>| yes(&Condition::Or(v), &[]);
    let not = |v: Vec<Condition>| yes(&Condition::Not(v), &[]);
    assert!(and(vec![]) && and(vec![t.clone(), t.clone()]) && !and(vec![t.clone(), f.clone()]));
    assert!(!or(vec![]) && or(vec![f.clone(), t.clone()]) && !or(vec![f.clone(), f.clone()]));
    assert!(not(vec![f.clone()]) && !not(vec![t.clone()]) && !not(vec![f.clone(), t.clone()]));
}

#[test]
fn in_nin_exists_truthy_and_timestamp() {
    let kv = [("cam", "front"), ("n", "3")];
    assert!(yes(
        &Condition::In(l("cam"), vec![text("back"), text("front")]),
        &kv
    ));
    assert!(!yes(&Condition::In(l("cam"), vec![text("back")]), &kv));
    assert!(yes(&Condition::In(l("n"), vec![text("1"), int(3)]), &kv));
    assert!(yes(&Condition::NotIn(l("cam"), vec![text("back")]), &kv));
    assert!(!yes(
        &Condition::NotIn(l("n"), vec![Operand::Const(Value::Float(3.0))]),
        &kv
    ));
    assert!(yes(&Condition::Exists(vec!["cam".into(), "n".into()]), &kv));
    assert!(!yes(
        &Condition::Exists(vec!["cam".into(), "x".into()]),
        &kv
    ));
    assert!(yes(&Condition::Truthy(l("cam")), &kv));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "0")]));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "")]));
    assert!(!yes(&Condition::Truthy(l("z")), &[("z", "false")]));
    let after = cmp(CmpOp::Gte, Operand::Timestamp, int(100));
    assert_eq!(run(&after, false, 100, &[]), Ok(true));
    assert_eq!(run(&after, false, 99, &[]), Ok(false));
}

fn over(c: &Condition, desc: bool, ts: &[u64]) -> Vec<u64> {
    let mut m = Matcher::new(c, false, desc);
    let mut out = Vec::new();
    for &t in ts {
        match m.matches(t, &Labels::new()) {
            Ok(true) => out.push(t),
            Ok(false) => {}
            Err(Stop::Limit) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    out
}

#[test]
fn each_n_keeps_every_nth_record_that_reaches_it() {
    let ts: Vec<u64> = (0..10).collect();
    assert_eq!(over(&Condition::EachN(3), false, &ts), [2, 5, 8]);
    assert_eq!(over(&Condition::EachN(1), false, &ts), ts);
    // after a filter: every second even record
    let even_then_each = Condition::And(vec![
        Condition::In(
            Operand::Timestamp,
            vec![int(0), int(2), int(4), int(6), int(8)],
        ),
        Condition::EachN(2),
    ]);
    assert_eq!(over(&even_then_each, false, &ts), [2, 6]);
}

#[test]
fn each_t_keeps_one_record_per_step_as_reductstore_does() {
    let ts: Vec<u64> = (0..10).map(|i| i * 40).collect(); // 0, 40, ..., 360
                                                          // the first record sets the clock; then one at least 100 µs after the last kept
    assert_eq!(over(&Condition::EachT(100), false, &ts), [120, 240, 360]);
    assert_eq!(over(&Condition::EachT(0), false, &ts), ts);
    let rev: Vec<u64> = ts.iter().rev().copied().collect();
    assert_eq!(over(&Condition::EachT(100), true, &rev), [240, 120, 0]);
    // time going backwards restarts the clock
    assert_eq!(
        over(&Condition::EachT(100), false, &[500, 100, 150, 200]),
        [200]
    );
}

#[test]
fn limit_ends_the_query_after_n_records_that_reach_it() {
    let ts: Vec<u64> = (0..10).collect();
    assert_eq!(over(&Condition::Limit(3), false, &ts), [0, 1, 2]);
    assert_eq!(over(&Condition::Limit(0), false, &ts), [] as [u64; 0]);
    let odd_limited = Condition::And(vec![
        Condition::In(Operand::Timestamp, vec![int(1), int(3), int(5), int(7)]),
        Condition::Limit(2),
    ]);
    assert_eq!(over(&odd_limited, false, &ts), [1, 3]);
}

// ---- a property test against a plain reference evaluator ----

const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const VALUES: [&str; 14] = [
    "0", "1", "2", "10", "-3", "2.5", "1e1", "abc", "b", "", "true", "false", "x y", "B",
];

fn random_operand(r: &mut StdRng) -> Operand {
    match r.random_range(0..6) {
        0 | 1 => l(KEYS[r.random_range(0..KEYS.len())]),
        2 => int(r.random_range(-4..12)),
        3 => Operand::Const(Value::Float(r.random_range(-8..24) as f64 / 2.0)),
        4 => Operand::Const(Value::Bool(r.random())),
        _ => text(VALUES[r.random_range(0..VALUES.len())]),
    }
}

fn random_condition(r: &mut StdRng, depth: u32) -> Condition {
    let leaf = depth == 0 || r.random_range(0..3) == 0;
    if leaf {
        return match r.random_range(0..5) {
            0 | 1 => {
                let op = [
                    CmpOp::Eq,
                    CmpOp::Ne,
                    CmpOp::Gt,
                    CmpOp::Gte,
                    CmpOp::Lt,
                    CmpOp::Lte,
                ][r.random_range(0..6)];
                cmp(op, random_operand(r), random_operand(r))
            }
            2 => {
                let items = (0..r.random_range(1..4))
                    .map(|_| random_operand(r))
                    .collect();
                if r.random() {
                    Condition::In(random_operand(r), items)
                } else {
                    Condition::NotIn(random_operand(r), items)
                }
            }
            3 => Condition::Exists(vec![KEYS[r.random_range(0..KEYS.len())].into()]),
            _ => Condition::Truthy(random_operand(r)),
        };
    }
    let kids = (0..r.random_range(0..4))
        .map(|_| random_condition(r, depth - 1))
        .collect();
    match r.random_range(0..3) {
        0 => Condition::And(kids),
        1 => Condition::Or(kids),
        _ => Condition::Not(kids),
    }
}

/// The reference: every number as an f64 (exact for the small values generated), text as
/// a `String`, no pre-classification, no short-cuts but the evaluation order.
#[derive(Debug, Clone, PartialEq)]
enum Ref {
    Num(f64),
    Text(String),
}

fn ref_parse(s: &str) -> Ref {
    if s == "true" {
        Ref::Num(1.0)
    } else if s == "false" {
        Ref::Num(0.0)
    } else if let Ok(f) = s.parse::<f64>() {
        Ref::Num(f)
    } else {
        Ref::Text(s.to_string())
    }
}

fn ref_value(o: &Operand, ts: u64, kv: &Labels, strict: bool) -> Result<Option<Ref>, String> {
    Ok(Some(match o {
        Operand::Label(name) => match kv.get(name) {
            Some(v) => ref_parse(v),
            None if strict => return Err(name.clone()),
            None => return Ok(None),
        },
        Operand::Timestamp => Ref::Num(ts as f64),
        Operand::Const(Value::Bool(b)) => Ref::Num(if *b { 1.0 } else { 0.0 }),
        Operand::Const(Value::Int(i)) => Ref::Num(*i as f64),
        Operand::Const(Value::Float(f)) => Ref::Num(*f),
        Operand::Const(Value::Str(s)) => ref_parse(s),
    }))
}

fn ref_cmp(op: CmpOp, a: &Ref, b: &Ref) -> bool {
    let ord = match (a, b) {
        (Ref::Num(x), Ref::Num(y)) => x.partial_cmp(y),
        (Ref::Text(x), Ref::Text(y)) => Some(x.cmp(y)),
        _ => None,
    };
    match op {
        CmpOp::Eq => ord == Some(Ordering::Equal),
        CmpOp::Ne => ord != Some(Ordering::Equal),
        CmpOp::Gt => ord == Some(Ordering::Greater),
        CmpOp::Gte => ord == Some(Ordering::Greater) || ord == Some(Ordering::Equal),
        CmpOp::Lt => ord == Some(Ordering::Less),
        CmpOp::Lte => ord == Some(Ordering::Less) || ord == Some(Ordering::Equal),
    }
}

fn reference(c: &Condition, ts: u64, kv: &Labels, strict: bool) -> Result<bool, String> {
    match c {
        Condition::And(v) => {
            for k in v {
                if !reference(k, ts, kv, strict)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Or(v) => {
            for k in v {
                if reference(k, ts, kv, strict)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Condition::Not(v) => {
            for k in v {
                if reference(k, ts, kv, strict)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Condition::Compare(op, a, b) => {
            let x = ref_value(a, ts, kv, strict)?;
            let y = ref_value(b, ts, kv, strict)?;
            Ok(match (x, y) {
                (Some(x), Some(y)) => ref_cmp(*op, &x, &y),
                _ => false,
            })
        }
        Condition::In(a, items) | Condition::NotIn(a, items) => {
            let Some(x) = ref_value(a, ts, kv, strict)? else {
                return Ok(false);
            };
            let mut found = false;
            for i in items {
                match ref_value(i, ts, kv, strict)? {
                    None => return Ok(false),
                    Some(y) if ref_cmp(CmpOp::Eq, &x, &y) => {
                        found = true;
                        break;
                    }
                    Some(_) => {}
                }
            }
            Ok(if matches!(c, Condition::In(..)) {
                found
            } else {
                !found
            })
        }
        Condition::Exists(v) => Ok(v.iter().all(|k| kv.contains_key(k))),
        Condition::Truthy(a) => Ok(match ref_value(a, ts, kv, strict)? {
            None => false,
            Some(Ref::Num(x)) => x != 0.0,
            Some(Ref::Text(t)) => !t.is_empty(),
        }),
        Condition::EachN(_) | Condition::EachT(_) | Condition::Limit(_) => {
            unreachable!("not generated")
        }
    }
}

#[test]
fn matches_the_reference_evaluator_on_random_conditions_and_labels() {
    let mut r = StdRng::seed_from_u64(0x007a_b10b);
    let mut outcomes = [0usize; 3];
    for _ in 0..20_000 {
        let c = random_condition(&mut r, 4);
        for _ in 0..8 {
            let mut kv = Labels::new();
            for k in KEYS {
                if r.random_range(0..4) != 0 {
                    kv.insert(k.into(), VALUES[r.random_range(0..VALUES.len())].into());
                }
            }
            let ts = r.random_range(0..20);
            let strict = r.random();
            let want = reference(&c, ts, &kv, strict);
            let got = Matcher::new(&c, strict, false).matches(ts, &kv);
            let got = got.map_err(|e| match e {
                Stop::Missing(l) => l,
                Stop::Limit => unreachable!(),
            });
            assert_eq!(
                got, want,
                "condition {c:?}\nlabels {kv:?} ts {ts} strict {strict}"
            );
            outcomes[match want {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(_) => 2,
            }] += 1;
        }
    }
    // the generator covers every outcome often
    assert!(outcomes.iter().all(|&n| n > 5_000), "{outcomes:?}");
}
